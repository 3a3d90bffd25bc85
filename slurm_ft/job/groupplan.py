"""The replica-group supervisor's decisions, pure: the allocation and its groups now -> what to do.

A job submitted with `slurm-ft sbatch --replica-groups R [--hot-spares K] -N N` holds N + K nodes and
trains as R torchft replica groups of M = N / R nodes, each its own `srun` step, all meeting at the
torchft Lighthouse the supervisor runs on the batch host (groups.py). On every poll it hands `decide`
a View and carries out the Actions it gets back. No subprocess and no clock here: times come in.

  relaunch  a node of group g failed: stop g only and start it again on its healthy nodes plus idle
            healthy nodes of the allocation (a hot spare, or the survivors of a parked group); the other
            groups keep stepping and g rejoins through torchft's quorum, healing from a peer
  park      too few idle healthy nodes for g: stop it, the job trains on the other groups (torchft
            averages over the groups in the quorum); it starts again once M idle nodes are there
  restart   group g's step failed with no node to blame (after EXIT_GRACE_S), or hung with no culprit:
            g alone starts again on the same nodes
  fallback  the batch host failed (the supervisor and the Lighthouse run there), or fewer than
            paths.MIN_GROUPS groups could run: the requeue path, as hotplan's fallback
  exit      every group completed (0), or one exited hotplan.EXIT_DO_NOT_RESTART

The failed nodes are never given back while other groups' steps run (no shrink): Slurm 22.05 loses the
resources of a step that runs across a resize, and the next step waits forever on "Requested nodes are
busy" (hotplan.py); they stay in the job, drained and unused, until it ends or is requeued.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence, Tuple

from slurm_ft.job.hotplan import EXIT_DO_NOT_RESTART, EXIT_GRACE_S
from slurm_ft.job.paths import MIN_GROUPS, groups_left


@dataclass(frozen=True)
class Group:
    nodes: Tuple[str, ...] = ()          # () = parked (no step)
    rc: Optional[int] = None             # None while its step runs (or parked)
    since_exit_s: float = 0.0            # how long ago its step ended (rc set)


@dataclass(frozen=True)
class View:
    allocation: Tuple[str, ...]          # the job's nodes, in Slurm's order
    faults: Mapping[str, str]            # node -> why it counts as failed
    batch_host: str
    group_nodes: int                     # M
    groups: Tuple[Group, ...]            # R


@dataclass(frozen=True)
class Action:
    kind: str                            # relaunch, park, restart, fallback, exit
    group: int = -1
    nodes: Tuple[str, ...] = ()          # relaunch/restart: where the group runs next
    failed: Tuple[str, ...] = ()
    rc: Optional[int] = None
    reason: str = ""


def form(allocation: Sequence[str], faults: Mapping[str, str], batch_host: str, groups: int,
         group_nodes: int) -> List[Tuple[str, ...]]:
    """The first launch's groups, in allocation order (group 0 holds the batch host when it is healthy);
    () for a group the healthy nodes do not reach."""
    healthy = [x for x in allocation if x not in faults]
    out: List[Tuple[str, ...]] = []
    for g in range(groups):
        chunk = tuple(healthy[g * group_nodes:(g + 1) * group_nodes])
        out.append(chunk if len(chunk) == group_nodes else ())
    return out


def decide(v: View) -> List[Action]:
    """The actions for this poll ([] = wait)."""
    failed_all = tuple(x for x in v.allocation if x in v.faults)
    if v.batch_host in v.faults:
        return [Action("fallback", failed=failed_all,
                       reason=f"the batch host {v.batch_host} failed ({v.faults[v.batch_host]}): the Lighthouse "
                              f"and the supervisor run there")]
    if any(g.rc == EXIT_DO_NOT_RESTART for g in v.groups):
        return [Action("exit", rc=EXIT_DO_NOT_RESTART,
                       reason=f"a replica group exited {EXIT_DO_NOT_RESTART}: do not restart")]
    if v.groups and all(g.rc == 0 for g in v.groups if g.nodes) and any(g.nodes for g in v.groups):
        return [Action("exit", rc=0, reason="every replica group completed")]
    if min(len(v.groups), groups_left(v.allocation, v.faults, v.batch_host, v.group_nodes)) < MIN_GROUPS:
        return [Action("fallback", failed=failed_all,
                       reason=f"fewer than {MIN_GROUPS} whole replica group(s) left; " + _why(v.faults, failed_all))]
    # nodes held by groups that run on (or completed) and are not hit; the rest of the healthy ones are idle
    hit = {i for i, g in enumerate(v.groups) if g.nodes and any(x in v.faults for x in g.nodes)}
    held = {x for i, g in enumerate(v.groups) if i not in hit for x in g.nodes}
    idle = [x for x in v.allocation if x not in v.faults and x not in held
            and not any(x in v.groups[i].nodes for i in hit)]
    acts: List[Action] = []
    for i in sorted(hit):
        g = v.groups[i]
        keep = [x for x in g.nodes if x not in v.faults]
        failed = tuple(x for x in g.nodes if x in v.faults)
        take = idle[:max(0, v.group_nodes - len(keep))]
        if len(keep) + len(take) < v.group_nodes:
            idle = [x for x in idle if x not in take] + keep       # its survivors wait for a parked group's turn
            acts.append(Action("park", group=i, failed=failed, reason=f"no hot spare left for group {i}: the job "
                                                                       f"trains on the other groups; " + _why(v.faults, failed)))
            continue
        idle = [x for x in idle if x not in take]
        chosen = set(keep) | set(take)
        acts.append(Action("relaunch", group=i, nodes=tuple(x for x in v.allocation if x in chosen), failed=failed,
                           reason=_why(v.faults, failed)))
    for i, g in enumerate(v.groups):
        if i in hit:
            continue
        if not g.nodes and len(idle) >= v.group_nodes:       # a parked group: M idle healthy nodes again
            chosen = set(idle[:v.group_nodes])
            idle = idle[v.group_nodes:]
            acts.append(Action("relaunch", group=i, nodes=tuple(x for x in v.allocation if x in chosen),
                               reason=f"group {i} back: {v.group_nodes} idle healthy node(s)"))
        elif g.nodes and g.rc not in (None, 0) and g.since_exit_s >= EXIT_GRACE_S:
            acts.append(Action("restart", group=i, nodes=g.nodes,
                               reason=f"group {i}'s step failed (exit {g.rc}) and no node of it is faulty"))
    return acts


def running_groups(groups: Sequence[Group]) -> int:
    return sum(1 for g in groups if g.nodes and g.rc is None)


def _why(faults: Mapping[str, str], nodes: Sequence[str]) -> str:
    return "; ".join(f"{x}: {faults[x]}" for x in nodes)

