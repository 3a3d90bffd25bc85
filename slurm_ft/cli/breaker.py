"""`slurm-ft breaker status|hold|release|reset`: the drain-rate breaker that keeps a bad probe from draining
the fleet, and an admin's bounded hold on it (breaker/hold.py)."""
from __future__ import annotations

import dataclasses
import json
import time
from typing import TYPE_CHECKING, Any, Dict, Tuple

import click

from slurm_ft.errors import EXIT_NEGATIVE
from slurm_ft.breaker import hold as breaker_hold, rules as brk

if TYPE_CHECKING:
    from slurm_ft.config import Config


@click.group("breaker")
def breaker() -> None:
    """slurm-ft drains at most a share (or count) of nodes per window; past it, checks only report.

    The count is read from Slurm's node reasons, so one breaker holds for the whole fleet."""


def describe(b: Dict[str, Any]) -> str:
    from slurm_ft.cli.node import stamp  # lazy: cli.node loads config (yaml) and the Slurm backend
    head = (f"OPEN since {stamp(b['open_since'])}: {b['reason']}" if b["open"] else "closed")
    h = b.get("hold")
    if h:
        head += (f" (HELD {h['state']} by {h['who']}, uid {h['uid']}, until {stamp(h['until'])}: {h['reason']}; "
                 f"`slurm-ft breaker release` ends it)")
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
    b: Dict[str, Any] = {"open": is_open, "open_since": recent[cap - 1][0] if is_open else None,
                         "reason": f"{len(recent)} nodes taken out by slurm-ft within the window" if is_open else "",
                         "drains_in_window": len(recent), "nodes_in_window": [n for _, n in recent],
                         "limit": cap, "window_s": lc.breaker_window_s, "hold": None}
    held = breaker_hold.current(config, now)      # an admin's hold decides over the count while in force
    if held is not None:
        b.update(hold=dataclasses.asdict(held), open=held.state == "open",
                 open_since=held.since if held.state == "open" else None,
                 reason=held.describe() if held.state == "open" else "")
    return config, b


@breaker.command("status")
@click.option("--json", "as_json", is_flag=True, help="As JSON, an admin's hold (or null) included.")
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
               "or their drains age out of the window;\nto decide for a while yourself: `slurm-ft breaker hold "
               "open|closed --for 2h --reason ...` (at most 24 h), ended by `slurm-ft breaker release`")


@breaker.command("hold")
@click.argument("state", type=click.Choice(breaker_hold.STATES))
@click.option("--for", "duration", required=True, metavar="DURATION",
              help=f"How long: 90s, 30m, 2h, 1h30m, 1d; at most {breaker_hold.MAX_HOLD_S / 3600:g} h.")
@click.option("--reason", required=True, help="Why, for the log and `breaker status`.")
@click.pass_context
def hold(ctx: click.Context, state: str, duration: str, reason: str) -> None:
    """Hold the breaker OPEN (slurm-ft drains nothing) or CLOSED (no drain limit) for a bounded time.

    Every reader of the breaker that shares this state directory honours it; it ends by itself."""
    from slurm_ft.cli.node import admin, stamp  # lazy: cli.node loads the Slurm backend
    from slurm_ft.config import load_config  # lazy: yaml; not for --help
    seconds = breaker_hold.parse_duration(duration)       # before the config: a typo is exit 2 at once
    config = load_config(ctx.obj.get("config_path") if ctx.obj else None)
    h = breaker_hold.set_hold(config, state, seconds, reason, admin().split(":", 1)[1])
    click.echo(f"breaker held {h.state} until {stamp(h.until)} ({breaker_hold.path(config)}); "
               f"`slurm-ft breaker release` ends it sooner")


@breaker.command("release")
@click.pass_context
def release(ctx: click.Context) -> None:
    """End an admin's hold now: the breaker decides by its limits again."""
    from slurm_ft.cli.node import admin  # lazy: cli.node loads the Slurm backend
    from slurm_ft.config import load_config  # lazy: yaml; not for --help
    config = load_config(ctx.obj.get("config_path") if ctx.obj else None)
    was = breaker_hold.release(config, admin().split(":", 1)[1])
    click.echo(f"breaker hold released (was {was.describe()})" if was else "no breaker hold in force")
