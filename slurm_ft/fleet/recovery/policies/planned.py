"""Planned swaps: a node drained `slurm-ft: PLANNED ...` for a soft signal (node/planned.py) while a
fault-tolerant job runs on it. No fault: the job is never requeued for it. The plan opens one of three
paths (job/paths.planned_path), never a policy of POLICIES' (those claim faults):

  planned           a hot-spare job: quarantine and swap (the pool refills the partition), then wait for the
                    job's supervisor to move off the node at the checkpoint it asks for (closed `planned`)
  planned_restart   the job is pending again after a restart: a spare takes the node's place before it
                    starts (the requeue path's steps; that restart was not ours to count; closed `planned`)
  planned_deferred  running with no hot spare (or the node is its batch host): noted and closed `deferred`
                    at open; the node goes with the job's next restart, whoever restarts it

A fault in the job, or its restart, supersedes an open `planned` incident: that path takes the node along.
"""
from __future__ import annotations

from typing import List, Mapping

from slurm_ft.fleet.recovery.policies.base import IncidentView
from slurm_ft.fleet.recovery.policies.common import failure
from slurm_ft.fleet.recovery.policies.in_allocation import InAllocation
from slurm_ft.fleet.recovery.policies.requeue_swap import RequeueSwap
from slurm_ft.fleet.recovery.records import Step
from slurm_ft.job.paths import PLANNED, PLANNED_DEFERRED, PLANNED_RESTART
from slurm_ft.job.tag import FtSpec


class PlannedInJob(InAllocation):
    """The in-allocation path's steps, for a node the supervisor leaves at a checkpoint rather than a fault;
    the incident holds its job no longer than a fault's does (HOT_RELEASE_WAIT_S)."""
    path = PLANNED
    phases: Mapping[str, str] = {"open": "incident", "quarantine": "quarantine", "swap": "pool refill",
                                 "planned": "incident closed"}
    released_as = "planned swap"
    quarantine_says = "out of the job partitions, drained for its planned swap (the job runs on)"
    waiting_says = "waiting for the job's supervisor to move off the node at its next checkpoint"
    close_kind = "planned"
    ends_old_steps = False        # the step trains on until its next checkpoint, however long that is
    kept_says = ("quarantined and replaced in the partition; the job's supervisor moves off the node at its "
                 "checkpoint (it stays in the job, unused, where Slurm refuses the shrink)")
    left_says = "the job's supervisor moved off the node at a checkpoint and gave it back"

    def advance(self, v: IncidentView) -> List[Step]:
        job = v.job
        failed = [n for n in job.nodes if failure(v.snap.nodes.get(n), v.policy)]     # its own node failing too
        if not job.running or job.restart_count > v.inc.restart_count or failed:
            why = (f"a fault in the job ({', '.join(failed)})" if failed and job.running
                   else f"job {job.job_id} is {job.state}, restart {job.restart_count}")
            return [Step("superseded", **v.base, reason=f"{why}: that path takes {', '.join(v.inc.nodes)} along")]
        return self.in_job(v)

    def note(self, spec: FtSpec) -> str:
        return "planned, hot spare"       # the controller adds which node and when (its open)


class PlannedAtRestart(RequeueSwap):
    """The requeue path's steps from `swap` on, for a job already pending: its restart is not counted
    against its max_restarts (whoever restarted it decided that), and it closes `planned`."""
    path = PLANNED_RESTART
    closes_as = "planned"

    def gives_up(self, v: IncidentView, max_restarts: int) -> bool:
        return False

    def note(self, spec: FtSpec) -> str:
        return "planned, at restart"


class PlannedDeferred(RequeueSwap):
    """Closed at open (`deferred`): nothing to advance; a later incident of the job takes the node along."""
    path = PLANNED_DEFERRED
    phases: Mapping[str, str] = {"open": "incident"}

    def advance(self, v: IncidentView) -> List[Step]:
        return []

    def note(self, spec: FtSpec) -> str:
        return "planned, deferred"
