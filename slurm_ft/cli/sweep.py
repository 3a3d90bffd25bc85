"""`slurm-ft sweep`: validate repaired nodes, re-check spares, refill the pool; print only what changed."""
from __future__ import annotations

import json
from typing import Optional

import click

from slurm_ft.errors import EXIT_COMMAND


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
    from slurm_ft.cli.node import setup
    from slurm_ft.lifecycle.sweep import sweep_locked
    config, client = setup(ctx)
    report = sweep_locked(config, client, wait_s=wait_s)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
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
