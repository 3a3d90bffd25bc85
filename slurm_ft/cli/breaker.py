"""`slurm-ft breaker status|reset`: the drain-rate breaker that keeps a bad probe from draining the fleet."""
from __future__ import annotations

import json
import time

import click

from slurm_ft.errors import EXIT_NEGATIVE


@click.group("breaker")
def breaker() -> None:
    """slurm-ft drains at most a share (or count) of nodes per window; past it, checks only report."""


def describe(b: dict) -> str:
    from slurm_ft.cli.node import stamp
    head = (f"OPEN since {stamp(b['open_since'])}: {b['reason']}" if b["open"] else "closed")
    nodes = ", ".join(b["nodes_in_window"]) or "none"
    return f"breaker {head}\n  drains in window: {b['drains_in_window']} of {b['limit']} ({nodes})"


def _state(ctx):
    from slurm_ft.cli.node import setup
    from slurm_ft.lifecycle import breaker as brk
    from slurm_ft.lifecycle.store import Store
    config, client = setup(ctx)
    lc = config.lifecycle
    now = time.time()
    total = len(client.nodes())
    with Store(config.state_dir) as store:
        st = store.breaker_state()
    nodes = brk.in_window(st, now, lc.breaker_window_s)
    return config, {"open": st.open, "open_since": st.open_since, "reason": st.open_reason,
                    "drains_in_window": len(nodes), "nodes_in_window": list(nodes),
                    "limit": brk.limit(total, lc.breaker_max_share, lc.breaker_max_nodes),
                    "window_s": lc.breaker_window_s, "reset_at": st.reset_at or None}


@breaker.command("status")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show the breaker. Exit 0 closed, 1 open."""
    _, b = _state(ctx)
    click.echo(json.dumps(b, indent=2) if as_json else describe(b))
    if b["open"]:
        ctx.exit(EXIT_NEGATIVE)


@breaker.command("reset")
@click.pass_context
def reset(ctx: click.Context) -> None:
    """Close the breaker; drains so far stop counting. Find the cause first (`slurm-ft node list`)."""
    from slurm_ft.cli.node import admin, setup, stamp
    from slurm_ft.lifecycle.store import Store
    config, _ = setup(ctx)
    with Store(config.state_dir) as store:
        before = store.breaker_reset(time.time(), actor=admin())
    if before.open:
        click.echo(f"breaker reset (was open since {stamp(before.open_since)}: {before.open_reason})")
    else:
        click.echo("breaker was closed; the drain window starts afresh")
    click.echo("nodes already drained stay drained: `slurm-ft node list --state failed`")
