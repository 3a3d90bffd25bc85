"""`controller run`'s loop: a cycle, then idle until the interval ends or a node wakes the controller.

Idle, the controller reads Slurm every `controller.interval_s` (nodes, jobs, partitions: one read each);
a node that drained itself wakes it at once (slurm_ft/wake.py), so a fault is acted on within a cycle
of its drain while the fleet-wide reads stay few. Used by the daemon and by the lab's scenario alike.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable, Optional

from slurm_ft.errors import SlurmFTError
from slurm_ft.slurm import parse
from slurm_ft.wake import Listener

if TYPE_CHECKING:
    from slurm_ft.config import Config
    from slurm_ft.fleet.recovery.controller import Controller
    from slurm_ft.fleet.recovery.liveness import Writer

log = logging.getLogger(__name__)


def listen(ctl: Controller, config: Config) -> Optional[Listener]:
    """The nodes' wake channel, or None (controller.wake_port 0, or the port taken): then it only polls."""
    port = config.controller.wake_port
    if not port:
        return None
    try:
        munge = parse.munge_socket(ctl.client.running_config())
    except SlurmFTError as exc:
        log.error("slurmctld's config unreadable (%s): wakes are checked with munge's default socket", exc)
        munge = None
    try:
        return Listener(port, munge_socket=munge)
    except OSError as exc:
        log.error("cannot listen for nodes' wakes on UDP port %s (%s): polling every %g s only", port, exc,
                  config.controller.interval_s)
        return None


def serve(ctl: Controller, every: float, listener: Optional[Listener], stopped: Callable[[], bool],
          budget_s: Optional[float] = None, liveness: Optional[Writer] = None) -> None:
    """Cycles until `stopped()`: each followed by the rest of `every`, cut short by a wake. `liveness`:
    told of each cycle's end (fleet/recovery/liveness.py, the daemon's textfile)."""
    if liveness is not None:
        liveness.write(force=True)          # started: the file says so before the first cycle ends
    try:
        while not stopped():
            started = time.monotonic()
            try:
                ctl.cycle(budget_s)
            except Exception as exc:   # one bad cycle (Slurm down, a timeout) must not end the daemon
                log.error("cycle failed: %s", exc, exc_info=log.isEnabledFor(logging.DEBUG))
                if liveness is not None:
                    liveness.cycle_failed()
            else:
                if liveness is not None:
                    liveness.cycle_done(time.monotonic() - started)
            heard = idle(every - (time.monotonic() - started), listener, stopped)
            if heard is not None:
                ctl.heard(heard)
    finally:
        if listener is not None:
            listener.close()
        if liveness is not None:
            liveness.write(force=True)      # the last cycle's end exactly; its age then tells a stopped controller


def idle(rest: float, listener: Optional[Listener], stopped: Callable[[], bool]) -> Optional[str]:
    """Wait out `rest` seconds, a node's wake, or a stop, whichever comes first; the wake's payload."""
    end = time.monotonic() + rest
    while not stopped():
        left = end - time.monotonic()
        if left <= 0:
            return None
        if listener is None:
            time.sleep(min(left, 0.2))
        else:
            heard = listener.wait(min(left, 0.2))
            if heard is not None:
                return heard
    return None
