"""`slurm-ft breaker status|reset`: the drain-rate breaker that keeps a bad probe from draining the fleet."""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Dict, Tuple

import click

from slurm_ft.errors import EXIT_NEGATIVE
from slurm_ft.breaker import rules as brk

if TYPE_CHECKING:
    from slurm_ft.config import Config


@click.group("breaker")
def breaker() -> None:
    """slurm-ft drains at most a share (or count) of nodes per window; past it, checks only report.

    The count is read from Slurm's node reasons, so one breaker holds for the whole fleet."""


def describe(b: Dict[str, Any]) -> str:
    from slurm_ft.cli.node import stamp  # lazy: cli.node loads config (yaml) and the Slurm backend
    head = (f"OPEN since {stamp(b['open_since'])}: {b['reason']}" if b["open"] else "closed")
    nodes = ", ".join(b["nodes_in_window"]) or "none"
    return f"breaker {head}\n  drains in window: {b['drains_in_window']} of {b['limit']} ({nodes})"


def _state(ctx: click.Context) -> Tuple[Config, Dict[str, Any]]:
    from slurm_ft.cli.node import setup  # lazy: config (yaml) and the Slurm backend; `reset` needs neither
    config, client = setup(ctx)
    lc = config.lifecycle
    now = time.time()
    nodes = client.nodes()
    recent = sorted((t, n) for n, t in brk.view(nodes, now).out if now - t <= lc.breaker_window_s)
    cap = brk.limit(len(nodes), lc.breaker_max_share, lc.breaker_max_nodes)
    is_open = (lc.breaker_max_share > 0 or lc.breaker_max_nodes > 0) and len(recent) >= cap
    return config, {"open": is_open, "open_since": recent[cap - 1][0] if is_open else None,
                    "reason": f"{len(recent)} nodes taken out by slurm-ft within the window" if is_open else "",
                    "drains_in_window": len(recent), "nodes_in_window": [n for _, n in recent],
                    "limit": cap, "window_s": lc.breaker_window_s}


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
    """Explain how the breaker closes: it is computed from Slurm, there is nothing local to reset."""
    click.echo("the breaker counts nodes Slurm shows taken out by slurm-ft within the window, the same on "
               "every host;\nit closes when repaired nodes are resumed (`slurm-ft node list --state failed`) "
               "or their drains age out of the window")
