"""`slurm-ft spares plan|status`: how many hot spares, with the arithmetic; the live pool against it."""
from __future__ import annotations

import dataclasses
import json
import time
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple, TypeVar

import click

from slurm_ft.errors import EXIT_NEGATIVE, UsageError
from slurm_ft.plan import history
from slurm_ft.plan import spares as sp
from slurm_ft.plan.explain import gnum, num
from slurm_ft.plan.profiles import profile_from_dict
from slurm_ft.slurm.hostlist import compress

if TYPE_CHECKING:
    from typing import TypedDict, Unpack

    from slurm_ft.config import Config
    from slurm_ft.fleet.report.drain_stats import Episode
    from slurm_ft.fleet.recovery.records import Incident
    from slurm_ft.plan.domains import DomainPlan
    from slurm_ft.plan.history import Observed
    from slurm_ft.plan.profiles import Profile

    class RateOptions(TypedDict):
        """The _plan_options values make_plan takes by name (all but --gpus-per-node and --json)."""
        profile: Optional[str]
        profile_file: Optional[str]
        node_mtbf_hours: Optional[float]
        interruptions_per_day: Optional[float]
        at_gpus: Optional[int]
        replace_fraction: Optional[float]
        repair_hours: Optional[float]
        target: Optional[float]
        ckpt_cost_s: Optional[float]
        restart_s: Optional[float]

    class PlanOptions(RateOptions):
        """The same with --gpus-per-node, as `spares plan` receives them."""
        gpus_per_node: Optional[int]

F = TypeVar("F", bound=Callable[..., Any])


def _load_planning(ctx: click.Context) -> Config:
    from slurm_ft.config import load_config  # lazy: config loads yaml (~25 ms); not for --help
    return load_config((ctx.obj or {}).get("config_path"))


def _plan_options(f: F) -> F:
    opts = [
        click.option("--gpus-per-node", type=click.IntRange(min=1), default=None,
                     help="GPUs per node (default 8; status: from Slurm)."),
        click.option("--profile", default=None, help="Failure profile (built-in: llama3, 419 in 54 days on 16,384 GPUs)."),
        click.option("--profile-file", type=click.Path(dir_okay=False), default=None,
                     help="A failure profile in YAML (name, days, gpus, classes: [{name, count, replace, kind}])."),
        click.option("--node-mtbf-hours", type=float, default=None, help="Failure rate as one node's MTBF in hours."),
        click.option("--interruptions-per-day", type=float, default=None,
                     help="Failure rate as interruptions per day observed ..."),
        click.option("--at-gpus", type=int, default=None, help="... on this many GPUs (default: --gpus)."),
        click.option("--replace-fraction", type=float, default=None,
                     help="Share of faults that take a node out (default: the profile's, else 1)."),
        click.option("--repair-hours", type=float, default=None, help="Time to return a node to service (default 72)."),
        click.option("--target", type=float, default=None,
                     help="Wanted P(no more nodes out than spares), 0 < q < 1 (default 0.999)."),
        click.option("--checkpoint-cost-s", "ckpt_cost_s", type=float, default=None,
                     help="Blocking cost of one checkpoint in seconds (default 10)."),
        click.option("--restart-s", type=float, default=None,
                     help="Seconds from a fault to training again, for the ETTR (default 300)."),
        click.option("--json", "as_json", is_flag=True, help="Everything as one JSON object, derivation included."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def read_profile_file(path: str) -> Profile:
    import yaml  # lazy: ~10 ms; only for --profile-file, not --help
    try:
        with open(path) as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    return profile_from_dict(data, path)


def make_plan(ctx: click.Context, gpus: int, gpus_per_node: Optional[int], profile: Optional[str],
              profile_file: Optional[str], node_mtbf_hours: Optional[float],
              interruptions_per_day: Optional[float], at_gpus: Optional[int], replace_fraction: Optional[float],
              repair_hours: Optional[float], target: Optional[float], ckpt_cost_s: Optional[float],
              restart_s: Optional[float]) -> sp.SparePlan:
    """The plan from flags, falling back to the config's `planning` section, then built-in defaults."""
    cfg = _load_planning(ctx).planning
    if profile and profile_file:
        raise UsageError("give --profile or --profile-file, not both")
    rate_flags = any(x is not None for x in (profile, profile_file, node_mtbf_hours, interruptions_per_day))
    if not rate_flags:      # nothing on the command line: the config's rate, else its profile
        node_mtbf_hours, interruptions_per_day = cfg.node_mtbf_hours, cfg.interruptions_per_day
        at_gpus = at_gpus if at_gpus is not None else cfg.at_gpus
        if node_mtbf_hours is None and interruptions_per_day is None:
            profile = cfg.profile
    return sp.plan_spares(
        gpus, 8 if gpus_per_node is None else gpus_per_node, profile=profile,
        profile_data=read_profile_file(profile_file) if profile_file else None,
        node_mtbf_hours=node_mtbf_hours, interruptions_per_day=interruptions_per_day, at_gpus=at_gpus,
        replace_fraction=replace_fraction if replace_fraction is not None else cfg.replace_fraction,
        repair_hours=repair_hours if repair_hours is not None else cfg.repair_hours,
        target=target if target is not None else cfg.target,
        ckpt_cost_s=ckpt_cost_s if ckpt_cost_s is not None else cfg.checkpoint_cost_s,
        restart_s=restart_s if restart_s is not None else cfg.restart_s)


@click.group("spares")
def spares() -> None:
    """Spare-pool sizing (Poisson arithmetic, shown step by step) and the live pool."""


def observed_from_journal(ctx: click.Context, fleet_nodes: Optional[int], confidence: float) -> Observed:
    """The fleet's own failure rate, repair times and recovery times (plan/history.py)."""
    _, eps, incidents, fleet_nodes, since, now = read_journal(ctx, fleet_nodes)
    return history.observe(eps, incidents, nodes=fleet_nodes, since=since, now=now, confidence=confidence)


def read_journal(ctx: click.Context, fleet_nodes: Optional[int]
                 ) -> Tuple[Config, List[Episode], List[Incident], int, float, float]:
    """(config, drain episodes, incidents, fleet nodes, since, now) from the journal in state_dir."""
    from slurm_ft.fleet.report.fleet_view import drain_report  # lazy: the fleet view is heavy (~35 ms), only --from-journal
    from slurm_ft.fleet.lifecycle.node_history import Store  # lazy: the sqlite3 store, only --from-journal
    from slurm_ft.fleet.lifecycle.synthetic import OBSERVED_SINCE  # lazy: only --from-journal (the sqlite3 store)
    from slurm_ft.fleet.recovery import journal  # lazy: the sqlite3 journal, only --from-journal
    config = _load_planning(ctx)
    if fleet_nodes is None:
        from slurm_ft.slurm.backend import client_from_config  # lazy: the Slurm backend, only without --fleet-nodes
        fleet_nodes = len(client_from_config(config).nodes())
    now = time.time()
    with Store(config.state_dir, create=False) as store:
        eps, _ = drain_report(store, now)
        first = min((e.time for e in store.history()), default=now)
        since = min(float(store.kv_get(OBSERVED_SINCE) or now), first)
        incidents = journal.incidents(store.db)
    return config, eps, incidents, fleet_nodes, since, now


def domain_plan(config: Config, eps: List[Episode], since: float, now: float, repair_hours: float, target: float,
                confidence: float) -> Optional[DomainPlan]:
    """The per-domain answer when the config names failure domains (planning.domains), else None."""
    from slurm_ft.config import expand_domains  # lazy: config loads yaml; only --from-journal
    from slurm_ft.plan import domains  # lazy: ~5 ms; only --from-journal with planning.domains
    pc = config.planning
    if not pc.domains:
        return None
    return domains.plan_domains(expand_domains(pc.domains), eps, since=since, now=now,
                                repair_hours=repair_hours, target=target, confidence=confidence,
                                window_s=pc.domain_outage_window_s)


@spares.command("plan")
@click.option("--gpus", type=int, required=True, help="GPUs in the job (or the cluster) to protect.")
@click.option("--from-journal", is_flag=True,
              help="The failure rate and repair time from this cluster's journal (state_dir), not a profile.")
@click.option("--fleet-nodes", type=click.IntRange(min=1), default=None,
              help="With --from-journal: nodes the journal watched (default: the nodes Slurm knows).")
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.95, show_default=True,
              help="With --from-journal: of the rate's interval.")
@_plan_options
@click.pass_context
def plan_cmd(ctx: click.Context, gpus: int, from_journal: bool, fleet_nodes: Optional[int], confidence: float,
             as_json: bool, **kw: Unpack[PlanOptions]) -> None:
    """How many hot spare nodes keep P(more nodes in repair than spares) under 1 - target.

    Nodes in repair are an M/G/infinity queue, so Poisson with mean (node-taking faults per hour) x
    (repair hours). Also the checkpoint interval (Young, Daly) and the ETTR that follows. Every
    number is printed with the arithmetic that gives it.
    """
    observed = per_domain = None
    if from_journal:
        if any(kw.get(k) is not None for k in ("profile", "profile_file", "node_mtbf_hours", "interruptions_per_day")):
            raise UsageError("--from-journal gives the failure rate: no --profile, --node-mtbf-hours or "
                             "--interruptions-per-day with it")
        config, eps, incidents, fleet_nodes, since, now = read_journal(ctx, fleet_nodes)
        observed = history.observe(eps, incidents, nodes=fleet_nodes, since=since, now=now, confidence=confidence)
        kw["node_mtbf_hours"] = observed.node_mtbf_hours
        kw["replace_fraction"] = 1.0 if kw.get("replace_fraction") is None else kw["replace_fraction"]
        if kw.get("repair_hours") is None and observed.repair_hours["mean"]:
            kw["repair_hours"] = observed.repair_hours["mean"]
    plan = make_plan(ctx, gpus, **kw)
    if observed is not None:
        plan = dataclasses.replace(plan, rate_source=observed.source())
        per_domain = domain_plan(config, eps, since, now, plan.repair_hours, plan.target, confidence)
    if as_json:
        out = plan.to_dict()
        if observed is not None:
            out["from_journal"] = observed.to_dict()
        if per_domain is not None:
            out["from_journal"]["per_domain"] = per_domain.to_dict()
        click.echo(json.dumps(out, indent=2))
    else:
        lines = sp.render(plan)
        if observed is not None:
            rh = observed.repair_hours
            lines = [f"From the journal: {observed.source()}",
                     f"  repair time (fault -> back in the pool): {rh['count']} repairs, mean "
                     f"{_h(rh['mean'])}, p50 {_h(rh['p50'])}, p90 {_h(rh['p90'])}"] + [
                     f"  recovery via {p}: {d['count']} incidents, p50 {d['p50']:.1f} s, p90 {d['p90']:.1f} s"
                     for p, d in observed.recovery_s.items()] + [""] + lines
            if per_domain is not None:
                from slurm_ft.plan.domains import render as render_domains  # lazy: only with planning.domains
                lines += [""] + render_domains(per_domain)
        click.echo("\n".join(lines))


def _h(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.1f} h"


@spares.command("status")
@click.option("--partition", default=None, help="The spare pool's partition (default: controller.spare_partition).")
@click.option("--check", is_flag=True, help="Exit 1 when fewer healthy idle spares than the plan wants.")
@_plan_options
@click.pass_context
def status_cmd(ctx: click.Context, partition: Optional[str], check: bool, as_json: bool,
               gpus_per_node: Optional[int], **kw: Unpack[RateOptions]) -> None:
    """The live spare pool (healthy vs not) against the plan for this cluster's own size."""
    from slurm_ft.fleet.report.pool_status import pool_status  # lazy: with slurm.types ~7 ms; only `spares status`
    from slurm_ft.slurm.backend import client_from_config  # lazy: the Slurm backend (~10 ms); not for --help

    cfg = _load_planning(ctx)
    part = partition or cfg.controller.spare_partition
    client = client_from_config(cfg)
    st = pool_status(client.nodes(), client.partitions(), part, cfg.controller.job_partitions, gpus_per_node)
    if st.cluster_nodes == 0:
        raise UsageError(f"no nodes outside partition {part!r} to protect")
    if st.gpus_per_node <= 0:
        raise UsageError("the cluster's nodes report no GPUs in their Gres; give --gpus-per-node")
    plan = make_plan(ctx, st.cluster_nodes * st.gpus_per_node, st.gpus_per_node, **kw)
    short = plan.spare_nodes - len(st.healthy_idle)
    if as_json:
        click.echo(json.dumps({**st.to_dict(), "plan": plan.to_dict(), "planned_spares": plan.spare_nodes,
                               "short_by": max(short, 0)}, indent=2))
    else:
        lines = [f"Cluster: {st.cluster_nodes} nodes ({st.cluster_gpus} GPUs) in partition(s) "
                 f"{', '.join(st.job_partitions)}; spare pool: partition {part}, {st.pool_size} node(s)",
                 f"  healthy, idle:  {len(st.healthy_idle):>4}  {_names(st.healthy_idle)}",
                 f"  healthy, busy:  {len(st.busy):>4}  {_names(st.busy)}",
                 f"  not healthy:    {len(st.unhealthy):>4}"]
        lines += [f"    {n}: {s}{' - ' + r if r else ''}" for n, s, r in st.unhealthy]
        lines += ["", f"Plan for {plan.nodes} nodes x {plan.gpus_per_node} GPUs: {plan.spare_nodes} spare(s) "
                      f"(expected {num(plan.expected_nodes_in_repair)} in repair, target {gnum(plan.target)}); "
                      f"run `slurm-ft spares plan --gpus {plan.gpus} --gpus-per-node {plan.gpus_per_node}` "
                      f"for the arithmetic."]
        lines.append(f"=> short by {short} healthy idle spare(s)" if short > 0 else
                     f"=> pool OK: {len(st.healthy_idle)} healthy idle >= {plan.spare_nodes} planned")
        click.echo("\n".join(lines))
    if check and short > 0:
        ctx.exit(EXIT_NEGATIVE)


def _names(names: Sequence[str]) -> str:
    return compress(names) if names else ""
