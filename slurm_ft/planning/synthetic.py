"""A synthetic node history at a known failure rate, written into a journal: what `--from-journal`
must recover (tests, and trying the planning commands before a cluster has a history).

Each node fails as a Poisson process of `rate_per_node_day` while in service; each fault is followed by
quarantine, a repair of exponential duration (mean `repair_hours`), validation and the pool, recorded
through the lifecycle store exactly as the sweep and an admin would record them.
"""
from __future__ import annotations

import random
from typing import Sequence

from slurm_ft.lifecycle.states import Event, State
from slurm_ft.lifecycle.store import Store

OBSERVED_SINCE = "observed_since"


def write_history(store: Store, nodes: Sequence[str], *, days: float, rate_per_node_day: float,
                  repair_hours: float, start: float, seed: int = 0) -> int:
    """Record `days` of faults and repairs from `start`; returns the number of faults written."""
    rng = random.Random(seed)
    end = start + days * 86400.0
    faults = 0
    for node in nodes:
        t = start
        while True:
            t += rng.expovariate(rate_per_node_day) * 86400.0
            if t >= end:
                break
            back = t + rng.expovariate(1.0 / repair_hours) * 3600.0
            steps = [(Event.FAULT, t, f"slurm-ft: XID79 gpu{rng.randrange(8)} GPU has fallen off the bus", "check"),
                     (Event.QUARANTINE, t + 60, "drained and out of the partitions", "sweep"),
                     (Event.REPAIRED, back - 3600, "synthetic repair", "admin:synthetic"),
                     (Event.VALIDATE, back - 1800, "validation job: full + burnin", "sweep"),
                     (Event.PASS, back, "passed", "sweep")]
            for event, at, cause, actor in steps:
                store.apply(node, event, at, default=State.IN_SERVICE, cause=cause, actor=actor)
            faults += 1
            t = back
    store.kv_set(OBSERVED_SINCE, repr(start))
    return faults
