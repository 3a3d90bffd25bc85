"""The recovery policy a site runs, built from the features it turns on and the figures it measured.

Each kind of fault takes the way back the product would take (docs/planning.md, "The slurm-ft policy"):

  a GPU fault (crash) that takes its node, with a hot spare left and not on the batch host:
      in the allocation: `slurm-ft watch` drains the node, the job's supervisor sees it, stops the step
      and launches it again on a hot spare (no requeue)
  the same on the batch host, or with no hot spare left: requeue + swap: the controller quarantines the
      node, swaps a pool spare in and requeues the job; StartTime=now clears Slurm's requeue delay
  a hang: the hang timeout and the supervisor's checks; a culprit takes one of the two ways above, none
      restarts the step in place. Without hang detection, the collective timeout ends the step
  a lost host: the first of what the product sees: Slurm's ping marks it NOT_RESPONDING (the supervisor
      acts at once, the controller after its grace), SlurmdTimeout marks it DOWN, or the step fails when
      the collective times out
  a software fault (no node to blame): slurm-ft does not restart it; the job ends (with a supervisor,
      after its grace for a node fault to show) and Slurm requeues it (RequeueExit), with its delay

Without a feature, the way Slurm alone goes: ranks left waiting on a dead peer hold the job until the
collective timeout, a health check drains the node after half its interval, a person swaps a spare in,
and the requeued job waits Slurm's requeue delay. Every time comes from a Figures (plan/figures.py):
measured on the lab, configured, or stated, each with its source. Pure.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

from slurm_ft.errors import UsageError
from slurm_ft.plan.figures import Figures
from slurm_ft.plan.profiles import Policy, Route

# The waterfall's levers, in the order they are added: slurm-ft's own, then those the job must bring
# (waterfall_verdict reads the rows in this order).
ORDER = ("fast_detection", "requeue_now", "spare_swap", "hot_spares", "hang_detection", "planned_swaps",
         "async_checkpoint", "replica_groups")
SHIPPED = ("fast_detection", "requeue_now", "spare_swap", "hot_spares", "hang_detection", "planned_swaps")
JOBS_OWN = ("async_checkpoint",)        # exists today, in the job (PyTorch DCP async_save), not in slurm-ft
WITH_THE_JOB = ("replica_groups",)      # slurm-ft's (`--replica-groups`), for a job written as torchft groups
LABELS = {
    "fast_detection": "fast detection (watcher drains, controller requeues)",
    "requeue_now": "requeue now (StartTime=now)",
    "spare_swap": "spare swap (the controller's)",
    "hot_spares": "hot spares (relaunch in the allocation)",
    "hang_detection": "hang detection (--hang-timeout + checks)",
    "async_checkpoint": "async checkpoint (blocks for the copy to host)",
    "planned_swaps": "planned swaps (failing GPU swapped at a save)",
    "replica_groups": "replica groups (a fault stops one group)",
}


def ships(lever: str) -> str:
    """Who ships a lever: slurm-ft, the job (its framework), slurm-ft with the job's framework, or nobody yet."""
    return ("slurm-ft" if lever in SHIPPED else "the job" if lever in JOBS_OWN
            else "slurm-ft + the job" if lever in WITH_THE_JOB else "not yet")


@dataclass(frozen=True)
class Features:
    fast_detection: bool = False
    requeue_now: bool = False
    spare_swap: bool = False
    hot_spares: int = 0
    hang_timeout_s: Optional[float] = None
    async_checkpoint: bool = False
    planned_swap_share: float = 0.0     # the share of node-taking GPU faults swapped ahead (soft signals)
    replica_groups: int = 1
    expedite: bool = False              # Slurm >= 25.11 `--requeue=expedite`: Slurm's own requeue delay is 0

    @property
    def supervisor(self) -> bool:
        """The job runs under slurm-ft's supervisor (hot spares or hang detection need it)."""
        return self.hot_spares > 0 or self.hang_timeout_s is not None

    def on(self) -> List[str]:
        out = [k for k in ("fast_detection", "requeue_now", "spare_swap") if getattr(self, k)]
        if self.hot_spares:
            out.append(f"hot_spares={self.hot_spares}")
        if self.hang_timeout_s is not None:
            out.append(f"hang_timeout={self.hang_timeout_s:g}s")
        if self.async_checkpoint:
            out.append("async_checkpoint")
        if self.planned_swap_share:
            out.append(f"planned_swaps={self.planned_swap_share:g}")
        if self.replica_groups > 1:
            out.append(f"replica_groups={self.replica_groups}")
        if self.expedite:
            out.append("expedite")
        return out


SLURM_ALONE = Features()


def with_lever(x: Features, lever: str, f: Figures) -> Features:
    """`x` with one more lever on, at the setting the figures' `levers` section states."""
    if lever == "hot_spares":
        return replace(x, hot_spares=x.hot_spares or int(f.s("hot_spares")))
    if lever == "hang_detection":
        return replace(x, hang_timeout_s=x.hang_timeout_s if x.hang_timeout_s is not None else f.s("hang_timeout_s"))
    if lever == "planned_swaps":
        return replace(x, planned_swap_share=x.planned_swap_share or f.s("planned_swap_share"))
    if lever == "replica_groups":
        return replace(x, replica_groups=x.replica_groups if x.replica_groups > 1 else int(f.s("replica_groups")))
    if lever in ("fast_detection", "requeue_now", "spare_swap", "async_checkpoint"):
        return replace(x, **{lever: True})
    raise UsageError(f"unknown lever {lever!r} (known: {', '.join(ORDER)})")


@dataclass(frozen=True)
class JobCosts:
    """What the job itself costs at a restart and at a save, in seconds (plan/jobcost.py derives them)."""
    nodes: int                      # training nodes (N; hot spares are held on top)
    init_s: float                   # each rank's own start before the checkpoint load
    load_s: float                   # loading the checkpoint
    sync_blocking_s: float          # a synchronous save blocks training this long
    async_blocking_s: float         # an asynchronous save: the copy to host memory
    async_write_s: float            # ... then written in the background this long
    restart_override_s: Optional[float] = None      # --restart-s: one restart time for every way back

    def blocking(self, asynchronous: bool) -> Tuple[float, float]:
        """(blocking seconds, background write seconds) of one save."""
        return (self.async_blocking_s, self.async_write_s) if asynchronous else (self.sync_blocking_s, 0.0)


@dataclass(frozen=True)
class Restarts:
    requeued: float             # the requeued job RUNNING -> computing again
    relaunched: float           # the step launched again inside the allocation -> computing again


def restarts(f: Figures, job: JobCosts) -> Restarts:
    """Launch (the lab's measured curve at the job's node count) + the job's own start + the checkpoint load."""
    if job.restart_override_s is not None:
        return Restarts(job.restart_override_s, job.restart_override_s)
    own = job.init_s + job.load_s
    return Restarts(f.curve("restart_launch_s").at(job.nodes) + own, f.curve("relaunch_s").at(job.nodes) + own)


def startup(f: Figures, job: JobCosts, supervised: bool) -> float:
    """The job's first start to its first step (launch + each rank's own start; nothing to load), as
    `slurm-ft status --job` counts it: from the batch step's start (a requeued job's launch), or, under
    the supervisor, from its first launch of the step (a relaunch's)."""
    return f.curve("relaunch_s" if supervised else "restart_launch_s").at(job.nodes) + job.init_s


def build(x: Features, f: Figures, job: JobCosts, name: str = "slurm-ft") -> Policy:
    """The policy (a Route per kind of fault and need of a node) a site with features `x` runs."""
    if x.hot_spares < 0 or x.replica_groups < 1 or not 0 <= x.planned_swap_share <= 1:
        raise UsageError("hot spares >= 0, replica groups >= 1, a planned-swap share between 0 and 1")
    if x.hang_timeout_s is not None and not x.hang_timeout_s > 0:
        raise UsageError(f"--hang-timeout must be positive, got {x.hang_timeout_s:g}")
    rs = restarts(f, job)
    delay = 0.0 if x.expedite else f.s("requeue_delay_s")
    n = job.nodes
    pending, start_now = f.curve("requeue_to_pending_s").at(n), f.s("start_now_s")
    running = f.curve("schedule_to_running_s").at(n)
    collective = f.s("collective_timeout_s")
    half_check = f.s("health_check_interval_s") / 2
    manual = f.s("manual_swap_s")
    slurmd = f.s("slurmd_timeout_s")
    # Slurm pings a host every SlurmdTimeout/3; a lost one fails the next ping after MessageTimeout:
    # NOT_RESPONDING half a ping interval after the loss, on average
    ping_seen = slurmd / 3 / 2 + f.s("message_timeout_s")
    # Slurm's own requeue (the job exited, RequeueExit; or Slurm requeued it for a DOWN node): the epilogs
    # run while the delay counts, then the job is scheduled and its prologs run
    slurm_requeue = max(pending, delay) + running
    # slurm-ft's controller: requeue issued (quarantine, swap inside), then the epilogs; StartTime=now
    # clears the delay where `requeue_now`, else Slurm's delay still holds the job
    ctl = f.s("controller_requeue_s")
    ctl_requeue = ctl + (pending + start_now if x.requeue_now else max(pending, delay)) + running
    drained = f.s("detect_drain_s") if x.fast_detection else half_check      # the node drained
    # a person swaps a spare in once the node shows drained (or DOWN), side by side with the requeue
    def manual_swap(detect_s: float, shown_s: float) -> float:
        return 0.0 if x.spare_swap else max(0.0, shown_s + manual - detect_s)

    routes: Dict[str, Route] = {}
    # a GPU fault: ranks on the dead GPU die, the others wait in the collective
    if x.fast_detection:
        d = drained
        routes["crash/swap"] = Route(d, ctl_requeue, manual_swap(d, d), rs.requeued, True, "crash/swap")
    else:
        routes["crash/swap"] = Route(collective, slurm_requeue, manual_swap(collective, half_check), rs.requeued,
                                     True, "crash/swap")
    # a software fault: nothing to drain; a supervised step ends at once (srun --kill-on-bad-exit) and the
    # supervisor waits its grace for a node fault before it ends the job; Slurm requeues it
    soft = f.s("exit_grace_s") if x.supervisor else collective
    routes["crash/keep"] = Route(soft, slurm_requeue, 0.0, rs.requeued, True, "crash/keep")
    # a lost host: the first of NOT_RESPONDING (the controller after its grace), DOWN, the step's failure
    if x.fast_detection:
        d = min(slurmd, ping_seen + f.s("unresponsive_grace_s"), collective)
        routes["node/swap"] = Route(d, ctl_requeue, manual_swap(d, d), rs.requeued, True, "node/swap")
    else:
        d = min(slurmd, collective)
        routes["node/swap"] = Route(d, slurm_requeue, manual_swap(d, slurmd), rs.requeued, True, "node/swap")
    routes["node/keep"] = replace(routes["node/swap"], swap_s=0.0, name="node/keep")
    # a hang: the hang timeout + the checks, or the collective timeout
    if x.hang_timeout_s is not None:
        d = x.hang_timeout_s + f.s("hang_check_s")
        # a culprit: drained by the checks, the controller requeues (or the hot spares absorb it, below)
        routes["hang/swap"] = Route(d, ctl_requeue if x.fast_detection else slurm_requeue,
                                    manual_swap(d, d), rs.requeued, True, "hang/swap")
        # no culprit: the supervisor restarts the step in place, from the latest checkpoint
        routes["hang/keep"] = Route(d, f.s("stop_step_s"), 0.0, rs.relaunched, False, "hang/keep")
    else:
        # nothing names the node behind a stalled collective: a person finds and swaps it
        routes["hang/swap"] = Route(collective, slurm_requeue, manual, rs.requeued, True, "hang/swap")
        routes["hang/keep"] = Route(collective, slurm_requeue, 0.0, rs.requeued, True, "hang/keep")

    inalloc: Dict[str, Route] = {}
    if x.hot_spares:
        stop = f.s("stop_step_s")
        seen = drained + f.s("supervisor_sees_s")
        inalloc["crash/swap"] = Route(seen, stop, 0.0, rs.relaunched, False, "crash/swap")
        # the supervisor takes NOT_RESPONDING for a fault at once
        inalloc["node/swap"] = Route(min(slurmd, ping_seen, collective), stop, 0.0, rs.relaunched, False,
                                     "node/swap")
        if x.hang_timeout_s is not None:
            inalloc["hang/swap"] = Route(routes["hang/swap"].detect_s, stop, 0.0, rs.relaunched, False, "hang/swap")

    crash = routes["crash/swap"]
    return Policy(name, crash.detect_s, routes["node/swap"].detect_s, routes["hang/keep"].detect_s,
                  max(crash.sched_s, crash.swap_s), 0.0, None,
                  source=f"built from {', '.join(x.on()) or 'no slurm-ft feature (Slurm alone)'}; figures from "
                         f"{', '.join(f.files)}",
                  routes=routes, in_allocation=inalloc or None, hot_spares=x.hot_spares,
                  planned_share=x.planned_swap_share, replica_groups=x.replica_groups, levers=tuple(x.on()))


def describe(p: Policy, restart: float) -> List[Tuple[str, str, float, float, float, float, bool]]:
    """(key, way, detect, sched, swap, restart, requeued) per route of a built policy, for the output."""
    out = []
    for key in ("crash/swap", "crash/keep", "node/swap", "hang/swap", "hang/keep"):
        r = p.route(*_split(key))
        out.append((key, "requeue" if r.requeue else "in place", r.detect_s, r.sched_s, r.swap_s,
                    r.restart_s if r.restart_s is not None else restart, r.requeue))
        a = p.absorbed(*_split(key))
        if a is not None:
            out.append((key, "in allocation", a.detect_s, a.sched_s, a.swap_s,
                        a.restart_s if a.restart_s is not None else restart, a.requeue))
    return out


def _split(key: str) -> Tuple[str, bool]:
    kind, need = key.split("/")
    return kind, need == "swap"
