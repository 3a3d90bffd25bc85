"""One read of the fleet for people and Prometheus: Slurm's nodes + the journal -> a view.

`slurm-ft status`, `slurm-ft node list` and the metrics file all come from `view()`, so the three
always agree.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple, Union

from slurm_ft.config import Config
from slurm_ft.errors import SlurmFTError
from slurm_ft.breaker import hold as breaker_hold, rules as brk
from slurm_ft.fleet.report import drain_stats, job_progress, metrics
from slurm_ft.fleet.recovery import journal
from slurm_ft.fleet.lifecycle.pool import pool_target
from slurm_ft.fleet.lifecycle.reconcile import count_states, state_of
from slurm_ft.fleet.lifecycle.transitions import State
from slurm_ft.fleet.lifecycle.node_history import NodeRecord, Store
from slurm_ft.fleet.recovery.records import Incident
from slurm_ft.slurm.types import Node

if TYPE_CHECKING:
    from slurm_ft.fleet.report.drain_stats import Episode, Stats
    from slurm_ft.fleet.lifecycle.sweep_report import SweepReport
    from slurm_ft.slurm.api import SlurmApi

log = logging.getLogger(__name__)

# all checkpoint directories of one metrics write together (each at most job_progress.READ_DEADLINE_S):
# 100 held jobs naming one slow directory cost ~1,000 s a write, inside the sweep lock, before this
GOODPUT_TOTAL_S = 30.0


@dataclass
class FleetView:
    now: float
    nodes: List[Node]
    records: Dict[str, NodeRecord]
    states: Dict[str, State]
    spare_partition: str
    pool: List[str] = field(default_factory=list)          # known-good schedulable spares
    pool_target: int = 0
    pool_target_source: str = ""
    incidents_open: List[Incident] = field(default_factory=list)
    incidents_total: int = 0
    phase_seconds: Dict[str, List[float]] = field(default_factory=dict)
    drain_summary: Dict[str, Any] = field(default_factory=dict)   # fleet/report/drain_stats.py: per check and per Xid
    breaker: brk.BreakerState = field(default_factory=brk.BreakerState)
    breaker_in_window: Tuple[str, ...] = ()
    breaker_limit: int = 0
    last_sweep: Optional[Dict[str, Any]] = None
    keep_off: FrozenSet[str] = frozenset()      # the config's nodes slurm-ft leaves alone
    breaker_hold: Optional[Dict[str, Any]] = None   # an admin's hold in force (breaker/hold.py)

    def by_state(self, state: State) -> List[str]:
        return sorted(n for n, s in self.states.items() if s is state)

    def to_dict(self) -> Dict[str, Any]:
        rows = {r["node"]: r for r in self.rows()}

        def row(name: str) -> Dict[str, Any]:
            return rows[name]

        return {
            "time": self.now,
            "nodes_by_state": count_states(self.states.values()),
            "pool": {"partition": self.spare_partition, "healthy": len(self.pool), "target": self.pool_target,
                     "target_source": self.pool_target_source, "nodes": self.pool,
                     "short": max(0, self.pool_target - len(self.pool))},
            "incidents": {"open": [_incident(i) for i in self.incidents_open], "total": self.incidents_total},
            "quarantined": [row(n) for n in self.by_state(State.QUARANTINED) + self.by_state(State.FAILED)],
            "validating": [row(n) for n in self.by_state(State.REPAIRED) + self.by_state(State.VALIDATING)],
            "remediating": [row(n) for n in self.by_state(State.REMEDIATING)],   # being rebooted by the sweep
            "rma": [row(n) for n in self.by_state(State.RMA)],
            "breaker": {"open": self.breaker.open, "open_since": self.breaker.open_since,
                        "reason": self.breaker.open_reason, "drains_in_window": len(self.breaker_in_window),
                        "nodes_in_window": list(self.breaker_in_window), "limit": self.breaker_limit,
                        "hold": self.breaker_hold},
            "last_sweep": self.last_sweep,
            "keep_off": sorted(self.keep_off),
        }

    def rows(self) -> List[Dict[str, Any]]:
        """One row per node, for `node list`."""
        node_by = {n.name: n for n in self.nodes}
        out = []
        for name in sorted(self.states):
            rec = self.records.get(name)
            n = node_by.get(name)
            out.append({"node": name, "state": self.states[name].value, "since": rec.since if rec else None,
                        "cause": rec.cause if rec else "", "slurm_state": _slurm_state(n) if n else "unknown",
                        "slurm_reason": n.reason if n else "", "partitions": list(n.partitions) if n else [],
                        "keep_off": name in self.keep_off})
        return out


def view(config: Config, client: SlurmApi, store: Store, *, now: Optional[float] = None,
         with_target: bool = True, nodes: Optional[Sequence[Node]] = None) -> FleetView:
    """`nodes`: the caller's fresh read of every node (else one is made)."""
    now = time.time() if now is None else now
    spare = config.controller.spare_partition
    nodes = client.nodes() if nodes is None else list(nodes)
    records = store.records()
    recorded = {n: r.state for n, r in records.items()}
    states = {n.name: state_of(n, recorded, spare) for n in nodes}
    for name, rec in records.items():     # nodes Slurm no longer knows keep their record
        states.setdefault(name, rec.state)
    v = FleetView(now=now, nodes=nodes, records=records, states=states, spare_partition=spare,
                  keep_off=config.keep_off_nodes)
    v.pool = sorted(n.name for n in nodes if spare in n.partitions and n.available and states[n.name] is State.SPARE
                    and n.name not in v.keep_off)    # the controller never takes a keep_off spare
    if with_target:
        job_parts = tuple(config.controller.job_partitions) or tuple(
            sorted({p for n in nodes for p in n.partitions} - {spare}))
        v.pool_target, v.pool_target_source = pool_target(config, nodes, job_parts)
    _incidents(v, store)
    lc = config.lifecycle
    # the fleet-wide breaker, from Slurm's node reasons (as every node's check computes it)
    recent = sorted((t, n) for n, t in brk.view(nodes, now).out if now - t <= lc.breaker_window_s)
    v.breaker_in_window = tuple(n for _, n in recent)
    v.breaker_limit = brk.limit(len(nodes), lc.breaker_max_share, lc.breaker_max_nodes)
    if (lc.breaker_max_share > 0 or lc.breaker_max_nodes > 0) and len(recent) >= v.breaker_limit:
        v.breaker = brk.BreakerState(open_since=recent[v.breaker_limit - 1][0], open_reason=(
            f"{len(recent)} nodes taken out by slurm-ft within {brk._span(lc.breaker_window_s)} "
            f"(limit {v.breaker_limit})"))
    held = breaker_hold.current(config, now)    # an admin's hold decides over the count while in force
    if held is not None:
        v.breaker_hold = dataclasses.asdict(held)
        v.breaker = (brk.BreakerState(open_since=held.since, open_reason=held.describe())
                     if held.state == "open" else brk.BreakerState())
    v.last_sweep = store.kv_get_json("last_sweep")
    return v


def drain_report(store: Store, now: float) -> Tuple[List[Episode], Dict[str, Any]]:
    """(episodes, summary) of every slurm-ft drain in the journal (fleet/report/drain_stats.py)."""
    journal.ensure(store.db)
    return _drain_report(store, journal.incidents(store.db), now)


def _drain_report(store: Store, every: List[Incident], now: float) -> Tuple[List[Episode], Dict[str, Any]]:
    eps = drain_stats.episodes(store.history(), every)
    return eps, drain_stats.summarize(eps, now)


def _incidents(v: FleetView, store: Store) -> None:
    journal.ensure(store.db)
    every = journal.incidents(store.db)           # one read for the drain summary and the incidents
    v.drain_summary = _drain_report(store, every, v.now)[1]
    v.incidents_total = len(every)
    v.incidents_open = [i for i in every if i.open]
    for inc in every:
        start = inc.fault_at or inc.opened_at
        for step in inc.steps:
            if step.done_at is not None and step.outcome == "ok" and step.name != "open":
                v.phase_seconds.setdefault(step.name, []).append(max(0.0, step.done_at - start))
        if inc.closed_at is not None and inc.status == "recovered":
            v.phase_seconds.setdefault("total", []).append(max(0.0, inc.closed_at - start))


def snapshot(v: FleetView, jobs: Sequence[Tuple[int, Mapping[str, Any]]] = ()) -> metrics.Readings:
    """The metrics of the view, with the per-job goodput rows `jobs` (goodput_rows)."""
    return metrics.Readings(jobs=tuple(jobs),
        nodes_by_state=count_states(v.states.values()), pool_size=len(v.pool), pool_target=v.pool_target,
        incidents_total=v.incidents_total, incidents_open=len(v.incidents_open), phase_seconds=v.phase_seconds,
        drains=drain_rows(v.drain_summary), breaker_open=v.breaker.open, breaker_drains_in_window=len(v.breaker_in_window), breaker_limit=v.breaker_limit,
        last_sweep_time=(v.last_sweep or {}).get("time"), last_sweep_duration_s=(v.last_sweep or {}).get("elapsed_s"))


def drain_rows(summary: Mapping[str, Any]) -> List[Tuple[str, str, Stats]]:
    return drain_stats.metric_rows(summary)


def write_metrics(config: Config, client: SlurmApi, store: Store, *, report: Optional[SweepReport] = None,
                  nodes: Optional[Sequence[Node]] = None) -> Optional[str]:
    """Write the textfile if a path is configured; return the path written. `nodes`: a fresh read, as `view`."""
    path = config.lifecycle.metrics_path
    if not path:
        return None
    v = view(config, client, store, nodes=nodes)
    metrics.write(path, snapshot(v, goodput_rows(config, client, store, nodes=v.nodes)))
    return path


def goodput_rows(config: Config, client: SlurmApi, store: Store, *, total_s: float = GOODPUT_TOTAL_S,
                 clock: Callable[[], float] = time.monotonic, nodes: Optional[Sequence[Node]] = None
                 ) -> List[Tuple[int, Dict[str, Any]]]:
    """(job id, its goodput dict) of each fault-tolerant job that runs or was requeued after running
    (job_progress.followed). Each checkpoint directory is read once, however many jobs name it, and all
    of them within `total_s`: a job whose directory cannot be read in time, or is not reached before
    that, is left out (and logged), never guessed; so is everything when Slurm cannot say which jobs
    are fault-tolerant. `nodes`: the caller's read of every node, for the jobs' GPUs (else one read for
    all the jobs: a job's own nodes are, to slurmctld, a read of every node each)."""
    by_name = {n.name: n for n in nodes} if nodes is not None else None
    try:
        jobs = job_progress.ft_jobs(config, client)
    except SlurmFTError as exc:
        log.error("goodput: cannot list the fault-tolerant jobs: %s", exc)
        return []
    deadline = clock() + total_s
    read: Dict[str, Union[job_progress.DirFiles, job_progress.Unreadable]] = {}
    rows, late = [], []
    for job, spec in jobs:
        if not job_progress.followed(job):
            continue
        d = os.path.normpath(spec.ckpt_dir)
        if d not in read:
            left = deadline - clock()
            if left <= 0:
                late.append(job.job_id)
                continue
            try:
                read[d] = job_progress.read_dir(d, min(job_progress.READ_DEADLINE_S, left))
            except job_progress.Unreadable as exc:
                read[d] = exc
        got = read[d]
        if isinstance(got, job_progress.Unreadable):
            log.error("goodput of job %s not known: %s", job.job_id, got)
            continue
        try:
            if by_name is None and job.nodes and not job.tres_per_node:
                by_name = {n.name: n for n in client.nodes()}
            rows.append((job.job_id, job_progress.goodput_of(store.db, client, job, spec, time.time(), got,
                                                             nodes=by_name).to_dict()))
        except SlurmFTError as exc:
            log.error("goodput of job %s not known: %s", job.job_id, exc)
    if late:
        log.error("goodput of %d job(s) not known (%s): their directories were not reached within the "
                  "%g s of a metrics write", len(late), ", ".join(map(str, late[:10])), total_s)
    return rows


def _slurm_state(n: Node) -> str:
    return "+".join([n.state] + sorted(n.flags))


def _incident(i: Incident) -> Dict[str, Any]:
    return {"id": i.id, "job_id": i.job_id, "status": i.status, "nodes": list(i.nodes), "faults": list(i.faults),
            "spares": list(i.spares), "opened_at": i.opened_at, "note": i.note,
            "last_step": i.steps[-1].name if i.steps else ""}
