"""Discrete-event simulation of one synchronous training job on a cluster with a spare pool.

Model (every choice here is printed with the results):
- Faults hit the job's GPUs as one Poisson process of rate (profile interruptions per GPU-second) x GPUs
  over the whole elapsed time; each fault's class is drawn with the profile's class counts as weights,
  and whether it needs a node swap with the class's `replace` share (true = always, false = never).
  One process for the whole job, not one timer per node: the same law, and ~1 event per interruption.
- A fault stops the job. A hardware fault (a class that needs a node swap) counts even during a recovery,
  since the job holds its nodes; a software fault (no swap) only while the job runs. Each fault takes the
  way back the policy gives its kind and need of a node (profiles.Route; plan/levers.py builds them from
  a site's features): detection, then the scheduling (requeue delay, epilogs, prologs; or stopping the
  step) and, for a fault that takes its node, a spare (swap_s) side by side, then the restart. A job
  with K hot spares meets a node-taking fault inside its allocation while one is left and the node is
  not the batch host (drawn: 1 in n); a requeue refills them. A fault that lands during a recovery starts
  its own; the job resumes when the later one is done, and time is charged once.
- The failed node goes to repair for a time drawn from an exponential (or fixed) distribution of mean
  `repair_hours`, then back to the pool. An empty pool makes the job wait for the first node back
  ("pool exhaustion"), or, for an elastic job above its minimum, run on fewer nodes at proportionally
  lower throughput until a later recovery finds spares again (regrowing costs no extra restart then).
- While running, the job checkpoints after every `ckpt_interval_s` of compute, blocking `ckpt_cost_s`;
  an asynchronous save then writes for `ckpt_persist_s` in the background. A fault loses the compute
  since the last written checkpoint (one being saved or written does not count yet).
- Planned swaps: a share of node-taking GPU faults is swapped at a checkpoint written through, before it
  fails: no detection, no work lost. Replica groups: a fault stops one of R groups for its way back; the
  others train on (1/R of the compute missing meanwhile), and no work is lost.
- Every second of the elapsed time is charged to exactly one of: useful, checkpointing, lost work,
  detection, scheduling (requeue delay and swap), waiting for spares, restart, shrunk (capacity missing
  while elastic, or a replica group out), so the causes add up to the elapsed time and ETTR = useful /
  elapsed.
`replay` takes a given schedule of faults through the same ways back, without drawing anything.
Pure: seeded `random.Random` streams (faults; repairs; which node; planned), no clock.
"""
from __future__ import annotations

import heapq
import math
import random
import statistics
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import Any, Dict, List, Optional, Sequence, Tuple, TypedDict

from slurm_ft.errors import UsageError
from slurm_ft.plan.profiles import KINDS, Policy, Profile, Route

CAUSES = ("checkpointing", "lost_work", "detection", "scheduling", "waiting_for_spares", "restart", "shrunk")
DEFAULT_RESTART_S = 180.0       # relaunch every rank, NCCL init, load the checkpoint
DEFAULT_CKPT_COST_S = 10.0      # blocking part of a save (two-stage async: the copy to host memory)


@dataclass(frozen=True)
class SimParams:
    gpus: int
    gpus_per_node: int
    days: float
    spares: int
    repair_hours: float
    ckpt_interval_s: float
    ckpt_cost_s: float = DEFAULT_CKPT_COST_S
    restart_s: float = DEFAULT_RESTART_S
    repair_dist: str = "exp"            # exp | fixed
    elastic_min_nodes: Optional[int] = None   # None: the job waits for a full set of nodes
    ckpt_persist_s: float = 0.0         # asynchronous saves: the background write after the blocking copy;
                                        # a checkpoint counts (a fault resumes from it) once it is written

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node

    def check(self) -> None:
        if self.gpus <= 0:
            raise UsageError(f"--gpus must be positive, got {self.gpus}")
        if self.gpus_per_node <= 0 or self.gpus % self.gpus_per_node:
            raise UsageError(f"--gpus {self.gpus} is not a multiple of --gpus-per-node {self.gpus_per_node}")
        for name, v, zero_ok in (("--days", self.days, False), ("--repair-hours", self.repair_hours, True),
                                 ("--checkpoint-interval", self.ckpt_interval_s, False),
                                 ("--checkpoint-cost-s", self.ckpt_cost_s, True),
                                 ("--restart-s", self.restart_s, True),
                                 ("the background write of a save", self.ckpt_persist_s, True)):
            if not math.isfinite(v) or v < 0 or (v == 0 and not zero_ok):
                raise UsageError(f"{name} must be {'zero or more' if zero_ok else 'positive'}, got {v}")
        if self.spares < 0:
            raise UsageError(f"--spares must be zero or more, got {self.spares}")
        if self.repair_dist not in ("exp", "fixed"):
            raise UsageError(f"--repair-dist must be exp or fixed, not {self.repair_dist!r}")
        if self.elastic_min_nodes is not None and not (0 < self.elastic_min_nodes <= self.nodes):
            raise UsageError(f"--elastic-min-nodes must be between 1 and the job's {self.nodes} nodes")
        if self.ckpt_persist_s > self.ckpt_interval_s:
            raise UsageError(f"the checkpoint interval ({self.ckpt_interval_s:g} s) is shorter than a save's background "
                             f"write ({self.ckpt_persist_s:g} s): the asynchronous saves cannot keep up")


@dataclass
class SimResult:
    seed: int
    elapsed_s: float
    useful_s: float
    lost_s: Dict[str, float]
    interruptions: int
    by_class: Dict[str, int]
    by_kind: Dict[str, int]
    replacements: int
    pool_exhaustions: int           # swaps that found the pool empty and waited
    shrinks: int                    # elastic: recoveries that went on with fewer nodes
    max_in_repair: int
    min_pool: int
    checkpoints: int
    by_path: Dict[str, int] = field(default_factory=dict)    # interruptions by the way back the job took

    @property
    def ettr(self) -> float:
        return self.useful_s / self.elapsed_s

    def to_dict(self) -> Dict[str, Any]:
        return {"seed": self.seed, "ettr": self.ettr, "interruptions": self.interruptions,
                "elapsed_hours": self.elapsed_s / 3600, "useful_hours": self.useful_s / 3600,
                "lost_hours_by_cause": {k: v / 3600 for k, v in self.lost_s.items()},
                "interruptions_by_class": self.by_class, "interruptions_by_kind": self.by_kind,
                "interruptions_by_path": self.by_path,
                "replacements": self.replacements, "pool_exhaustion_events": self.pool_exhaustions,
                "shrink_events": self.shrinks, "max_nodes_in_repair": self.max_in_repair,
                "min_spares_in_pool": self.min_pool, "checkpoints": self.checkpoints}


@dataclass(frozen=True)
class SimFault:
    """One interruption as the simulation met it, in seconds from the start (see `simulate(faults=...)`)."""
    at: float                       # the fault
    detected: float
    cls: str                        # the profile's class name
    kind: str
    swap: bool                      # took a node out: it went to repair
    repaired: Optional[float]       # when that node came back from repair (swap only)
    resumed: float                  # the job computing again (the end of this recovery)
    path: str = ""                  # the way back: requeue, in allocation, in place, planned, replica group


# The ways back, as SimResult.by_path names them
PATHS = ("requeue", "in allocation", "in place", "planned", "replica group")


def simulate(profile: Profile, policy: Policy, p: SimParams, seed: int = 0,
             faults: Optional[List[SimFault]] = None) -> SimResult:
    """One seeded run; with `faults` (a list) each interruption is also appended to it, in time order."""
    p.check()
    if p.elastic_min_nodes is not None and policy.hot_spares:
        raise UsageError("an elastic job (--elastic-min-nodes) with hot spares is not modelled: give one of them")
    # Streams: fault times and classes; repair times; which node a fault hits (the batch host or not) and
    # whether a fault is announced early (planned swaps). Each is drawn only where it matters, from its own
    # stream, so every policy run with one seed meets the same faults at the same moments (common random
    # numbers: comparisons need fewer seeds).
    rng = random.Random(seed)
    rng_repair = random.Random(f"repair-{seed}")
    rng_path = random.Random(f"path-{seed}")
    rng_plan = random.Random(f"plan-{seed}")
    T = p.days * 86400.0
    rate = profile.rate_per_gpu_s() * p.gpus
    classes = profile.classes
    cum = list(accumulate(c.count for c in classes))
    total_w = cum[-1]
    restart = policy.restart_s if policy.restart_s is not None else p.restart_s
    tau, delta = p.ckpt_interval_s, p.ckpt_cost_s
    persist = p.ckpt_persist_s
    cycle = tau + delta
    repair_mean = p.repair_hours * 3600.0
    n = p.nodes

    # The loop is the whole cost (100,000 GPUs x 365 days: ~17,000 faults a seed): every route is looked
    # up once per class into flat tuples, the helpers are inlined and each cause is a local float.
    def flat(r: Route) -> Tuple[float, float, float, float, bool, float]:
        return (r.detect_s, r.sched_s, r.swap_s, r.restart_s if r.restart_s is not None else restart, r.requeue,
                max(r.sched_s, r.swap_s))

    # The ways back, 4 per class: index 4 * class + 2 * (the fault takes its node) + (inside the allocation);
    # the in-allocation one is None where the policy has none for that kind.
    ways: List[Tuple[float, float, float, float, bool, float]] = []
    can: List[bool] = []            # the way exists (an in-allocation one may not: then never chosen)
    for c in classes:
        for sw in (False, True):
            ways.append(flat(policy.route(c.kind, sw)))
            absorbed_way = policy.absorbed(c.kind, sw)
            ways.append(flat(absorbed_way if absorbed_way is not None else Route(0.0, 0.0)))
            can += [True, absorbed_way is not None]
    fast = [0] * len(ways)          # faults of each way met while running, with nothing to clip: charged at the end
    reps = [c.replace for c in classes]
    plannable = [c.kind == "crash" for c in classes]     # a GPU's own signals can announce it, not a lost host
    plan_share = policy.planned_share
    K = policy.hot_spares
    R = policy.replica_groups
    rep_exp = p.repair_dist == "exp" and repair_mean > 0
    elastic_min = p.elastic_min_nodes
    rnd, rnd_repair, rnd_path, rnd_plan = rng.random, rng_repair.random, rng_path.random, rng_plan.random
    log, push, pop = math.log, heapq.heappush, heapq.heappop
    l_ckpt = l_lost = l_shrunk = l_det = l_wait = l_sched = l_restart = 0.0   # l_ckpt: besides whole saves
    useful = 0.0
    degraded = 0.0                  # replica groups: job-seconds of one group missing while it recovers
    group_end = [0.0] * R           # when each group is back
    checkpoints = 0
    class_hits = [0] * len(classes)
    path_hits = [0] * len(PATHS)    # the ways of the faults charged in the loop (the others: from `fast`)
    pool = p.spares
    repairs: List[float] = []       # heap of times nodes come back from repair
    missing = 0                     # nodes an elastic job runs without
    hot_left = K                    # hot spares the job still holds
    owed = 0                        # nodes its partition lacks: in-allocation faults the pool could not refill
    replacements = exhaustions = shrinks = 0
    max_in_repair, min_pool = 0, pool
    up_since = 0.0                  # when the job last started computing
    busy_until = 0.0                # end of the recovery in progress (<= up_since when running)

    def run_segment(a: float, b: float, failed: bool) -> None:
        """Account compute from a to b at the current size; `failed`: stopped by a fault."""
        nonlocal useful, checkpoints, l_ckpt, l_lost, l_shrunk
        e = b - a
        k = int(e // cycle)
        rem = e - k * cycle
        work = k * tau
        checkpoints += k
        wasted = 0.0
        if rem <= tau:
            wasted, tail = (rem, 0.0) if failed else (0.0, rem)
        else:
            wasted, tail = (tau, 0.0) if failed else (0.0, tau)
            l_ckpt += rem - tau
        work += tail
        share = (n - missing) / n
        useful += work * share
        l_lost += wasted * share
        l_shrunk += (work + wasted) * (1 - share)

    t = 0.0
    while True:
        t += -log(1.0 - rnd()) / rate           # rng.expovariate(rate), inlined
        if t >= T:
            break
        ci = bisect_right(cum, rnd() * total_w)
        swap = rnd() < reps[ci]                 # drawn for every fault, so the streams stay in step
        running = t >= busy_until
        if not running and not swap:
            continue        # a software fault needs the job's processes: none run during a recovery
        class_hits[ci] += 1
        wi = 4 * ci + 2 * swap
        planned = plan_share and swap and running and plannable[ci] and rnd_plan() < plan_share
        absorbed = False
        if hot_left and can[wi + 1] and rnd_path() * n >= 1:    # not the batch host: its loss
            wi += 1                                                             # ends the allocation
            absorbed = True
            hot_left -= 1
        det, sched, swap_s, rest, requeue, m = ways[wi]
        if planned:
            det = delta + persist       # a save, written through, then the swap: no work lost
        if running and R == 1:     # run_segment(up_since, t, True), inlined: the hot path
            e = t - up_since
            k = int(e // cycle)
            rem = e - k * cycle
            work = k * tau
            checkpoints += k
            if rem <= tau:
                wasted = rem
                if k and rem < persist:     # the latest save is still being written: resume from the one before
                    wasted += tau
                    work -= tau
            else:
                wasted = tau
                l_ckpt += rem - tau
            if planned:
                work += wasted
                wasted = 0.0
            if missing:
                share = (n - missing) / n
                useful += work * share
                l_lost += wasted * share
                l_shrunk += (work + wasted) * (1 - share)
            else:
                useful += work
                l_lost += wasted
        t_det = t + det
        while repairs and repairs[0] <= t_det:  # nodes back from repair
            pop(repairs)
            pool += 1
        if swap:
            replacements += 1
            back = t_det + (-log(1.0 - rnd_repair()) * repair_mean if rep_exp else repair_mean)
            push(repairs, back)
            if len(repairs) > max_in_repair:
                max_in_repair = len(repairs)
        else:
            back = None
        wait_end = t_det
        if absorbed:            # the job runs on: the controller refills its partition when the pool can
            ready = t_det + sched
            if pool > 0:
                pool -= 1
            else:
                owed += 1
            exact = True
        elif swap or (owed and requeue):        # a node for the job: the pool's (and the ones owed)
            need = swap + owed if requeue else 1
            if requeue:
                owed = 0
                hot_left = K    # a requeued job asks for its N + K nodes again
            if pool >= need:            # the common case
                pool -= need
                ready = t_det + m
                exact = True
            else:
                exact = False
                need -= pool
                pool = 0
                ready = t_det + sched
                if elastic_min is not None and n - missing - need >= elastic_min:
                    missing += need
                    shrinks += 1
                else:
                    exhaustions += 1
                    while need:
                        back_one = pop(repairs)
                        if back_one > wait_end:
                            wait_end = back_one
                        need -= 1
                    if wait_end + swap_s > ready:
                        ready = wait_end + swap_s
        else:
            ready = t_det + sched
            exact = True
            if requeue:
                hot_left = K
        if missing:
            while missing and pool > 0:         # an elastic job takes back what it lacks, at no extra cost
                pool -= 1
                missing -= 1
        if pool < min_pool:
            min_pool = pool
        end = ready + rest
        if R > 1:       # one group of R recovers; the others train on
            g = int(rnd_path() * R)
            a = t if t > group_end[g] else group_end[g]     # a group's own down times do not overlap
            b = end if end < T else T
            if b > a:
                degraded += (b - a) / R
            if end > group_end[g]:
                group_end[g] = end
            path_hits[4] += 1
            if faults is not None:
                c = classes[ci]
                faults.append(SimFault(t, t_det, c.name, c.kind, swap, back, end, "replica group"))
            continue
        if running and exact and not planned and end <= T:     # the common case: nothing to clip
            fast[wi] += 1
            busy_until = up_since = end
            if faults is not None:
                c = classes[ci]
                faults.append(SimFault(t, t_det, c.name, c.kind, swap, back, end,
                                       PATHS[1 if absorbed else 0 if requeue else 2]))
            continue
        # each cause charged for [a, b] clipped to [floor, T]: time before floor is charged already
        floor = t if running else busy_until
        a = t if t > floor else floor
        b = t_det if t_det < T else T
        if b > a:
            if planned:
                l_ckpt += b - a
            else:
                l_det += b - a
        a = t_det if t_det > floor else floor
        b = wait_end if wait_end < T else T
        if b > a:
            l_wait += b - a
        a = wait_end if wait_end > floor else floor
        b = ready if ready < T else T
        if b > a:
            l_sched += b - a
        a = ready if ready > floor else floor
        b = end if end < T else T
        if b > a:
            l_restart += b - a
        if end > busy_until:
            busy_until = end
            up_since = end
        path_hits[3 if planned else 1 if absorbed else 0 if requeue else 2] += 1
        if faults is not None:
            c = classes[ci]
            faults.append(SimFault(t, t_det, c.name, c.kind, swap, back, busy_until,
                                   PATHS[3 if planned else 1 if absorbed else 0 if requeue else 2]))
    for wi, count in enumerate(fast):       # the fast path's faults, charged by their way
        if count:
            det, sched, swap_s, rest, requeue, m = ways[wi]
            l_det += count * det
            l_sched += count * m
            l_restart += count * rest
            path_hits[1 if wi & 1 else 0 if requeue else 2] += count
    interruptions = sum(class_hits)
    if busy_until < T:
        run_segment(up_since, T, False)
    l_ckpt += checkpoints * delta
    if degraded:        # a missing group's share of the compute (its share of the blocking saves stays there)
        degraded *= tau / cycle
        useful -= degraded
        l_shrunk += degraded
    lost = {"checkpointing": l_ckpt, "lost_work": l_lost, "detection": l_det, "scheduling": l_sched,
            "waiting_for_spares": l_wait, "restart": l_restart, "shrunk": l_shrunk}
    by_class = {c.name: h for c, h in zip(classes, class_hits) if h}
    by_kind = dict.fromkeys(KINDS, 0)
    for c, h in zip(classes, class_hits):
        by_kind[c.kind] += h
    return SimResult(seed, T, useful, lost, interruptions, by_class, by_kind, replacements, exhaustions,
                     shrinks, max_in_repair, min_pool, checkpoints, {k: v for k, v in zip(PATHS, path_hits) if v})


# --- a given schedule of faults -------------------------------------------------------------------------

@dataclass(frozen=True)
class ScheduledFault:
    """One fault of a given schedule: what it is and when, counted from the job's last (re)start."""
    after_s: float          # seconds of training since the job last started computing (its first step)
    kind: str               # crash | node | hang
    swap: bool              # the fault takes its node (it goes to repair)
    batch_host: bool = False    # it hit the node the batch step runs on (no in-allocation way back)
    name: str = ""


@dataclass
class Replayed:
    fault: ScheduledFault
    way: str                # requeue, in allocation, in place
    detect_s: float
    sched_s: float
    swap_s: float
    restart_s: float
    lost_work_s: float
    checkpointing_s: float

    @property
    def recovery_s(self) -> float:
        """Fault -> the job computing again, as `slurm-ft status --job` measures it."""
        return self.detect_s + max(self.sched_s, self.swap_s) + self.restart_s

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.fault.name, "kind": self.fault.kind, "swap": self.fault.swap,
                "batch_host": self.fault.batch_host, "after_s": self.fault.after_s, "way": self.way,
                "detect_s": self.detect_s, "sched_s": self.sched_s, "swap_s": self.swap_s, "restart_s": self.restart_s,
                "recovery_s": self.recovery_s, "lost_work_s": self.lost_work_s, "checkpointing_s": self.checkpointing_s}


def lost_work(after_s: float, p: SimParams) -> Tuple[float, float]:
    """(work lost, blocking saves) when a fault hits `after_s` seconds after the job started computing:
    the same arithmetic as the simulation's (a save being written does not count yet)."""
    tau, delta, persist = p.ckpt_interval_s, p.ckpt_cost_s, p.ckpt_persist_s
    cycle = tau + delta
    k = int(after_s // cycle)
    rem = after_s - k * cycle
    ckpt = k * delta
    if rem <= tau:
        wasted = rem + (tau if k and rem < persist else 0.0)
    else:
        wasted = tau
        ckpt += rem - tau
    return wasted, ckpt


def replay(policy: Policy, p: SimParams, schedule: Sequence[ScheduledFault]) -> List[Replayed]:
    """The way back and the cost of each fault of `schedule`, in order, without drawing anything: the
    hot spares are used up and refilled as in `simulate`, the pool always has a spare (a schedule is short)."""
    p.check()
    restart = policy.restart_s if policy.restart_s is not None else p.restart_s
    hot_left = policy.hot_spares
    out = []
    for f in schedule:
        if f.kind not in KINDS:
            raise UsageError(f"a scheduled fault's kind must be one of {', '.join(KINDS)}, not {f.kind!r}")
        if not (f.after_s >= 0 and math.isfinite(f.after_s)):
            raise UsageError(f"a scheduled fault's after_s must be zero or more, not {f.after_s!r}")
        route = policy.route(f.kind, f.swap)
        way = "requeue" if route.requeue else "in place"
        absorbed = policy.absorbed(f.kind, f.swap) if hot_left and not f.batch_host else None
        if absorbed is not None:
            route, way = absorbed, "in allocation"
            hot_left -= 1
        elif route.requeue:
            hot_left = policy.hot_spares
        wasted, ckpt = lost_work(f.after_s, p)
        out.append(Replayed(f, way, route.detect_s, route.sched_s, route.swap_s if f.swap else 0.0,
                            route.restart_s if route.restart_s is not None else restart, wasted, ckpt))
    return out


# --- several seeds --------------------------------------------------------------------------------------

Spread = Dict[str, float]       # mean, min, max, stdev (+ p5, p95 from 5 values)


class Summary(TypedDict):
    seeds: List[int]
    ettr: Spread
    interruptions: Spread
    replacements: Spread
    pool_exhaustion_events: Spread
    shrink_events: Spread
    max_nodes_in_repair: Spread
    lost_hours_by_cause: Dict[str, Spread]
    useful_hours: Spread


def spread(values: Sequence[float]) -> Spread:
    vals = sorted(values)
    out = {"mean": statistics.fmean(vals), "min": vals[0], "max": vals[-1],
           "stdev": statistics.stdev(vals) if len(vals) > 1 else 0.0}
    if len(vals) >= 5:
        q = statistics.quantiles(vals, n=20, method="inclusive")
        out["p5"], out["p95"] = q[0], q[-1]
    return out


def run_seeds(profile: Profile, policy: Policy, p: SimParams, seeds: Sequence[int]) -> List[SimResult]:
    if not seeds:
        raise UsageError("--seeds must be at least 1")
    return [simulate(profile, policy, p, s) for s in seeds]


def summarise(results: Sequence[SimResult]) -> Summary:
    return {
        "seeds": [r.seed for r in results],
        "ettr": spread([r.ettr for r in results]),
        "interruptions": spread([r.interruptions for r in results]),
        "replacements": spread([r.replacements for r in results]),
        "pool_exhaustion_events": spread([r.pool_exhaustions for r in results]),
        "shrink_events": spread([r.shrinks for r in results]),
        "max_nodes_in_repair": spread([r.max_in_repair for r in results]),
        "lost_hours_by_cause": {c: spread([r.lost_s[c] / 3600 for r in results]) for c in CAUSES},
        "useful_hours": spread([r.useful_s / 3600 for r in results]),
    }


def sweep(profile: Profile, policy: Policy, p: SimParams, seeds: Sequence[int], *,
          spares: Sequence[int] = (), intervals_s: Sequence[float] = ()) -> Dict[str, List[Dict[str, float]]]:
    """Mean ETTR over `seeds` against spare count and against checkpoint interval (for the plot)."""
    out: Dict[str, List[Dict[str, float]]] = {"spares": [], "interval_s": []}
    for s in spares:
        rs = run_seeds(profile, policy, replace(p, spares=s), seeds)
        out["spares"].append({"spares": s, **{k: v for k, v in spread([r.ettr for r in rs]).items()
                                              if k in ("mean", "min", "max")},
                              "pool_exhaustion_events": statistics.fmean(r.pool_exhaustions for r in rs)})
    for iv in intervals_s:
        rs = run_seeds(profile, policy, replace(p, ckpt_interval_s=iv), seeds)
        out["interval_s"].append({"interval_s": iv, **{k: v for k, v in spread([r.ettr for r in rs]).items()
                                                       if k in ("mean", "min", "max")}})
    return out
