"""The in-allocation path (`slurm-ft sbatch --hot-spares K -N N`): the job's supervisor relaunches its
step on a hot spare and gives the failed node back (shrinks the job); the controller quarantines the
node, refills the partition from the pool (a later requeue asks for N + K again) and closes the incident
once the node has left the job.

  quarantine  the failed node leaves the job partitions (the job runs on); the supervisor is told
  swap        refill the job's partition from the pool (the job itself keeps running)
  end_steps   the job's steps still running on the failed node past the supervisor's own stop are
              cancelled, as root: ending a step takes an RPC of the job's user (srun turns its SIGTERM
              into a step kill through slurmctld), which their rate limiter's empty bucket can hold for
              minutes; root's are not limited. The supervisor then relaunches on its hot spare
  released    the node left the job (or Slurm refused the shrink: it stays in the job, unused)

The requeue path takes over only on what the supervisor cannot handle (job/paths.py, the rule the
supervisor follows too): the job was requeued (by Slurm, after a node failure), or Slurm shows more
failed nodes than it has spares for, or its batch host failed. Never on a passing state: a job Slurm
shows STOPPED, SIGNALING or COMPLETING at the same restart count still runs, or is ending (then it is
abandoned); a requeue would kill a job that runs on its hot spare.
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

from slurm_ft.fleet.recovery.policies.base import IncidentView
from slurm_ft.fleet.recovery.policies.common import failed_in_run, quarantined, swapped
from slurm_ft.fleet.recovery.records import Step
from slurm_ft.job.paths import IN_ALLOCATION, supervisor_path
from slurm_ft.job.tag import FtSpec
from slurm_ft.slurm.types import Job

# The supervisor gives a quarantined node back as it relaunches the step (hotplan); past this, Slurm
# refused the shrink and the node stays in the job, unused, until the job ends or is requeued.
HOT_RELEASE_WAIT_S = 30.0
# The supervisor's own stop of the old step: SIGTERM to srun, 10 s (job/supervisor.py STOP_GRACE_S), then
# its cancel; a step still on the failed node past this is ended by the controller (end_steps).
OLD_STEP_GRACE_S = 20.0


class InAllocation:
    """The job's own supervisor recovers inside its allocation (replica_group.py differs only in what the
    supervisor relaunches, when it can, and how the timeline names it)."""
    path = IN_ALLOCATION
    phases: Mapping[str, str] = {"open": "incident", "quarantine": "quarantine", "swap": "pool refill",
                                 "end_steps": "old step ended", "released": "incident closed"}
    released_as = "relaunched on a hot spare of the allocation"
    supervised, closes_as = True, "recovered"
    quarantine_says = "out of the job partitions, drained with its reason (the job runs on)"
    waiting_says = "waiting for the job's supervisor to give the failed node back"
    close_kind = "released"
    ends_old_steps = True         # end_steps: a fault's old step is over; a planned swap's is not
    kept_says = "the failed node stays in the job unused (Slurm refused the shrink)"
    left_says = "the failed node left the job"

    def claims(self, job: Job, spec: Optional[FtSpec], failed: Sequence[str]) -> bool:
        return supervisor_path(spec, job.nodes, job.batch_host, failed) == self.path

    def advance(self, v: IncidentView) -> List[Step]:
        inc, job, base = v.inc, v.job, v.base
        if job.restart_count > inc.restart_count:
            return [Step("handover", **base, reason=f"job requeued (restart {job.restart_count}, {job.state}): "
                                                f"the requeue path takes over")]
        if not job.running:
            return [Step("poll", **base, reason=f"job is {job.state}: waiting for it to run on or end")]
        failed = failed_in_run(job, v.snap.nodes, v.incidents, v.policy)
        if failed and not self.claims(job, v.spec, failed):
            return [Step("handover", **base, reason=f"{self.why_not(job, v.spec, failed)}: the requeue path takes over")]
        return self.in_job(v)

    def in_job(self, v: IncidentView) -> List[Step]:
        """The node out of the running job: quarantine it, refill its partition from the pool once while a
        spare is free, then close (release). A step the supervisor could not end on the failed node is
        ended first, whatever the quarantine waits on (the breaker): it is the job's recovery."""
        inc, base = v.inc, v.base
        if (self.ends_old_steps and any(n in v.job.nodes for n in inc.nodes)
                and v.now - inc.opened_at >= OLD_STEP_GRACE_S and inc.step("end_steps") is None):
            return [Step("end_steps", **base, reason="the failed node is still in the job past the supervisor's "
                         "stop: its steps there are ended as root")]
        if not quarantined(inc, v.snap, v.policy):
            return [Step("quarantine", **base, reason=self.quarantine_says)]
        if not inc.done("swap") and not swapped(inc, v.snap, v.policy):
            fresh = [s for s in v.pool if s not in inc.spares][:len(inc.nodes)]
            if fresh:
                for s in fresh:
                    v.pool.remove(s)
                return [Step("swap", **base, spares=tuple(fresh),
                             reason=f"refill {inc.partition} from {v.policy.spare_partition} (the job keeps running)")]
        return self.release(v)

    def release(self, v: IncidentView) -> List[Step]:
        """Close once the supervisor gave the failed node back (shrank the job), or Slurm refused to."""
        if any(n in v.job.nodes for n in v.inc.nodes):
            if v.now - v.inc.opened_at < HOT_RELEASE_WAIT_S:
                return [Step("poll", **v.base, reason=self.waiting_says)]
            return [Step(self.close_kind, **v.base, reason=f"{self.released_as}; {self.kept_says}")]
        return [Step(self.close_kind, **v.base, reason=f"{self.released_as}; {self.left_says}")]

    def why_not(self, job: Job, spec: Optional[FtSpec], failed: Sequence[str]) -> str:
        if job.batch_host in failed:
            return f"the batch host {job.batch_host} failed"
        return f"hot spares used up ({len(job.nodes) - len(failed)} healthy node(s) left)"

    def note(self, spec: FtSpec) -> str:
        """The incident's note for people (the path itself is its own column)."""
        return f"hot-spare: {spec.hot_spares} hot spare(s), {spec.train_nodes} training nodes"

