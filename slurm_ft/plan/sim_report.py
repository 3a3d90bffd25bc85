"""What `slurm-ft sim` prints: the inputs and how the derived ones follow, then the results over seeds.

Pure: takes the profile, policy, parameters and results, returns text lines or a JSON-ready dict.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from slurm_ft.errors import UsageError
from slurm_ft.plan.explain import Derivation, gnum, num, pct
from slurm_ft.plan.figures import Figures
from slurm_ft.plan.levers import LABELS, describe, ships
from slurm_ft.plan.profiles import Policy, Profile
from slurm_ft.plan.sim import CAUSES, SimParams, SimResult, Spread, summarise
from slurm_ft.plan.spares import daly_interval, plan_spares

SHORT = {"checkpointing": "ckpt", "lost_work": "lost work", "detection": "detect", "scheduling": "sched",
         "waiting_for_spares": "wait spare", "restart": "restart", "shrunk": "shrunk"}
CAUSE_LABELS = {
    "checkpointing": "checkpointing (blocking saves)",
    "lost_work": "lost work (redone since last checkpoint)",
    "detection": "detection (fault to decision)",
    "scheduling": "scheduling (requeue delay, node swap)",
    "waiting_for_spares": "waiting for spares (pool empty)",
    "restart": "restart (relaunch + checkpoint load)",
    "shrunk": "shrunk (elastic: nodes missing; a replica group out)",
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
          target: float = 0.999, ckpt_persist_s: float = 0.0, job: Optional[Derivation] = None,
          restart_note: str = "--restart-s") -> SimSetup:
    """Fill in the checkpoint interval (Daly) and the spare count (Poisson plan) when not given.
    `ckpt_persist_s`: an asynchronous save's background write (the interval is at least that);
    `job`: how the job's own costs were derived (plan/jobcost.py), printed with the inputs."""
    # check what the arithmetic below divides by before using it
    SimParams(gpus, gpus_per_node, days, spares or 0, repair_hours, ckpt_interval_s or ckpt_persist_s or 1.0,
              ckpt_cost_s, restart_s, repair_dist, elastic_min_nodes, ckpt_persist_s).check()
    d = Derivation()
    if job is not None:
        d.steps.extend(job.steps)
    c = d.given("profile_count", "interruptions in the profile (c)", profile.total, note=profile.source)
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
        if ckpt_persist_s > ckpt_interval_s:
            ckpt_interval_s = d.given("ckpt_interval_s", "checkpoint interval: a save's background write (tau)",
                                      ckpt_persist_s, "s", note="longer than Daly's: the next save waits for it")
            interval_from = "the background write of an asynchronous save (longer than Daly's optimum)"
    else:
        d.given("ckpt_interval_s", "checkpoint interval (tau)", ckpt_interval_s, "s", note="--checkpoint-interval")
        interval_from = "given"
    if spares is None:
        plan = plan_spares(gpus, gpus_per_node, profile_data=profile, repair_hours=repair_hours, target=target,
                           ckpt_cost_s=ckpt_cost_s if ckpt_cost_s > 0 else 1.0, restart_s=restart_s)
        spares = plan.spare_nodes
        d.given("spares", "pool spares (s)", spares, "nodes",
                note=f"Poisson plan: L = {num(plan.expected_nodes_in_repair)} nodes in repair, "
                     f"P(N > {spares}) = {num(plan.tail_at_spares)} < 1 - {gnum(target)}; see `slurm-ft spares plan`")
        spares_from = f"spares plan at target {gnum(target)}"
    else:
        d.given("spares", "pool spares (s)", spares, "nodes", note="--spares")
        spares_from = "given"
    d.given("repair_hours", "mean time to return a node (H)", repair_hours, "h",
            note="exponential" if repair_dist == "exp" else "fixed")
    restart = policy.restart_s if policy.restart_s is not None else restart_s
    d.given("restart_s", "restart: relaunch + checkpoint load", restart, "s",
            note="from the policy" if policy.restart_s is not None else restart_note)
    if ckpt_persist_s:
        d.given("ckpt_persist_s", "an asynchronous save's background write", ckpt_persist_s, "s",
                note="a fault before it ends resumes from the save before")
    params = SimParams(gpus, gpus_per_node, days, spares, repair_hours, ckpt_interval_s, ckpt_cost_s, restart_s,
                       repair_dist, elastic_min_nodes, ckpt_persist_s)
    params.check()
    return SimSetup(profile, policy, params, d, interval_from, spares_from)


def _swap_text(share: float) -> str:
    return "yes" if share == 1 else "no" if share == 0 else f"{100 * share:.0f}%"


def policy_line(p: Policy) -> str:
    if p.routes is not None:
        return (f"{', '.join(p.levers) or 'Slurm alone'}; the way back of each kind of fault below")
    return (f"detect crash {gnum(p.detect_crash_s)} s / host lost {gnum(p.detect_node_s)} s / hang "
            f"{gnum(p.detect_hang_s)} s, requeue {gnum(p.requeue_s)} s, swap {gnum(p.swap_s)} s"
            + (f", restart {gnum(p.restart_s)} s" if p.restart_s is not None else ""))


FAULTS = {"crash/swap": "GPU/host part fails (a signal on the node)", "crash/keep": "software (nothing to blame)",
          "node/swap": "host lost (stops answering)", "hang/swap": "hang, a node to blame (link, NIC)",
          "hang/keep": "hang, no node to blame"}


def routes_lines(p: Policy, restart: float) -> List[str]:
    """The way back of each kind of fault under a policy built from features (plan/levers.py)."""
    if p.routes is None:
        return []
    out = [f"  {'fault':<42} {'way back':<14} {'detect':>8} {'sched':>8} {'swap':>8} {'restart':>8} {'total':>8}"]
    for key, way, det, sched, swap, rest, _ in describe(p, restart):
        total = det + max(sched, swap) + rest
        out.append(f"  {FAULTS[key]:<42} {way:<14} {num(det):>8} {num(sched):>8} {num(swap):>8} {num(rest):>8} "
                   f"{num(total):>8}")
    if p.hot_spares:
        out.append(f"  in allocation while one of the {p.hot_spares} hot spare(s) is left and the node is not the batch "
                   f"host (1 of n); the next requeue refills them")
    if p.planned_share:
        out.append(f"  planned: {100 * p.planned_share:g}% of node-taking GPU faults are swapped at a checkpoint "
                   f"before they fail (no work lost; one save written through)")
    if p.replica_groups > 1:
        out.append(f"  replica groups: a fault stops 1 of {p.replica_groups} groups for its way back; the others train "
                   f"on (charged as 1/{p.replica_groups} of that time to 'shrunk'; no work lost)")
    return out


def figures_lines(f: Figures, names: Sequence[str] = ()) -> List[str]:
    """Each figure with its kind and source, and the file it came from."""
    out = [f"Figures from {', '.join(f.files)}:"]
    for name, m in f.measured_by.items():
        out.append(f"  {name} measured " + ", ".join(f"{k} {m[k]}" for k in ("date", "machine", "slurm") if k in m)
                   + (f" ({m['note']})" if "note" in m else ""))
    for table in (f.figures, f.job, f.levers):
        for name in (names or sorted(table)):
            if name in table:
                x = table[name]
                out.append(f"  {name:<26} {gnum(x.value):>9}  {x.kind:<10} {x.source}")
    for c in sorted(f.curves.values(), key=lambda c: c.name):
        a, b = c.fit()
        pts = ", ".join(f"{n}: {gnum(v)}" for n, v in c.points)
        out.append(f"  {c.name:<26} {'curve':>9}  {c.kind:<10} {c.source}; points (nodes: s) {pts}; fit over "
                   f"{', '.join(str(u) for u in c.use)}: {num(a)} + {num(b)} × log2(n)")
    return out


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
    rl = routes_lines(pol, p.restart_s)
    if rl:
        out += ["", "Ways back (seconds; sched and swap side by side):"] + rl
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
    paths = by_path(results)
    if set(paths) - {"requeue"}:
        out.append("  by way back             " + ", ".join(f"{k} {num(v)}" for k, v in paths.items()))
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


def by_path(results: Sequence[SimResult]) -> Dict[str, float]:
    """Mean interruptions per way back over the seeds."""
    out: Dict[str, float] = {}
    for r in results:
        for k, v in r.by_path.items():
            out[k] = out.get(k, 0.0) + v / len(results)
    return out


def to_dict(s: SimSetup, results: Sequence[SimResult]) -> Dict[str, Any]:
    summ = summarise(results)
    p = s.params
    routes = [{"fault": key, "way": way, "detect_s": det, "sched_s": sched, "swap_s": swap, "restart_s": rest,
               "requeued": req} for key, way, det, sched, swap, rest, req in describe(s.policy, p.restart_s)] \
        if s.policy.routes is not None else None
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
        "elastic_min_nodes": p.elastic_min_nodes, "checkpoint_persist_s": p.ckpt_persist_s,
        "levers": list(s.policy.levers), "hot_spares": s.policy.hot_spares, "routes": routes,
        "interruptions_by_path": by_path(results),
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
    head = f"  {'policy':<12} {'ETTR':>8} {'min..max':>17} {'sd':>6} {'interr.':>8} {'exhaust.':>8}" + "".join(
        f" {SHORT[c]:>10}" for c in CAUSES)
    out += ["", f"Results (means over seeds; hours lost by cause, of {num(elapsed_h)} elapsed):", head]
    for s, res in runs:
        summ = summarise(res)
        e = summ["ettr"]
        out.append(f"  {s.policy.name:<12} {pct(e['mean']):>8} {pct(e['min']) + '..' + pct(e['max']):>17} "
                   f"{pct(e['stdev']):>6} "
                   f"{num(summ['interruptions']['mean']):>8} {num(summ['pool_exhaustion_events']['mean']):>8}"
                   + "".join(f" {num(summ['lost_hours_by_cause'][c]['mean']):>10}" for c in CAUSES))
    for s, _ in runs:
        rl = routes_lines(s.policy, s.params.restart_s)
        if rl:
            out += ["", f"Ways back under {s.policy.name} (seconds; sched and swap side by side):"] + rl
    out += ["", "  ETTR = useful / elapsed; each policy's own breakdown: `slurm-ft sim --policy NAME`."]
    return out


# --- the waterfall: one lever at a time ----------------------------------------------------------------

WaterfallStep = Tuple[str, SimSetup, Sequence[SimResult]]      # (lever, or "slurm" for Slurm alone; setup; results)


def waterfall_rows(steps: Sequence[WaterfallStep]) -> List[Dict[str, Any]]:
    rows: List[Dict[str, Any]] = []
    prev: Optional[float] = None
    for lever, s, res in steps:
        summ = summarise(res)
        e = summ["ettr"]
        rows.append({"lever": lever, "label": "Slurm alone" if lever == "slurm" else "+ " + LABELS[lever],
                     "ships": "Slurm" if lever == "slurm" else ships(lever), "levers": list(s.policy.levers),
                     "ettr": e, "delta_ettr": None if prev is None else e["mean"] - prev,
                     "checkpoint_cost_s": s.params.ckpt_cost_s, "checkpoint_interval_s": s.params.ckpt_interval_s,
                     "lost_hours_by_cause": {c: summ["lost_hours_by_cause"][c]["mean"] for c in CAUSES},
                     "interruptions_by_path": by_path(res)})
        prev = e["mean"]
    return rows


def waterfall_verdict(rows: Sequence[Dict[str, Any]], aim: float) -> Dict[str, Any]:
    """ETTR with slurm-ft's levers, and with what exists today (the job's async checkpoint too), against
    the aim; what is left then, and what each lever after it adds."""
    def last(who: Sequence[str]) -> int:
        return max(i for i, r in enumerate(rows) if r["ships"] in who)
    ft, today = last(("Slurm", "slurm-ft")), last(("Slurm", "slurm-ft", "the job", "slurm-ft + the job"))
    after = [{"lever": r["lever"], "adds": r["delta_ettr"]} for r in rows[today + 1:]]
    return {"slurm_ft_ettr": rows[ft]["ettr"], "today_ettr": rows[today]["ettr"], "aim": aim,
            "slurm_ft_through": rows[ft]["lever"], "today_through": rows[today]["lever"],
            "slurm_ft_meets_aim": rows[ft]["ettr"]["mean"] >= aim, "today_meets_aim": rows[today]["ettr"]["mean"] >= aim,
            "left_hours_by_cause_slurm_ft": dict(sorted(rows[ft]["lost_hours_by_cause"].items(), key=lambda kv: -kv[1])),
            "left_hours_by_cause_today": dict(sorted(rows[today]["lost_hours_by_cause"].items(), key=lambda kv: -kv[1])),
            "levers_after_slurm_ft": [{"lever": r["lever"], "adds": r["delta_ettr"]} for r in rows[ft + 1:]],
            "levers_after_today": after,
            "first_to_reach_aim": next((r["lever"] for r in rows if r["ettr"]["mean"] >= aim), None)}


def render_waterfall(steps: Sequence[WaterfallStep], aim: float, settings: Sequence[str] = ()) -> List[str]:
    s0 = steps[0][1]
    p = s0.params
    res0 = steps[0][2]
    seeds = [r.seed for r in res0]
    seed_txt = f"seed {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} seeds ({seeds[0]}..{seeds[-1]})"
    elapsed_h = res0[0].elapsed_s / 3600
    rows = waterfall_rows(steps)
    out = [f"Waterfall: {num(p.gpus)} GPUs ({num(p.nodes)} nodes of {p.gpus_per_node}) for {gnum(p.days)} days, "
           f"profile {s0.profile.name}, {num(p.spares)} pool spares, {seed_txt}; each row adds one lever to the "
           f"row above, on the same faults", "Inputs and derived inputs (Slurm alone's checkpoints):"]
    out += s0.derivation.render()
    if settings:
        out += ["", "Lever settings:"] + [f"  {x}" for x in settings]
    head = (f"  {'':<66} {'ETTR':>8} {'min..max':>17} {'change':>8}" + "".join(f" {SHORT[c]:>10}" for c in CAUSES)
            + "  ckpt every / blocks")
    out += ["", f"ETTR, and hours lost by cause (means over seeds, of {num(elapsed_h)} elapsed):", head]
    for r in rows:
        e = r["ettr"]
        mark = {"the job": "  (the job's)", "slurm-ft + the job": "  (a torchft job)",
                "not yet": "  (not shipped)"}.get(r["ships"], "")
        change = "" if r["delta_ettr"] is None else f"{100 * r['delta_ettr']:+.2f}"
        out.append(f"  {(r['label'] + mark)[:66]:<66} {pct(e['mean']):>8} {pct(e['min']) + '..' + pct(e['max']):>17} "
                   f"{change:>8}" + "".join(f" {num(r['lost_hours_by_cause'][c]):>10}" for c in CAUSES)
                   + f"  {num(r['checkpoint_interval_s'])} s / {num(r['checkpoint_cost_s'])} s")
    v = waterfall_verdict(rows, aim)

    def spread_txt(e: Spread) -> str:
        return f"{pct(e['mean'])} (min {pct(e['min'])}, max {pct(e['max'])}, sd {pct(e['stdev'])})"

    def left(hours: Dict[str, float]) -> str:
        return ", ".join(f"{CAUSE_LABELS[c].split(' (')[0]} {num(h)} h" for c, h in hours.items() if h >= 0.05)

    def adds(xs: Sequence[Dict[str, Any]]) -> str:
        return ", ".join(f"{LABELS[x['lever']].split(' (')[0]} {100 * x['adds']:+.2f} points" for x in xs)
    def through(key: str) -> str:
        return LABELS.get(v[key], "Slurm alone").split(" (")[0]
    out += ["", f"With slurm-ft's levers (through {through('slurm_ft_through')}): ETTR {spread_txt(v['slurm_ft_ettr'])}; "
                f"aim {pct(aim)}: {'met' if v['slurm_ft_meets_aim'] else 'not met'}.",
            f"  left: {left(v['left_hours_by_cause_slurm_ft'])}; the levers after it add: "
            f"{adds(v['levers_after_slurm_ft'])}.",
            f"With what the job brings too (through {through('today_through')}: what exists today): ETTR "
            f"{spread_txt(v['today_ettr'])}; aim {pct(aim)}: {'met' if v['today_meets_aim'] else 'not met'}.",
            f"  left: {left(v['left_hours_by_cause_today'])}"
            + (f"; the levers not shipped yet add: {adds(v['levers_after_today'])}." if v["levers_after_today"] else ".")]
    if v["first_to_reach_aim"]:
        out.append(f"  The first row at or above the aim: {LABELS.get(v['first_to_reach_aim'], 'Slurm alone')}.")
    out += ["", "  ETTR = useful / elapsed; `slurm-ft sim --policy slurm-ft [features]` prints one row's ways back."]
    return out
