"""`slurm-ft node list|history|quarantine|repaired|release`: the lifecycle of one node, for admins."""
from __future__ import annotations

import getpass
import json
import os
import time
from typing import TYPE_CHECKING, Optional, Tuple

import click

from slurm_ft.config import load_config
from slurm_ft.errors import UsageError
from slurm_ft.fleet.lifecycle.transitions import Event, State
from slurm_ft.fleet.lifecycle.node_history import Store
from slurm_ft.slurm.backend import client_from_config

if TYPE_CHECKING:
    from slurm_ft.config import Config
    from slurm_ft.slurm.api import SlurmApi
    from slurm_ft.slurm.client import SlurmClient
    from slurm_ft.slurm.types import Node


def admin() -> str:
    """Who did it, for the history: the sudo user when there is one."""
    return "admin:" + (os.environ.get("SUDO_USER") or getpass.getuser())


def setup(ctx: click.Context) -> Tuple[Config, SlurmClient]:
    config = load_config(ctx.obj.get("config_path") if ctx.obj else None)
    return config, client_from_config(config)


def stamp(t: Optional[float]) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _known(client: SlurmApi, name: str) -> Node:
    found = {n.name: n for n in client.nodes()}
    if name not in found:
        raise UsageError(f"unknown node {name!r} (not in this cluster's slurm.conf)")
    return found[name]


@click.group("node")
def node() -> None:
    """A node's lifecycle: in service -> failed -> quarantined -> repaired -> validating -> spare."""


@node.command("list")
@click.option("--state", "state", type=click.Choice([s.value for s in State]), help="Only nodes in this state.")
@click.option("--all", "show_all", is_flag=True, help="Also nodes in service (hidden by default).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_(ctx: click.Context, state: Optional[str], show_all: bool, as_json: bool) -> None:
    """Nodes with their lifecycle state (by default those not simply in service)."""
    from slurm_ft.fleet.report.fleet_view import view  # lazy: the fleet view is heavy (~35 ms), only `node list`
    config, client = setup(ctx)
    with Store(config.state_dir) as store:
        rows = view(config, client, store, with_target=False).rows()
    if state:
        rows = [r for r in rows if r["state"] == state]
    elif not show_all and not as_json:
        rows = [r for r in rows if r["state"] != State.IN_SERVICE.value]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no nodes" + (f" in state {state}" if state else " outside service (--all lists every node)"))
        return
    click.echo(f"{'NODE':<10} {'STATE':<12} {'SINCE':<19} {'SLURM':<24} CAUSE")
    for r in rows:
        cause = r["cause"] or r["slurm_reason"]
        click.echo(f"{r['node']:<10} {r['state']:<12} {stamp(r['since']):<19} {r['slurm_state']:<24} {cause}")


@node.command("history")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def history(ctx: click.Context, name: str, as_json: bool) -> None:
    """Every recorded transition of NODE, with time, cause and who."""
    config = load_config(ctx.obj.get("config_path") if ctx.obj else None)
    with Store(config.state_dir) as store:
        entries = store.history(name)
        rec = store.record(name)
        out = store.kv_get(f"validation_out:{name}")
    out = out if out and os.path.exists(out) else ""
    if as_json:
        click.echo(json.dumps({"node": name, "state": rec.state.value if rec else None,
                               "history": [e.to_dict() for e in entries], "validation_output": out or None},
                              indent=2))
        return
    if not entries:
        click.echo(f"{name}: no recorded transitions (in service or spare since slurm-ft first saw it)")
        return
    for e in entries:
        frm = e.from_state.value if e.from_state else "-"
        click.echo(f"{stamp(e.time)}  {frm:>11} -> {e.to_state.value:<11} {e.event.value:<10} "
                   f"{e.cause}{'  [' + e.actor + ']' if e.actor else ''}")
    if out:
        click.echo(f"latest validation output: {out}")


def _event(ctx: click.Context, name: str, event: Event, cause: str) -> None:
    from slurm_ft.fleet.lifecycle import admin as fleet_admin  # lazy: the sweep is heavy, only the commands that change a node
    config, client = setup(ctx)
    n = _known(client, name)
    lc = config.lifecycle
    with Store(config.state_dir) as store:
        entry = fleet_admin.apply(config, client, store, n, event, cause, admin())
    click.echo(f"{name}: {entry.from_state} -> {entry.to_state}" + (f" ({entry.cause})" if entry.cause else ""))
    if entry.to_state is State.REPAIRED:
        click.echo(f"the next `slurm-ft sweep` validates it ({' + '.join(lc.validate_levels)}) "
                   f"and returns it to {config.controller.spare_partition} if it passes")
    if entry.to_state is State.QUARANTINED:
        click.echo(f"drained and out of the partitions; after the repair run `slurm-ft node repaired {name}`")


@node.command("quarantine")
@click.argument("name")
@click.option("--reason", default="by an admin", show_default=True, help="Why, for the history and the drain.")
@click.pass_context
def quarantine(ctx: click.Context, name: str, reason: str) -> None:
    """Take NODE out of service: drain it (a running job finishes) and out of every partition."""
    _event(ctx, name, Event.QUARANTINE, reason)


@node.command("repaired")
@click.argument("name")
@click.option("--note", default="", help="What was done (reboot, GPU swapped, ...), for the history.")
@click.pass_context
def repaired(ctx: click.Context, name: str, note: str) -> None:
    """NODE was fixed: the next sweep validates it and, if it passes, returns it to the spare pool."""
    _event(ctx, name, Event.REPAIRED, note or "marked repaired")


@node.command("release")
@click.argument("name")
@click.option("--note", default="", help="The vendor's repair, for the history.")
@click.pass_context
def release(ctx: click.Context, name: str, note: str) -> None:
    """Take NODE off the RMA list after the vendor's repair; earlier incidents stop counting."""
    _event(ctx, name, Event.RELEASE, note or "released from the RMA list")
