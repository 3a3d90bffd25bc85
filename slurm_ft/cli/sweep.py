"""`slurm-ft sweep`: validate repaired nodes, re-check spares, refill the pool; print only what changed."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional

import click

from slurm_ft.errors import EXIT_COMMAND, UsageError
from slurm_ft.filelock import FileLock

if TYPE_CHECKING:
    from slurm_ft.fleet.lifecycle.sweep_report import SweepReport


@click.command("sweep")
@click.option("--wait", "wait_s", type=click.FloatRange(min=0), default=None,
              help="Seconds to wait for validation jobs (default lifecycle.validate_wait_s); "
                   "jobs still running are picked up by the next sweep.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON.")
@click.pass_context
def sweep(ctx: click.Context, wait_s: Optional[float], as_json: bool) -> None:
    """One lifecycle pass for cron or a systemd timer. Silent when nothing changed.

    Exit 0 done (alerts included), 3 a Slurm command failed for some node, 5 another sweep is running.
    """
    from slurm_ft.cli.node import setup  # lazy: config (yaml) and the Slurm backend; not for --help
    from slurm_ft.fleet.lifecycle.sweep import sweep_locked  # lazy: the sweep is heavy (~50 ms); not for --help
    config, client = setup(ctx)
    report = sweep_locked(config, client, wait_s=wait_s)
    _echo_report(ctx, report, report.to_dict() if as_json else None)


@click.command("remediate")
@click.option("--dry-run", is_flag=True, help="Only print what would be done; change nothing.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def remediate(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """The sweep's remediation step alone: reset, reboot or send to RMA the quarantined nodes whose
    finding the policy (lifecycle.remediation) can handle, within the remediation budget. Nodes it
    finishes are validated by the next `slurm-ft sweep`. --dry-run also shows the budget: per pool what
    was started within the window, and what waits for it until when.

    Exit 0 done, 2 remediation is off (without --dry-run), 3 a Slurm command failed, 5 a sweep is running.
    """
    from slurm_ft.cli.node import setup  # lazy: config (yaml) and the Slurm backend; not for --help
    from slurm_ft.fleet.lifecycle import remedy_plan, remedy_act  # lazy: only remediate; loaded with the sweep anyway
    from slurm_ft.fleet.lifecycle.node_history import Store  # lazy: the sqlite3 store, loaded with the sweep anyway
    from slurm_ft.fleet.lifecycle.sweep import Sweeper  # lazy: the sweep is heavy (~50 ms); not for --help
    from slurm_ft.fleet.lifecycle.sweep_report import SweepReport  # lazy: as Sweeper
    config, client = setup(ctx)
    if dry_run:
        with Store(config.state_dir) as store:
            steps, budget = remedy_act.snapshot_plan(Sweeper(config, client, store, actor="remediate"))
        if as_json:
            click.echo(json.dumps({"steps": [s.to_dict() for s in steps], "budget": budget.to_dict()}, indent=2))
        else:
            for s in steps:
                click.echo(f"would {remedy_plan.describe(s)}")
            if not steps:
                click.echo("nothing to remediate (no quarantined or remediating node)")
            for line in remedy_plan.budget_lines(budget.to_dict()):
                click.echo(f"budget: {line}")
        return
    if config.lifecycle.remediation.mode != "on":
        raise UsageError(f"lifecycle.remediation.mode is {config.lifecycle.remediation.mode!r}: set it to "
                         f"'on' to act, or use --dry-run")
    with FileLock(Path(config.state_dir) / "sweep.lock", "sweep"):
        with Store(config.state_dir) as store:
            sweeper = Sweeper(config, client, store, actor="remediate")
            report = SweepReport(started=sweeper.clock())
            remedy_act.run(sweeper, report)
    _echo_report(ctx, report, {"changes": report.changes, "alerts": report.alerts, "errors": report.errors}
                 if as_json else None)


def _echo_report(ctx: click.Context, report: SweepReport, doc: Optional[Mapping[str, object]]) -> None:
    """The report's lines (or `doc` as JSON); exit 3 when a Slurm command failed."""
    if doc is not None:
        click.echo(json.dumps(doc, indent=2))
    else:
        for line in report.changes:
            click.echo(line)
        for line in report.alerts:
            click.echo(f"ALERT: {line}")
        for line in report.pending:
            click.echo(f"still validating: {line}")
        for line in report.errors:
            click.echo(f"slurm-ft: error: {line}", err=True)
    if report.errors:
        ctx.exit(EXIT_COMMAND)
