"""What every recovery policy reads, pure: the controller's settings, when a node counts as failed, and
the facts about an incident that more than one policy asks (its spares moved, the job restarted, the
failed nodes left the job partitions). No subprocess, no clock."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple, TypedDict

from slurm_ft import vocab
from slurm_ft.fleet.recovery.records import Incident, same_submit
from slurm_ft.fleet.recovery.snapshot import Snapshot
from slurm_ft.job.nodefault import node_fault
from slurm_ft.job.paths import is_planned
from slurm_ft.job.tag import FtSpec
from slurm_ft.slurm.types import Job, Node

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
# Slurm ended the job for a node of its run that stopped answering and did not requeue it: a `--no-kill`
# job (a hot-spare or replica-group job) whose batch host went DOWN ends FAILED, JobLaunchFailure, the node
# taken out of its NodeList. A root `scontrol requeue` of the ended job brings it back.
NODE_FAILURE_ENDS = ("JobLaunchFailure", "NodeDown")


def reason_in(reason: str, names: Iterable[str]) -> bool:
    norm = reason.replace("_", " ").lower()
    return any(norm.startswith(n.replace("_", " ").lower()) for n in names)


def ended_by_node_failure(job: Job) -> bool:
    """The job ended because Slurm lost a node of its run, not by its own doing: NODE_FAILURE_ENDS (22.05
    ends a --no-kill job so when its batch host goes DOWN), or killed after Slurm took its batch host out
    of the run (24.11 keeps the job running without it, then SIGKILLs the batch step when the node answers
    again: FAILED, RaisedSignal:9; 25.11 and 26.05 leave such a job RUNNING: plan._detect)."""
    if job.state == "NODE_FAIL":
        return True
    return job.state == "FAILED" and (reason_in(job.reason, NODE_FAILURE_ENDS)
                                      or (lost_batch_host(job) and reason_in(job.reason, ("RaisedSignal:9",))))


def lost_batch_host(job: Job) -> bool:
    """Slurm took the job's batch host out of its node list: the node stopped answering (a --no-kill job
    keeps the rest). Slurm never lets a job or its owner give the batch host up."""
    return bool(job.batch_host and job.nodes) and job.batch_host not in job.nodes


@dataclass(frozen=True)
class ControllerSettings:
    """The controller's settings the plan reads (config `controller`)."""
    spare_partition: str = "spares"
    job_partitions: Tuple[str, ...] = ()          # () = every partition but the pool
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
    # the config's keep_off: nodes slurm-ft never touches (no incident, never a spare, never moved)
    keep_off: FrozenSet[str] = frozenset()

    @classmethod
    def from_config(cls, cc: ControllerConfig, keep_off: FrozenSet[str] = frozenset()) -> "ControllerSettings":
        return cls(spare_partition=cc.spare_partition, job_partitions=tuple(cc.job_partitions),
                   slurm_fault_reasons=tuple(cc.slurm_fault_reasons), running_timeout_s=cc.running_timeout_s,
                   unresponsive_grace_s=cc.unresponsive_grace_s, wave_nodes=cc.wave_nodes,
                   wave_window_s=cc.wave_window_s, wave_settle_s=cc.wave_settle_s,
                   restore_after_s=cc.restore_after_s, keep_off=frozenset(keep_off))

    def is_job_partition(self, name: str) -> bool:
        if name == self.spare_partition:
            return False
        return not self.job_partitions or name in self.job_partitions


def failure(node: Optional[Node], policy: ControllerSettings) -> Optional[str]:
    """Why the node counts as a fault the controller takes on, or None (nodefault.node_fault under this
    policy's reasons). A node an admin set DOWN (or drained) with their own reason is theirs: never
    claimed by a job, drained over, counted or replaced by slurm-ft; so is a node in keep_off."""
    why = node_fault(node, policy.slurm_fault_reasons)
    if why is None or node is None or vocab.admins(node.reason, policy.slurm_fault_reasons) \
            or node.name in policy.keep_off:
        return None
    return why


def admins(node: Optional[Node], policy: ControllerSettings) -> bool:
    return node is not None and (node.drained or node.down) and vocab.admins(node.reason, policy.slurm_fault_reasons)


def of_job(incidents: Sequence[Incident], job_id: int, job: Optional[Job]) -> List[Incident]:
    """This job's incidents, not those of an older job with the same id (ids start again after a slurmctld
    state loss, or wrap at MaxJobId; the lab resets them): see `belongs`."""
    return [i for i in incidents if i.job_id == job_id and (job is None or belongs(i, job))]


def belongs(inc: Incident, job: Job) -> bool:
    """May `inc` be an incident of `job` (of the same id)? A restart count never goes down, and within one
    restart count SubmitTime stays (Slurm resets it at a requeue, which moves the count on): an incident
    of the job's current restart count opened under another SubmitTime is an older job's. An earlier
    count cannot be told apart (the requeue reset the time), nor a row journaled before the column."""
    if inc.restart_count != job.restart_count:
        return inc.restart_count < job.restart_count
    return same_submit(inc.job_submit, job.submit_time)


def failed_in_run(job: Job, nodes: Mapping[str, Node], incidents: Sequence[Incident],
                  policy: ControllerSettings) -> List[str]:
    """The job's nodes failed in this run of it: failed now, or named by an incident of this run. A health
    check may resume its drain once the fault no longer shows (an Xid older than its look-back); the
    node stays failed here, as it does for the job's supervisor (which then falls back to the requeue)."""
    earlier = {n for i in of_job(incidents, job.job_id, job) if i.restart_count == job.restart_count
               and not is_planned(i.path) for n in i.nodes}
    return [n for n in job.nodes if n in earlier or failure(nodes.get(n), policy)]


def refill_size(spec: Optional[FtSpec]) -> Optional[int]:
    """The node count a requeued job whose supervisor shrinks it asks for again: N + K (its shrinks lowered
    NumNodes)."""
    if spec is None or not spec.train_nodes or not (spec.hot_spares or spec.replica_groups):
        return None
    return spec.train_nodes + spec.hot_spares


def swapped(inc: Incident, snap: Snapshot, policy: ControllerSettings) -> bool:
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


def quarantined(inc: Incident, snap: Snapshot, policy: ControllerSettings) -> bool:
    """The incident's failed nodes left every job partition (an admin's reason on a node, set since the
    incident opened, makes it theirs: it stays where it is)."""
    return not any(n in p.nodes for n in inc.nodes if not admins(snap.nodes.get(n), policy)
                   for p in snap.partitions.values() if policy.is_job_partition(p.name))


class IncidentFields(TypedDict):
    """The Step fields every step of one incident shares (Step(kind, **base, ...))."""
    job_id: int
    incident_id: int
    nodes: Tuple[str, ...]
    partition: str
