"""Which path a fault of a fault-tolerant job takes: the one rule that the job's own supervisors follow
and the controller's policies (fleet/recovery/policies/) read, so the two never disagree. Pure.

  in_allocation  a hot-spare job (`--hot-spares K -N N`): its supervisor relaunches the whole step on N
                 healthy nodes of its allocation while the batch host is healthy and N healthy nodes remain
  replica_group  a replica-group job (`--replica-groups R [--hot-spares K] -N N`): its supervisor relaunches
                 only the failed group (N / R nodes), on a hot spare when one is left, or runs on fewer
                 groups, while the batch host (the torchft Lighthouse's) is healthy and MIN_GROUPS whole
                 groups can still run
  requeue        anything else: the controller requeues the whole job onto a spare from the pool

A planned swap (a node out for a soft signal, no fault: fleet/recovery/policies/planned.py) takes one of three:
  planned           a hot-spare job's supervisor moves off the node at its next checkpoint
  planned_restart   the job is pending again: a spare takes the node's place before it starts
  planned_deferred  running with no hot spare: the node goes with the job's next restart
"""
from __future__ import annotations

from typing import Collection, Optional, Sequence

from slurm_ft.job.tag import FtSpec

REQUEUE = "requeue"
IN_ALLOCATION = "in_allocation"
REPLICA_GROUP = "replica_group"
PLANNED = "planned"
PLANNED_RESTART = "planned_restart"
PLANNED_DEFERRED = "planned_deferred"
PATHS = (REQUEUE, IN_ALLOCATION, REPLICA_GROUP, PLANNED, PLANNED_RESTART, PLANNED_DEFERRED)
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


def is_planned(path: str) -> bool:
    """An incident of a planned swap: its nodes were degraded, not failed."""
    return path in (PLANNED, PLANNED_RESTART, PLANNED_DEFERRED)


def planned_path(spec: Optional[FtSpec], allocation: Sequence[str], batch_host: str, running: bool,
                 out: Collection[str]) -> str:
    """The path a planned swap of the nodes `out` takes: the job's supervisor where it could relaunch
    without them (a hot-spare job, not its batch host), else the job's next restart."""
    if not running:
        return PLANNED_RESTART
    if supervisor_path(spec, allocation, batch_host, out) == IN_ALLOCATION:
        return PLANNED
    return PLANNED_DEFERRED
