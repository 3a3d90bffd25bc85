"""The controller's decisions, pure: one snapshot + the journal's incidents -> the steps to run now.

No subprocess, no clock: `now` comes in as an argument, so every rule here is a unit test away.

For a fault-tolerant job with a failed node, an incident runs these steps, each idempotent:

  open        the incident is journaled (job, failed nodes, their reasons, restart count)
  quarantine  the failed nodes leave the job partitions and stay drained with their reason
  swap        the best healthy spares move from the pool into the job's partition
  requeue     `scontrol requeue` at once (held when it must wait for a spare, or gives up)
  exclude     ExcNodeList += failed nodes (NumNodes lowered when an elastic job shrinks)
  start       StartTime=now once Slurm shows PENDING/BeginTime (or release when held)
  confirm     the job runs again on healthy nodes: the incident closes as recovered

A planned swap (a node drained `slurm-ft: PLANNED ...` for a soft signal while a fault-tolerant job runs on
it: node/planned.py) is no fault and never requeues a job. With a hot spare the incident runs quarantine and
swap (the pool refills the partition) and waits for the job's supervisor to move off the node at its next
checkpoint (closed `planned`); without one it is noted `deferred` at once: the node goes with the job's next
restart (any later incident of the job takes it too, and a restart with nothing else to do opens one that
swaps a spare in for it). A fault in a job with an open planned incident supersedes it.

The plan never looks at what a step *did*: it reads Slurm's state from the snapshot, so a step whose
result never reached the journal (a killed controller) is simply planned again, and its act finds
the work done. `poll` means "wait a moment and read again"; `wait` parks an incident until a spare
turns up; `give_up` stops a job that keeps failing without progress; `abandon` closes an incident
whose job ended.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, TypedDict

from slurm_ft.fleet.records import Incident, Placement, Step

from slurm_ft.slurm.types import Job, Node
from slurm_ft.job.ckptscan import HOLD_PREFIX
from slurm_ft.job.hotplan import FINAL_EXITS
from slurm_ft.job.nodefault import node_fault
from slurm_ft.fleet import outage as out
from slurm_ft.fleet.snapshot import Snapshot
from slurm_ft.job.tag import FtSpec
from slurm_ft.slurm.hostlist import compress
from slurm_ft import vocab
from slurm_ft.vocab import ENDED_JOB_STATES, planned, slurm_time

if TYPE_CHECKING:
    from slurm_ft.config import ControllerConfig

# Reasons as Slurm 22.05 prints them (`launch_failed_requeued_held`); compared without case and `_`.
HELD_REASONS = ("launch failed requeued held", "JobHeldAdmin", "JobHeldUser", "job requeued in held state")
# Slurm requeued the job itself: the fault happened while it ran, so it is ours to finish.
# (Not `job_requeued_in_held_state`: that is our own or an admin's `requeuehold`, which we leave alone.)
SLURM_REQUEUED_REASONS = ("launch failed requeued held", "BeginTime", "NodeDown")
# A user's or an admin's hold (`scontrol hold`, `requeuehold`): never Slurm's requeue after a fault.
PEOPLE_HOLDS = ("JobHeldUser", "JobHeldAdmin", "job requeued in held state")
# Pending, waiting to start again. From Slurm 25.11 a job requeued HELD stays REQUEUE_HOLD until released
# (an expedited requeue after a non-zero exit with clean epilogs: the controller releases it like any hold).
PENDING_STATES = ("PENDING", "REQUEUE_HOLD")


def reason_in(reason: str, names: Iterable[str]) -> bool:
    norm = reason.replace("_", " ").lower()
    return any(norm.startswith(n.replace("_", " ").lower()) for n in names)


@dataclass(frozen=True)
class Policy:
    spare_partition: str = "spares"
    job_partitions: Tuple[str, ...] = ()          # () = every partition but the pool
    fail_prefix: str = vocab.OWNER
    slurm_fault_reasons: Tuple[str, ...] = vocab.SLURM_FAULT_REASONS
    running_timeout_s: float = 120.0
    # More than this share of all nodes DOWN/NOT_RESPONDING at once is Slurm's outage (slurmctld just
    # restarted, the network), not failing GPUs: no new recoveries until it passes.
    outage_share: float = 0.5
    # An outage is not a fault (outage.py): NOT_RESPONDING is a fault after a grace; a wave (this many
    # nodes stopping within the window) holds its members back and alerts; wrong quarantines come back.
    unresponsive_grace_s: float = 60.0
    wave_nodes: int = 8
    wave_window_s: float = 120.0
    wave_settle_s: float = 60.0
    restore_after_s: float = 30.0

    @classmethod
    def from_config(cls, cc: ControllerConfig) -> "Policy":
        return cls(spare_partition=cc.spare_partition, job_partitions=tuple(cc.job_partitions),
                   slurm_fault_reasons=tuple(cc.slurm_fault_reasons), running_timeout_s=cc.running_timeout_s,
                   unresponsive_grace_s=cc.unresponsive_grace_s, wave_nodes=cc.wave_nodes,
                   wave_window_s=cc.wave_window_s, wave_settle_s=cc.wave_settle_s,
                   restore_after_s=cc.restore_after_s)

    def is_job_partition(self, name: str) -> bool:
        if name == self.spare_partition:
            return False
        return not self.job_partitions or name in self.job_partitions


# --- what counts as a failed node ------------------------------------------------------------------

def failure(node: Optional[Node], policy: Policy) -> Optional[str]:
    """Why the node counts as a fault the controller takes on, or None (nodefault.node_fault under this
    policy's reasons). A node an admin set DOWN (or drained) with their own reason is theirs: never
    claimed by a job, drained over, counted or replaced by slurm-ft."""
    why = node_fault(node, policy.fail_prefix, policy.slurm_fault_reasons)
    if why is None or node is None or vocab.admins(node.reason, policy.slurm_fault_reasons):
        return None
    return why


def degraded(node: Optional[Node]) -> bool:
    """Out for a planned swap: drained `slurm-ft: PLANNED ...` (no fault: its jobs run on)."""
    return node is not None and node.drained and planned(node.reason)


def spare_pool(snap: Snapshot, policy: Policy, taken: Set[str], faults: Dict[str, int]) -> List[str]:
    """Healthy idle spares, best first: fewest past faults, then name (a lemon is the last to be used)."""
    part = snap.partitions.get(policy.spare_partition)
    if part is None:
        return []
    good = []
    for name in part.nodes:
        node = snap.nodes.get(name)
        if name in taken or node is None or not node.available or node.state != "IDLE":
            continue
        if "RESERVED" in node.flags or "COMPLETING" in node.flags:
            continue
        good.append(name)
    return sorted(good, key=lambda n: (faults.get(n, 0), n))


# --- the plan --------------------------------------------------------------------------------------

def plan(snap: Snapshot, incidents: Sequence[Incident], policy: Policy, now: float) -> List[Step]:
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
                job, snap, incidents, policy, claimed)
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
    return steps


def _revalidations(snap: Snapshot, incidents: Sequence[Incident], policy: Policy, now: float) -> List[Step]:
    """Nodes a closed incident quarantined for not answering, answering again: to validation, never
    straight back into service (a hang of the node itself looks the same as a lost network from here).
    One that stopped with a wave of others gets the lighter re-check (`outage` in the step's reason)."""
    steps = []
    in_use = {n for p in snap.partitions.values() for n in p.nodes
              if p.name == policy.spare_partition or policy.is_job_partition(p.name)}
    for name, inc in sorted(out.latest_incident_of(incidents).items()):
        if inc.open or name in in_use:
            continue
        node = snap.nodes.get(name)
        if node is not None and out.restorable(node, snap.seen.get(name), snap.watching_since, now,
                                               policy.restore_after_s):
            wave = out.in_a_wave(name, snap.seen, nodes=policy.wave_nodes, window_s=policy.wave_window_s)
            steps.append(Step("revalidate", inc.job_id, incident_id=inc.id, nodes=(name,),
                              reason=out.revalidate_reason(node.reason, outage=wave)))
    return steps


def outage(snap: Snapshot, policy: Policy) -> int:
    """Most of the cluster unresponsive at once: a Slurm-side outage; swapping spares would not help.
    How many nodes are unresponsive then, else 0."""
    down = sum(1 for n in snap.nodes.values() if n.down)
    return down if snap.nodes and down > policy.outage_share * len(snap.nodes) else 0


def _detect(job: Job, snap: Snapshot, incidents: Sequence[Incident], policy: Policy,
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
        # The same fault seen again through a stale read: an incident already requeued this run.
        handled = {n for i in _of_job(incidents, job.job_id, job) if i.restart_count == job.restart_count
                   and not planned_incident(i) for n in i.nodes}
        failed = [n for n in failed if n not in handled]
        if not failed and prev is not None:
            # Slurm moved the job itself (>= 25.11: an expedited requeue on node failure starts it again
            # at once on idle nodes): the node it left is still a fault to quarantine and replace.
            failed = _left_behind(prev, job, snap, incidents, policy)
            hit_run = prev.restart_count if failed else None
    elif job.state in ("PENDING", "NODE_FAIL", "REQUEUED", "REQUEUE_HOLD") and (
            _slurm_requeued(job) or (prev is not None and not reason_in(job.reason, PEOPLE_HOLDS)
                                     and _left_behind(prev, job, snap, incidents, policy))):
        mine = _of_job(incidents, job.job_id, job)
        if mine and mine[-1].status == "gave_up":
            return None             # held by us after max-restarts: an admin releases it
        if job.exit_code.split(":")[0] in {str(x) for x in FINAL_EXITS}:
            return None             # "do not restart me", or the restart limit used up (its last exit status)
        # Requeued (launch failed, node failure, its owner's `scontrol requeue`): the failed nodes are those
        # of its last run, as Slurm still lists them or as the journal saw them run; never the other failed
        # nodes of the partition, which are no fault of this job's.
        cands = job.nodes or (prev.nodes if prev is not None else ())
        failed = [n for n in cands if n not in job.excluded_nodes and failure(snap.nodes.get(n), policy)
                  and snap.nodes[n].state not in ("ALLOCATED", "MIXED")]
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
    # out for a planned swap: they leave with this restart too (no second restart for them later); in a
    # hot-spare job only while its supervisor still has enough nodes without them (a degraded node beats
    # a requeue)
    along = [n for n in (job.nodes if job.running else (job.nodes or snap.partitions[part].nodes))
             if degraded(snap.nodes.get(n)) and n not in claimed and n not in failed and n not in job.excluded_nodes
             and (job.running or snap.nodes[n].state not in ("ALLOCATED", "MIXED"))]
    spec = snap.specs.get(job.job_id)
    if along and job.running and in_supervisor_hands(job, spec, failed) \
            and not in_supervisor_hands(job, spec, failed + along):
        along = []
    reasons = tuple(f"{n}: {failure(snap.nodes.get(n), policy)}" for n in failed) + tuple(
        f"{n}: {snap.nodes[n].reason}" for n in along)
    return Step("open", job.job_id, nodes=tuple(failed + along), partition=part, reason="; ".join(reasons),
                restart_count=hit_run)


def _detect_planned(job: Job, snap: Snapshot, incidents: Sequence[Incident], policy: Policy,
                    claimed: Set[str]) -> Optional[Step]:
    """An `open` step (planned) for an FT job with nodes out for a planned swap that no incident of this
    run named yet: while it runs (its supervisor moves at a checkpoint, or the swap waits for its next
    restart), or pending again after a restart (a spare takes their place before it starts)."""
    part = _job_partition(job, snap, policy)
    if part is None:
        return None
    named = {n for i in _of_job(incidents, job.job_id, job) if i.restart_count == job.restart_count for n in i.nodes}
    if job.running:
        cands: Sequence[str] = job.nodes
    elif job.state in PENDING_STATES and job.restart_count and not reason_in(job.reason, PEOPLE_HOLDS):
        cands = [n for n in (job.nodes or snap.partitions[part].nodes)
                 if n not in job.excluded_nodes and snap.nodes.get(n) is not None
                 and snap.nodes[n].state not in ("ALLOCATED", "MIXED")]
    else:
        return None
    out = [n for n in cands if degraded(snap.nodes.get(n)) and n not in named and n not in claimed]
    if not out:
        return None
    return Step("open", job.job_id, nodes=tuple(out), partition=part, planned=True,
                reason="; ".join(f"{n}: {snap.nodes[n].reason}" for n in out))


def _previous_run(job: Job, snap: Snapshot, policy: Policy, now: float) -> Optional[Placement]:
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
                 policy: Policy) -> List[str]:
    """Failed nodes of the job's previous run that it no longer holds and no incident of that run took."""
    handled = {n for i in _of_job(incidents, job.job_id, job) if i.restart_count >= prev.restart_count
               and not planned_incident(i) for n in i.nodes}
    return [n for n in prev.nodes if n not in job.nodes and n not in handled
            and failure(snap.nodes.get(n), policy)]


# The supervisor gives a quarantined node back as it relaunches the step (hotplan); past this, Slurm
# refused the shrink and the node stays in the job, unused, until the job ends or is requeued.
HOT_RELEASE_WAIT_S = 30.0
HOT_NOTE = "hot-spare: "      # an incident the job's supervisor handles in its own allocation
PLANNED_HOT_NOTE = "planned, hot spare: "          # the supervisor moves off the node at its next checkpoint
PLANNED_RESTART_NOTE = "planned, at restart: "     # a spare takes the node's place before the job starts again
PLANNED_DEFERRED_NOTE = "planned, deferred: "      # no hot spare: the node goes with the job's next restart


def planned_incident(inc: Incident) -> bool:
    """An incident of a planned swap: its nodes were degraded, not failed."""
    return inc.note.startswith("planned, ")


def in_supervisor_hands(job: Job, spec: Optional[FtSpec], failed: Sequence[str]) -> bool:
    """A hot-spare job's fault is its supervisor's (it relaunches the step on its own spares) while the
    batch host is healthy and the job still holds train_nodes healthy nodes. Otherwise (spares used up,
    the batch host failed) it takes the requeue path like any other job."""
    if spec is None or not spec.hot_spares or not spec.train_nodes:
        return False
    if job.batch_host in failed:
        return False
    return len(job.nodes) - len(failed) >= spec.train_nodes


def failed_in_run(job: Job, nodes: Mapping[str, Node], incidents: Sequence[Incident], policy: Policy) -> List[str]:
    """The job's nodes failed in this run of it: failed now, or named by an incident of this run. A health
    check may resume its drain once the fault no longer shows (an Xid older than its look-back); the
    node stays failed here, as it does for the job's supervisor (which then falls back to the requeue)."""
    earlier = {n for i in _of_job(incidents, job.job_id, job) if i.restart_count == job.restart_count
               and not planned_incident(i) for n in i.nodes}
    return [n for n in job.nodes if n in earlier or failure(nodes.get(n), policy)]


def refill_size(spec: Optional[FtSpec]) -> Optional[int]:
    """The node count a requeued hot-spare job asks for again: N + K (its shrinks lowered NumNodes)."""
    if spec is None or not spec.hot_spares or not spec.train_nodes:
        return None
    return spec.train_nodes + spec.hot_spares


def _slurm_requeued(job: Job) -> bool:
    if job.state in ("NODE_FAIL", "REQUEUED", "REQUEUE_HOLD"):
        return True
    if job.restart_count == 0:
        return False
    # The client gives Slurm's own words (squeue's state_description, scontrol's Reason): a hold by a
    # user or admin (JobHeldUser/JobHeldAdmin, "job requeued in held state") is not Slurm's requeue.
    return reason_in(job.reason, SLURM_REQUEUED_REASONS)


def _job_partition(job: Job, snap: Snapshot, policy: Policy) -> Optional[str]:
    for name in job.partition.split(","):
        if name in snap.partitions and policy.is_job_partition(name):
            return name
    return None


def fault_time(snap: Snapshot, nodes: Iterable[str]) -> Optional[float]:
    """The earliest drain time among the failed nodes, when Slurm gave one."""
    times = [t for t in (slurm_time(snap.nodes[n].reason_time) for n in nodes if n in snap.nodes) if t is not None]
    return min(times) if times else None


def restarts_without_progress(inc: Incident, incidents: Sequence[Incident], job: Optional[Job] = None) -> int:
    """Earlier recoveries of this job that found the same latest checkpoint (no step saved since)."""
    return sum(1 for i in _of_job(incidents, inc.job_id, job)
               if i.id < inc.id and i.status == "recovered" and i.ckpt_step == inc.ckpt_step)


def _of_job(incidents: Sequence[Incident], job_id: int, job: Optional[Job]) -> List[Incident]:
    """This job's incidents. Not those of an older job with the same id (ids start again with a fresh
    slurmctld): a restart count never goes down. (SubmitTime cannot tell them apart: a requeue resets it.)"""
    return [i for i in incidents if i.job_id == job_id and (job is None or i.restart_count <= job.restart_count)]


class _IncidentFields(TypedDict):
    """The Step fields every step of one incident shares (Step(kind, **base, ...))."""
    job_id: int
    incident_id: int
    nodes: Tuple[str, ...]
    partition: str


def _advance(inc: Incident, snap: Snapshot, incidents: Sequence[Incident], policy: Policy, now: float,
             pool: List[str]) -> List[Step]:
    """The next step of one open incident, read off Slurm's current state."""
    job = snap.jobs.get(inc.job_id)
    base = _IncidentFields(job_id=inc.job_id, incident_id=inc.id, nodes=inc.nodes, partition=inc.partition)
    spec = snap.specs.get(inc.job_id)
    max_restarts = spec.max_restarts if spec else 0
    # a restart for a planned swap alone was not ours to count: whoever restarted the job decided it
    giving_up = (not inc.note.startswith(PLANNED_RESTART_NOTE)
                 and restarts_without_progress(inc, incidents, job) >= max_restarts)

    def quarantined() -> bool:
        # an admin's reason on a node (set since the incident opened) makes it theirs: it stays where it is
        return not any(n in p.nodes for n in inc.nodes if not _admins(snap.nodes.get(n), policy)
                       for p in snap.partitions.values() if policy.is_job_partition(p.name))

    if job is None or job.state in ENDED_JOB_STATES:
        if not quarantined():
            return [Step("quarantine", **base, reason="job ended; the failed nodes still leave the partition")]
        state = job.state if job else "gone"
        return [Step("abandon", **base, reason=f"job {inc.job_id} is {state}")]

    # Quarantine and swap first, while the job still runs: once it is requeued, its nodes run their
    # epilogs and Slurm is busiest, and those partition edits would sit on the critical path.
    if inc.note.startswith(PLANNED_HOT_NOTE):
        return _advance_planned(inc, snap, incidents, policy, pool, spec, job, base, quarantined(), now)
    if inc.note.startswith(HOT_NOTE):
        return _advance_hot(inc, snap, incidents, policy, pool, spec, job, base, quarantined(), now)
    if not quarantined():
        return [Step("quarantine", **base, reason="out of the job partitions, drained with its reason")]
    if inc.note.startswith(HOLD_PREFIX):
        # its checkpoints could not be read as complete (or not in time): a restart would start from
        # scratch over them. Held until someone looks; released by hand, it is confirmed like any other.
        if not inc.done("hold"):
            return [Step("hold", **base, hold=True, reason=inc.note[len(HOLD_PREFIX):])]
        if job.running and _restarted(inc, job) and not any(n in job.nodes for n in inc.nodes):
            return [Step("confirm", **base, reason=f"released by hand, running on {len(job.nodes)} nodes")]
        return []
    if giving_up:
        if not inc.done("requeue"):
            return [Step("requeue", **base, hold=True,
                         reason="held, gives up: " + _give_up_reason(inc, incidents, max_restarts, job))]
        return [Step("give_up", **base, reason=_give_up_reason(inc, incidents, max_restarts, job))]

    if not _swapped(inc, snap, policy):
        need = len(inc.nodes) - len(inc.spares)
        chosen = list(inc.spares)
        fresh = [s for s in pool if s not in chosen][:max(need, 0)]
        for s in fresh:
            pool.remove(s)
        chosen += fresh
        short = len(inc.nodes) - len(chosen)
        if short <= 0:
            return [Step("swap", **base, spares=tuple(chosen),
                         reason=f"{len(chosen)} spare(s) from {policy.spare_partition} into {inc.partition}")]
        if spec is not None and _can_shrink(inc, spec, short):
            size = inc.job_nodes - short
            return [Step("swap", **base, spares=tuple(chosen), num_nodes=size,
                         reason=f"pool short by {short}: shrink the job to {size} nodes (min_nodes "
                                f"{spec.min_nodes})")]
        for s in fresh:  # not enough: take none, so the pool serves whoever can run
            pool.insert(0, s)
        pool.sort()
        if not inc.done("requeue"):   # the gang is dead anyway: stop it, held until a spare is free
            return [Step("requeue", **base, hold=True, reason="held until a spare is free")]
        if inc.status != "waiting":
            return [Step("wait", **base, reason=f"waiting for a spare: {policy.spare_partition} has "
                                                  f"{len(chosen)} healthy idle node(s), {len(inc.nodes)} needed")]
        return []

    # requeue: only a job still running on the fault needs it (Slurm may have requeued it already)
    if not inc.done("requeue"):
        return [Step("requeue", **base, reason="at once, without waiting for a collective timeout")]

    if job.running:
        if _restarted(inc, job):
            if any(n in job.nodes for n in inc.nodes):
                return [Step("poll", **base, reason="running again, but on a failed node")]
            return [Step("confirm", **base, reason=f"running on {len(job.nodes)} nodes")]
        return [Step("poll", **base, reason="requeue not seen by Slurm yet")]
    if job.state not in PENDING_STATES:
        return [Step("poll", **base, reason=f"job is {job.state}")]
    if not inc.done("exclude"):
        num_nodes = inc.shrink_to or refill_size(spec)
        return [Step("exclude", **base, num_nodes=num_nodes,
                     reason="exclude the failed nodes" + (f", NumNodes={num_nodes}" if num_nodes else ""))]
    if job.held or reason_in(job.reason, HELD_REASONS):
        return [Step("start", **base, hold=True, reason=f"release ({job.reason or 'held'}) and StartTime=now")]
    eligible = slurm_time(job.eligible_time)
    if job.reason == "BeginTime" or (eligible is not None and eligible > now + 1.0):
        wait = _completing(inc, snap, now, policy)
        if wait:    # StartTime=now sent while the old run's epilogs run does not stick: say so, send it once after
            if not inc.note.startswith("waiting for Slurm"):
                return [Step("note", **base, reason=wait)]
            return [Step("poll", **base, reason=wait)]
        # Only once Slurm shows the requeue finished: StartTime=now sent earlier does not stick.
        return [Step("start", **base, reason="StartTime=now: skip Slurm's requeue delay")]
    started = inc.step("start")
    waited = now - (started.done_at or started.intent_at) if started else 0.0
    if waited > policy.running_timeout_s and "not running after" not in inc.note:
        return [Step("note", **base, reason=f"not running after {waited:.0f} s: pending ({job.reason})")]
    return [Step("poll", **base, reason=f"pending ({job.reason})")]


def _advance_hot(inc: Incident, snap: Snapshot, incidents: Sequence[Incident], policy: Policy, pool: List[str],
                 spec: Optional[FtSpec], job: Job, base: _IncidentFields, quarantined: bool, now: float) -> List[Step]:
    """The in-allocation path: the job's supervisor relaunches its step on a hot spare and gives the
    failed node back (shrinks the job); the controller quarantines the node, refills the partition
    from the pool (a later requeue asks for N + K again) and closes the incident once the node has
    left the job. The requeue path takes over only on what the supervisor cannot handle: the job was
    requeued (by Slurm, after a node failure), or Slurm shows more failed nodes than its hot spares (or
    its batch host failed), as the supervisor sees them (nodefault: it falls back on the same view and
    then waits for the requeue). Never on a passing state: a job Slurm shows STOPPED, SIGNALING or
    COMPLETING at the same restart count still runs, or is ending (then it is abandoned); a requeue would
    kill a job that runs on its hot spare."""
    if job.restart_count > inc.restart_count:
        return [Step("note", **base, reason=f"job requeued (restart {job.restart_count}, {job.state}): "
                                            f"the requeue path takes over")]
    if not job.running:
        return [Step("poll", **base, reason=f"job is {job.state}: waiting for it to run on or end")]
    failed_in_job = failed_in_run(job, snap.nodes, incidents, policy)
    if failed_in_job and not in_supervisor_hands(job, spec, failed_in_job):
        why = (f"the batch host {job.batch_host} failed" if job.batch_host in failed_in_job
               else f"hot spares used up ({len(job.nodes) - len(failed_in_job)} healthy node(s) left)")
        return [Step("note", **base, reason=f"{why}: the requeue path takes over")]
    return _in_job(inc, snap, policy, pool, job, base, quarantined, now, HOT_WORDS)


# What a node's incident in a running hot-spare job says at each step: (quarantine, poll, close kind,
# closed with the node still in the job, closed with the node gone)
HOT_WORDS = ("out of the job partitions, drained with its reason (the job runs on)",
             "waiting for the job's supervisor to give the failed node back",
             "released",
             "relaunched on a hot spare of the allocation; the failed node stays in the job unused (Slurm refused "
             "the shrink)",
             "relaunched on a hot spare of the allocation; the failed node left the job")
# the supervisor moves at the checkpoint it asks for once told of the quarantine, usually seconds; the
# incident does not hold the job for longer (one open incident a job: a fault must not wait)
PLANNED_WORDS = ("out of the job partitions, drained for its planned swap (the job runs on)",
                 "waiting for the job's supervisor to move off the node at its next checkpoint",
                 "planned",
                 "quarantined and replaced in the partition; the job's supervisor moves off the node at its "
                 "checkpoint (it stays in the job, unused, where Slurm refuses the shrink)",
                 "the job's supervisor moved off the node at a checkpoint and gave it back")


def _in_job(inc: Incident, snap: Snapshot, policy: Policy, pool: List[str], job: Job, base: _IncidentFields,
            quarantined: bool, now: float, words: Tuple[str, str, str, str, str]) -> List[Step]:
    """A node out of a running hot-spare job (a fault's or a planned swap's): quarantine it, refill its
    partition from the pool once while a spare is free, and close once the node left the job (or after
    HOT_RELEASE_WAIT_S with it still there, unused)."""
    quarantine, poll, kind, kept, left = words
    if not quarantined:
        return [Step("quarantine", **base, reason=quarantine)]
    if not inc.done("swap") and not _swapped(inc, snap, policy):
        fresh = [s for s in pool if s not in inc.spares][:len(inc.nodes)]
        if fresh:
            for s in fresh:
                pool.remove(s)
            return [Step("swap", **base, spares=tuple(fresh),
                         reason=f"refill {inc.partition} from {policy.spare_partition} (the job keeps running)")]
    if any(n in job.nodes for n in inc.nodes):
        if now - inc.opened_at < HOT_RELEASE_WAIT_S:
            return [Step("poll", **base, reason=poll)]
        return [Step(kind, **base, reason=kept)]
    return [Step(kind, **base, reason=left)]


def _advance_planned(inc: Incident, snap: Snapshot, incidents: Sequence[Incident], policy: Policy, pool: List[str],
                     spec: Optional[FtSpec], job: Job, base: _IncidentFields, quarantined: bool, now: float
                     ) -> List[Step]:
    """A planned swap inside a hot-spare job: quarantine the node (the job runs on; its supervisor may give
    it back once told), refill the partition from the pool, and close once the node left the job (the
    supervisor moved at its checkpoint). A fault in the job, or the job restarted, supersedes it: the
    fault's incident (or the restart's) takes the node along."""
    failed = [n for n in job.nodes if failure(snap.nodes.get(n), policy)]     # its own node failing too
    if not job.running or job.restart_count > inc.restart_count or failed:
        why = (f"a fault in the job ({', '.join(failed)})" if failed and job.running
               else f"job {job.job_id} is {job.state}, restart {job.restart_count}")
        return [Step("superseded", **base, reason=f"{why}: that path takes {', '.join(inc.nodes)} along")]
    return _in_job(inc, snap, policy, pool, job, base, quarantined, now, PLANNED_WORDS)


def _admins(node: Optional[Node], policy: Policy) -> bool:
    return node is not None and (node.drained or node.down) and vocab.admins(node.reason, policy.slurm_fault_reasons)


def _completing(inc: Incident, snap: Snapshot, now: float, policy: Policy) -> str:
    """What Slurm is still finishing of the old run: its nodes' epilogs (COMPLETING in the job's
    partition), or "" when nothing (or when that has lasted past running_timeout_s: start anyway)."""
    part = snap.partitions.get(inc.partition)
    if part is None:
        return ""
    busy = [n for n in part.nodes if n in snap.nodes and "COMPLETING" in snap.nodes[n].flags]
    if not busy:
        return ""
    requeue = inc.step("requeue")
    since = (requeue.done_at or requeue.intent_at) if requeue else inc.opened_at
    if now - since > policy.running_timeout_s:
        return ""
    return (f"waiting for Slurm to complete job {inc.job_id}'s old run: epilogs on {len(busy)} node(s), "
            f"COMPLETING since the requeue {now - since:.0f} s ago")


def _swapped(inc: Incident, snap: Snapshot, policy: Policy) -> bool:
    """The swap is done and still holds: its spares are in the job partition and out of the pool.

    Read off Slurm, not only the journal: a slurmctld restarted without -R rebuilds partitions from
    slurm.conf, which silently undoes a swap; the plan then does it again.
    """
    if not inc.done("swap"):
        return False
    target = snap.partitions.get(inc.partition)
    pool = snap.partitions.get(policy.spare_partition)
    return all((target is not None and s in target.nodes) and (pool is None or s not in pool.nodes)
               for s in inc.spares)


def _restarted(inc: Incident, job: Job) -> bool:
    """The job runs again after the incident's requeue: its restart count moved if we requeued it;
    if Slurm had requeued it before us (the requeue step was skipped), running at all is enough."""
    requeue = inc.step("requeue")
    if requeue is not None and requeue.outcome == "ok":
        return job.restart_count > inc.restart_count
    return True


def _can_shrink(inc: Incident, spec: FtSpec, short: int) -> bool:
    return bool(spec.min_nodes and inc.job_nodes - short >= spec.min_nodes)


def _give_up_reason(inc: Incident, incidents: Sequence[Incident], max_restarts: int, job: Optional[Job]) -> str:
    n = restarts_without_progress(inc, incidents, job)
    where = f"checkpoint step {inc.ckpt_step}" if inc.ckpt_step is not None else "no checkpoint"
    return f"{n} restart(s) without progress ({where}), max_restarts={max_restarts}"
