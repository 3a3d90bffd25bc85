"""The `slurm-ft` command group (click), for every command but the hooks' `slurm-ft check ...`.

Command groups live in their own modules and are imported only when used, so that one command does
not pay for the others' imports. Other distributions add commands through the entry-point group
`slurm_ft.commands`: the lab (`slurm-ft lab ...`, the `slurm-ft-lab` project in lab/, a development tool
that `pip install slurm-ft` does not install) is one.
"""
from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import click

from slurm_ft import __version__, plugins
from slurm_ft.cli.guard import guarded, setup_logging
from slurm_ft.errors import EXIT_USAGE

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

# name -> "module:attribute"; each attribute is a click command or group.
COMMANDS = {
    "spares": "slurm_ft.cli.spares:spares",
    "sim": "slurm_ft.cli.sim:sim",
    "node": "slurm_ft.cli.node:node",
    "sweep": "slurm_ft.cli.sweep:sweep",
    "remediate": "slurm_ft.cli.sweep:remediate",
    "gpu-reset": "slurm_ft.cli.gpu_reset:gpu_reset",
    "report": "slurm_ft.cli.report:report",
    "status": "slurm_ft.cli.status:status",
    "breaker": "slurm_ft.cli.breaker:breaker",
    "check": "slurm_ft.cli.group:check",
    "watch": "slurm_ft.cli.watch:watch",
    "controller": "slurm_ft.cli.controller:controller",
    "incidents": "slurm_ft.cli.incidents:incidents",
    "xid": "slurm_ft.cli.xid:xid_group",
    "ckpt": "slurm_ft.cli.ckpt:ckpt",
    "sbatch": "slurm_ft.cli.sbatch:sbatch",
    "config": "slurm_ft.cli.config:config_group",
}


def _added() -> Dict[str, EntryPoint]:
    """name -> entry point, for the commands other installed distributions add."""
    return {n: ep for n, ep in plugins.added(plugins.COMMANDS).items() if n not in COMMANDS}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted([*COMMANDS, *_added()])

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        target = COMMANDS.get(name)
        command: Optional[click.Command]     # what the entry point or the module attribute names
        if target is None:
            ep = _added().get(name)
            command = ep.load() if ep is not None else None
            return command
        module, attr = target.split(":")
        command = getattr(importlib.import_module(module), attr)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurm-ft")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
@click.option("--config", "config_path", metavar="FILE", envvar="SLURM_FT_CONFIG",
              help="Config file (default /etc/slurm-ft/slurm-ft.yaml, or $SLURM_FT_CONFIG).")
@click.pass_context
def cli(ctx: click.Context, verbose: int, config_path: str | None) -> None:
    """Keep synchronous GPU training jobs alive on Slurm: detect, drain, swap in a spare, requeue."""
    setup_logging(verbose)
    ctx.obj = {"config_path": config_path}


@click.command("check", add_help_option=False,
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def check(ctx: click.Context, args: Tuple[str, ...]) -> None:
    """Check this node's GPUs and host at a level (slurm-ft check --help)."""
    from slurm_ft.cli.check import run  # lazy: a command's module loads when it runs, as COMMANDS' do
    ctx.exit(run(list(args), ctx.obj.get("config_path") if ctx.obj else None))


def _run(argv: Optional[Sequence[str]], prog_name: str) -> int:
    try:
        rv = cli.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("slurm-ft: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    return rv if isinstance(rv, int) else 0


def main(argv: Optional[Sequence[str]] = None, prog_name: str = "slurm-ft") -> None:
    sys.exit(guarded(lambda: _run(argv, prog_name)))


__all__ = ["cli", "main", "COMMANDS", "EXIT_USAGE"]
