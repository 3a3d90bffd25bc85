"""The recovery policies, one module each behind base.RecoveryPolicy; the first that claims a fault owns
its incident, and the incident keeps its path (journal column `path`). A new policy is one module here
and one line below (and, where the job's supervisor recovers, its rule in job/paths.py). A planned swap's
policies claim no fault: the plan opens their incidents itself (planned.py)."""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

from slurm_ft.fleet.recovery.policies.base import RecoveryPolicy
from slurm_ft.fleet.recovery.policies.in_allocation import InAllocation
from slurm_ft.fleet.recovery.policies.planned import PlannedAtRestart, PlannedDeferred, PlannedInJob
from slurm_ft.fleet.recovery.policies.replica_group import ReplicaGroup
from slurm_ft.fleet.recovery.policies.requeue_swap import RequeueSwap
from slurm_ft.job.tag import FtSpec
from slurm_ft.slurm.types import Job

POLICIES: Tuple[RecoveryPolicy, ...] = (ReplicaGroup(), InAllocation(), RequeueSwap())   # RequeueSwap last: claims all
PLANNED: Tuple[RecoveryPolicy, ...] = (PlannedInJob(), PlannedAtRestart(), PlannedDeferred())
BY_PATH: Dict[str, RecoveryPolicy] = {p.path: p for p in (*POLICIES, *PLANNED)}


def claim(job: Job, spec: Optional[FtSpec], failed: Sequence[str]) -> RecoveryPolicy:
    """The policy that owns a new incident of this job with these failed nodes."""
    return next(p for p in POLICIES if p.claims(job, spec, failed))


def of_path(path: str) -> RecoveryPolicy:
    """An incident's policy; an unknown path (a journal written by a newer slurm-ft) takes the requeue path."""
    return BY_PATH.get(path) or BY_PATH["requeue"]
