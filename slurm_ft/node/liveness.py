"""The node watcher's textfile for node_exporter (`health.metrics_path`, beside DCGM's): is `slurm-ft watch`
alive on this node, does it still read its sources, and what each check last found.

A watcher that died, or whose kernel-log thread stopped, drains nothing for an Xid until the next
HealthCheckProgram run, and says so nowhere else. A check's result comes from the node's state file
(node/state.py), which every check that records writes (the hooks, HealthCheckProgram, the watcher's
own, a hand-run `check`): a check is failing while one of its fail findings is active there, until a
run of a level with that check passes. Every series carries `node=` (the Slurm name, which the
operator types into `slurm-ft node history`; node_exporter's `instance` is a host and port).
Written by a thread of its own every WRITE_EVERY_S (a slow disk never delays an Xid), atomically.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Set, Tuple

from slurm_ft import __version__
from slurm_ft.errors import SlurmFTError
from slurm_ft.fsutil import atomic_write
from slurm_ft.node import levels, state as st
from slurm_ft.promtext import Exposition, labels

if TYPE_CHECKING:
    from slurm_ft.config import Config

log = logging.getLogger(__name__)

WRITE_EVERY_S = 5.0
ROUTINE_LEVELS = ("quick", "prolog", "epilog")     # what a node runs by itself: HealthCheckProgram, the hooks


@dataclass
class Readings:
    node: str
    loop_at: Optional[float] = None                     # the watcher's loop last went round
    sources: Mapping[str, bool] = field(default_factory=dict)     # kernel_log, nvml_events, soft_signals: read?
    checked_at: Mapping[str, float] = field(default_factory=dict)  # level -> a check of it last ended
    checks: Tuple[str, ...] = ()                        # the checks to report
    failing: Optional[Set[str]] = None                  # checks with an active fail finding; None: state unread
    drained: Optional[bool] = None                      # the checks know slurm-ft drained the node; None: unread


def render(r: Readings) -> str:
    out = Exposition()
    node = r.node
    out.family("slurm_ft_watch_info", "gauge", "slurm-ft watch running on this node, by version.",
               [(labels(node=node, version=__version__), 1)])
    if r.loop_at is not None:
        out.family("slurm_ft_watch_last_loop_timestamp_seconds", "gauge",
                   "Unix time the node's slurm-ft watch last went round its loop (every 0.2 s; longer while a "
                   "check for an Xid runs).", [(labels(node=node), r.loop_at)])
    out.family("slurm_ft_watch_source_up", "gauge",
               "1 while the watcher reads this source (kernel_log, nvml_events, soft_signals); 0: it stopped "
               "(nvml_events: also no NVIDIA driver).", [(labels(node=node, source=s), up) for s, up in sorted(r.sources.items())])
    if r.failing is not None:        # an unreadable state file shows no verdict rather than "all ok"
        out.family("slurm_ft_node_check_ok", "gauge",
                   "0 while a fail finding of this check is active in the node's state (until a level with the "
                   "check passes), else 1.",
                   [(labels(node=node, check=c), c not in r.failing) for c in sorted(set(r.checks) | r.failing)])
    out.family("slurm_ft_node_last_check_timestamp_seconds", "gauge",
               "Unix time a check of this level (quick: HealthCheckProgram or an Xid; prolog; epilog) last ended "
               "on the node, as the watcher ran or served it.",
               [(labels(node=node, level=lv), t) for lv, t in sorted(r.checked_at.items())])
    if r.drained is not None:
        out.family("slurm_ft_node_drained", "gauge",
                   "1 while the node's checks know slurm-ft drained it (the state file's last drain or resume).",
                   [(labels(node=node), r.drained)])
    return out.text()


def from_state(state: Mapping[str, object]) -> Tuple[Set[str], bool]:
    """(checks with an active fail finding, whether slurm-ft's drain is on the node) from a state file."""
    failing = {f.check for f in st.active(state)}
    return failing, bool(state.get("slurm_ft_drained"))


class NodeLiveness:
    """What the watcher tells it (its loop, each check's end), written with the state file's verdicts to
    health.metrics_path. Thread-safe: the loop, the served hooks and the writer thread share it."""

    def __init__(self, node: str, config: Config) -> None:
        hc = config.health
        self.node = node
        self.path = hc.on(node, hc.metrics_path)
        self.state_path = st.path_for(hc, node)
        self.checks = _routine_checks(config)
        self._lock = threading.Lock()
        self._loop_at: Optional[float] = None
        self._checked_at: Dict[str, float] = {}
        self._state_key: Optional[Tuple[int, int, int]] = None
        self._verdicts: Tuple[Optional[Set[str]], Optional[bool]] = (None, None)
        self._failing = False
        self._said = ""                 # the state file's last problem, said once (not every WRITE_EVERY_S)

    def looped(self, now: Optional[float] = None) -> None:
        self._loop_at = time.time() if now is None else now     # one float: no lock needed

    def checked(self, level: str, now: Optional[float] = None) -> None:
        with self._lock:
            self._checked_at[level] = time.time() if now is None else now

    def readings(self, sources: Mapping[str, bool]) -> Readings:
        failing, drained = self._read_state()
        with self._lock:
            checked = dict(self._checked_at)
        return Readings(self.node, self._loop_at, dict(sources), checked, self.checks, failing, drained)

    def write(self, sources: Mapping[str, bool]) -> None:
        """Replace the textfile; a failed write is logged once (and once when it works again)."""
        if not self.path:
            return
        try:
            atomic_write(self.path, render(self.readings(sources)), 0o644)   # node_exporter runs as its own user
        except OSError as exc:
            if not self._failing:
                log.error("watch metrics not written to %s: %s (health.metrics_path)", self.path, exc.strerror or exc)
            self._failing = True
            return
        if self._failing:
            log.warning("watch metrics written to %s again", self.path)
        self._failing = False

    def _read_state(self) -> Tuple[Optional[Set[str]], Optional[bool]]:
        """The state file's verdicts, parsed again only when the file changed (a healthy node's checks
        rewrite it only when a result changes)."""
        p = Path(self.state_path)
        try:
            s = os.stat(p)
            key: Optional[Tuple[int, int, int]] = (s.st_ino, s.st_size, s.st_mtime_ns)
        except FileNotFoundError:
            key = None
        except OSError as exc:
            return self._unread(f"{p}: state not read for the metrics: {exc.strerror or exc}")
        if key is not None and key == self._state_key:
            return self._verdicts
        try:
            failing, drained = from_state(st.load(p, self.node))
        except (SlurmFTError, OSError, KeyError, ValueError) as exc:   # unsafe or unreadable: no verdict to show
            return self._unread(f"{p}: state not read for the metrics: {exc}")
        self._state_key, self._verdicts, self._said = key, (failing, drained), ""
        return self._verdicts

    def _unread(self, why: str) -> Tuple[None, None]:
        if why != self._said:
            log.warning("%s", why)
        self._said, self._state_key = why, None
        return None, None


def _routine_checks(config: Config) -> Tuple[str, ...]:
    """The checks a node runs by itself; a level the config breaks is left out (its checks say why)."""
    found: List[str] = []
    for level in ROUTINE_LEVELS:
        try:
            found += [c for c in levels.checks_for(level, config.health.levels) if c not in found]
        except SlurmFTError:
            continue
    return tuple(found)
