"""The replica-group path (`slurm-ft sbatch --replica-groups R [--hot-spares K] -N N`): the job's
supervisor stops and relaunches only the failed torchft replica group (on a hot spare when one is left,
else the job trains on the other groups); the others keep stepping, and the group rejoins through
torchft's quorum, healing live from a peer. The controller's part is the in-allocation path's:

  quarantine  the failed node leaves the job partitions (the job runs on); the supervisor is told
  swap        refill the job's partition from the pool
  released    at once: the failed node stays in the job, drained and unused, until it ends or is requeued
              (the supervisor never shrinks the job while other groups' steps run: groupplan.py)

The requeue path takes over when the Lighthouse's host (the batch host) failed or fewer than
paths.MIN_GROUPS whole groups could still run (job/paths.py, the supervisor's own rule).
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

from slurm_ft.fleet.recovery.policies.base import IncidentView

from slurm_ft.fleet.recovery.policies.in_allocation import InAllocation
from slurm_ft.fleet.recovery.records import Step
from slurm_ft.job.paths import MIN_GROUPS, REPLICA_GROUP
from slurm_ft.job.tag import FtSpec
from slurm_ft.slurm.types import Job


class ReplicaGroup(InAllocation):
    path = REPLICA_GROUP
    phases: Mapping[str, str] = {"open": "incident", "quarantine": "quarantine", "swap": "pool refill",
                                 "released": "group's node released"}
    released_as = "the failed replica group relaunched in the allocation, the others trained on"

    def release(self, v: IncidentView) -> List[Step]:
        return [Step("released", **v.base, reason=f"{self.released_as}; the failed node stays in the job, "
                                                  f"drained and unused, until it ends or is requeued")]

    def why_not(self, job: Job, spec: Optional[FtSpec], failed: Sequence[str]) -> str:
        if job.batch_host in failed:
            return f"the Lighthouse's host {job.batch_host} (the batch host) failed"
        return f"fewer than {MIN_GROUPS} whole replica group(s) left ({len(job.nodes) - len(failed)} healthy node(s))"

    def note(self, spec: FtSpec) -> str:
        return (f"replica groups: {spec.replica_groups} of {(spec.train_nodes or 0) // max(1, spec.replica_groups)} "
                f"node(s), {spec.hot_spares} hot spare(s)")
