"""The hot-spare supervisor's decisions, pure: what the job's own allocation looks like now -> what to do.

A job submitted with `slurm-ft sbatch --hot-spares K -N N` holds N + K nodes. Its batch step (the
supervisor, supervisor.py) runs the training step on N of them and keeps K idle. On every poll it hands
`decide` a View (the allocation and each node's fault as Slurm shows it, the step's nodes and exit
status) and carries out the Action it gets back. No subprocess and no clock here: times come in.

Paths (docs/jobs.md, "Hot spares"):
  relaunch  a node of the step failed and N healthy nodes remain in the allocation: stop the step,
            give every failed node of the allocation back to Slurm (shrink the job) so it can be
            repaired, then start the step again on N healthy nodes from the latest complete checkpoint.
            The shrink happens only while no step runs: Slurm 22.05 cannot free the resources of a
            step that was running across a resize ("unable to update job's core use information due
            to job resizing", "gres/gpu: dealloc count underflow"), and the next step then waits
            forever on "Requested nodes are busy" (seen in the lab). Only nodes the controller has
            quarantined already leave (they left the job's partition: it saw the fault in the job and
            journaled it); the others stay in the job, unused, until the next relaunch. Slurm may
            refuse the shrink: 22.05 without accounting storage refuses every update of a job already
            resized once ("the DB index is being set", after ~5 s of slurmctld's own retries); the
            supervisor then stops trying until the job is requeued. A failed idle hot spare is left
            out of every launch and given back at the next relaunch.
  fallback  fewer than N healthy nodes, or the batch host itself failed: stop the step and leave the
            failed nodes in the job, so the controller sees them and takes the requeue path
  exit      the step ended with no node to blame: the job ends with the step's exit status
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Sequence, Tuple

from slurm_ft.job.paths import can_relaunch

# A step that failed may have failed *because* a node is going bad before slurm-ft drained it (the
# watcher drains within a second of a fatal Xid; a health check may take longer, and on the lab's 2 cores
# at load 120 the watcher's drain came 12-31 s after the Xid): wait this long for Slurm to show a node
# fault before the job ends on the step's exit status (still far below NCCL's 600 s timeout).
EXIT_GRACE_S = 60.0
# A training step that exits with this status says "do not restart me" (a bad config, a diverged run:
# a restart cannot help). 78 is sysexits' EX_CONFIG. The job ends with it, whatever else failed.
EXIT_DO_NOT_RESTART = 78
# The supervisor's own end when the step hung again with max_restarts used up (sysexits' EX_TEMPFAIL:
# not the job's fault).
EXIT_RESTART_LIMIT = 75
# Ends no one may restart: the controller leaves a job with one of these as its last exit status alone,
# also when Slurm requeued it itself (>= 25.11, expedite: any non-zero exit is requeued held).
FINAL_EXITS = frozenset({EXIT_DO_NOT_RESTART, EXIT_RESTART_LIMIT})
# A relaunch gives the failed nodes back (a read of the partitions where no quarantine notice came, the
# shrink) within this: both are RPCs of the job's user, which a loop of theirs that keeps their bucket
# empty can hold for minutes; past it the nodes stay in the job, unused, until a later relaunch.
GIVE_BACK_S = 15.0


@dataclass(frozen=True)
class View:
    allocation: Tuple[str, ...]          # the job's nodes now, in Slurm's order
    faults: Mapping[str, str]            # node -> why it counts as failed (nodefault), failed nodes only
    batch_host: str
    train_nodes: int                     # N
    step_nodes: Tuple[str, ...] = ()     # the running (or just ended) step's nodes; () = none launched
    step_rc: Optional[int] = None        # None while the step runs
    since_exit_s: float = 0.0            # how long ago the step ended (when step_rc is set)
    avoid: Mapping[str, str] = field(default_factory=dict)   # degraded nodes off the step (job/planned.py):
                                         # never picked, given back at a relaunch, no reason for one


@dataclass(frozen=True)
class Action:
    kind: str                            # wait, launch, relaunch, fallback, exit; restart (a hang, supervisor.py)
    nodes: Tuple[str, ...] = ()          # launch/relaunch: where the step runs next
    release: Tuple[str, ...] = ()        # relaunch: nodes to give back to Slurm first (shrink the job)
    failed: Tuple[str, ...] = ()         # the step's failed nodes (relaunch, fallback)
    rc: Optional[int] = None             # exit
    reason: str = ""


def pick(allocation: Sequence[str], faults: Mapping[str, str], n: int,
         prefer: Sequence[str] = ()) -> Optional[Tuple[str, ...]]:
    """N healthy nodes of the allocation, or None. The step's surviving nodes first (their page cache
    holds the checkpoint), then the idle ones, each in allocation order."""
    healthy = [x for x in allocation if x not in faults]
    if len(healthy) < n:
        return None
    keep = [x for x in healthy if x in prefer]
    rest = [x for x in healthy if x not in prefer]
    chosen = set((keep + rest)[:n])
    return tuple(x for x in allocation if x in chosen)


def first_launch(allocation: Sequence[str], faults: Mapping[str, str], n: int) -> Action:
    nodes = pick(allocation, faults, n)
    if nodes is None:
        return Action("fallback", failed=tuple(x for x in allocation if x in faults),
                      reason=f"{len(allocation) - len(faults)} healthy node(s) in the allocation, {n} needed")
    return Action("launch", nodes=nodes, reason=f"{n} of {len(allocation)} nodes; "
                                               f"{len(allocation) - n} hot spare(s) held")


def decide(v: View) -> Action:
    """The next action; `wait` when there is nothing to do until the next poll."""
    if v.batch_host in v.faults:          # the rule is paths.py's: the controller reads the same
        return Action("fallback", failed=tuple(x for x in v.allocation if x in v.faults),
                      reason=f"the batch host {v.batch_host} failed ({v.faults[v.batch_host]})")
    if v.step_rc == EXIT_DO_NOT_RESTART:
        return Action("exit", rc=v.step_rc, reason=f"the training step exited {EXIT_DO_NOT_RESTART}: do not restart")
    step_failed = tuple(x for x in v.step_nodes if x in v.faults)
    if not step_failed:
        if v.step_rc is None:
            return Action("wait")     # a failed idle hot spare: left out of launches, given back at the next
        if v.step_rc == 0:
            return Action("exit", rc=0, reason="the training step completed")
        if v.since_exit_s < EXIT_GRACE_S:
            return Action("wait", reason=f"step exited {v.step_rc}: waiting {EXIT_GRACE_S:g} s for a node fault")
        return Action("exit", rc=v.step_rc, reason=f"the training step failed (exit {v.step_rc}) and no node of "
                                                   f"it is faulty")
    out = {**v.avoid, **v.faults}
    nodes = pick(v.allocation, out, v.train_nodes, prefer=v.step_nodes)
    if nodes is None and v.avoid:      # a degraded node still beats no relaunch at all
        nodes = pick(v.allocation, v.faults, v.train_nodes, prefer=v.step_nodes)
        out = dict(v.faults)
    if nodes is None or not can_relaunch(v.allocation, v.faults, v.batch_host, v.train_nodes):
        return Action("fallback", failed=step_failed,
                      reason=f"hot spares used up: {len(v.allocation) - len(v.faults)} healthy node(s) left, "
                             f"{v.train_nodes} needed; " + _why(v.faults, step_failed))
    return Action("relaunch", nodes=nodes, failed=step_failed,
                  release=tuple(x for x in v.allocation if x in out and x not in nodes and x != v.batch_host),
                  reason=_why(v.faults, step_failed))


def refuses_resize(error: str) -> bool:
    """Slurm's answer to a shrink it will keep refusing until the job is requeued (22.05, no accounting)."""
    return "DB index is being set" in error


def _why(faults: Mapping[str, str], nodes: Sequence[str]) -> str:
    return "; ".join(f"{x}: {faults[x]}" for x in nodes)


def env_after_shrink(env: Mapping[str, str], nodelist: str, count: int) -> Dict[str, str]:
    """The batch step's SLURM_* variables after its job shrank to `count` nodes (`nodelist`), as
    the resize script `scontrol update NodeList=` writes (22.05, 24.11) says: new node list and counts,
    the per-node CPU count kept, the task counts dropped (srun would refuse the old ones)."""
    out = dict(env)
    out.update({"SLURM_NODELIST": nodelist, "SLURM_JOB_NODELIST": nodelist,
                "SLURM_NNODES": str(count), "SLURM_JOB_NUM_NODES": str(count)})
    cpus = _uniform_cpus(env.get("SLURM_JOB_CPUS_PER_NODE", ""))
    if cpus is not None:
        out["SLURM_JOB_CPUS_PER_NODE"] = f"{cpus}(x{count})" if count > 1 else cpus
    for key in ("SLURM_NPROCS", "SLURM_NTASKS", "SLURM_TASKS_PER_NODE"):
        out.pop(key, None)
    return out


def _uniform_cpus(text: str) -> Optional[str]:
    """'8(x3)' or '8' -> '8'; a mixed list ('8(x2),4') -> None (left as Slurm set it)."""
    head = text.split("(", 1)[0]
    if not head.isdigit() or "," in text:
        return None
    return head
