"""`slurm-ft report [--json]`: how slurm-ft's drains turned out, per check, per Xid and per soft signal.

Drains, confirmed faults, probable false positives (the node passed validation after no repair or only
a GPU reset), node-hours out of service and node-hours of spares consumed (fleet/report/drain_stats.py); then
the remediation budget as the last sweep spent it (fleet/lifecycle/remedy_plan.py). Exit 0; 2 when there is no
journal yet."""
from __future__ import annotations

import json
import time
from typing import Any, Dict

import click

from slurm_ft.config import load_config


def _row(name: str, r: Dict[str, Any]) -> str:
    rate = "-" if r["false_positive_rate"] is None else f"{100 * r['false_positive_rate']:.0f}%"
    return (f"{name:<14} {r['drains']:>6} {r['confirmed']:>9} {r['probable_false_positives']:>8} {rate:>6} "
            f"{r['open']:>5} {r['node_hours_out']:>10.1f} {r['spare_node_hours']:>11.1f}")


@click.command("report")
@click.option("--json", "as_json", is_flag=True, help="The summary and every drain episode as JSON.")
@click.pass_context
def report(ctx: click.Context, as_json: bool) -> None:
    """Per check and per Xid: drains, confirmed, probable false positives, hours out, spare-hours; per soft
    signal: planned swaps, confirmed by validation, false alarms, precision."""
    from slurm_ft.fleet.report.fleet_view import drain_report  # lazy: the fleet view is heavy (~35 ms); not for --help
    from slurm_ft.fleet.lifecycle.node_history import Store  # lazy: the sqlite3 store, loaded with the fleet view anyway
    from slurm_ft.fleet.lifecycle import remedy_plan, remedy_act  # lazy: loaded with the fleet view's neighbours anyway
    config = load_config(ctx.obj.get("config_path") if ctx.obj else None)
    now = time.time()
    with Store(config.state_dir, create=False) as store:
        eps, summary = drain_report(store, now)
        budget = store.kv_get_json(remedy_act.BUDGET_KEY)
    if as_json:
        click.echo(json.dumps({"time": now, **summary, "episodes": [e.to_dict(now) for e in eps],
                               "remediation_budget": budget, "keep_off": sorted(config.keep_off_nodes)}, indent=2))
        return
    if config.keep_off:     # first: their faults are in no figure below
        click.echo(f"keep_off (slurm-ft leaves alone, never drains): {config.keep_off}\n")
    head = (f"{'':<14} {'DRAINS':>6} {'CONFIRMED':>9} {'PROB_FP':>8} {'FP%':>6} {'OPEN':>5} "
            f"{'NODE_H_OUT':>10} {'SPARE_NODE_H':>11}")
    click.echo("per check")
    click.echo(head)
    for name, r in summary["by_check"].items():
        click.echo(_row(name, r))
    if summary["by_xid"]:
        click.echo("\nper Xid")
        click.echo(head)
        for name, r in summary["by_xid"].items():
            click.echo(_row(f"Xid {name}", r))
    if summary.get("by_soft_signal"):
        click.echo("\nper soft signal (planned swaps)")
        click.echo(f"{'':<18} {'SWAPS':>6} {'CONFIRMED':>9} {'FALSE_ALARMS':>12} {'OPEN':>5} {'PRECISION':>9}")
        for name, r in summary["by_soft_signal"].items():
            prec = "-" if r["precision"] is None else f"{100 * r['precision']:.0f}%"
            click.echo(f"{name:<18} {r['swaps']:>6} {r['confirmed']:>9} {r['false_alarms']:>12} {r['open']:>5} "
                       f"{prec:>9}")
    click.echo("\n" + _row("total", summary["total"]))
    click.echo("probable false positive: passed validation after no repair or only a GPU reset")
    if summary.get("by_soft_signal"):
        click.echo("soft signal: confirmed = validation failed or a repair was needed; false alarm = validated "
                   "as it was and passed")
    if not budget:
        click.echo(f"\nremediation budget: no sweep has planned a remediation yet "
                   f"(lifecycle.remediation.mode {config.lifecycle.remediation.mode})")
        return
    click.echo(f"\nremediation budget (the sweep at {remedy_plan.stamp(budget.get('time'))}):")
    for line in remedy_plan.budget_lines(budget):
        click.echo(f"  {line}")
