"""`slurm-ft sim`: simulate a training job's effective training time under a failure profile and policy."""
from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import click

from slurm_ft.errors import EnvironmentProblem, UsageError
from slurm_ft.plan import figures as fg
from slurm_ft.plan import levers as lv
from slurm_ft.plan import profiles as pr
from slurm_ft.plan import sim as simlib
from slurm_ft.plan import sim_report
from slurm_ft.plan.explain import Derivation, num, rnd
from slurm_ft.plan.jobcost import job_costs

if TYPE_CHECKING:
    from slurm_ft.config import PlanningConfig

# The figures measured on this project's lab, shipped as package data (bench/figures.py writes it)
SHIPPED_FIGURES = Path(__file__).resolve().parent.parent / "data" / "figures-lab.json"
BYTEROBUST_AIM = 0.97       # ByteRobust's 97% ETTR over 3 months on 9,600 GPUs (arXiv 2509.16293)


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None


def _yaml(path: str) -> Any:
    import yaml  # lazy: ~10 ms; only for --profile-file/--policy-file, not `sim --help`
    try:
        return yaml.safe_load(_read(path))
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML: {getattr(exc, 'problem', exc)}") from None


def load_figures(figures_file: Optional[str], recovery_figures: Optional[str]) -> Tuple[fg.Figures, Optional[pr.Policy]]:
    """The shipped figures, a site's file over them, and a `bench/recovery.py --json` output over both.
    A recovery file of the older flat shapes (detect/recovery p50 only) gives a flat slurm-ft policy instead."""
    figs = fg.parse(_read(str(SHIPPED_FIGURES)), f"slurm-ft's {SHIPPED_FIGURES.name}")
    if figures_file:
        figs = figs.over(fg.parse(_read(figures_file), figures_file))
    flat = None
    if recovery_figures:
        text = _read(recovery_figures)
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"{recovery_figures}: not JSON: {exc}") from None
        if isinstance(data, dict) and isinstance(data.get("slurm_ft"), dict) and "segments" in data["slurm_ft"]:
            values, points = fg.from_recovery_bench(data, recovery_figures)
            over = fg.Figures(files=[recovery_figures])
            for name, v in values.items():
                over.figures[name] = fg.Figure(name, v, "measured", f"bench/recovery.py --path {data.get('path')}, p50",
                                               recovery_figures)
            for name, (n, v) in points.items():
                old = figs.curve(name)
                pts = tuple(sorted({**dict(old.points), n: v}.items()))
                over.curves[name] = fg.Curve(name, pts, tuple(sorted(set(old.use) | {n})), "measured",
                                             f"{old.source}; {n} nodes from {recovery_figures}", recovery_figures)
            figs = figs.over(over)
        else:
            det, rec, what = pr.recovery_figures(text, recovery_figures)
            flat = pr.slurm_ft_policy(det, rec, source=f"measured by bench/recovery.py ({recovery_figures}): {what}")
    return figs, flat


@click.command("sim")
@click.option("--profile", default=None, help="Failure profile (built-in: llama3). Default: the config's, llama3.")
@click.option("--profile-file", type=click.Path(dir_okay=False), default=None, help="A failure profile in YAML.")
@click.option("--policy", type=click.Choice(pr.POLICIES), default=None,
              help="Recovery: Slurm alone, slurm-ft (default), Llama-3-like automation, or custom (--policy-file).")
@click.option("--policy-file", type=click.Path(dir_okay=False), default=None,
              help="Custom policy YAML: detect_s: {crash, node, hang}, requeue_s, swap_s, optional restart_s.")
@click.option("--figures", "figures_file", type=click.Path(dir_okay=False), default=None,
              help="A measurement file (slurm-ft-figures/1, docs/planning.md): the site's own figures over the "
                   "ones slurm-ft ships (measured on its lab).")
@click.option("--set", "settings", multiple=True, metavar="NAME=SECONDS",
              help="One figure (docs/planning.md), e.g. --set collective_timeout_s=120 --set slurmd_timeout_s=60.")
@click.option("--recovery-figures", type=click.Path(dir_okay=False), default=None,
              help="JSON written by `bench/recovery.py --json`: its measured phases over the figures.")
@click.option("--hot-spares", type=click.IntRange(min=0), default=None,
              help="slurm-ft policy: hot spare nodes per job (slurm-ft sbatch --hot-spares K). Default 0.")
@click.option("--hang-timeout", "hang_timeout_s", type=float, default=None,
              help="slurm-ft policy: the job's hang timeout in seconds (slurm-ft sbatch --hang-timeout S).")
@click.option("--expedite", is_flag=True, help="Slurm >= 25.11 --requeue=expedite: Slurm's requeue delay is 0.")
@click.option("--async-checkpoint", is_flag=True,
              help="The job's saves are asynchronous: they block for the copy to host memory only.")
@click.option("--planned-swaps", "planned_share", type=float, default=None,
              help="Planned swaps: the share of node-taking GPU faults swapped ahead, at a checkpoint.")
@click.option("--replica-groups", type=click.IntRange(min=1), default=None,
              help="Replica groups: the job trains as R torchft groups; a fault stops one.")
@click.option("--params", type=float, default=None,
              help="The model's parameters: the checkpoint's size, save and load times (the `ckpt plan` arithmetic).")
@click.option("--bytes-per-param", type=float, default=16.0, show_default=True)
@click.option("--d2h-gbps", type=float, default=25.0, show_default=True, help="With --params: GPU to host, each GPU.")
@click.option("--node-storage-gbps", type=float, default=50.0, show_default=True,
              help="With --params: node to storage, each node (reads as fast).")
@click.option("--storage-gbps", type=float, default=2000.0, show_default=True,
              help="With --params: the storage's aggregate (Llama 3's Tectonic: 2,000 GB/s sustained).")
@click.option("--init-s", type=float, default=None,
              help="Each rank's own start before the checkpoint load (default: the figures' init_s).")
@click.option("--gpus", type=int, default=None, help="GPUs in the job (default: the profile's, 16,384 for llama3).")
@click.option("--gpus-per-node", type=int, default=None, help="Default: the profile's (8).")
@click.option("--days", type=float, default=None, help="Elapsed days to simulate (default: the profile's window).")
@click.option("--seed", type=int, default=0, show_default=True, help="First random seed.")
@click.option("--seeds", "n_seeds", type=int, default=10, show_default=True,
              help="How many seeds (seed, seed+1, ...), summarised with their spread.")
@click.option("--spares", type=int, default=None, help="Pool spare nodes (default: the Poisson plan's count).")
@click.option("--target", type=float, default=None, help="Target of that plan (default 0.999).")
@click.option("--repair-hours", type=float, default=None, help="Mean time to return a node (default 72).")
@click.option("--repair-dist", type=click.Choice(["exp", "fixed"]), default="exp", show_default=True)
@click.option("--checkpoint-interval", "ckpt_interval_min", type=float, default=None,
              help="Minutes of compute between checkpoints (default: Daly's optimum).")
@click.option("--checkpoint-cost-s", "ckpt_cost_s", type=float, default=None,
              help="Blocking seconds of a synchronous save (default 10; with --params: its arithmetic).")
@click.option("--restart-s", type=float, default=None,
              help="One restart time (relaunch + checkpoint load) for every way back, instead of the model's.")
@click.option("--elastic-min-nodes", type=int, default=None,
              help="Elastic job: run on as few as this many nodes instead of waiting for a spare.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG (needs matplotlib): ETTR against spares and checkpoint interval; with --waterfall, "
                   "the waterfall.")
@click.option("--detect-hang-s", type=float, default=None,
              help="Override the policy's time to notice a hang (e.g. a shorter collective timeout).")
@click.option("--detect-node-s", type=float, default=None,
              help="Override the policy's time to notice a lost host (e.g. a lower SlurmdTimeout).")
@click.option("--compare", is_flag=True,
              help="Run slurm, llama3-like and slurm-ft (and a --policy-file) on the same faults, side by side.")
@click.option("--waterfall", is_flag=True,
              help="ETTR from Slurm alone, adding one lever at a time, each with its hours lost by cause.")
@click.option("--aim", type=float, default=BYTEROBUST_AIM, show_default=True,
              help="With --waterfall: the ETTR to reach (ByteRobust's 97%).")
@click.option("--schedule", "schedule_file", type=click.Path(dir_okay=False), default=None,
              help="A given list of faults (JSON, docs/planning.md): each one's way back and cost under the policy, "
                   "instead of a simulation.")
@click.option("--from-journal", is_flag=True,
              help="Faults at this cluster's own rate and repair time (the journal in state_dir), not a profile.")
@click.option("--fleet-nodes", type=click.IntRange(min=1), default=None,
              help="With --from-journal: nodes the journal watched (default: the nodes Slurm knows).")
@click.option("--write-journal", "journal_dir", type=click.Path(file_okay=False), default=None,
              help="Also write the first seed's faults, repairs and recoveries as a journal into this (empty) "
                   "state dir, ending now: what `spares plan --from-journal` reads.")
@click.option("--json", "as_json", is_flag=True, help="Everything as one JSON object.")
@click.pass_context
def sim(ctx: click.Context, profile: Optional[str], profile_file: Optional[str], policy: Optional[str],
        policy_file: Optional[str], figures_file: Optional[str], settings: Tuple[str, ...],
        recovery_figures: Optional[str],
        hot_spares: Optional[int], hang_timeout_s: Optional[float], expedite: bool, async_checkpoint: bool,
        planned_share: Optional[float], replica_groups: Optional[int], params: Optional[float],
        bytes_per_param: float, d2h_gbps: float, node_storage_gbps: float, storage_gbps: float,
        init_s: Optional[float], gpus: Optional[int],
        gpus_per_node: Optional[int], days: Optional[float], seed: int, n_seeds: int, spares: Optional[int],
        target: Optional[float], repair_hours: Optional[float], repair_dist: str,
        ckpt_interval_min: Optional[float], ckpt_cost_s: Optional[float], restart_s: Optional[float],
        elastic_min_nodes: Optional[int], plot_path: Optional[str], detect_hang_s: Optional[float],
        detect_node_s: Optional[float], compare: bool, waterfall: bool, aim: float, schedule_file: Optional[str],
        from_journal: bool,
        fleet_nodes: Optional[int], journal_dir: Optional[str], as_json: bool) -> None:
    """Discrete-event simulation of a synchronous training job: faults by class, the way back each takes
    under a policy, spare pool with repairs, checkpoints and lost work. Prints ETTR, time lost by cause,
    interruptions and pool exhaustion events, over several seeds with their spread."""
    from slurm_ft.config import load_config  # lazy: config loads yaml; not for `sim --help`
    cfg = load_config((ctx.obj or {}).get("config_path")).planning
    if profile and profile_file:
        raise UsageError("give --profile or --profile-file, not both")
    if from_journal and (profile or profile_file):
        raise UsageError("--from-journal gives the failure rate: no --profile or --profile-file with it")
    if policy_file and policy not in (None, "custom"):
        raise UsageError("--policy-file goes with --policy custom")
    if compare and waterfall:
        raise UsageError("give --compare or --waterfall, not both")
    if (compare or waterfall) and policy not in (None, "custom"):
        raise UsageError(f"--{'compare' if compare else 'waterfall'} runs its own policies; leave out --policy")
    if waterfall and policy_file:
        raise UsageError("--waterfall builds its policies from the levers; leave out --policy-file")
    if waterfall and elastic_min_nodes is not None:
        raise UsageError("--waterfall adds hot spares, which an elastic job (--elastic-min-nodes) is not modelled with")
    if compare and plot_path:
        raise UsageError("--plot draws one policy or the waterfall; leave out --compare")
    if not 0 < aim < 1:
        raise UsageError(f"--aim must be between 0 and 1, got {aim}")
    if params is not None and ckpt_cost_s is not None:
        raise UsageError("--params derives the checkpoint's cost; leave out --checkpoint-cost-s")
    for flag, v in (("--hang-timeout", hang_timeout_s), ("--params", params)):
        if v is not None and not (v > 0 and v != float("inf")):
            raise UsageError(f"{flag} must be positive, got {v}")
    for flag, v in (("--init-s", init_s), ("--restart-s", restart_s), ("--checkpoint-cost-s", ckpt_cost_s)):
        if v is not None and not (v >= 0 and v != float("inf")):
            raise UsageError(f"{flag} must be zero or more, got {v}")
    if planned_share is not None and not 0 <= planned_share <= 1:
        raise UsageError(f"--planned-swaps must be a share between 0 and 1, got {planned_share}")
    if from_journal:   # one class: node faults at the journal's rate, each taking a node out
        from slurm_ft.cli.spares import observed_from_journal  # lazy: the journal's readers, only --from-journal
        obs = observed_from_journal(ctx, fleet_nodes, 0.95)
        gpn = gpus_per_node or 8
        prof = pr.profile_from_dict({"name": "journal", "days": obs.days, "gpus": obs.nodes * gpn, "gpus_per_node": gpn,
                                     "source": obs.source(), "classes": [
                                         {"name": "node fault (journal)", "count": obs.incidents, "replace": True,
                                          "kind": "node"}]}, "the journal")
        if repair_hours is None and obs.repair_hours["mean"]:
            repair_hours = obs.repair_hours["mean"]
    elif profile_file:
        prof = pr.profile_from_dict(_yaml(profile_file), profile_file)
    else:
        prof = pr.get_profile(profile or cfg.profile)
    if n_seeds < 1:
        raise UsageError(f"--seeds must be at least 1, got {n_seeds}")
    if ckpt_interval_min is not None and not ckpt_interval_min > 0:
        raise UsageError(f"--checkpoint-interval must be positive, got {ckpt_interval_min}")
    if plot_path:
        _need_matplotlib()
    if journal_dir and (compare or waterfall or elastic_min_nodes is not None):
        raise UsageError("--write-journal records one policy's run of a job that waits for spares: "
                         "no --compare, --waterfall or --elastic-min-nodes with it")
    for flag, v in (("--detect-hang-s", detect_hang_s), ("--detect-node-s", detect_node_s)):
        if v is not None and not (v >= 0 and v != float("inf")):
            raise UsageError(f"{flag} must be zero or more, got {v}")

    figs, flat_ft = load_figures(figures_file, recovery_figures)
    for item in settings:
        key, eq, val = item.partition("=")
        if not eq or key not in {**fg.FIGURES, **fg.JOB}:
            raise UsageError(f"--set {item}: expected NAME=NUMBER with NAME one of "
                             f"{', '.join(sorted({**fg.FIGURES, **fg.JOB}))}")
        try:
            v = float(val)
        except ValueError:
            raise UsageError(f"--set {item}: {val!r} is not a number") from None
        if not (v >= 0 and v != float("inf")):
            raise UsageError(f"--set {item}: must be zero or more")
        figs = figs.with_figure(key, v, "configured", "--set on the command line")
    G = gpus if gpus is not None else prof.gpus
    gpn = gpus_per_node if gpus_per_node is not None else prof.gpus_per_node
    if G <= 0 or gpn <= 0 or G % gpn:
        sim_report.setup(prof, pr.SLURM, gpus=G, gpus_per_node=gpn, days=1, spares=0, repair_hours=1,
                         ckpt_interval_s=1, ckpt_cost_s=1, restart_s=1)      # the same one-line error as before
    _bounded_work(prof, G, gpn, days, n_seeds, replica_groups)
    job, job_d = job_costs(figs, gpus=G, gpus_per_node=gpn, params=params, bytes_per_param=bytes_per_param,
                           d2h_gbps=d2h_gbps, node_storage_gbps=node_storage_gbps, storage_gbps=storage_gbps,
                           ckpt_cost_s=ckpt_cost_s if ckpt_cost_s is not None else cfg.checkpoint_cost_s,
                           init_s=init_s, restart_s=restart_s)
    rs = lv.restarts(figs, job)
    if restart_s is None:       # shown as the sum of the parts as printed (the simulation uses them unrounded)
        for name, label, curve in (("restart_requeued_s", "restart of a requeued job (launch + init + load)",
                                    "restart_launch_s"),
                                   ("restart_relaunched_s", "restart in the allocation (relaunch + init + load)",
                                    "relaunch_s")):
            parts = [rnd(figs.curve(curve).at(job.nodes)), rnd(job.init_s), rnd(job.load_s)]
            job_d.step(name, label, f"{curve.removesuffix('_s')}(n) + init + load",
                       " + ".join(num(x) for x in parts), sum(parts), "s",
                       note=f"{curve}: the lab's measured curve at n = {num(job.nodes)} nodes")
    ft = lv.Features(True, True, True, hot_spares or 0, hang_timeout_s, async_checkpoint, planned_share or 0.0,
                     replica_groups or 1, expedite)

    def built(x: lv.Features, name: str) -> pr.Policy:
        return _override(lv.build(x, figs, job, name), detect_hang_s, detect_node_s)

    def flat(p: pr.Policy) -> pr.Policy:
        return _override(p, detect_hang_s, detect_node_s)

    runs: List[Tuple[str, sim_report.SimSetup, List[simlib.SimResult]]] = []
    seeds = list(range(seed, seed + n_seeds))

    def run(label: str, pol: pr.Policy, asynchronous: bool) -> None:
        blocking, write = job.blocking(asynchronous)
        s = _setup(cfg, prof, pol, G, gpn, days, spares, repair_hours, repair_dist, ckpt_interval_min, blocking,
                   write, rs.requeued, elastic_min_nodes, target, job_d,
                   "--restart-s" if restart_s is not None else "a requeued job's (above)")
        runs.append((label, s, simlib.run_seeds(s.profile, s.policy, s.params, seeds)))

    if waterfall:
        x = lv.Features(expedite=expedite)
        run("slurm", built(x, "slurm"), False)
        for lever in lv.ORDER:
            x = lv.with_lever(_with_flags(x, lever, hot_spares, hang_timeout_s, planned_share, replica_groups), lever, figs)
            run(lever, built(x, f"+{lever}"), x.async_checkpoint)
        steps = [(label, s, r) for label, s, r in runs]
        if as_json:
            out_w: Dict[str, Any] = {"waterfall": sim_report.waterfall_rows(steps),
                                     "verdict": sim_report.waterfall_verdict(sim_report.waterfall_rows(steps), aim),
                                     "steps": [sim_report.to_dict(s, r) for _, s, r in steps],
                                     "figures": figs.to_dict()}
            if plot_path:
                _plot_waterfall(sim_report.waterfall_rows(steps), steps[0][1], plot_path)
                out_w["plot"] = {"path": plot_path}
            click.echo(json.dumps(out_w, indent=2))
            return
        click.echo("\n".join(sim_report.render_waterfall(steps, aim, _lever_settings(figs, steps))))
        click.echo("")
        click.echo("\n".join(sim_report.figures_lines(figs)))
        if plot_path:
            _plot_waterfall(sim_report.waterfall_rows(steps), steps[0][1], plot_path)
            click.echo(f"\nWaterfall written to {plot_path}")
        return
    if compare:
        run("slurm", built(lv.Features(expedite=expedite), "slurm"), False)
        run("llama3-like", flat(pr.LLAMA3_LIKE), False)
        run("slurm-ft", flat(flat_ft) if flat_ft else built(ft, "slurm-ft"), ft.async_checkpoint)
        if policy_file:
            run("custom", flat(choose_policy("custom", policy_file)), False)
        if as_json:
            click.echo(json.dumps({"compare": [sim_report.to_dict(s, r) for _, s, r in runs],
                                   "figures": figs.to_dict()}, indent=2))
        else:
            click.echo("\n".join(sim_report.render_compare([(s, r) for _, s, r in runs])))
            click.echo("")
            click.echo("\n".join(sim_report.figures_lines(figs)))
        return
    name = policy or ("custom" if policy_file else "slurm-ft")
    if schedule_file:
        if compare or waterfall or journal_dir or plot_path:
            raise UsageError("--schedule replays one policy: no --compare, --waterfall, --write-journal or --plot")
        schedule = _schedule(schedule_file)
        pol = (flat(flat_ft) if flat_ft else built(ft, "slurm-ft")) if name == "slurm-ft" else \
            built(lv.Features(expedite=expedite), "slurm") if name == "slurm" else flat(choose_policy(name, policy_file))
        blocking, write = job.blocking(ft.async_checkpoint and name == "slurm-ft")
        s = _setup(cfg, prof, pol, G, gpn, days, 0, repair_hours, repair_dist, ckpt_interval_min, blocking, write,
                   rs.requeued, None, target, job_d, "--restart-s" if restart_s is not None else "a requeued job's")
        done = simlib.replay(s.policy, s.params, schedule)
        start = lv.startup(figs, job, supervised=bool(s.policy.hot_spares) or "hang_timeout" in
                           " ".join(s.policy.levers))
        out_r = _replay_dict(done, start, G)
        out_r.update({"policy": s.policy.name, "levers": list(s.policy.levers), "figures": figs.to_dict(),
                      "checkpoint_interval_s": s.params.ckpt_interval_s, "checkpoint_cost_s": s.params.ckpt_cost_s})
        if as_json:
            click.echo(json.dumps(out_r, indent=2))
        else:
            click.echo("\n".join(_replay_lines(out_r, s)))
        return
    if recovery_figures and name != "slurm-ft":
        raise UsageError("--recovery-figures goes with --policy slurm-ft")
    if name == "slurm-ft":
        run(name, flat(flat_ft) if flat_ft else built(ft, "slurm-ft"), ft.async_checkpoint)
    elif name == "slurm":
        run(name, built(lv.Features(expedite=expedite), "slurm"), False)
    else:
        run(name, flat(choose_policy(name, policy_file)), False)
    _, s, results = runs[0]
    out = sim_report.to_dict(s, results)
    out["figures"] = figs.to_dict()
    if journal_dir:
        out["journal"] = _write_journal(s, seeds[0], journal_dir)
    if plot_path:
        data = _sweep(s, seeds)
        _plot(data, s, plot_path)
        out["plot"] = {"path": plot_path, **data}
    if as_json:
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo("\n".join(sim_report.render(s, results)))
        if s.policy.routes is not None:
            click.echo("")
            click.echo("\n".join(sim_report.figures_lines(figs)))
        if journal_dir:
            j = out["journal"]
            click.echo(f"\nJournal: {j['node_faults']} node faults and {j['incidents']} recoveries of seed {j['seed']} "
                       f"written to {j['path']} ({j['days']:g} days ending now; the simulated node-fault rate "
                       f"{j['rate_per_node_day']:.4g} per node-day on the job's {j['fleet_nodes']} nodes). Plan "
                       f"from it: `slurm-ft spares plan --from-journal --fleet-nodes {j['fleet_nodes']}` with "
                       f"state_dir: {journal_dir}")
        if plot_path:
            click.echo(f"\nPlot written to {plot_path} (ETTR against spare count and checkpoint interval; "
                       f"means over {len(seeds[:5])} seed(s))")


def choose_policy(name: str, policy_file: Optional[str]) -> pr.Policy:
    if name == "custom":
        if not policy_file:
            raise UsageError("--policy custom needs --policy-file FILE")
        return pr.policy_from_dict(_yaml(policy_file), policy_file)
    if policy_file:
        raise UsageError("--policy-file goes with --policy custom")
    return pr.builtin_policy(name)


def _with_flags(x: lv.Features, lever: str, hot: Optional[int], hang: Optional[float], planned: Optional[float],
                groups: Optional[int]) -> lv.Features:
    """The waterfall's lever at the setting the command line gave, where it gave one."""
    if lever == "hot_spares" and hot:
        return replace(x, hot_spares=hot)
    if lever == "hang_detection" and hang is not None:
        return replace(x, hang_timeout_s=hang)
    if lever == "planned_swaps" and planned:
        return replace(x, planned_swap_share=planned)
    if lever == "replica_groups" and groups and groups > 1:
        return replace(x, replica_groups=groups)
    return x


def _lever_settings(figs: fg.Figures, steps: Sequence[sim_report.WaterfallStep]) -> List[str]:
    last = steps[-1][1].policy
    out = [f"hot spares: {last.hot_spares} per job", f"planned swaps: {100 * last.planned_share:g}% of node-taking "
           f"GPU faults", f"replica groups: {last.replica_groups}"]
    hang = next((x for x in last.levers if x.startswith("hang_timeout=")), None)
    if hang:
        out.insert(1, f"hang timeout: {hang.split('=', 1)[1]}")
    src = [f"{n}: {figs.levers[n].kind}, {figs.levers[n].source}" for n in fg.LEVERS if n in figs.levers]
    return out + [f"  (unless given on the command line; {x})" for x in src]


def _write_journal(s: sim_report.SimSetup, seed: int, state_dir: str) -> Dict[str, object]:
    """Run `seed` again with its faults recorded and write them as a cluster journal (fleet/lifecycle/synthetic.py)."""
    from slurm_ft.fleet.lifecycle.node_history import Store  # lazy: the sqlite3 store, only --write-journal
    from slurm_ft.fleet.lifecycle.synthetic import write_sim_journal  # lazy: only --write-journal
    p = s.params
    faults: List[simlib.SimFault] = []
    simlib.simulate(s.profile, s.policy, p, seed, faults=faults)
    with Store(state_dir) as store:
        try:
            written = write_sim_journal(store, faults, job_nodes=p.nodes, spares=p.spares, days=p.days,
                                        start=time.time() - p.days * 86400.0, seed=seed)
        except ValueError as exc:
            raise UsageError(f"--write-journal {state_dir}: {exc}") from None
        path = str(store.path)
    rate = s.profile.replace_count / s.profile.days / s.profile.gpus * p.gpus_per_node
    return {"path": path, "seed": seed, "days": p.days, "node_faults": written, "incidents": len(faults),
            "fleet_nodes": p.nodes, "rate_per_node_day": rate}


def _override(p: pr.Policy, hang: Optional[float], node: Optional[float]) -> pr.Policy:
    said: List[str] = []
    if hang is not None:
        said.append(f"hang detection {hang:g} s")
    if node is not None:
        said.append(f"host-loss detection {node:g} s")
    if not said:
        return p

    def routes(table: Optional[Dict[str, pr.Route]]) -> Optional[Dict[str, pr.Route]]:
        if table is None:
            return None
        out = {}
        for key, r in table.items():
            kind = key.split("/")[0]
            d = hang if kind == "hang" else node if kind == "node" else None
            out[key] = r if d is None else replace(r, detect_s=d)
        return out
    return replace(p, detect_hang_s=p.detect_hang_s if hang is None else hang,
                   detect_node_s=p.detect_node_s if node is None else node,
                   routes=routes(dict(p.routes) if p.routes is not None else None),
                   in_allocation=routes(dict(p.in_allocation) if p.in_allocation is not None else None),
                   source=f"{p.source}; overridden: {', '.join(said)}")


MAX_SIMULATED = 2_000_000     # interruptions in one policy's run over all its seeds: ~2.5 s on one core


def _bounded_work(prof: pr.Profile, gpus: int, gpus_per_node: int, days: Optional[float], n_seeds: int,
                  replica_groups: Optional[int]) -> None:
    """Refuse (exit 2) a run whose work has no bound a person would wait for: the simulator's time grows
    with the interruptions it draws (the profile's rate at this size, over the days, for every seed)."""
    span = days if days is not None else prof.days
    if not (span > 0 and math.isfinite(span)):
        raise UsageError(f"--days must be positive and finite, got {span}")
    expected = prof.total * gpus / prof.gpus * span / prof.days * n_seeds
    if expected > MAX_SIMULATED:
        raise UsageError(f"{n_seeds:,} seeds of {span:g} days at {gpus:,} GPUs draw about {expected:,.0f} "
                         f"interruptions, more than {MAX_SIMULATED:,} (a few seconds' work): fewer seeds or days")
    if replica_groups is not None and replica_groups > gpus // gpus_per_node:
        raise UsageError(f"--replica-groups {replica_groups:,}: more groups than the job's "
                         f"{gpus // gpus_per_node:,} nodes")


def _setup(cfg: PlanningConfig, prof: pr.Profile, pol: pr.Policy, gpus: int, gpus_per_node: int,
           days: Optional[float], spares: Optional[int], repair_hours: Optional[float], repair_dist: str,
           ckpt_interval_min: Optional[float], ckpt_cost_s: float, ckpt_persist_s: float, restart_s: float,
           elastic_min_nodes: Optional[int], target: Optional[float], job: Derivation,
           restart_note: str) -> sim_report.SimSetup:
    return sim_report.setup(
        prof, pol, gpus=gpus, gpus_per_node=gpus_per_node,
        days=days if days is not None else prof.days, spares=spares,
        repair_hours=repair_hours if repair_hours is not None else cfg.repair_hours,
        ckpt_interval_s=None if ckpt_interval_min is None else ckpt_interval_min * 60,
        ckpt_cost_s=ckpt_cost_s, restart_s=restart_s, repair_dist=repair_dist, elastic_min_nodes=elastic_min_nodes,
        target=target if target is not None else cfg.target, ckpt_persist_s=ckpt_persist_s,
        job=Derivation(list(job.steps)), restart_note=restart_note)


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401  # lazy: optional package (slurm-ft[plot]), only --plot
    except ImportError:
        raise EnvironmentProblem("--plot needs matplotlib: pip install 'slurm-ft[plot]' (or pip install matplotlib)") from None


def _sweep(s: sim_report.SimSetup, seeds: Sequence[int]) -> Dict[str, List[Dict[str, float]]]:
    p = s.params
    top = max(2 * p.spares, 8)
    step = max(1, top // 16)
    counts = sorted(set(range(0, top + 1, step)) | {p.spares})
    base = p.ckpt_interval_s
    intervals = [base * f for f in (0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)]
    return simlib.sweep(s.profile, s.policy, p, seeds[:5], spares=counts, intervals_s=intervals)


def _plot(data: Dict[str, List[Dict[str, float]]], s: sim_report.SimSetup, path: str) -> None:
    import matplotlib  # lazy: optional package (slurm-ft[plot]), only --plot
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: optional and heavy, after matplotlib.use('Agg')

    p = s.params
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [r["spares"] for r in data["spares"]]
    a1.plot(xs, [100 * r["mean"] for r in data["spares"]], marker="o")
    a1.fill_between(xs, [100 * r["min"] for r in data["spares"]], [100 * r["max"] for r in data["spares"]], alpha=0.2)
    a1.axvline(p.spares, linestyle="--", color="grey", label=f"{p.spares} ({s.spares_from})")
    a1.set_xlabel("hot spare nodes")
    a1.set_ylabel("ETTR (%)")
    a1.set_title(f"ETTR vs spares (repair {p.repair_hours:g} h)")
    a1.legend(loc="lower right")
    xi = [r["interval_s"] / 60 for r in data["interval_s"]]
    a2.plot(xi, [100 * r["mean"] for r in data["interval_s"]], marker="o")
    a2.fill_between(xi, [100 * r["min"] for r in data["interval_s"]], [100 * r["max"] for r in data["interval_s"]],
                    alpha=0.2)
    a2.axvline(p.ckpt_interval_s / 60, linestyle="--", color="grey", label=f"{p.ckpt_interval_s / 60:.1f} min")
    a2.set_xscale("log")
    a2.set_xlabel("checkpoint interval (minutes, log)")
    a2.set_title(f"ETTR vs checkpoint interval (cost {p.ckpt_cost_s:g} s)")
    a2.legend(loc="lower center")
    fig.suptitle(f"{s.profile.name}, policy {s.policy.name}: {p.gpus:,} GPUs, {p.days:g} days")
    _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: str) -> None:
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the plot: {exc.strerror}") from None
    finally:
        plt.close(fig)


def _plot_waterfall(rows: Sequence[Dict[str, Any]], s0: sim_report.SimSetup, path: str) -> None:
    """The waterfall as a PNG: ETTR per row as floating bars (each lever's gain), and the hours lost by
    cause per row, stacked."""
    import matplotlib  # lazy: optional package (slurm-ft[plot]), only --plot
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: optional and heavy, after matplotlib.use('Agg')

    p = s0.params
    labels = ["Slurm alone" if r["lever"] == "slurm" else "+ " + r["lever"].replace("_", " ") for r in rows]
    ettr = [100 * r["ettr"]["mean"] for r in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5))
    xs = list(range(len(rows)))
    bottoms = [ettr[0] if i == 0 else min(ettr[i - 1], ettr[i]) for i in xs]
    heights = [ettr[0] - 50 if i == 0 else abs(ettr[i] - ettr[i - 1]) for i in xs]
    bottoms[0] = 50
    colours = [{"slurm-ft": "tab:blue", "the job": "tab:green", "slurm-ft + the job": "tab:cyan",
                "not yet": "tab:orange"}.get(r["ships"], "grey")
               for r in rows]
    a1.bar(xs, heights, bottom=bottoms, color=colours)
    for i in xs:
        a1.text(i, ettr[i] + 0.3, f"{ettr[i]:.1f}", ha="center", fontsize=8)
        lo, hi = 100 * rows[i]["ettr"]["min"], 100 * rows[i]["ettr"]["max"]
        a1.plot([i, i], [lo, hi], color="black", linewidth=0.8)
    a1.set_xticks(xs)
    a1.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    a1.set_ylim(max(50.0, min(ettr) - 5), 100)
    a1.set_ylabel("ETTR (%), min..max over seeds")
    a1.set_title("ETTR, one lever at a time (blue: slurm-ft's; green: the job's; cyan: slurm-ft's for a torchft job)",
                 fontsize=10)
    bottom = [0.0] * len(rows)
    for cause in simlib.CAUSES:
        h = [r["lost_hours_by_cause"][cause] for r in rows]
        if max(h) > 0:
            a2.bar(xs, h, bottom=bottom, label=sim_report.SHORT[cause])
            bottom = [b + v for b, v in zip(bottom, h)]
    a2.set_xticks(xs)
    a2.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    a2.set_ylabel("hours lost (mean over seeds)")
    a2.set_title("where the time goes")
    a2.legend(fontsize=8)
    fig.suptitle(f"{s0.profile.name}: {p.gpus:,} GPUs, {p.days:g} days, {p.spares} pool spares")
    _save(fig, plt, path)


def _schedule(path: str) -> List[simlib.ScheduledFault]:
    """A fault schedule: {"faults": [{"after_s": S, "kind": "crash|node|hang", "swap": true|false,
    "batch_host": false, "name": "..."}, ...]}; after_s counts from the job's last (re)start."""
    try:
        data = json.loads(_read(path))
    except ValueError as exc:
        raise UsageError(f"{path}: not JSON: {exc}") from None
    faults = data.get("faults") if isinstance(data, dict) else None
    if not isinstance(faults, list) or not faults:
        raise UsageError(f"{path}: expected {{\"faults\": [...]}} with at least one fault")
    out = []
    for i, f in enumerate(faults):
        where = f"{path}: faults[{i}]"
        if not isinstance(f, dict):
            raise UsageError(f"{where}: must be a mapping")
        extra = sorted(set(f) - {"after_s", "kind", "swap", "batch_host", "name"})
        if extra:
            raise UsageError(f"{where}: unknown key {extra[0]} (valid: after_s, kind, swap, batch_host, name)")
        after = f.get("after_s")
        if isinstance(after, bool) or not isinstance(after, (int, float)) or not after >= 0 or after == float("inf"):
            raise UsageError(f"{where}.after_s must be a number of seconds, zero or more, not {after!r}")
        if f.get("kind") not in pr.KINDS:
            raise UsageError(f"{where}.kind must be one of {', '.join(pr.KINDS)}, not {f.get('kind')!r}")
        for key in ("swap", "batch_host"):
            if not isinstance(f.get(key, False), bool):
                raise UsageError(f"{where}.{key} must be true or false, not {f.get(key)!r}")
        out.append(simlib.ScheduledFault(float(after), f["kind"], f.get("swap", False), f.get("batch_host", False),
                                         str(f.get("name", f"fault {i + 1}"))[:100]))
    return out


def _replay_dict(done: Sequence[simlib.Replayed], startup_s: float, gpus: int) -> Dict[str, Any]:
    rec = sum(x.recovery_s for x in done)
    lost = sum(x.lost_work_s for x in done)
    ckpt = sum(x.checkpointing_s for x in done)
    total = startup_s + rec + lost
    return {"gpus": gpus, "startup_s": startup_s, "faults": [x.to_dict() for x in done],
            "lost_seconds": {"startup": startup_s, "recovery": rec, "redone_work": lost, "total": total,
                             "checkpointing": ckpt},
            "lost_gpu_seconds": total * gpus}


def _replay_lines(d: Dict[str, Any], s: sim_report.SimSetup) -> List[str]:
    out = [f"Replayed {len(d['faults'])} fault(s) on {num(d['gpus'])} GPUs ({num(s.params.nodes)} nodes) under "
           f"{d['policy']} ({', '.join(d['levers']) or 'Slurm alone'}); a checkpoint every "
           f"{num(s.params.ckpt_interval_s)} s of compute",
           f"  {'fault':<24} {'after':>7} {'way back':<14} {'detect':>7} {'sched':>7} {'swap':>7} {'restart':>8} "
           f"{'recovery':>9} {'redone':>7}"]
    for f in d["faults"]:
        out.append(f"  {f['name'][:24]:<24} {num(f['after_s']):>7} {f['way']:<14} {num(f['detect_s']):>7} "
                   f"{num(f['sched_s']):>7} {num(f['swap_s']):>7} {num(f['restart_s']):>8} {num(f['recovery_s']):>9} "
                   f"{num(f['lost_work_s']):>7}")
    ls = d["lost_seconds"]
    out += [f"Lost: startup {num(ls['startup'])} s + recovery {num(ls['recovery'])} s + redone work "
            f"{num(ls['redone_work'])} s = {num(ls['total'])} s = {num(d['lost_gpu_seconds'])} GPU-seconds "
            f"(what `slurm-ft status --job J` measures; blocking saves apart: {num(ls['checkpointing'])} s)"]
    return out
