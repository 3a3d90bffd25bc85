"""The controller's liveness textfile (`controller.metrics_path`): when `controller run` last finished a cycle.

A dead or wedged controller recovers nothing, and the sweep's textfile cannot tell: cron writes it
from the journal and Slurm, whether the controller runs or not. This file is written by the daemon's
loop from what the loop already knows (no Slurm read), at most every WRITE_EVERY_S, atomically, beside
the sweep's file in node_exporter's textfile directory. Alert on its age (etc/prometheus/slurm-ft.rules.yml).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Optional

from slurm_ft import __version__
from slurm_ft.fsutil import atomic_write
from slurm_ft.promtext import Exposition, labels

log = logging.getLogger(__name__)

WRITE_EVERY_S = 5.0      # a cycle every 50 ms (a lab's interval) still writes the file this seldom


@dataclass
class Readings:
    started_at: float
    last_cycle_at: Optional[float] = None       # when the last cycle that ran to its end ended
    last_cycle_s: Optional[float] = None        # how long it took
    cycles_failed: int = 0                      # cycles that raised (Slurm down, a timeout) since the start


def render(r: Readings) -> str:
    out = Exposition()
    out.family("slurm_ft_controller_info", "gauge", "slurm-ft controller running, by version.",
               [(labels(version=__version__), 1)])
    out.family("slurm_ft_controller_start_time_seconds", "gauge", "Unix time `slurm-ft controller run` started.",
               [("", r.started_at)])
    if r.last_cycle_at is not None and r.last_cycle_s is not None:
        out.family("slurm_ft_controller_last_cycle_timestamp_seconds", "gauge",
                   "Unix time the controller's last cycle (observe, plan, act) ran to its end.", [("", r.last_cycle_at)])
        out.family("slurm_ft_controller_last_cycle_duration_seconds", "gauge",
                   "Wall time of the controller's last cycle (a recovery in progress polls up to "
                   "controller.cycle_budget_s).", [("", r.last_cycle_s)])
    out.family("slurm_ft_controller_cycles_failed_total", "counter",
               "Controller cycles that failed (Slurm unreachable, a timeout) since it started.", [("", r.cycles_failed)])
    return out.text()


class Writer:
    """What the loop tells it, written to `path` when due; "" writes nothing. A write that fails is logged
    once (and once more when writing works again): the loop must go on recovering jobs."""

    def __init__(self, path: str, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        self.readings = Readings(started_at=clock())
        self._written_at: Optional[float] = None
        self._failing = False

    def cycle_done(self, seconds: float) -> None:
        now = self.clock()
        self.readings.last_cycle_at, self.readings.last_cycle_s = now, seconds
        self.write(now)

    def cycle_failed(self) -> None:
        self.readings.cycles_failed += 1
        self.write(self.clock())

    def write(self, now: Optional[float] = None, force: bool = False) -> None:
        now = self.clock() if now is None else now
        if not self.path or (not force and self._written_at is not None and now - self._written_at < WRITE_EVERY_S):
            return
        self._written_at = now
        try:
            atomic_write(self.path, render(self.readings), 0o644)   # node_exporter runs as its own user
        except OSError as exc:
            if not self._failing:
                log.error("liveness metrics not written to %s: %s (controller.metrics_path)", self.path,
                          exc.strerror or exc)
            self._failing = True
            return
        if self._failing:
            log.warning("liveness metrics written to %s again", self.path)
        self._failing = False
