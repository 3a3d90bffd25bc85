""""May I take these nodes out of service?": the one question every drain in slurm-ft asks first.

Health checks (`check --drain`, the HealthCheckProgram, `watch`), the sweep's spare re-checks and the
controller's quarantines call `may_take_out` (or `may_drain` for one node) before they touch Slurm. The
answer is the pure `breaker.may_take_out` over a fresh Slurm snapshot, so every host and the controller
see one fleet-wide breaker, with no node-local state to reset.

When the count cannot be known (Slurm unreachable, a malformed answer) the answer is NO, logged as an
error: slurm-ft's own trouble must never take nodes out.

Prolog and epilog cannot call Slurm. They decide from the fleet view the node's last `check --drain`
saved next to its state file (`save_view`/`hook_decision`); a missing, corrupt or older than
`health.fleet_view_max_age_s` view is an unknown count: the finding is reported, the node not drained.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Optional, Sequence

from slurm_ft.config import Config
from slurm_ft.errors import SlurmFTError
from slurm_ft.fsutil import atomic_write
from slurm_ft.node import breaker as brk
from slurm_ft.node.state import path_for

if TYPE_CHECKING:
    from slurm_ft.slurm.api import SlurmApi
    from slurm_ft.slurm.types import Node

log = logging.getLogger(__name__)


def enabled(config: Config) -> bool:
    lc = config.lifecycle
    return lc.breaker_max_share > 0 or lc.breaker_max_nodes > 0


def decide(config: Config, fleet: brk.FleetView, nodes: Iterable[str], now: float) -> brk.Decision:
    lc = config.lifecycle
    return brk.may_take_out(fleet, nodes, now, max_share=lc.breaker_max_share, max_nodes=lc.breaker_max_nodes,
                            window_s=lc.breaker_window_s)


def fleet_view(config: Config, *, client: Optional[SlurmApi] = None, snapshot: Optional[Sequence[Node]] = None,
               now: Optional[float] = None) -> brk.FleetView:
    """The breaker's view of the fleet from `snapshot` (slurm.types.Node list), else a fresh read of every node
    (`client.fleet_nodes()`: the light one, as every node's health check makes it)."""
    now = time.time() if now is None else now
    if snapshot is None:
        if client is None:
            # the prolog/epilog load guard for hook_decision and never call Slurm
            # lazy: only a caller without a client pays for the Slurm backend
            from slurm_ft.slurm.backend import client_from_config
            client = client_from_config(config)
        snapshot = client.fleet_nodes()
    return brk.view(snapshot, now)


def may_take_out(config: Config, nodes: Iterable[str], *, client: Optional[SlurmApi] = None,
                 snapshot: Optional[Sequence[Node]] = None, actor: str = "",
                 now: Optional[float] = None) -> brk.Decision:
    """May `actor` take `nodes` out of service now (drain, quarantine, anything that removes them)?

    `snapshot`: the caller's fresh `client.nodes()`, to save a Slurm call. An unknown count says no."""
    nodes = list(nodes)
    if not enabled(config):
        return brk.Decision(True, "breaker disabled", 0, 1 << 30)
    now = time.time() if now is None else now
    try:
        fleet = fleet_view(config, client=client, snapshot=snapshot, now=now)
    except (SlurmFTError, OSError) as exc:
        why = f"fleet drain count unknown ({exc}); not taking out {', '.join(nodes)}"
        log.error("%s%s", f"{actor}: " if actor else "", why)
        return brk.Decision(False, why, 0, 0)
    d = decide(config, fleet, nodes, now)
    if not d.allowed:
        log.warning("%s%s", f"{actor}: " if actor else "", d.reason)
    return d


def may_drain(config: Config, node: str, reason: str = "", *, client: Optional[SlurmApi] = None,
              total_nodes: Optional[int] = None, actor: str = "check", now: Optional[float] = None) -> brk.Decision:
    """`may_take_out` for one node (`reason` and `total_nodes` are accepted for older callers)."""
    return may_take_out(config, [node], client=client, actor=actor, now=now)


@contextlib.contextmanager
def serialized(config: Config) -> Iterator[None]:
    """Decide, drain and `settle` one at a time among the callers sharing `state_dir` (one host, the lab,
    a shared file system). Best effort: without the lock file the callers rely on `settle` alone."""
    fd = None
    try:
        os.makedirs(config.state_dir, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(config.state_dir, "breaker.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as exc:
        log.warning("breaker lock in %s not taken: %s", config.state_dir, exc)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def settle(config: Config, node: str, reason: str, *, client: SlurmApi, actor: str = "check") -> str:
    """Right after draining `node` with `reason`: re-read Slurm; undo the drain when racing drains on
    other hosts put the fleet past the limit (`breaker.keeps`) or the count cannot be read. Returns why
    it was undone, or "" when the drain stands."""
    if not enabled(config):
        return ""
    now = time.time()
    lc = config.lifecycle
    try:
        fleet = fleet_view(config, client=client, now=now)
        if brk.keeps(fleet, node, now, max_share=lc.breaker_max_share, max_nodes=lc.breaker_max_nodes,
                     window_s=lc.breaker_window_s):
            return ""
        why = (f"drain-rate breaker: drains racing on other hosts passed the limit "
               f"{brk.limit(fleet.total, lc.breaker_max_share, lc.breaker_max_nodes)}; drain of {node} undone")
    except (SlurmFTError, OSError) as exc:
        why = f"fleet drain count unknown after draining {node} ({exc}); drain undone"
    try:
        if client.node(node).reason == reason:      # still our drain: nobody rewrote it meanwhile
            client.resume([node])
    except (SlurmFTError, OSError) as exc:
        log.error("%s: %s; undoing the drain of %s failed: %s", actor, why, node, exc)
        return f"{why} (resume failed: {exc})"
    log.error("%s: %s", actor, why)
    return why


# --- the hook path: the node-local copy of the last fleet view ------------------------------------

def view_path(config: Config, node: str) -> Path:
    p = path_for(config.health, node)
    return p.with_name(p.name + ".fleet")


def save_view(config: Config, node: str, fleet: brk.FleetView) -> None:
    """Keep the view for this node's prolog/epilog (best effort: a failure only logs)."""
    path = view_path(config, node)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(path, json.dumps(fleet.to_dict()) + "\n", mode=0o600)
    except OSError as exc:
        log.warning("fleet view %s not written: %s", path, exc)


def load_view(config: Config, node: str) -> Optional[brk.FleetView]:
    path = view_path(config, node)
    try:
        raw = path.read_bytes()[:4 << 20]
        return brk.FleetView.from_dict(json.loads(raw))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError) as exc:
        log.error("fleet view %s unusable: %s", path, exc)
        return None


def view_age(config: Config, node: str, now: float) -> Optional[float]:
    v = load_view(config, node)
    return None if v is None else now - v.taken_at


def hook_decision(config: Config, node: str, now: Optional[float] = None) -> brk.Decision:
    """May the prolog/epilog fail this node (Slurm then drains it)? From the saved view; unknown says no."""
    if not enabled(config):
        return brk.Decision(True, "breaker disabled", 0, 1 << 30)
    now = time.time() if now is None else now
    fleet = load_view(config, node)
    max_age = config.health.fleet_view_max_age_s
    if fleet is None or not (0 <= now - fleet.taken_at <= max_age):
        what = ("no fleet view saved" if fleet is None
                else f"fleet view is {now - fleet.taken_at:.0f} s old (max {max_age:g} s)")
        why = (f"fleet drain count unknown ({what}; the HealthCheckProgram `check --drain` saves it); "
               f"not draining {node}")
        log.error("%s", why)
        return brk.Decision(False, why, 0, 0)
    return decide(config, fleet, [node], now)
