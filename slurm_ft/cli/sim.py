"""`slurm-ft sim`: simulate a training job's effective training time under a failure profile and policy."""
from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

import click

from slurm_ft.cli.spares import observed_from_journal
from slurm_ft.errors import EnvironmentProblem, UsageError
from slurm_ft.plan import profiles as pr
from slurm_ft.plan import sim as simlib
from slurm_ft.plan import sim_report

if TYPE_CHECKING:
    from slurm_ft.config import PlanningConfig


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


def choose_policy(name: Optional[str], policy_file: Optional[str], recovery_figures: Optional[str]) -> pr.Policy:
    if policy_file and name not in ("custom", None):
        raise UsageError("--policy-file goes with --policy custom")
    name = name or ("custom" if policy_file else "slurm-ft")
    if name == "custom" or policy_file:
        if not policy_file:
            raise UsageError("--policy custom needs --policy-file FILE")
        return pr.policy_from_dict(_yaml(policy_file), policy_file)
    if recovery_figures:
        if name != "slurm-ft":
            raise UsageError("--recovery-figures goes with --policy slurm-ft")
        det, rec, what = pr.recovery_figures(_read(recovery_figures), recovery_figures)
        return pr.slurm_ft_policy(det, rec, source=f"measured by bench/recovery.py ({recovery_figures}): {what}")
    return pr.builtin_policy(name)


@click.command("sim")
@click.option("--profile", default=None, help="Failure profile (built-in: llama3). Default: the config's, llama3.")
@click.option("--profile-file", type=click.Path(dir_okay=False), default=None, help="A failure profile in YAML.")
@click.option("--policy", type=click.Choice(pr.POLICIES), default=None,
              help="Recovery: Slurm alone, slurm-ft (default), Llama-3-like automation, or custom (--policy-file).")
@click.option("--policy-file", type=click.Path(dir_okay=False), default=None,
              help="Custom policy YAML: detect_s: {crash, node, hang}, requeue_s, swap_s, optional restart_s.")
@click.option("--recovery-figures", type=click.Path(dir_okay=False), default=None,
              help="JSON written by `bench/recovery.py --json`: slurm-ft's measured detection/recovery p50.")
@click.option("--gpus", type=int, default=None, help="GPUs in the job (default: the profile's, 16,384 for llama3).")
@click.option("--gpus-per-node", type=int, default=None, help="Default: the profile's (8).")
@click.option("--days", type=float, default=None, help="Elapsed days to simulate (default: the profile's window).")
@click.option("--seed", type=int, default=0, show_default=True, help="First random seed.")
@click.option("--seeds", "n_seeds", type=int, default=10, show_default=True,
              help="How many seeds (seed, seed+1, ...), summarised with their spread.")
@click.option("--spares", type=int, default=None, help="Hot spare nodes (default: the Poisson plan's count).")
@click.option("--target", type=float, default=None, help="Target of that plan (default 0.999).")
@click.option("--repair-hours", type=float, default=None, help="Mean time to return a node (default 72).")
@click.option("--repair-dist", type=click.Choice(["exp", "fixed"]), default="exp", show_default=True)
@click.option("--checkpoint-interval", "ckpt_interval_min", type=float, default=None,
              help="Minutes of compute between checkpoints (default: Daly's optimum).")
@click.option("--checkpoint-cost-s", "ckpt_cost_s", type=float, default=None,
              help="Blocking seconds per checkpoint (default 10).")
@click.option("--restart-s", type=float, default=simlib.DEFAULT_RESTART_S, show_default=True,
              help="Relaunch of all ranks plus checkpoint load, in seconds.")
@click.option("--elastic-min-nodes", type=int, default=None,
              help="Elastic job: run on as few as this many nodes instead of waiting for a spare.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG of ETTR against spare count and checkpoint interval (needs matplotlib).")
@click.option("--detect-hang-s", type=float, default=None,
              help="Override the policy's time to notice a hang (e.g. a shorter collective timeout).")
@click.option("--detect-node-s", type=float, default=None,
              help="Override the policy's time to notice a lost host (e.g. a lower SlurmdTimeout).")
@click.option("--compare", is_flag=True,
              help="Run slurm, llama3-like and slurm-ft (and a --policy-file) on the same faults, side by side.")
@click.option("--from-journal", is_flag=True,
              help="Faults at this cluster's own rate and repair time (the journal in state_dir), not a profile.")
@click.option("--fleet-nodes", type=click.IntRange(min=1), default=None,
              help="With --from-journal: nodes the journal watched (default: the nodes Slurm knows).")
@click.option("--write-journal", "journal_dir", type=click.Path(file_okay=False), default=None,
              help="Also write the first seed's faults, repairs and recoveries as a journal into this (empty) "
                   "state dir, ending now: what `spares plan --from-journal` reads.")
@click.option("--predicted-share", type=click.FloatRange(0, 1), default=None,
              help="Share of node-swap faults a soft signal announces ahead: a planned swap, no lost work "
                   "(default: the profile's, 0).")
@click.option("--predicted-lead-hours", type=click.FloatRange(0), default=None,
              help="How far ahead (default: the profile's, 0): from a checkpoint interval on, no checkpoint is asked for.")
@click.option("--json", "as_json", is_flag=True, help="Everything as one JSON object.")
@click.pass_context
def sim(ctx: click.Context, profile: Optional[str], profile_file: Optional[str], policy: Optional[str],
        policy_file: Optional[str], recovery_figures: Optional[str], gpus: Optional[int],
        gpus_per_node: Optional[int], days: Optional[float], seed: int, n_seeds: int, spares: Optional[int],
        target: Optional[float], repair_hours: Optional[float], repair_dist: str,
        ckpt_interval_min: Optional[float], ckpt_cost_s: Optional[float], restart_s: float,
        elastic_min_nodes: Optional[int], plot_path: Optional[str], detect_hang_s: Optional[float],
        detect_node_s: Optional[float], compare: bool, from_journal: bool, fleet_nodes: Optional[int],
        journal_dir: Optional[str], predicted_share: Optional[float], predicted_lead_hours: Optional[float],
        as_json: bool) -> None:
    """Discrete-event simulation of a synchronous training job: faults by class, detection, recovery,
    spare pool with repairs, checkpoints and lost work. Prints ETTR, time lost by cause, interruptions
    and pool exhaustion events, over several seeds with their spread."""
    from slurm_ft.config import load_config  # lazy: config loads yaml; not for `sim --help`
    cfg = load_config((ctx.obj or {}).get("config_path")).planning
    if profile and profile_file:
        raise UsageError("give --profile or --profile-file, not both")
    if from_journal and (profile or profile_file):
        raise UsageError("--from-journal gives the failure rate: no --profile or --profile-file with it")
    if from_journal:   # one class: node faults at the journal's rate, each taking a node out
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
    if predicted_share is not None or predicted_lead_hours is not None:
        prof = replace(prof, predicted_share=prof.predicted_share if predicted_share is None
                                   else predicted_share, predicted_lead_hours=prof.predicted_lead_hours
                                   if predicted_lead_hours is None else predicted_lead_hours)
    if compare:
        if plot_path:
            raise UsageError("--plot draws one policy; leave out --compare")
        if policy not in (None, "custom"):
            raise UsageError("--compare runs every built-in policy; leave out --policy")
        pols = [pr.SLURM, pr.LLAMA3_LIKE, choose_policy("slurm-ft", None, recovery_figures)]
        if policy_file:
            pols.append(choose_policy("custom", policy_file, None))
    else:
        pols = [choose_policy(policy, policy_file, recovery_figures)]
    if n_seeds < 1:
        raise UsageError(f"--seeds must be at least 1, got {n_seeds}")
    if ckpt_interval_min is not None and not ckpt_interval_min > 0:
        raise UsageError(f"--checkpoint-interval must be positive, got {ckpt_interval_min}")
    if plot_path:
        _need_matplotlib()
    if journal_dir and (compare or elastic_min_nodes is not None):
        raise UsageError("--write-journal records one policy's run of a job that waits for spares: "
                         "no --compare or --elastic-min-nodes with it")
    for flag, v in (("--detect-hang-s", detect_hang_s), ("--detect-node-s", detect_node_s)):
        if v is not None and not (v >= 0 and v != float("inf")):
            raise UsageError(f"{flag} must be zero or more, got {v}")
    pols = [_override(p, detect_hang_s, detect_node_s) for p in pols]
    runs = []
    for pol in pols:
        s = _setup(cfg, prof, pol, gpus, gpus_per_node, days, spares, repair_hours, repair_dist, ckpt_interval_min,
                   ckpt_cost_s, restart_s, elastic_min_nodes, target)
        seeds = list(range(seed, seed + n_seeds))
        runs.append((s, simlib.run_seeds(s.profile, s.policy, s.params, seeds)))
    if compare:
        if as_json:
            click.echo(json.dumps({"compare": [sim_report.to_dict(s, r) for s, r in runs]}, indent=2))
        else:
            click.echo("\n".join(sim_report.render_compare(runs)))
        return
    s, results = runs[0]
    out = sim_report.to_dict(s, results)
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


def _write_journal(s: sim_report.SimSetup, seed: int, state_dir: str) -> Dict[str, object]:
    """Run `seed` again with its faults recorded and write them as a cluster journal (fleet/synthetic.py)."""
    from slurm_ft.fleet.store import Store  # lazy: the sqlite3 store, only --write-journal
    from slurm_ft.fleet.synthetic import write_sim_journal  # lazy: only --write-journal
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
    return replace(p, detect_hang_s=p.detect_hang_s if hang is None else hang,
                   detect_node_s=p.detect_node_s if node is None else node,
                   source=f"{p.source}; overridden: {', '.join(said)}")


def _setup(cfg: PlanningConfig, prof: pr.Profile, pol: pr.Policy, gpus: Optional[int], gpus_per_node: Optional[int],
           days: Optional[float], spares: Optional[int], repair_hours: Optional[float], repair_dist: str,
           ckpt_interval_min: Optional[float], ckpt_cost_s: Optional[float], restart_s: float,
           elastic_min_nodes: Optional[int], target: Optional[float]) -> sim_report.SimSetup:
    return sim_report.setup(
        prof, pol, gpus=gpus if gpus is not None else prof.gpus,
        gpus_per_node=gpus_per_node if gpus_per_node is not None else prof.gpus_per_node,
        days=days if days is not None else prof.days, spares=spares,
        repair_hours=repair_hours if repair_hours is not None else cfg.repair_hours,
        ckpt_interval_s=None if ckpt_interval_min is None else ckpt_interval_min * 60,
        ckpt_cost_s=ckpt_cost_s if ckpt_cost_s is not None else cfg.checkpoint_cost_s,
        restart_s=restart_s, repair_dist=repair_dist, elastic_min_nodes=elastic_min_nodes,
        target=target if target is not None else cfg.target)


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
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the plot: {exc.strerror}") from None
    finally:
        plt.close(fig)
