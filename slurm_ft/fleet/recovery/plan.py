"""The controller's decisions, pure: one snapshot + the journal's incidents -> the steps to run now.

No subprocess, no clock: `now` comes in as an argument, so every rule here is a unit test away.

For a fault-tolerant job with a failed node, `open` journals an incident (job, failed nodes, their
reasons, restart count) with the path of the recovery policy that claims it (fleet/recovery/policies: the job's
supervisor in its allocation, a replica group, or the requeue path); the incident's next steps, each
idempotent, are that policy's (`advance`). Common to all: an incident whose job ended still quarantines
its nodes, then is abandoned.

A planned swap (a node drained `slurm-ft: PLANNED ...` for a soft signal while a fault-tolerant job runs on
it: node/planned.py) is no fault and never requeues a job: `_detect_planned` opens it on a path of
fleet/recovery/policies/planned.py (the supervisor moves at a checkpoint; or deferred to the job's next restart,
when any incident of the job takes the node along, and a restart with nothing else to do opens one that
swaps a spare in for it). A fault in a job with an open planned incident supersedes it.

The plan never looks at what a step *did*: it reads Slurm's state from the snapshot, so a step whose
result never reached the journal (a killed controller) is simply planned again, and its act finds
the work done. `poll` means "wait a moment and read again"; `wait` parks an incident until a spare
turns up; `give_up` stops a job that keeps failing without progress; `abandon` closes an incident
whose job ended.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from slurm_ft.fleet.recovery.records import Incident, Placement, Step

from slurm_ft.slurm.types import Job, Node
from slurm_ft.job.hotplan import FINAL_EXITS
from slurm_ft.job.paths import REQUEUE, is_planned, planned_path
from slurm_ft.fleet.recovery import outage as out
from slurm_ft.fleet.recovery import policies
from slurm_ft.fleet.recovery.policies.base import IncidentView
# the settings and the shared facts live with the policies; imported from here by the controller and tests
from slurm_ft.fleet.recovery.policies.common import (  # noqa: F401
    HELD_REASONS, PENDING_STATES, PEOPLE_HOLDS, SLURM_REQUEUED_REASONS, ControllerSettings, IncidentFields,
    admins, belongs, ended_by_node_failure, failed_in_run, failure, lost_batch_host, of_job, quarantined, reason_in,
    refill_size)
from slurm_ft.fleet.recovery.policies.in_allocation import HOT_RELEASE_WAIT_S  # noqa: F401
from slurm_ft.fleet.recovery.policies.requeue_swap import restarts_without_progress  # noqa: F401
from slurm_ft.fleet.recovery.snapshot import Snapshot
from slurm_ft.slurm.hostlist import compress
from slurm_ft.vocab import ENDED_JOB_STATES, planned, revalidate_reason, slurm_time

_LOST_BATCH_HOST = "the job's batch host, which Slurm took out of the job (it stopped answering)"


def degraded(node: Optional[Node]) -> bool:
    """Out for a planned swap: drained `slurm-ft: PLANNED ...` (no fault: its jobs run on)."""
    return node is not None and node.drained and planned(node.reason)


def spare_pool(snap: Snapshot, policy: ControllerSettings, taken: Set[str], faults: Dict[str, int]) -> List[str]:
    """Healthy idle spares, best first: fewest past faults, then name (a lemon is the last to be used)."""
    part = snap.partitions.get(policy.spare_partition)
    if part is None:
        return []
    good = []
    for name in part.nodes:
        node = snap.nodes.get(name)
        if name in taken or name in policy.keep_off or node is None or not node.available or node.state != "IDLE":
            continue
        if "RESERVED" in node.flags or "COMPLETING" in node.flags:
            continue
        good.append(name)
    return sorted(good, key=lambda n: (faults.get(n, 0), n))


# --- the plan --------------------------------------------------------------------------------------

def plan(snap: Snapshot, incidents: Sequence[Incident], policy: ControllerSettings, now: float) -> List[Step]:
    """The steps to run now: open incidents carried on first (they own their spares), then new ones."""
    steps: List[Step] = []
    open_ = [i for i in incidents if i.open]
    faults: Dict[str, int] = {}
    for inc in incidents:
        for n in inc.nodes:
            faults[n] = faults.get(n, 0) + 1
    taken: Set[str] = {s for i in open_ for s in i.spares}
    pool = spare_pool(snap, policy, taken, faults)
    for inc in sorted(open_, key=lambda i: i.id):
        late = _late_failures(inc, snap, incidents, policy, {n for i in open_ if i.id != inc.id for n in i.nodes})
        if late:
            steps.append(Step("join", inc.job_id, incident_id=inc.id, nodes=late, partition=inc.partition,
                              reason="; ".join(f"{n}: {failure(snap.nodes.get(n), policy)}" for n in late)))
            continue
        steps.extend(_advance(inc, snap, incidents, policy, now, pool))
    active = out.waves(snap.seen, now, nodes=policy.wave_nodes, window_s=policy.wave_window_s,
                       settle_s=policy.wave_settle_s)
    if active:
        steps.append(Step("alert", 0, nodes=tuple(sorted({n for w in active for n in w.still_out})),
                          reason=out.describe(active, now)))
    hold = out.held_back(snap.nodes, snap.seen, now, grace_s=policy.unresponsive_grace_s, active=active)
    down = outage(snap, policy)
    if down:
        steps.append(Step("alert", -1, reason=(
            f"Slurm outage: {down} of {len(snap.nodes)} nodes unresponsive (over {policy.outage_share:.0%}): "
            f"no new recoveries until it passes (slurmctld restarted, the network, an overloaded host?)")))
    else:
        busy = {i.job_id for i in open_}
        claimed = {n for i in open_ for n in i.nodes}
        counted = set(snap.out_counted)
        for job in sorted(snap.jobs.values(), key=lambda j: j.job_id):
            if job.job_id in busy or job.job_id not in snap.specs:
                continue
            step = _detect(job, snap, incidents, policy, claimed | hold, now) or _detect_planned(
                job, snap, incidents, policy, claimed, now)
            if step is None:
                continue
            if step.kind == "open":
                # The breaker stops drains, not the recovery of a drain it allowed: a node a check drained
                # (or drained PLANNED for a planned swap) within the budget is out already and costs nothing
                # more; the rest cost one each.
                why = out.breaker_room(counted, snap.out_past_limit, step.nodes,
                                       [n for n in step.nodes if snap.nodes[n].drained], snap.out_limit)
                if why:
                    step = Step("alert", job.job_id, nodes=step.nodes, reason=f"job {job.job_id}: {why}")
                else:
                    claimed.update(step.nodes)
                    counted.update(step.nodes)
            steps.append(step)
    steps.extend(_revalidations(snap, incidents, policy, now))
    steps.extend(_restorations(snap, incidents, policy))
    return steps


def _restorations(snap: Snapshot, incidents: Sequence[Incident], policy: ControllerSettings) -> List[Step]:
    """Partition changes of closed incidents that Slurm no longer shows: a slurmctld restarted without -R
    rebuilds the partitions from slurm.conf (an open incident's own steps are done again by its policy).
    A node the incident quarantined, still out for its fault (its latest incident, drained or down by
    slurm-ft or Slurm), is back in a job partition: out again. A spare it swapped in (the last swap of that
    node, named by no incident since) that its job runs on now is back in the pool alone: into the job's
    partition again. An idle one stays in the pool: the journal cannot tell a restart's undoing from a
    person's (or a reinstall's) return of the spares, and a spare in the pool is never a node lost."""
    latest = out.latest_incident_of(incidents)
    swapped_by = {x: i.id for i in sorted(incidents, key=lambda i: i.id) if i.done("swap") for x in i.spares}
    jobs_parts = [p for p in snap.partitions.values() if policy.is_job_partition(p.name)]
    pool = snap.partitions.get(policy.spare_partition)
    steps = []
    for inc in sorted(incidents, key=lambda i: i.id):
        if inc.open or not inc.done("quarantine"):
            continue
        back = tuple(n for n in inc.nodes if latest[n].id == inc.id and failure(snap.nodes.get(n), policy)
                     and any(n in p.nodes for p in jobs_parts))
        job, target = snap.jobs.get(inc.job_id), snap.partitions.get(inc.partition)
        spares = tuple(x for x in inc.spares if swapped_by.get(x) == inc.id and x not in latest
                       and x not in policy.keep_off
                       and job is not None and job.running and belongs(inc, job) and x in job.nodes
                       and target is not None and x not in target.nodes and pool is not None and x in pool.nodes)
        if back or spares:
            steps.append(Step("restore", inc.job_id, incident_id=inc.id, nodes=back, spares=spares,
                              partition=inc.partition, reason=(
                                  f"incident {inc.id}'s partition changes undone by Slurm (slurmctld restarted?): "
                                  + "; ".join([f"{compress(list(back))} out of the job partitions again"] * bool(back)
                                              + [f"{compress(list(spares))} from {policy.spare_partition} into "
                                                 f"{inc.partition} again"] * bool(spares)))))
    return steps


def _revalidations(snap: Snapshot, incidents: Sequence[Incident], policy: ControllerSettings, now: float) -> List[Step]:
    """Nodes a closed incident quarantined for not answering, answering again: to validation, never
    straight back into service (a hang of the node itself looks the same as a lost network from here).
    One that stopped with a wave of others gets the lighter re-check (`outage` in the step's reason)."""
    steps = []
    in_use = {n for p in snap.partitions.values() for n in p.nodes
              if p.name == policy.spare_partition or policy.is_job_partition(p.name)}
    for name, inc in sorted(out.latest_incident_of(incidents).items()):
        if inc.open or name in in_use or name in policy.keep_off:
            continue
        node = snap.nodes.get(name)
        if node is not None and out.restorable(node, snap.seen.get(name), snap.watching_since, now,
                                               policy.restore_after_s):
            wave = out.in_a_wave(name, snap.seen, nodes=policy.wave_nodes, window_s=policy.wave_window_s)
            steps.append(Step("revalidate", inc.job_id, incident_id=inc.id, nodes=(name,),
                              reason=revalidate_reason(node.reason, outage=wave)))
    return steps


def outage(snap: Snapshot, policy: ControllerSettings) -> int:
    """Most of the cluster unresponsive at once: a Slurm-side outage; swapping spares would not help.
    How many nodes are unresponsive then, else 0."""
    down = sum(1 for n in snap.nodes.values() if n.down)
    return down if snap.nodes and down > policy.outage_share * len(snap.nodes) else 0


def _detect(job: Job, snap: Snapshot, incidents: Sequence[Incident], policy: ControllerSettings,
            claimed: Set[str], now: float) -> Optional[Step]:
    """An `open` step when this FT job has a failed node that no incident has handled yet (or an `alert`
    when a requeued job's last run is unknown: then it claims nothing)."""
    part = _job_partition(job, snap, policy)
    if part is None:
        return None
    prev = _previous_run(job, snap, policy, now)
    hit_run = None              # the run the fault hit, when Slurm has already started the job again
    if job.running:
        failed = [n for n in job.nodes if failure(snap.nodes.get(n), policy)]
        lost = snap.nodes.get(job.batch_host) if lost_batch_host(job) else None
        if lost is not None and not failure(lost, policy) and not admins(lost, policy):
            # 25.11 and 26.05 keep the job RUNNING without it, its batch step (the supervisor) ended once the
            # node answers again: only a requeue brings the run back (the path a failed batch host takes).
            # Not while it is still down: 22.05 and 24.11 end the job then, and its revival takes it on.
            failed.append(job.batch_host)
        # The same fault seen again through a stale read: an incident already requeued this run.
        handled = {n for i in of_job(incidents, job.job_id, job) if i.restart_count == job.restart_count
                   and not is_planned(i.path) for n in i.nodes}
        failed = [n for n in failed if n not in handled]
        if not failed and prev is not None:
            # Slurm moved the job itself (>= 25.11: an expedited requeue on node failure starts it again
            # at once on idle nodes): the node it left is still a fault to quarantine and replace.
            failed = _left_behind(prev, job, snap, incidents, policy)
            hit_run = prev.restart_count if failed else None
    elif ended_by_node_failure(job) and job.requeue:        # Slurm refuses to requeue a job with Requeue=0
        return _revive(job, snap, incidents, policy, claimed, part)
    elif job.state in ("PENDING", "NODE_FAIL", "REQUEUED", "REQUEUE_HOLD") and (
            _slurm_requeued(job) or (prev is not None and not reason_in(job.reason, PEOPLE_HOLDS)
                                     and _left_behind(prev, job, snap, incidents, policy))):
        mine = of_job(incidents, job.job_id, job)
        if mine and mine[-1].status == "gave_up":
            return None             # held by us after max-restarts: an admin releases it
        if job.exit_code.split(":")[0] in {str(x) for x in FINAL_EXITS}:
            return None             # "do not restart me", or the restart limit used up (its last exit status)
        # Requeued (launch failed, node failure, its owner's `scontrol requeue`): the failed nodes are those
        # of its last run, as Slurm still lists them or as the journal saw them run; never the other failed
        # nodes of the partition, which are no fault of this job's.
        cands = _last_run_nodes(job, prev)
        # a node an incident of that run already took (a hot spare's, which leaves it drained) is no new fault
        done = {n for i in mine if prev is not None and i.restart_count >= prev.restart_count
                and not is_planned(i.path) for n in i.nodes}
        failed = [n for n in cands if n not in job.excluded_nodes and n not in done
                  and failure(snap.nodes.get(n), policy) and snap.nodes[n].state not in ("ALLOCATED", "MIXED")]
        if not cands:
            others = [n for n in snap.partitions[part].nodes if n not in claimed and failure(snap.nodes.get(n), policy)]
            spec = snap.specs.get(job.job_id)
            # Held by Slurm after a launch failure, it would wait for a person: released, it starts again
            # where Slurm schedules it (not on the node it failed on: Slurm drained that one).
            release = (job.held and reason_in(job.reason, ("launch failed requeued held",))
                       and spec is not None and job.restart_count <= spec.max_restarts)
            if others or release:
                return Step("release" if release else "alert", job.job_id, nodes=tuple(others), reason=(
                    f"job {job.job_id} was requeued ({job.reason or job.state}, restart {job.restart_count}) but "
                    f"the controller never saw where its last run ran (it started after): claiming none of "
                    f"{part}'s failed nodes ({compress(others) or 'none'}); the job starts again as Slurm "
                    f"schedules it" + (", released from Slurm's hold" if release else "")))
    else:
        return None
    failed = [n for n in failed if n not in claimed]
    if not failed:
        return None
    # a running job's supervisor may recover it in its allocation (job/paths.py); a requeued one is requeued
    spec = snap.specs.get(job.job_id)
    in_run = sorted({*failed, *failed_in_run(job, snap.nodes, incidents, policy)})
    path = policies.claim(job, spec, in_run).path if job.running and hit_run is None else REQUEUE
    # out for a planned swap: they leave with this restart too (no second restart for them later); on a
    # supervisor's path only while it still holds enough nodes without them (a degraded node beats a requeue)
    along = [n for n in (job.nodes if job.running else _last_run_nodes(job, prev))
             if degraded(snap.nodes.get(n)) and n not in claimed and n not in failed and n not in job.excluded_nodes
             and (job.running or snap.nodes[n].state not in ("ALLOCATED", "MIXED"))]
    if along and path != REQUEUE and policies.claim(job, spec, in_run + along).path != path:
        along = []
    reasons = tuple(f"{n}: {failure(snap.nodes.get(n), policy) or _LOST_BATCH_HOST}" for n in failed) + tuple(
        f"{n}: {snap.nodes[n].reason}" for n in along)
    return Step("open", job.job_id, nodes=tuple(failed + along), partition=part, reason="; ".join(reasons),
                restart_count=hit_run, path=path)


def _revive(job: Job, snap: Snapshot, incidents: Sequence[Incident], policy: ControllerSettings,
            claimed: Set[str], part: str) -> Optional[Step]:
    """An `open` step (requeue) for an FT job Slurm ended when a node of its run stopped answering
    (ended_by_node_failure): the nodes Slurm took out of the run (the journal saw it run there, or its batch
    host) and those failed now. Such a node often answers again at once (ReturnToService): it is
    quarantined all the same, as any node that stopped answering, and validated before it serves again."""
    mine = of_job(incidents, job.job_id, job)
    if mine and mine[-1].status == "gave_up":
        return None
    if job.exit_code.split(":")[0] in {str(x) for x in FINAL_EXITS}:
        return None
    run = snap.placements.get(job.job_id, {}).get(job.restart_count)
    ran = set(run.nodes if run is not None else ()) | ({job.batch_host} if job.batch_host else set())
    handled = {n for i in mine if i.restart_count == job.restart_count for n in i.nodes}
    removed = sorted(n for n in ran - set(job.nodes) if n in snap.nodes)
    failed = [n for n in sorted({*removed, *(n for n in job.nodes if failure(snap.nodes.get(n), policy))})
              if n not in handled and n not in claimed and n not in job.excluded_nodes
              and not admins(snap.nodes.get(n), policy)]
    if not failed:
        return None
    reasons = "; ".join(f"{n}: {failure(snap.nodes.get(n), policy) or 'removed from the job by Slurm'} "
                        f"(job ended {job.state}, {job.reason})" for n in failed)
    return Step("open", job.job_id, nodes=tuple(failed), partition=part, reason=reasons, path=REQUEUE)


def _detect_planned(job: Job, snap: Snapshot, incidents: Sequence[Incident], policy: ControllerSettings,
                    claimed: Set[str], now: float) -> Optional[Step]:
    """An `open` step (planned) for an FT job with nodes out for a planned swap that no incident of this
    run named yet: while it runs (its supervisor moves at a checkpoint, or the swap waits for its next
    restart), or pending again after a restart (a spare takes their place before it starts)."""
    part = _job_partition(job, snap, policy)
    if part is None:
        return None
    named = {n for i in of_job(incidents, job.job_id, job) if i.restart_count == job.restart_count for n in i.nodes}
    if job.running:
        cands: Sequence[str] = job.nodes
    elif job.state in PENDING_STATES and job.restart_count and not reason_in(job.reason, PEOPLE_HOLDS):
        cands = [n for n in _last_run_nodes(job, _previous_run(job, snap, policy, now))
                 if n not in job.excluded_nodes and snap.nodes.get(n) is not None
                 and snap.nodes[n].state not in ("ALLOCATED", "MIXED")]
    else:
        return None
    out = [n for n in cands if degraded(snap.nodes.get(n)) and n not in named and n not in claimed]
    if not out:
        return None
    in_run = sorted({*out, *failed_in_run(job, snap.nodes, incidents, policy)})
    return Step("open", job.job_id, nodes=tuple(out), partition=part,
                path=planned_path(snap.specs.get(job.job_id), job.nodes, job.batch_host, job.running, in_run),
                reason="; ".join(f"{n}: {snap.nodes[n].reason}" for n in out))


def _last_run_nodes(job: Job, prev: Optional[Placement]) -> Tuple[str, ...]:
    """Where a requeued job ran last: as Slurm still lists it, or as the journal saw it run; never the
    partition's other nodes, which are no doing of this job's (its owner can requeue it at will)."""
    return job.nodes or (prev.nodes if prev is not None else ())


def _previous_run(job: Job, snap: Snapshot, policy: ControllerSettings, now: float) -> Optional[Placement]:
    """Where the job ran before its current run, while that restart is recent: a pending job's last
    run, or a running job's run before this one when this one is new (not yet recorded, or first seen
    within running_timeout_s). None when the controller never saw an earlier run."""
    runs = snap.placements.get(job.job_id, {})
    older = [rc for rc in runs if rc < job.restart_count]
    if not older:
        return None
    current = runs.get(job.restart_count)
    if job.running and current is not None and now - current.seen_at > policy.running_timeout_s:
        return None
    return runs[max(older)]


def prolog_runs(jobs: Mapping[int, Job], known: Mapping[int, Mapping[int, Placement]],
                failed_prologs: Mapping[int, Tuple[FrozenSet[str], float]]) -> List[Placement]:
    """Runs a failed prolog ended before the controller saw them: the job, requeued by Slurm with no nodes
    listed, ran last (restart count - 1) where its prologs failed (their wakes, slurm_ft/wake.py), when the
    journal has no record of that run. `failed_prologs`: job id -> (nodes, when heard)."""
    runs = []
    for jid, (nodes, at) in sorted(failed_prologs.items()):
        job = jobs.get(jid)
        if job is None or job.nodes or job.running or job.restart_count < 1:
            continue
        if job.restart_count - 1 not in known.get(jid, {}):
            runs.append(Placement(jid, job.restart_count - 1, tuple(sorted(nodes)), at))
    return runs


def _left_behind(prev: Placement, job: Job, snap: Snapshot, incidents: Sequence[Incident],
                 policy: ControllerSettings) -> List[str]:
    """Failed nodes of the job's previous run that it no longer holds and no incident of that run took."""
    handled = {n for i in of_job(incidents, job.job_id, job) if i.restart_count >= prev.restart_count
               and not is_planned(i.path) for n in i.nodes}
    return [n for n in prev.nodes if n not in job.nodes and n not in handled
            and failure(snap.nodes.get(n), policy)]


def _slurm_requeued(job: Job) -> bool:
    if job.state in ("NODE_FAIL", "REQUEUED", "REQUEUE_HOLD"):
        return True
    if job.restart_count == 0:
        return False
    # The client gives Slurm's own words (squeue's state_description, scontrol's Reason): a hold by a
    # user or admin (JobHeldUser/JobHeldAdmin, "job requeued in held state") is not Slurm's requeue.
    return reason_in(job.reason, SLURM_REQUEUED_REASONS)


def _job_partition(job: Job, snap: Snapshot, policy: ControllerSettings) -> Optional[str]:
    for name in job.partition.split(","):
        if name in snap.partitions and policy.is_job_partition(name):
            return name
    return None


def fault_time(snap: Snapshot, nodes: Iterable[str]) -> Optional[float]:
    """The earliest drain time among the failed nodes, when Slurm gave one."""
    times = [t for t in (slurm_time(snap.nodes[n].reason_time) for n in nodes if n in snap.nodes) if t is not None]
    return min(times) if times else None


def _late_failures(inc: Incident, snap: Snapshot, incidents: Sequence[Incident], policy: ControllerSettings,
                   others: Set[str]) -> Tuple[str, ...]:
    """Nodes of the run a requeue-path incident recovers that failed after it opened (while it runs, no
    other incident opens for its job): they join it, to be quarantined and replaced with it. Two Xid 79 on
    two nodes of one job 2 s apart opened one incident naming one of them; the other stayed in the
    partition, drained, unreplaced and unjournaled until the sweep. Not a node another incident of the run
    took (a hot spare's, which leaves it drained), nor one another open incident holds (`others`)."""
    job = snap.jobs.get(inc.job_id)
    if inc.path != REQUEUE or job is None or not belongs(inc, job):
        return ()
    others = others | {n for i in of_job(incidents, job.job_id, job) if i.id != inc.id
                       and i.restart_count >= inc.restart_count and not is_planned(i.path) for n in i.nodes}
    if job.running and job.restart_count == inc.restart_count:
        ran: Sequence[str] = job.nodes
    else:
        run = snap.placements.get(inc.job_id, {}).get(inc.restart_count)
        ran = run.nodes if run is not None else ()
    return tuple(n for n in ran if n not in inc.nodes and n not in others and failure(snap.nodes.get(n), policy)
                 and not (job.running and job.restart_count > inc.restart_count and n in job.nodes))


def _advance(inc: Incident, snap: Snapshot, incidents: Sequence[Incident], policy: ControllerSettings, now: float,
             pool: List[str]) -> List[Step]:
    """The next step of one open incident: its policy's (fleet/recovery/policies), once the job is known to run on."""
    job = snap.jobs.get(inc.job_id)
    base = IncidentFields(job_id=inc.job_id, incident_id=inc.id, nodes=inc.nodes, partition=inc.partition)
    if job is not None and not belongs(inc, job):
        # its job is gone and the id names another job now: nothing of this incident is done to that one
        return [Step("abandon", **base, reason=f"job {inc.job_id} is another job now (submitted {job.submit_time}, "
                                               f"restart {job.restart_count})")]
    revived = job is not None and ended_by_node_failure(job) and not inc.done("requeue")
    if job is None or (job.state in ENDED_JOB_STATES and not revived):
        # the failed nodes still leave the partition; one healthy again (resumed, repaired) is left alone
        if any(failure(snap.nodes.get(n), policy) for n in inc.nodes) and not quarantined(inc, snap, policy):
            return [Step("quarantine", **base, reason="job ended; the failed nodes still leave the partition")]
        state = job.state if job else "gone"
        return [Step("abandon", **base, reason=f"job {inc.job_id} is {state}")]
    view = IncidentView(inc=inc, snap=snap, incidents=incidents, policy=policy, pool=pool, now=now, job=job,
                        spec=snap.specs.get(inc.job_id), base=base)
    return policies.of_path(inc.path).advance(view)
