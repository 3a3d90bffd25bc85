"""How many hot spares a job or cluster needs, and what checkpoint interval and ETTR follow.

Nodes in repair form an M/G/infinity queue: node-taking faults arrive at rate `a` (Poisson), each
node spends a mean `H` hours out whatever the repair-time distribution, and repairs run side by side.
The number out at any moment is then Poisson with mean L = a * H (Little's law with the M/G/inf
result), and the pool needs the smallest s with P(N > s) < 1 - target.

The checkpoint interval is Young's first-order optimum sqrt(2 d M) and Daly's higher-order form
(FGCS 22(3) 2006, eq. 37) for blocking cost d and mean time between interruptions M; the ETTR is
1 - (d/tau + (tau/2 + R)/M) with R the time from a fault to training again (first-order waste model).
Pure: numbers in, numbers and their derivation out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from slurm_ft.errors import UsageError
from slurm_ft.plan.explain import Derivation, gnum, num, pct
from slurm_ft.plan.profiles import Profile, get_profile

if TYPE_CHECKING:
    from slurm_ft.config import PlanningConfig

DEFAULT_REPAIR_HOURS = 72.0
DEFAULT_TARGET = 0.999
DEFAULT_CKPT_COST_S = 10.0
DEFAULT_RESTART_S = 300.0


# --- Poisson --------------------------------------------------------------------------------------

def poisson_pmf(lam: float, k: int) -> float:
    if lam == 0:
        return 1.0 if k == 0 else 0.0
    return math.exp(-lam + k * math.log(lam) - math.lgamma(k + 1))


def poisson_tail(lam: float, s: int) -> float:
    """P(N > s) for N ~ Poisson(lam), summed upward from s+1 (no 1 - cdf cancellation)."""
    if lam == 0:
        return 0.0
    if s < lam - 40 * math.sqrt(lam) - 50:
        return 1.0          # P(N <= s) is below 1e-300 this far under the mean
    terms = []
    running = 0.0
    k = s + 1
    while True:
        p = poisson_pmf(lam, k)
        terms.append(p)
        running += p
        if k > lam and p < 1e-18 * running:
            break
        if k > lam + 50 * math.sqrt(lam) + 200:
            break
        k += 1
    return math.fsum(terms)


def smallest_spares(lam: float, risk: float) -> int:
    """Smallest s with P(N > s) < risk, N ~ Poisson(lam): P(N > s) falls as s grows, so bisect."""
    if lam == 0:
        return 0
    hi = max(1, int(lam + 10 * math.sqrt(lam)) + 10)
    while poisson_tail(lam, hi) >= risk:
        hi *= 2
    lo = -1                     # P(N > -1) = 1 >= risk
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if poisson_tail(lam, mid) < risk:
            hi = mid
        else:
            lo = mid
    return hi


# --- checkpoint interval and ETTR ------------------------------------------------------------------

def young_interval(cost_s: float, mtbi_s: float) -> float:
    return math.sqrt(2 * cost_s * mtbi_s)


def daly_interval(cost_s: float, mtbi_s: float) -> float:
    if cost_s >= 2 * mtbi_s:
        return mtbi_s
    x = cost_s / (2 * mtbi_s)
    return math.sqrt(2 * cost_s * mtbi_s) * (1 + math.sqrt(x) / 3 + x / 9) - cost_s


# --- the plan ---------------------------------------------------------------------------------------

@dataclass
class SparePlan:
    gpus: int
    gpus_per_node: int
    nodes: int
    rate_source: str
    node_failures_per_day: float
    job_interruptions_per_day: float
    mtbi_hours: float
    replace_fraction: float
    repair_hours: float
    nodes_into_repair_per_day: float
    expected_nodes_in_repair: float
    target: float
    spare_nodes: int
    tail_at_spares: float           # P(N > spare_nodes)
    tail_below: Optional[float]     # P(N > spare_nodes - 1), None when spare_nodes = 0
    ckpt_cost_s: float
    restart_s: float
    interval_young_s: float
    interval_daly_s: float
    ettr: float
    table: List[Tuple[int, float, float, float]] = field(default_factory=list)  # k, P(N=k), P(N<=k), P(N>k)
    derivation: Derivation = field(default_factory=Derivation)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "gpus": self.gpus, "gpus_per_node": self.gpus_per_node, "nodes": self.nodes,
            "rate_source": self.rate_source,
            "node_failure_rate_per_day": self.node_failures_per_day,
            "node_mtbf_hours": _safe_div(24.0, self.node_failures_per_day),
            "job_interruptions_per_day": self.job_interruptions_per_day,
            "mtbi_hours": self.mtbi_hours,
            "replace_fraction": self.replace_fraction,
            "repair_hours": self.repair_hours,
            "nodes_into_repair_per_day": self.nodes_into_repair_per_day,
            "expected_nodes_in_repair": self.expected_nodes_in_repair,
            "target": self.target,
            "spare_nodes": self.spare_nodes,
            "spare_share_of_nodes": self.spare_nodes / self.nodes,
            "p_more_out_than_spares": self.tail_at_spares,
            "p_more_out_than_spares_minus_one": self.tail_below,
            "checkpoint_cost_s": self.ckpt_cost_s,
            "restart_s": self.restart_s,
            "checkpoint_interval_s": {"young": self.interval_young_s, "daly": self.interval_daly_s},
            "ettr": self.ettr,
            "poisson_table": [{"k": k, "p_eq": p, "p_le": c, "p_gt": t} for k, p, c, t in self.table],
            "derivation": self.derivation.to_list(),
        }


def _safe_div(a: float, b: float) -> Optional[float]:
    return a / b if b else None


def _positive(name: str, v: Optional[float], allow_zero: bool = False) -> None:
    if v is None:
        return
    if isinstance(v, float) and not math.isfinite(v):
        raise UsageError(f"{name} must be a finite number, got {v}")
    if v < 0 or (v == 0 and not allow_zero):
        raise UsageError(f"{name} must be {'zero or more' if allow_zero else 'positive'}, got {num(v)}")


MAX_GPUS = 1_000_000      # five times the largest cluster of 2026: a larger count is a typo


def nodes_of(gpus: int, gpus_per_node: int) -> int:
    if gpus <= 0:
        raise UsageError(f"--gpus must be positive, got {gpus}")
    if gpus > MAX_GPUS:
        raise UsageError(f"--gpus {num(gpus)} is more than {num(MAX_GPUS)}, beyond any cluster")
    if gpus_per_node <= 0:
        raise UsageError(f"--gpus-per-node must be positive, got {gpus_per_node}")
    if gpus % gpus_per_node:
        raise UsageError(f"--gpus {gpus} is not a multiple of --gpus-per-node {gpus_per_node}")
    return gpus // gpus_per_node


def plan_spares(gpus: int, gpus_per_node: int = 8, *, profile: Optional[str] = None,
                profile_data: Optional[Profile] = None,
                node_mtbf_hours: Optional[float] = None, interruptions_per_day: Optional[float] = None,
                at_gpus: Optional[int] = None, replace_fraction: Optional[float] = None,
                repair_hours: float = DEFAULT_REPAIR_HOURS, target: float = DEFAULT_TARGET,
                ckpt_cost_s: float = DEFAULT_CKPT_COST_S, restart_s: float = DEFAULT_RESTART_S,
                table_rows: int = 6) -> SparePlan:
    """The spare pool for `gpus` GPUs; the failure rate from exactly one of a profile, a node MTBF or an
    observed interruption rate (with the GPU count it was seen at)."""
    n = nodes_of(gpus, gpus_per_node)
    chosen = [x is not None for x in (profile or profile_data, node_mtbf_hours, interruptions_per_day)]
    if sum(chosen) > 1:
        raise UsageError("give one failure rate: --profile, --node-mtbf-hours or --interruptions-per-day")
    if sum(chosen) == 0:
        profile = "llama3"
    _positive("--node-mtbf-hours", node_mtbf_hours)
    _positive("--interruptions-per-day", interruptions_per_day)
    _positive("--repair-hours", repair_hours, allow_zero=True)
    _positive("--checkpoint-cost-s", ckpt_cost_s)
    _positive("--restart-s", restart_s, allow_zero=True)
    if interruptions_per_day is not None and at_gpus is None:
        at_gpus = gpus
    if at_gpus is not None and at_gpus <= 0:
        raise UsageError(f"--at-gpus must be positive, got {at_gpus}")
    if not (0 < target < 1) or not math.isfinite(target):
        raise UsageError(f"--target must be between 0 and 1 (exclusive), got {target}")
    if replace_fraction is not None and not (0 <= replace_fraction <= 1):
        raise UsageError(f"--replace-fraction must be between 0 and 1, got {replace_fraction}")

    d = Derivation()
    G = d.given("gpus", "GPUs in the job (G)", gpus)
    g = d.given("gpus_per_node", "GPUs per node (g)", gpus_per_node)
    n = d.step("nodes", "nodes in the job (n)", "G / g", f"{gnum(G)} / {gnum(g)}", n)

    prof = profile_data or (get_profile(profile) if profile else None)
    if prof is not None:
        src = f"profile {prof.name}: {prof.source}"
        c = d.given("profile_count", "interruptions observed (c)", prof.total, note=prof.source)
        days = d.given("profile_days", "over days (D)", prof.days, "days")
        g0 = d.given("at_gpus", "on GPUs (G0)", prof.gpus)
        r = d.step("observed_per_day", "observed rate (r)", "c / D", f"{gnum(c)} / {gnum(days)}", c / days, "/day")
        lam_job = d.step("job_interruptions_per_day", "interruptions of this job per day (j)", "r × G / G0",
                         f"{gnum(r)} × {gnum(G)} / {gnum(g0)}", r * G / g0, "/day")
        lam_node = d.step("node_failure_rate_per_day", "failures per node per day (f)", "j / n",
                          f"{gnum(lam_job)} / {gnum(n)}", lam_job / n, "/day")
        if replace_fraction is None:
            rc = d.given("profile_replace_count", "of them needing a node swap (c_r)", prof.replace_count,
                         note="sum of count × replace share over the classes")
            replace_fraction = d.step("replace_fraction", "share that takes a node out (p)", "c_r / c",
                                      f"{gnum(rc)} / {gnum(c)}", rc / c)
        else:
            replace_fraction = d.given("replace_fraction", "share that takes a node out (p)", replace_fraction,
                                       note="--replace-fraction")
    elif interruptions_per_day is not None:
        assert at_gpus is not None          # set to `gpus` above when not given
        src = f"observed {num(interruptions_per_day)} interruptions/day at {num(at_gpus)} GPUs"
        r = d.given("observed_per_day", "observed rate (r)", interruptions_per_day, "/day")
        g0 = d.given("at_gpus", "observed on GPUs (G0)", at_gpus)
        lam_job = d.step("job_interruptions_per_day", "interruptions of this job per day (j)", "r × G / G0",
                         f"{gnum(r)} × {gnum(G)} / {gnum(g0)}", r * G / g0, "/day")
        lam_node = d.step("node_failure_rate_per_day", "failures per node per day (f)", "j / n",
                          f"{gnum(lam_job)} / {gnum(n)}", lam_job / n, "/day")
        replace_fraction = d.given("replace_fraction", "share that takes a node out (p)",
                                   1.0 if replace_fraction is None else replace_fraction,
                                   note="--replace-fraction" if replace_fraction is not None
                                   else "default 1: every interruption takes a node out")
    else:
        assert node_mtbf_hours is not None  # the rate left: with none given, the llama3 profile was chosen
        src = f"node MTBF {num(node_mtbf_hours)} h"
        mtbf = d.given("node_mtbf_hours", "node MTBF (F)", node_mtbf_hours, "h")
        lam_node = d.step("node_failure_rate_per_day", "failures per node per day (f)", "24 / F",
                          f"24 / {gnum(mtbf)}", 24 / mtbf, "/day")
        lam_job = d.step("job_interruptions_per_day", "interruptions of this job per day (j)", "f × n",
                         f"{gnum(lam_node)} × {gnum(n)}", lam_node * n, "/day")
        replace_fraction = d.given("replace_fraction", "share that takes a node out (p)",
                                   1.0 if replace_fraction is None else replace_fraction,
                                   note="--replace-fraction" if replace_fraction is not None
                                   else "default 1: every failure takes a node out")
    if lam_job <= 0:
        raise UsageError("the failure rate is zero at this size: nothing to plan")

    mtbi_h = d.step("mtbi_hours", "mean time between interruptions (M)", "24 / j", f"24 / {gnum(lam_job)}",
                    24 / lam_job, "h")
    into = d.step("nodes_into_repair_per_day", "nodes going into repair per day (a)", "p × j",
                  f"{gnum(replace_fraction)} × {gnum(lam_job)}", replace_fraction * lam_job, "/day")
    H = d.given("repair_hours", "time to return a node to service (H)", repair_hours, "h")
    L = d.step("expected_nodes_in_repair", "expected nodes in repair (L)", "a × H / 24",
               f"{gnum(into)} × {gnum(H)} / 24", into * H / 24)
    if L > n:
        # each node would be in repair longer than in service: no spare pool keeps such a job running
        # (and the tail sums below grow as sqrt(L): minutes at the rates that get here)
        raise UsageError(f"at {src} and {num(H)} h of repair, {num(L)} nodes would be in repair at once, "
                         f"more than the job's {num(n)}: check the failure rate and --repair-hours")
    q = d.given("target", "target P(no shortage) (q)", target)
    risk = 1 - q
    d.text("nodes in repair ~ Poisson(L) (M/G/infinity: independent repairs, any repair-time distribution)")
    d.text(f"P(N = 0) = exp(-L) = exp(-{gnum(L)}) = {num(poisson_pmf(L, 0))};  P(N = k) = P(N = k-1) × L / k")

    s = smallest_spares(L, risk)
    rows = []
    lo = max(0, s - table_rows + 1)
    cdf = math.fsum(poisson_pmf(L, k) for k in range(0, lo))
    for k in range(lo, s + 1):
        p = poisson_pmf(L, k)
        cdf += p
        rows.append((k, p, min(cdf, 1.0), poisson_tail(L, k)))
    d.text(f"{'k':>6} {'P(N = k)':>12} {'P(N <= k)':>12} {'P(N > k)':>12}")
    if lo > 0:
        d.text(f"{'...':>6}")
    for k, p, c_, t in rows:
        d.text(f"{k:>6} {num(p):>12} {num(c_):>12} {num(t):>12}")
    tail_s = poisson_tail(L, s)
    tail_b = poisson_tail(L, s - 1) if s > 0 else None
    why = f"P(N > {s}) = {num(tail_s)} < 1 - q = {num(rnd_risk(risk))}"
    if tail_b is not None:
        why += f", while P(N > {s - 1}) = {num(tail_b)} is not"
    d.step("spare_nodes", "hot spares (s), smallest s with P(N > s) < 1 - q", "", "", s, "nodes", note=why,
           exact=True)
    d.step("spare_share", "spares as a share of the job's nodes", "s / n", f"{gnum(s)} / {gnum(n)}", s / n)

    M = d.step("mtbi_s", "M in seconds", "M × 3600", f"{gnum(mtbi_h)} × 3600", mtbi_h * 3600, "s")
    dc = d.given("ckpt_cost_s", "blocking checkpoint cost (d)", ckpt_cost_s, "s")
    R = d.given("restart_s", "fault to training again (R)", restart_s, "s",
                note="detection + requeue + restart + checkpoint load")
    ty = d.step("interval_young_s", "checkpoint interval, Young (tau_Y)", "sqrt(2 × d × M)",
                f"sqrt(2 × {gnum(dc)} × {gnum(M)})", young_interval(dc, M), "s")
    if dc < 2 * M:
        td = d.step("interval_daly_s", "checkpoint interval, Daly (tau_D)",
                    "sqrt(2 × d × M) × (1 + sqrt(d / (2 × M)) / 3 + d / (2 × M) / 9) - d",
                    f"sqrt(2 × {gnum(dc)} × {gnum(M)}) × (1 + sqrt({gnum(dc)} / (2 × {gnum(M)})) / 3 "
                    f"+ {gnum(dc)} / (2 × {gnum(M)}) / 9) - {gnum(dc)}", daly_interval(dc, M), "s")
    else:
        td = d.step("interval_daly_s", "checkpoint interval, Daly (tau_D = M since d >= 2M)", "M", gnum(M), M, "s")
    waste = d.step("waste", "expected waste (w)", "d / tau_D + (tau_D / 2 + R) / M",
                   f"{gnum(dc)} / {gnum(td)} + ({gnum(td)} / 2 + {gnum(R)}) / {gnum(M)}",
                   dc / td + (td / 2 + R) / M, note="first-order: checkpoints + half an interval redone + R")
    if waste < 1:
        ettr = d.step("ettr", "expected effective training time ratio (ETTR)", "1 - w", f"1 - {gnum(waste)}",
                      1 - waste, note=f"{pct(1 - waste)}, assuming a spare is ready, which holds with P >= q")
    else:
        ettr = d.step("ettr", "expected effective training time ratio (ETTR)", "max(0, 1 - w)",
                      f"max(0, 1 - {gnum(waste)})", 0.0,
                      note="w >= 1: the job fails faster than it checkpoints and restarts, and makes no progress")

    return SparePlan(G, g, n, src, lam_node, lam_job, mtbi_h, replace_fraction, H, into, L, q, s,
                     tail_s, tail_b, dc, R, ty, td, ettr, rows, d)


def plan_from_settings(gpus: int, gpus_per_node: int, settings: PlanningConfig) -> SparePlan:
    """The plan with the inputs of a `planning:` config section (`slurm_ft.config.PlanningConfig`, or
    anything with its attributes): its node MTBF or observed rate when set, else its profile."""
    profile: Optional[str] = None
    mtbf: Optional[float] = None
    per_day: Optional[float] = None
    at_gpus: Optional[int] = None
    if settings.node_mtbf_hours is not None:
        mtbf = settings.node_mtbf_hours
    elif settings.interruptions_per_day is not None:
        per_day, at_gpus = settings.interruptions_per_day, settings.at_gpus
    else:
        profile = settings.profile
    return plan_spares(gpus, gpus_per_node, profile=profile, node_mtbf_hours=mtbf, interruptions_per_day=per_day,
                       at_gpus=at_gpus, replace_fraction=settings.replace_fraction,
                       repair_hours=settings.repair_hours, target=settings.target,
                       ckpt_cost_s=settings.checkpoint_cost_s, restart_s=settings.restart_s)


def rnd_risk(risk: float) -> float:
    """1 - q without binary noise (1 - 0.999 = 0.0010000000000000009)."""
    return float(f"{risk:.12g}")


def render(plan: SparePlan) -> List[str]:
    out = [f"Spare pool for {num(plan.gpus)} GPUs ({num(plan.nodes)} nodes of {plan.gpus_per_node}), "
           f"failure rate from {plan.rate_source}", ""]
    out += plan.derivation.render()
    out += ["", f"=> {plan.spare_nodes} hot spare node(s) ({pct(plan.spare_nodes / plan.nodes)} of "
                f"{num(plan.nodes)}) keep P(more nodes out than spares) = {num(plan.tail_at_spares)} under "
                f"{num(rnd_risk(1 - plan.target))}; the job is interrupted {num(plan.job_interruptions_per_day)} "
                f"times a day (every {num(plan.mtbi_hours)} h); checkpoint every {num(plan.interval_daly_s)} s "
                f"(Daly) for an ETTR of about {pct(plan.ettr)}."]
    return out
