"""What `slurm-ft sim` prints: the inputs and how the derived ones follow, then the results over seeds.

Pure: takes the profile, policy, parameters and results, returns text lines or a JSON-ready dict.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from slurm_ft.errors import UsageError
from slurm_ft.plan.explain import Derivation, gnum, num, pct
from slurm_ft.plan.profiles import Policy, Profile
from slurm_ft.plan.sim import CAUSES, SimParams, SimResult, Spread, summarise
from slurm_ft.plan.spares import daly_interval, plan_spares

CAUSE_LABELS = {
    "checkpointing": "checkpointing (blocking saves)",
    "lost_work": "lost work (redone since last checkpoint)",
    "detection": "detection (fault to decision)",
    "scheduling": "scheduling (requeue delay, node swap)",
    "waiting_for_spares": "waiting for spares (pool empty)",
    "restart": "restart (relaunch + checkpoint load)",
    "shrunk": "shrunk (elastic: nodes missing)",
}


@dataclass
class SimSetup:
    """The simulation's inputs with the derivation of those that were not given."""
    profile: Profile
    policy: Policy
    params: SimParams
    derivation: Derivation = field(default_factory=Derivation)
    interval_from: str = ""
    spares_from: str = ""


def setup(profile: Profile, policy: Policy, *, gpus: int, gpus_per_node: int, days: float,
          spares: Optional[int], repair_hours: float, ckpt_interval_s: Optional[float], ckpt_cost_s: float,
          restart_s: float, repair_dist: str = "exp", elastic_min_nodes: Optional[int] = None,
          target: float = 0.999) -> SimSetup:
    """Fill in the checkpoint interval (Daly) and the spare count (Poisson plan) when not given."""
    # check what the arithmetic below divides by before using it
    SimParams(gpus, gpus_per_node, days, spares or 0, repair_hours, ckpt_interval_s or 1.0, ckpt_cost_s, restart_s,
              repair_dist, elastic_min_nodes).check()
    d = Derivation()
    c = d.given("profile_count", "interruptions in the profile (c)", profile.total, note=profile.source)
    if profile.predicted_share:
        d.given("predicted_share", "node-swap faults announced ahead: planned swaps", profile.predicted_share,
                note=f"{profile.predicted_lead_hours:g} h ahead; no detection, no lost work")
    D = d.given("profile_days", "over days (D)", profile.days, "days")
    G0 = d.given("profile_gpus", "on GPUs (G0)", profile.gpus)
    G = d.given("gpus", "GPUs in the simulated job (G)", gpus)
    days_ = d.given("days", "simulated days (T)", days, "days")
    lam = d.step("rate_per_gpu_day", "faults per GPU-day (r)", "c / (D × G0)", f"{gnum(c)} / ({gnum(D)} × {gnum(G0)})",
                 c / (D * G0), "/GPU-day")
    d.step("expected_interruptions", "expected interruptions (r × G × T)", "r × G × T",
           f"{gnum(lam)} × {gnum(G)} × {gnum(days_)}", lam * G * days_)
    M = d.step("mtbi_s", "mean time between interruptions (M)", "86400 / (r × G)", f"86400 / ({gnum(lam)} × {gnum(G)})",
               86400 / (lam * G), "s")
    dc = d.given("ckpt_cost_s", "blocking checkpoint cost (d)", ckpt_cost_s, "s")
    if ckpt_interval_s is None:
        if dc <= 0:
                    raise UsageError("--checkpoint-cost-s 0 needs an explicit --checkpoint-interval")
        ckpt_interval_s = d.step("ckpt_interval_s", "checkpoint interval, Daly (tau)",
                                 "sqrt(2 × d × M) × (1 + sqrt(d / (2 × M)) / 3 + d / (2 × M) / 9) - d",
                                 f"sqrt(2 × {gnum(dc)} × {gnum(M)}) × (1 + sqrt({gnum(dc)} / (2 × {gnum(M)})) / 3 "
                                 f"+ {gnum(dc)} / (2 × {gnum(M)}) / 9) - {gnum(dc)}", daly_interval(dc, M), "s")
        interval_from = "Daly's optimum for the expected M"
    else:
        d.given("ckpt_interval_s", "checkpoint interval (tau)", ckpt_interval_s, "s", note="--checkpoint-interval")
        interval_from = "given"
    if spares is None:
        plan = plan_spares(gpus, gpus_per_node, profile_data=profile, repair_hours=repair_hours, target=target,
                           ckpt_cost_s=ckpt_cost_s if ckpt_cost_s > 0 else 1.0, restart_s=restart_s)
        spares = plan.spare_nodes
        d.given("spares", "hot spares (s)", spares, "nodes",
                note=f"Poisson plan: L = {num(plan.expected_nodes_in_repair)} nodes in repair, "
                     f"P(N > {spares}) = {num(plan.tail_at_spares)} < 1 - {gnum(target)}; see `slurm-ft spares plan`")
        spares_from = f"spares plan at target {gnum(target)}"
    else:
        d.given("spares", "hot spares (s)", spares, "nodes", note="--spares")
        spares_from = "given"
    d.given("repair_hours", "mean time to return a node (H)", repair_hours, "h",
            note="exponential" if repair_dist == "exp" else "fixed")
    restart = policy.restart_s if policy.restart_s is not None else restart_s
    d.given("restart_s", "restart: relaunch + checkpoint load", restart, "s",
            note="from the policy" if policy.restart_s is not None else "--restart-s")
    params = SimParams(gpus, gpus_per_node, days, spares, repair_hours, ckpt_interval_s, ckpt_cost_s, restart_s,
                       repair_dist, elastic_min_nodes)
    params.check()
    return SimSetup(profile, policy, params, d, interval_from, spares_from)


def _swap_text(share: float) -> str:
    return "yes" if share == 1 else "no" if share == 0 else f"{100 * share:.0f}%"


def policy_line(p: Policy) -> str:
    return (f"detect crash {gnum(p.detect_crash_s)} s / host lost {gnum(p.detect_node_s)} s / hang "
            f"{gnum(p.detect_hang_s)} s, requeue {gnum(p.requeue_s)} s, swap {gnum(p.swap_s)} s"
            + (f", restart {gnum(p.restart_s)} s" if p.restart_s is not None else ""))


def _fmt_spread(sp: Spread, f: Callable[[float], str] = num) -> str:
    if sp["min"] == sp["max"]:
        return f(sp["mean"])
    extra = f", p5 {f(sp['p5'])} p95 {f(sp['p95'])}" if "p5" in sp else ""
    return f"{f(sp['mean'])}  (min {f(sp['min'])}, max {f(sp['max'])}, sd {num(sp['stdev'])}{extra})"


def render(s: SimSetup, results: Sequence[SimResult]) -> List[str]:
    p, prof, pol = s.params, s.profile, s.policy
    summ = summarise(results)
    seeds = [r.seed for r in results]
    seed_txt = f"seed {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} seeds ({seeds[0]}..{seeds[-1]})"
    out = [f"Simulated: {num(p.gpus)} GPUs ({num(p.nodes)} nodes of {p.gpus_per_node}) for {gnum(p.days)} days, "
           f"profile {prof.name}, policy {pol.name}, {seed_txt}",
           f"Policy {pol.name}: {policy_line(pol)}",
           f"  figures: {pol.source}",
           "" if p.elastic_min_nodes is None else
           f"Elastic: runs on as few as {num(p.elastic_min_nodes)} nodes instead of waiting for a spare",
           "Inputs and derived inputs:"]
    out = [line for line in out if line != ""]
    out += s.derivation.render()
    n_seeds = len(results)
    exp_int = s.derivation.value("expected_interruptions")
    assert exp_int is not None          # setup() derives it
    out += ["", f"Results ({'mean over seeds' if n_seeds > 1 else 'one run'}):",
            f"  ETTR                    {_fmt_spread(summ['ettr'], pct)}",
            f"  interruptions           {_fmt_spread(summ['interruptions'])}   (expected {num(exp_int)})",
            f"  node replacements       {_fmt_spread(summ['replacements'])}",
            f"  pool exhaustion events  {_fmt_spread(summ['pool_exhaustion_events'])}   (a swap found no spare)",
            f"  max nodes in repair     {_fmt_spread(summ['max_nodes_in_repair'])}"]
    if p.elastic_min_nodes is not None:
        out.append(f"  shrink events           {_fmt_spread(summ['shrink_events'])}")
    if any(r.planned_swaps for r in results):
        out.append(f"  planned swaps           {num(sum(r.planned_swaps for r in results) / len(results))}   "
                   f"(announced ahead: no detection, no lost work)")
    elapsed_h = results[0].elapsed_s / 3600
    out += ["", f"  Where the {num(elapsed_h)} elapsed hours went (mean hours, share of elapsed):"]
    total = 0.0
    for c in CAUSES:
        h = summ["lost_hours_by_cause"][c]["mean"]
        total += h
        out.append(f"    {CAUSE_LABELS[c]:<44} {num(h):>9} h  {pct(h / elapsed_h):>7}")
    useful_h = summ["useful_hours"]["mean"]
    total += useful_h
    out.append(f"    {'useful training':<44} {num(useful_h):>9} h  {pct(useful_h / elapsed_h):>7}")
    out.append(f"    {'total (= elapsed: each second counted once)':<44} {num(total):>9} h")
    u = round(useful_h, 1)
    out.append(f"  ETTR = useful / elapsed = {gnum(u)} / {gnum(elapsed_h)} = {num(u / elapsed_h)}"
               + (" (means over seeds)" if n_seeds > 1 else ""))
    # per class: expected vs simulated
    out += ["", "  Interruptions by class (expected = count × G/G0 × T/D; kind decides detection):",
            f"    {'class':<32} {'kind':<6} {'swap':<5} {'expected':>9} {'simulated':>10}"]
    scale = p.gpus / prof.gpus * p.days / prof.days
    for fc in prof.classes:
        sim_mean = sum(r.by_class.get(fc.name, 0) for r in results) / n_seeds
        out.append(f"    {fc.name:<32} {fc.kind:<6} {_swap_text(fc.replace):<5} {num(fc.count * scale):>9} "
                   f"{num(sim_mean):>10}")
    out += ["", "  Model: faults as one Poisson process over the job, classes by weight; a software fault only "
                "while the job runs; recovery = detection, then requeue delay and node swap side by side, then "
                "restart; a failed node returns after its repair; an empty pool makes the job wait. "
                "Every number above is a mean over the seeds listed."]
    return out


def to_dict(s: SimSetup, results: Sequence[SimResult]) -> Dict[str, Any]:
    summ = summarise(results)
    p = s.params
    return {
        "profile": s.profile.name, "policy": s.policy.name, "policy_source": s.policy.source,
        "policy_figures": {"detect_s": {"crash": s.policy.detect_crash_s, "node": s.policy.detect_node_s,
                                        "hang": s.policy.detect_hang_s},
                           "requeue_s": s.policy.requeue_s, "swap_s": s.policy.swap_s,
                           "restart_s": s.policy.restart_s if s.policy.restart_s is not None else p.restart_s},
        "gpus": p.gpus, "gpus_per_node": p.gpus_per_node, "nodes": p.nodes, "days": p.days,
        "spares": p.spares, "spares_from": s.spares_from, "repair_hours": p.repair_hours,
        "repair_dist": p.repair_dist, "checkpoint_interval_s": p.ckpt_interval_s,
        "checkpoint_interval_from": s.interval_from, "checkpoint_cost_s": p.ckpt_cost_s,
        "elastic_min_nodes": p.elastic_min_nodes,
        "expected_interruptions": s.derivation.value("expected_interruptions"),
        "interruptions": summ["interruptions"]["mean"],
        "ettr": summ["ettr"]["mean"],
        "lost_hours_by_cause": {c: v["mean"] for c, v in summ["lost_hours_by_cause"].items()},
        "pool_exhaustion_events": summ["pool_exhaustion_events"]["mean"],
        "summary": summ,
        "runs": [r.to_dict() for r in results],
        "derivation": s.derivation.to_list(),
    }


def render_compare(runs: Sequence[Tuple[SimSetup, Sequence[SimResult]]]) -> List[str]:
    """Policies side by side: `runs` = [(SimSetup, results), ...] on the same seeds (the same faults)."""
    s0, res0 = runs[0]
    p = s0.params
    seeds = [r.seed for r in res0]
    seed_txt = f"seed {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} seeds ({seeds[0]}..{seeds[-1]})"
    out = [f"Simulated: {num(p.gpus)} GPUs ({num(p.nodes)} nodes of {p.gpus_per_node}) for {gnum(p.days)} days, "
           f"profile {s0.profile.name}, {seed_txt}; every policy meets the same faults at the same moments",
           "Inputs and derived inputs:"]
    out += s0.derivation.render()
    out += ["", "Policies:"]
    for s, _ in runs:
        out.append(f"  {s.policy.name:<12} {policy_line(s.policy)}")
        out.append(f"  {'':<12} figures: {s.policy.source}")
    elapsed_h = res0[0].elapsed_s / 3600
    short = {"checkpointing": "ckpt", "lost_work": "lost work", "detection": "detect", "scheduling": "sched",
             "waiting_for_spares": "wait spare", "restart": "restart", "shrunk": "shrunk"}
    head = f"  {'policy':<12} {'ETTR':>8} {'min..max':>17} {'interr.':>8} {'exhaust.':>8}" + "".join(
        f" {short[c]:>10}" for c in CAUSES)
    out += ["", f"Results (means over seeds; hours lost by cause, of {num(elapsed_h)} elapsed):", head]
    for s, res in runs:
        summ = summarise(res)
        e = summ["ettr"]
        out.append(f"  {s.policy.name:<12} {pct(e['mean']):>8} {pct(e['min']) + '..' + pct(e['max']):>17} "
                   f"{num(summ['interruptions']['mean']):>8} {num(summ['pool_exhaustion_events']['mean']):>8}"
                   + "".join(f" {num(summ['lost_hours_by_cause'][c]['mean']):>10}" for c in CAUSES))
    out += ["", "  ETTR = useful / elapsed; each policy's own breakdown: `slurm-ft sim --policy NAME`."]
    return out
