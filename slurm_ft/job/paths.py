"""Which path a fault of a fault-tolerant job takes: the one rule that the job's own supervisors follow
and the controller's policies (fleet/policies/) read, so the two never disagree. Pure.

  in_allocation  a hot-spare job (`--hot-spares K -N N`): its supervisor relaunches the whole step on N
                 healthy nodes of its allocation while the batch host is healthy and N healthy nodes remain
  replica_group  a replica-group job (`--replica-groups R [--hot-spares K] -N N`): its supervisor relaunches
                 only the failed group (N / R nodes), on a hot spare when one is left, or runs on fewer
                 groups, while the batch host (the torchft Lighthouse's) is healthy and MIN_GROUPS whole
                 groups can still run
  requeue        anything else: the controller requeues the whole job onto a spare from the pool
"""
from __future__ import annotations

from typing import Collection, Optional, Sequence

from slurm_ft.job.tag import FtSpec

REQUEUE = "requeue"
IN_ALLOCATION = "in_allocation"
REPLICA_GROUP = "replica_group"
PATHS = (REQUEUE, IN_ALLOCATION, REPLICA_GROUP)
# The fewest replica groups a job trains on before it takes the requeue path: the Lighthouse's
# min_replicas. One group still makes progress; the others heal from it when they rejoin.
MIN_GROUPS = 1


def healthy(allocation: Sequence[str], failed: Collection[str]) -> int:
    return sum(1 for n in allocation if n not in failed)


def can_relaunch(allocation: Sequence[str], failed: Collection[str], batch_host: str, train_nodes: int) -> bool:
    """A hot-spare supervisor can start its step again on train_nodes healthy nodes of the allocation."""
    return batch_host not in failed and healthy(allocation, failed) >= train_nodes


def groups_left(allocation: Sequence[str], failed: Collection[str], batch_host: str, group_nodes: int) -> int:
    """How many whole replica groups the allocation can still run (0 when the batch host failed: the
    supervisor and the Lighthouse run there)."""
    if batch_host in failed or group_nodes < 1:
        return 0
    return healthy(allocation, failed) // group_nodes


def supervisor_path(spec: Optional[FtSpec], allocation: Sequence[str], batch_host: str,
                    failed: Collection[str]) -> Optional[str]:
    """The path the job's own supervisor takes for these failed nodes, or None (the requeue path)."""
    if spec is None or not spec.train_nodes:
        return None
    if spec.replica_groups:
        per = spec.train_nodes // spec.replica_groups
        left = min(spec.replica_groups, groups_left(allocation, failed, batch_host, per))
        return REPLICA_GROUP if left >= MIN_GROUPS else None
    if spec.hot_spares and can_relaunch(allocation, failed, batch_host, spec.train_nodes):
        return IN_ALLOCATION
    return None
