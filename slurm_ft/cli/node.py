"""`slurm-ft node list|history|quarantine|repaired|release`: the lifecycle of nodes, for admins.

The commands that name nodes take a Slurm hostlist (`gpu[001-004,007]`), as scontrol does: at scale an
admin quarantines a rack. Every name is checked before any node is touched; then each node is acted on
and reported on its own line, a refused one on stderr (exit 2) without stopping the others."""
from __future__ import annotations

import getpass
import json
import os
import time
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import click

from slurm_ft.config import load_config
from slurm_ft.errors import EXIT_USAGE, UsageError
from slurm_ft.fleet.lifecycle.transitions import Event, State, TransitionError
from slurm_ft.fleet.lifecycle.node_history import Store
from slurm_ft.slurm.backend import client_from_config
from slurm_ft.slurm.hostlist import compress, expand

if TYPE_CHECKING:
    from slurm_ft.config import Config
    from slurm_ft.fleet.lifecycle.transitions import HistoryEntry
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


def names_of(expr: str) -> List[str]:
    """The node names of a hostlist argument, in the order written; a bad or empty one: UsageError (exit 2)."""
    names = list(dict.fromkeys(expand(expr)))
    if not names:
        raise UsageError(f"hostlist {expr!r} names no node")
    return names


def _known(client: SlurmApi, expr: str) -> List[Node]:
    """The nodes `expr` names, all of them in this cluster: an unknown one stops the command before any is touched."""
    found = {n.name: n for n in client.nodes()}
    names = names_of(expr)
    unknown = [n for n in names if n not in found]
    if unknown:
        raise UsageError(f"unknown node{'s' if len(unknown) > 1 else ''} {compress(unknown)!r} "
                         f"(not in this cluster's slurm.conf)")
    return [found[n] for n in names]


@click.group("node")
def node() -> None:
    """A node's lifecycle: in service -> failed -> quarantined -> repaired -> validating -> spare."""


@node.command("list")
@click.option("--state", "state", type=click.Choice([s.value for s in State]), help="Only nodes in this state.")
@click.option("--all", "show_all", is_flag=True, help="Also nodes in service (hidden by default).")
@click.option("--json", "as_json", is_flag=True, help="As JSON: every node, those in service included.")
@click.pass_context
def list_(ctx: click.Context, state: Optional[str], show_all: bool, as_json: bool) -> None:
    """Nodes with their lifecycle state (by default those not simply in service, and those in keep_off)."""
    from slurm_ft.fleet.report.fleet_view import view  # lazy: the fleet view is heavy (~35 ms), only `node list`
    config, client = setup(ctx)
    with Store(config.state_dir) as store:
        rows = view(config, client, store, with_target=False).rows()
    if state:
        rows = [r for r in rows if r["state"] == state]
    elif not show_all and not as_json:
        rows = [r for r in rows if r["state"] != State.IN_SERVICE.value or r["keep_off"]]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no nodes" + (f" in state {state}" if state else " outside service (--all lists every node)"))
        return
    click.echo(f"{'NODE':<10} {'STATE':<12} {'SINCE':<19} {'SLURM':<24} CAUSE")
    for r in rows:
        cause = r["cause"] or r["slurm_reason"]
        if r["keep_off"]:
            cause = "[keep_off: slurm-ft leaves it alone]" + (f" {cause}" if cause else "")
        click.echo(f"{r['node']:<10} {r['state']:<12} {stamp(r['since']):<19} {r['slurm_state']:<24} {cause}")


@node.command("history")
@click.argument("nodes", metavar="NODES")
@click.option("--json", "as_json", is_flag=True,
              help="As JSON: one object for a single node name, a list of them for a hostlist (gpu[001-004]).")
@click.pass_context
def history(ctx: click.Context, nodes: str, as_json: bool) -> None:
    """Every recorded transition of NODES (a name or a hostlist), with time, cause and who."""
    names = names_of(nodes)
    config = load_config(ctx.obj.get("config_path") if ctx.obj else None)
    with Store(config.state_dir) as store:
        found = [(n, store.history(n), store.record(n), store.kv_get(f"validation_out:{n}")) for n in names]
    docs = []
    for name, entries, rec, out in found:
        out = out if out and os.path.exists(out) else ""
        if as_json:
            docs.append({"node": name, "state": rec.state.value if rec else None,
                         "history": [e.to_dict() for e in entries], "validation_output": out or None})
            continue
        _print_history(name, entries, out, several=len(names) > 1)
    if as_json:     # the shape follows what the caller wrote, not how many nodes a hostlist happens to name
        click.echo(json.dumps(docs if _is_hostlist(nodes) else docs[0], indent=2))


def _is_hostlist(expr: str) -> bool:
    return any(c in expr for c in "[,")


def _print_history(name: str, entries: Sequence[HistoryEntry], out: str, several: bool) -> None:
    lead = f"{name}  " if several else ""      # several nodes: each line names its node, for grep
    if not entries:
        click.echo(f"{name}: no recorded transitions (in service or spare since slurm-ft first saw it)")
        return
    for e in entries:
        frm = e.from_state.value if e.from_state else "-"
        click.echo(f"{lead}{stamp(e.time)}  {frm:>11} -> {e.to_state.value:<11} {e.event.value:<10} "
                   f"{e.cause}{'  [' + e.actor + ']' if e.actor else ''}")
    if out:
        click.echo(f"{lead}latest validation output: {out}")


def _event(ctx: click.Context, nodes: str, event: Event, cause: str) -> None:
    from slurm_ft.fleet.lifecycle import admin as fleet_admin  # lazy: the sweep is heavy, only the commands that change a node
    config, client = setup(ctx)
    targets = _known(client, nodes)
    kept = [n.name for n in targets if config.keeps_off(n.name)]
    if kept and event is not Event.RELEASE:     # the sweep would never validate it, the drain would be ours
        raise UsageError(f"{compress(kept)} in keep_off ({config.path or 'the config'}): slurm-ft does not touch "
                         f"{'them' if len(kept) > 1 else 'it'}; drain with scontrol, or remove "
                         f"{'them' if len(kept) > 1 else 'it'} from keep_off first")
    lc = config.lifecycle
    reached: Dict[State, List[str]] = {}
    refused = 0
    with Store(config.state_dir) as store:
        for n in targets:
            try:
                entry = fleet_admin.apply(config, client, store, n, event, cause, admin())
            except TransitionError as exc:      # this node only: the others of the hostlist go on
                click.echo(f"slurm-ft: error: {n.name}: {exc}", err=True)
                refused += 1
                continue
            click.echo(f"{n.name}: {entry.from_state} -> {entry.to_state}" + (f" ({entry.cause})" if entry.cause else ""))
            reached.setdefault(entry.to_state, []).append(n.name)
    if State.REPAIRED in reached:
        click.echo(f"the next `slurm-ft sweep` validates {compress(reached[State.REPAIRED])} "
                   f"({' + '.join(lc.validate_levels)}) and returns each node that passes to "
                   f"{config.controller.spare_partition}")
    if State.QUARANTINED in reached:
        click.echo("drained and out of the partitions; after the repair run "
                   f"`slurm-ft node repaired {compress(reached[State.QUARANTINED])}`")
    if refused:
        ctx.exit(EXIT_USAGE)


@node.command("quarantine")
@click.argument("nodes", metavar="NODES")
@click.option("--reason", default="by an admin", show_default=True, help="Why, for the history and the drain.")
@click.pass_context
def quarantine(ctx: click.Context, nodes: str, reason: str) -> None:
    """Take NODES (a name or a hostlist) out of service: drain (a running job finishes), out of every partition."""
    _event(ctx, nodes, Event.QUARANTINE, reason)


@node.command("repaired")
@click.argument("nodes", metavar="NODES")
@click.option("--note", default="", help="What was done (reboot, GPU swapped, ...), for the history.")
@click.pass_context
def repaired(ctx: click.Context, nodes: str, note: str) -> None:
    """NODES (a name or a hostlist) were fixed: the next sweep validates each, a pass returns it to the spare pool."""
    _event(ctx, nodes, Event.REPAIRED, note or "marked repaired")


@node.command("release")
@click.argument("nodes", metavar="NODES")
@click.option("--note", default="", help="The vendor's repair, for the history.")
@click.pass_context
def release(ctx: click.Context, nodes: str, note: str) -> None:
    """Take NODES (a name or a hostlist) off the RMA list after the vendor's repair; earlier incidents stop counting."""
    _event(ctx, nodes, Event.RELEASE, note or "released from the RMA list")
