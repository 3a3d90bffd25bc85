"""Discrete-event simulation of one synchronous training job on a cluster with a spare pool.

Model (every choice here is printed with the results):
- Faults hit the job's GPUs as one Poisson process of rate (profile interruptions per GPU-second) x GPUs
  over the whole elapsed time; each fault's class is drawn with the profile's class counts as weights,
  and whether it needs a node swap with the class's `replace` share (true = always, false = never).
  One process for the whole job, not one timer per node: the same law, and ~1 event per interruption.
- A fault stops the job. A hardware fault (a class that needs a node swap) counts even during a recovery,
  since the job holds its nodes; a software fault (no swap) only while the job runs. Recovery: detection (by kind, from the policy), then the scheduler delay
  (requeue_s) and, if the class needs a node swap, a spare (swap_s) side by side, then the job's restart
  (relaunch + checkpoint load). A fault that lands during a recovery starts its own; the job resumes
  when the later one is done, and time is charged once, to whichever recovery is still running.
- The failed node goes to repair for a time drawn from an exponential (or fixed) distribution of mean
  `repair_hours`, then back to the pool. An empty pool makes the job wait for the first node back
  ("pool exhaustion"), or, for an elastic job above its minimum, run on fewer nodes at proportionally
  lower throughput until a later recovery finds spares again (regrowing costs no extra restart then).
- While running, the job checkpoints after every `ckpt_interval_s` of compute, blocking `ckpt_cost_s`.
  A fault loses the compute since the last complete checkpoint (a checkpoint being written is lost too).
- Planned swaps (issue 24): a share of the node-swap faults (the profile's `predicted_share`) is announced by a
  soft signal ahead of time (its own seeded stream, so the faults themselves stay the same). Such a fault costs
  the same scheduling, swap and restart, but no detection and no lost work: the job moves at a checkpoint,
  the next periodic one when the lead time (`predicted_lead_hours`) reaches it, else one asked for (its
  blocking cost charged to checkpointing).
- Every second of the elapsed time is charged to exactly one of: useful, checkpointing, lost work,
  detection, scheduling (requeue delay and swap), waiting for spares, restart, shrunk (capacity missing
  while elastic), so the causes add up to the elapsed time and ETTR = useful / elapsed.
Pure: seeded `random.Random` streams (faults; repairs), no clock.
"""
from __future__ import annotations

import heapq
import math
import random
import statistics
from bisect import bisect_right
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any, Dict, List, Optional, Sequence, TypedDict

from slurm_ft.errors import UsageError
from slurm_ft.plan.profiles import KINDS, Policy, Profile

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
                                 ("--restart-s", self.restart_s, True)):
            if not math.isfinite(v) or v < 0 or (v == 0 and not zero_ok):
                raise UsageError(f"{name} must be {'zero or more' if zero_ok else 'positive'}, got {v}")
        if self.spares < 0:
            raise UsageError(f"--spares must be zero or more, got {self.spares}")
        if self.repair_dist not in ("exp", "fixed"):
            raise UsageError(f"--repair-dist must be exp or fixed, not {self.repair_dist!r}")
        if self.elastic_min_nodes is not None and not (0 < self.elastic_min_nodes <= self.nodes):
            raise UsageError(f"--elastic-min-nodes must be between 1 and the job's {self.nodes} nodes")


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
    planned_swaps: int = 0          # faults met by a planned swap (predicted ahead)

    @property
    def ettr(self) -> float:
        return self.useful_s / self.elapsed_s

    def to_dict(self) -> Dict[str, Any]:
        return {"seed": self.seed, "ettr": self.ettr, "interruptions": self.interruptions,
                "elapsed_hours": self.elapsed_s / 3600, "useful_hours": self.useful_s / 3600,
                "lost_hours_by_cause": {k: v / 3600 for k, v in self.lost_s.items()},
                "interruptions_by_class": self.by_class, "interruptions_by_kind": self.by_kind,
                "replacements": self.replacements, "pool_exhaustion_events": self.pool_exhaustions,
                "shrink_events": self.shrinks, "max_nodes_in_repair": self.max_in_repair,
                "min_spares_in_pool": self.min_pool, "checkpoints": self.checkpoints,
                "planned_swaps": self.planned_swaps}


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
    planned: bool = False           # announced ahead: a planned swap (no detection, no lost work)


def simulate(profile: Profile, policy: Policy, p: SimParams, seed: int = 0,
             faults: Optional[List[SimFault]] = None) -> SimResult:
    """One seeded run; with `faults` (a list) each interruption is also appended to it, in time order."""
    p.check()
    # two streams: fault times and classes, and repair times; so every policy run with one seed meets
    # the same faults at the same moments (common random numbers: comparisons need fewer seeds)
    rng = random.Random(seed)
    rng_repair = random.Random(f"repair-{seed}")
    T = p.days * 86400.0
    rate = profile.rate_per_gpu_s() * p.gpus
    classes = profile.classes
    cum = list(accumulate(c.count for c in classes))
    total_w = cum[-1]
    restart = policy.restart_s if policy.restart_s is not None else p.restart_s
    tau, delta = p.ckpt_interval_s, p.ckpt_cost_s
    cycle = tau + delta
    repair_mean = p.repair_hours * 3600.0
    n = p.nodes

    # The loop is the whole cost (100,000 GPUs x 365 days: ~17,000 faults a seed): everything per class
    # is looked up once, the helpers are inlined and each cause is a local float. The same arithmetic in
    # the same order as the plain version, so every result is bit for bit what it was.
    det = [policy.detect_s(c.kind) for c in classes]
    reps = [c.replace for c in classes]
    requeue_s, swap_s = policy.requeue_s, policy.swap_s
    rep_exp = p.repair_dist == "exp" and repair_mean > 0
    elastic_min = p.elastic_min_nodes
    rnd, rnd_repair, log, push, pop = rng.random, rng_repair.random, math.log, heapq.heappush, heapq.heappop
    predicted = profile.predicted_share
    rnd_planned = random.Random(f"planned-{seed}").random if predicted > 0 else None   # off: no draw at all
    forced_ckpt = delta if profile.predicted_lead_hours * 3600.0 < tau else 0.0   # a checkpoint asked for
    planned_swaps = 0
    l_ckpt = l_lost = l_shrunk = l_det = l_wait = l_sched = l_restart = 0.0
    useful = 0.0
    checkpoints = 0
    class_hits = [0] * len(classes)
    first_seen: List[int] = []      # class indices in the order first hit (the report's order)
    pool = p.spares
    repairs: List[float] = []       # heap of times nodes come back from repair
    missing = 0                     # nodes an elastic job runs without
    replacements = exhaustions = shrinks = 0
    max_in_repair, min_pool = 0, pool
    up_since = 0.0                  # when the job last started computing
    busy_until = 0.0                # end of the recovery in progress (<= up_since when running)
    interruptions = 0

    def run_segment(a: float, b: float, failed: bool) -> None:
        """Account compute from a to b at the current size; `failed`: stopped by a fault."""
        nonlocal useful, checkpoints, l_ckpt, l_lost, l_shrunk
        e = b - a
        k = int(e // cycle)
        rem = e - k * cycle
        work = k * tau
        ckpt = k * delta
        checkpoints += k
        wasted = 0.0
        if rem <= tau:
            wasted, tail = (rem, 0.0) if failed else (0.0, rem)
        else:
            wasted, tail = (tau, 0.0) if failed else (0.0, tau)
            ckpt += rem - tau
        work += tail
        share = (n - missing) / n
        useful += work * share
        l_ckpt += ckpt
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
        interruptions += 1
        if not class_hits[ci]:
            first_seen.append(ci)
        class_hits[ci] += 1
        planned = swap and rnd_planned is not None and rnd_planned() < predicted
        planned_swaps += planned
        if running:     # run_segment(up_since, t, True), inlined: the hot path
            e = t - up_since
            k = int(e // cycle)
            rem = e - k * cycle
            work = k * tau
            ckpt = k * delta
            checkpoints += k
            if rem <= tau:
                wasted = rem
            else:
                wasted = tau
                ckpt += rem - tau
            if planned:      # saved by the checkpoint the swap waits for (asked for: its cost ends the segment)
                extra = wasted if wasted < forced_ckpt else forced_ckpt
                work += wasted - extra
                ckpt += extra
                checkpoints += extra > 0
                wasted = 0.0
            share = (n - missing) / n
            useful += work * share
            l_ckpt += ckpt
            l_lost += wasted * share
            l_shrunk += (work + wasted) * (1 - share)
        floor = t if running else busy_until      # time before `floor` is already charged
        t_det = t if planned else t + det[ci]     # announced: nothing left to detect
        ready_nodes = t_det
        wait_end = t_det
        while repairs and repairs[0] <= t_det:  # nodes back from repair
            pop(repairs)
            pool += 1
        back = None
        if swap:
            replacements += 1
            back = t_det + (-log(1.0 - rnd_repair()) / (1 / repair_mean) if rep_exp else repair_mean)
            push(repairs, back)
            if pool > 0:
                pool -= 1
                ready_nodes = t_det + swap_s
            elif elastic_min is not None and n - missing - 1 >= elastic_min:
                missing += 1
                shrinks += 1
            else:
                exhaustions += 1
                wait_end = max(t_det, pop(repairs))
                ready_nodes = wait_end + swap_s
            if len(repairs) > max_in_repair:
                max_in_repair = len(repairs)
        while missing and pool > 0:            # an elastic job takes back what it lacks, at no extra cost
            pool -= 1
            missing -= 1
        if pool < min_pool:
            min_pool = pool
        ready = t_det + requeue_s
        if ready_nodes > ready:
            ready = ready_nodes
        end = ready + restart
        # each cause charged for [a, b] clipped to [floor, T]: time before floor is charged already
        a = t if t > floor else floor
        b = t_det if t_det < T else T
        if b > a:
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
        if faults is not None:
            c = classes[ci]
            faults.append(SimFault(t, t_det, c.name, c.kind, swap, back, busy_until, planned))
    if busy_until < T:
        run_segment(up_since, T, False)
    lost = {"checkpointing": l_ckpt, "lost_work": l_lost, "detection": l_det, "scheduling": l_sched,
            "waiting_for_spares": l_wait, "restart": l_restart, "shrunk": l_shrunk}
    by_class = {classes[i].name: class_hits[i] for i in first_seen}
    by_kind = dict.fromkeys(KINDS, 0)
    for i in first_seen:
        by_kind[classes[i].kind] += class_hits[i]
    return SimResult(seed, T, useful, lost, interruptions, by_class, by_kind, replacements, exhaustions,
                     shrinks, max_in_repair, min_pool, checkpoints, planned_swaps)


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
