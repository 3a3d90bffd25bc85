"""A simulated history at a known failure rate, written into a journal: what `--from-journal` must
recover (tests, bench/sim.py, and trying the planning commands before a cluster has a history).

`write_sim_journal` takes the faults `slurm-ft sim` met (plan/sim.py `simulate(faults=...)`), maps
them onto named nodes (the job's slots and the spare pool), records each repair (fault, quarantine,
repair, validation, the pool) through the lifecycle store exactly as the sweep and an admin record
them, and one recovery incident per interruption as the controller journals it.
"""
from __future__ import annotations

import heapq
import random
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from slurm_ft.fleet.lifecycle.transitions import Event, State
from slurm_ft.fleet.lifecycle.node_history import Store
from slurm_ft.fleet.recovery import journal
from slurm_ft.vocab import sim_reason

if TYPE_CHECKING:
    from slurm_ft.plan.sim import SimFault

OBSERVED_SINCE = "observed_since"
SIM_JOB_ID = 1
SIM_PARTITION = "train"

_Step = Tuple[float, str, Event, str, str]      # time, node, event, cause, actor
# fault time, opened, failed nodes, spares taken, fault class, resumed
_Incident = Tuple[float, float, List[str], List[str], str, float]


def _repair_steps(node: str, fault_at: float, quarantined: float, back: float, cause: str) -> List[_Step]:
    """A fault, its quarantine, a repair, a validation and the pass at `back` (steps spread over the repair,
    so that they stay in order however short it was)."""
    span = back - quarantined
    return [(fault_at, node, Event.FAULT, cause, "check"),
            (quarantined, node, Event.QUARANTINE, "drained and out of the partitions", "sweep"),
            (quarantined + 0.5 * span, node, Event.REPAIRED, "synthetic repair", "admin:synthetic"),
            (quarantined + 0.75 * span, node, Event.VALIDATE, "validation job: full + burnin", "sweep"),
            (back, node, Event.PASS, "passed", "sweep")]


def _apply(store: Store, steps: Sequence[_Step], until: float) -> None:
    """Record the steps up to `until` in time order (a repair still running then stays open)."""
    for at, node, event, cause, actor in sorted(steps, key=lambda s: s[0]):
        if at <= until:
            store.apply(node, event, at, default=State.IN_SERVICE, cause=cause, actor=actor)


def sim_node_names(job_nodes: int, spares: int) -> Tuple[List[str], List[str]]:
    """The simulated job's nodes and the spare pool's, as they are named in the journal."""
    names = [f"sim{i:05d}" for i in range(job_nodes + spares)]
    return names[:job_nodes], names[job_nodes:]


def write_sim_journal(store: Store, faults: Sequence[SimFault], *, job_nodes: int, spares: int, days: float,
                      start: float, seed: int = 0) -> int:
    """Record the interruptions of one simulated run (`SimFault`s, seconds from `start`) as the journal
    of a cluster with `job_nodes` + `spares` nodes; returns the node faults written.

    Which of the job's nodes a fault hits is drawn uniformly (seeded); the failed node goes to repair
    until the simulation's repair time, a spare takes its slot (or the first node back when the pool is
    empty, as the simulation waits for it). Each interruption is one incident of job 1: recovered when
    the job resumed, abandoned when a later fault came during its recovery (the simulation charges that
    time to the later one). Nothing after the end of the window is written.
    """
    journal.ensure(store.db)
    if store.history() or journal.incidents(store.db, limit=1):
        raise ValueError("the journal already holds a history: a simulated one goes into an empty state dir")
    rng = random.Random(f"slots-{seed}")
    end = start + days * 86400.0
    slots, pool = sim_node_names(job_nodes, spares)
    for node in pool:
        store.enrol(node, State.SPARE, start, cause="simulated spare pool", actor="sim")
    in_repair: List[Tuple[float, str]] = []
    steps: List[_Step] = []
    swapped_in: Dict[int, int] = {}         # slot -> index in `steps` of the swap-in of the node it holds
    incidents: List[_Incident] = []
    written = 0
    for f in faults:
        failed: List[str] = []
        taken: List[str] = []
        if f.swap:
            assert f.repaired is not None       # a fault that took a node out has its repair time
            while in_repair and in_repair[0][0] <= f.detected:
                pool.append(heapq.heappop(in_repair)[1])
            # a node still being brought in by an earlier recovery is not there to fail yet
            ready = [k for k in range(job_nodes) if k not in swapped_in or steps[swapped_in[k]][0] <= start + f.at]
            if not ready:
                raise ValueError(f"every node of the {job_nodes}-node job was being replaced when a fault hit: "
                                 f"simulate a larger job to write a journal")
            i = ready[rng.randrange(len(ready))]
            node = slots[i]
            failed.append(node)
            heapq.heappush(in_repair, (f.repaired, node))
            steps += _repair_steps(node, start + f.at, start + f.detected, start + f.repaired,
                                   sim_reason(f.cls, f.kind))
            back, spare = (0.0, pool.pop(0)) if pool else heapq.heappop(in_repair)
            slots[i] = spare
            taken.append(spare)
            swapped_in[i] = len(steps)
            steps.append((start + max(f.detected, back), spare, Event.SWAP_IN,
                          f"replaces {node} in job {SIM_JOB_ID}", "controller"))
            written += start + f.at <= end
        incidents.append((start + f.at, start + f.detected, failed, taken, f.cls, start + f.resumed))
    _apply(store, steps, end)
    _write_incidents(store, incidents, job_nodes, end)
    store.kv_set(OBSERVED_SINCE, repr(start))
    return written


def _write_incidents(store: Store, rows: Sequence[_Incident], job_nodes: int, end: float) -> None:
    for n, (fault_at, opened, nodes, taken, cls, resumed) in enumerate(rows):
        if fault_at > end:
            break
        iid = journal.open_incident(store.db, job_id=SIM_JOB_ID, nodes=nodes, faults=[cls],
                                    partition=SIM_PARTITION, restart_count=n, job_nodes=job_nodes,
                                    ckpt_step=None, fault_at=fault_at, now=opened, detail="simulated")
        if taken:
            journal.update_incident(store.db, iid, spares=taken)
        later: Optional[float] = rows[n + 1][0] if n + 1 < len(rows) else None
        if later is not None and later < resumed:
            if later <= end:
                journal.close_incident(store.db, iid, "abandoned", later, note="a later fault during recovery")
        elif resumed <= end:
            journal.close_incident(store.db, iid, "recovered", resumed)
