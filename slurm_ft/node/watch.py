"""The node watcher: Xids from the kernel log and from NVML events; a fatal one runs the quick level
with --drain at once, so detection takes a poll interval (50 ms) instead of a HealthCheckInterval.

Two source threads feed one queue; the main loop judges each event with the Xid catalog:
* user-caused or warn-only Xid -> one log line, nothing else;
* a draining Xid -> `check_node("quick", drain=True)` with the event handed in (an NVML event may not
  be in the log yet), then one line saying what happened. Events already queued are handled together,
  so a burst of Xids costs one check and one scontrol call.

With a soft-signal pass (node/softpass.py, every health.soft_period_s in a thread of its own, so a slow
NVML read never delays an Xid), warn-class hardware Xids also count toward its trends, and a soft finding
drains the node gracefully for a planned swap (node/planned.py).
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Union

from slurm_ft.config import Config
from slurm_ft.fsutil import atomic_write, refuse_unsafe
from slurm_ft.gpu import journal, kmsg, xid as catalog
from slurm_ft.gpu.nvml import NvmlEventError, XidEventWatcher
from slurm_ft.gpu.sample import XidEvent
from slurm_ft.node import host, state as st
from slurm_ft.node.check_lock import CheckLock
from slurm_ft.node.check_server import BUSY_S
from slurm_ft.node.liveness import WRITE_EVERY_S, NodeLiveness
from slurm_ft.node.run import Report, check_node

if TYPE_CHECKING:
    from pathlib import Path

    from slurm_ft.node.softpass import PassResult, SoftPass
    from slurm_ft.slurm.api import SlurmApi

log = logging.getLogger(__name__)

CHECK_NOW = XidEvent(xid=0, detail="NVML event wait failed", source="nvml")   # run the check, no Xid
SAVE_EVERY_S = 5.0       # a log position with no Xid before it is saved at most this often
_SOURCES = {"watch-kmsg": "kernel_log", "watch-nvml": "nvml_events", "watch-soft": "soft_signals"}  # thread -> source


@dataclass
class Position:
    """Queued after the events read before it: once they are handled, the watcher saves it, and a
    restarted watcher resumes there (an Xid logged while it was down is handled, none twice)."""
    where: Dict[str, Any]        # kmsg.Position


@dataclass
class Handled:
    events: List[XidEvent]
    fatal: bool
    detected_at: float
    done_at: float
    report: Optional[Report] = None      # when a check ran

    def to_dict(self) -> Dict[str, object]:
        d: Dict[str, object] = {"kind": "xid", "time": round(self.done_at, 3), "fatal": self.fatal,
                                "latency_s": round(self.done_at - self.detected_at, 4),
                                "events": [{"xid": e.xid, "gpu": e.gpu, "pci": e.pci_bus_id, "source": e.source,
                                            "meaning": catalog.verdict(e).name,
                                            "verdict": catalog.verdict(e).severity}
                                           for e in self.events]}
        if self.report is not None:
            d["check"] = self.report.to_dict()
        return d


class Watcher:
    def __init__(self, node: str, config: Config, *, client: Optional[SlurmApi] = None, use_nvml: bool = True,
                 use_kmsg: bool = True, poll_s: float = 0.05, check: Optional[Callable[..., Report]] = None,
                 soft: Optional[SoftPass] = None, on_soft: Optional[Callable[[PassResult], None]] = None,
                 liveness: Optional[NodeLiveness] = None) -> None:
        self.node = node
        self.config = config
        self.client = client
        self.use_nvml = use_nvml
        self.use_kmsg = use_kmsg
        self.poll_s = poll_s
        self.stop_event = threading.Event()
        self.events: "queue.Queue[Union[XidEvent, Position]]" = queue.Queue()
        self.sources: List[str] = []
        self._threads: List[threading.Thread] = []
        self._check = check
        self.check_lock = CheckLock()          # one check at a time: this loop's and the hooks' it serves
        self.soft = soft
        self.on_soft = on_soft
        self.planned_drains = 0                # planned-swap drains the soft pass made (watch --once ends on one)
        self.liveness = liveness               # the node's textfile for node_exporter (node/liveness.py)

    # --- sources ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the sources; return once each follows (or 5 s passed): an Xid after that is seen."""
        waits = []
        if self.use_kmsg:
            path = self.config.health.on(self.node, self.config.health.kmsg_path)
            placed = threading.Event()
            self._spawn("kmsg", self._follow_kmsg, path, placed)
            self.sources.append(f"kernel log {path}")
            waits.append(placed)
        if self.use_nvml:
            ready = threading.Event()
            self._spawn("nvml", self._nvml_events, ready)
            waits.append(ready)
        if self.soft is not None and self.soft.period_s > 0:
            self._spawn("soft", self._soft_passes)
            self.sources.append(f"soft signals every {self.soft.period_s:g} s")
        if self.liveness is not None and self.liveness.path:
            self._spawn("metrics", self._write_metrics)
            self.sources.append(f"metrics to {self.liveness.path}")
        deadline = time.monotonic() + 5.0
        for w in waits:
            w.wait(max(0.0, deadline - time.monotonic()))

    def _spawn(self, name: str, target: Callable[..., None], *args: object) -> None:
        t = threading.Thread(target=target, args=args, name=f"watch-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def _follow_kmsg(self, path: str, placed: threading.Event) -> None:
        def at(where: Dict[str, Any]) -> None:   # the first one: the log is open and the place to read from set
            placed.set()
            self.events.put(Position(where))
        try:
            start = self._load_position(path)
            if path == journal.SOURCE:
                events = journal.follow(poll_s=self.poll_s, stop=self.stop_event.is_set, start=start, on_position=at)
            else:
                events = kmsg.follow(path, poll_s=self.poll_s, stop=self.stop_event.is_set,
                                     boot_time=host.boot_time(), start=start, on_position=at)
            for ev in events:
                self.events.put(ev)
        except Exception as exc:  # noqa: BLE001 - the other source keeps running
            log.error("kernel log watch stopped: %s", exc)
        finally:
            placed.set()

    def _position_file(self) -> Path:
        p = st.path_for(self.config.health, self.node)
        return p.with_name(p.name + ".watch")

    def _load_position(self, path: str) -> Optional[Dict[str, Any]]:
        """Where the last watcher stopped reading `path`; None (start at the end) when unknown."""
        f = self._position_file()
        try:
            where = json.loads(f.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("%s: unreadable watch position (%s); starting at the end of the log", f, exc)
            return None
        return where if isinstance(where, dict) and where.get("path") == path else None

    def _save_position(self, where: Dict[str, Any]) -> None:
        f = self._position_file()
        try:
            f.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            refuse_unsafe(f.parent, "state directory")
            atomic_write(f, json.dumps(where) + "\n", mode=0o600)
        except Exception as exc:  # noqa: BLE001 - the watch goes on; a restart then starts at the end
            log.warning("watch position not saved in %s: %s", f, exc)

    def _nvml_events(self, ready: threading.Event) -> None:
        first = True
        while not self.stop_event.is_set():
            try:
                with XidEventWatcher() as w:
                    if first:
                        self.sources.append(f"NVML Xid events on GPUs {w.registered}")
                        ready.set()
                    while not self.stop_event.is_set():
                        for ev in w.wait(int(self.poll_s * 1000) or 1):
                            self.events.put(ev)
            except NvmlEventError as exc:
                # NVML stopped delivering events: a GPU was lost or the driver went away. Check now.
                log.error("%s; running the quick check", exc)
                self.events.put(CHECK_NOW)
            except Exception as exc:  # noqa: BLE001 - no driver at all: the kernel log still works
                if first:
                    log.warning("NVML Xid events unavailable: %s", exc)
                    ready.set()
                    return
                log.warning("NVML Xid events: %s; retrying", exc)
            first = False
            ready.set()
            self.stop_event.wait(5.0)      # then listen again (the driver may be back after a reset)

    def _soft_passes(self) -> None:
        assert self.soft is not None
        while not self.stop_event.is_set():
            now = time.time()
            if self.soft.due(now):
                try:
                    res = self.soft.run(now)
                except Exception as exc:  # noqa: BLE001 - a bug in the soft pass must not stop the Xid watch
                    log.error("soft-signal pass failed: %s", exc, exc_info=log.isEnabledFor(logging.DEBUG))
                    continue
                if res.outcome is not None and res.outcome.action == "drained":
                    self.planned_drains += 1
                if self.on_soft:
                    self.on_soft(res)
            self.stop_event.wait(max(0.05, min(1.0, self.soft.next_at - time.time())))

    def sources_up(self) -> Dict[str, bool]:
        """Each source this watcher started: is its thread still reading?"""
        return {_SOURCES[t.name]: t.is_alive() for t in self._threads if t.name in _SOURCES}

    def _write_metrics(self) -> None:
        assert self.liveness is not None
        self.liveness.write(self.sources_up())
        while not self.stop_event.wait(WRITE_EVERY_S):
            self.liveness.write(self.sources_up())
        self.liveness.write(self.sources_up())      # at stop: the loop's last round exactly

    def stop(self) -> None:
        self.stop_event.set()
        for t in self._threads:
            t.join(timeout=2.0)
        if self.soft is not None:
            self.soft.save()

    # --- the loop -----------------------------------------------------------------------------
    def next_batch(self, timeout: float) -> List[Union[XidEvent, Position]]:
        try:
            first = self.events.get(timeout=timeout)
        except queue.Empty:
            return []
        batch = [first]
        while True:
            try:
                batch.append(self.events.get_nowait())
            except queue.Empty:
                return batch

    def handle(self, batch: List[XidEvent]) -> Handled:
        detected = time.time()
        check_now = any(e is CHECK_NOW for e in batch)
        batch = [e for e in batch if e is not CHECK_NOW]
        fatal = [e for e in batch if catalog.verdict(e).drains]
        if self.soft is not None:   # warn-class hardware Xids are a soft signal's trend
            self.soft.note_xids([e for e in batch if catalog.verdict(e).severity == "warn"
                                 and not catalog.verdict(e).user_caused])
        if not fatal and not check_now:
            for e in batch:
                v = catalog.verdict(e)
                log.warning("Xid %s on %s: %s (%s); nothing to do", e.xid, _where(e), v.name,
                            "application error" if v.user_caused else v.severity)
            return Handled(batch, False, detected, time.time())
        check = self._check or _default_check
        # first in line for the lock; a check that outlasts BUSY_S (NVML stuck in a hook's check) does not
        # hold the drain: it runs beside it, as a hook's does after the same wait
        locked = self.check_lock.acquire(timeout=BUSY_S, urgent=True)
        if not locked:
            log.warning("the node's check lock stayed held %.0f s: checking for the Xid beside that check", BUSY_S)
        try:
            report = check("quick", self.node, self.config, drain=True, client=self.client, extra_xids=fatal)
        finally:
            if locked:
                self.check_lock.release()
        if self.liveness is not None:
            self.liveness.checked("quick")
        return Handled(batch, True, detected, time.time(), report)

    def run(self, *, once: bool = False, timeout: Optional[float] = None,
            on_handled: Optional[Callable[[Handled], None]] = None) -> int:
        """Handle events until stopped, `timeout` passes, or (once) the first fatal Xid is handled or the
        first planned-swap drain made."""
        end = time.monotonic() + timeout if timeout is not None else None
        handled_fatal = 0
        saved_at = 0.0
        while not self.stop_event.is_set():
            if self.liveness is not None:
                self.liveness.looped()
            wait = 0.2 if end is None else max(0.0, min(0.2, end - time.monotonic()))
            queued = self.next_batch(wait)
            positions = [p for p in queued if isinstance(p, Position)]
            batch = [e for e in queued if not isinstance(e, Position)]
            h = self.handle(batch) if batch else None
            if positions and (batch or time.monotonic() - saved_at >= SAVE_EVERY_S):
                self._save_position(positions[-1].where)       # after its events were handled
                saved_at = time.monotonic()
            if h is not None:
                if on_handled:
                    on_handled(h)
                if h.fatal:
                    handled_fatal += 1
                    if once:
                        break
            if once and self.planned_drains:
                break
            if end is not None and time.monotonic() >= end:
                break
        return handled_fatal


def _default_check(level: str, node: str, config: Config, **kw: Any) -> Report:
    return check_node(level, node, config, **kw)


def _where(e: XidEvent) -> str:
    return f"gpu{e.gpu}" if e.gpu is not None else (f"PCI {e.pci_bus_id}" if e.pci_bus_id else "?")
