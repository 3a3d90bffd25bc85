"""The `slurm-ft` command. The only place that sets up logging and turns errors into exit codes.

Command groups live in their own modules and are imported only when used, so that the node-side
health check (run by slurmd every few minutes) does not pay for the controller's imports.
"""
from __future__ import annotations

import importlib
import logging
import sys

import click

from slurm_ft import __version__
from slurm_ft.errors import EXIT_USAGE, SlurmFTError

# name -> "module:attribute"; each attribute is a click command or group.
COMMANDS = {
    "spares": "slurm_ft.cli.spares:spares",
    "sim": "slurm_ft.cli.sim:sim",
    "lab": "slurm_ft.cli.lab:lab",
    "node": "slurm_ft.cli.node:node",
    "sweep": "slurm_ft.cli.sweep:sweep",
    "remediate": "slurm_ft.cli.sweep:remediate",
    "gpu-reset": "slurm_ft.cli.gpu_reset:gpu_reset",
    "report": "slurm_ft.cli.report:report",
    "status": "slurm_ft.cli.status:status",
    "breaker": "slurm_ft.cli.breaker:breaker",
    "check": "slurm_ft.cli.check:check",
    "watch": "slurm_ft.cli.watch:watch",
    "controller": "slurm_ft.cli.controller:controller",
    "incidents": "slurm_ft.cli.incidents:incidents",
    "xid": "slurm_ft.cli.xid:xid_group",
    "ckpt": "slurm_ft.cli.ckpt:ckpt",
    "sbatch": "slurm_ft.cli.sbatch:sbatch",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurm-ft")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
@click.option("--config", "config_path", metavar="FILE", envvar="SLURM_FT_CONFIG",
              help="Config file (default /etc/slurm-ft/slurm-ft.yaml, or $SLURM_FT_CONFIG).")
@click.pass_context
def cli(ctx: click.Context, verbose: int, config_path: str | None) -> None:
    """Keep synchronous GPU training jobs alive on Slurm: detect, drain, swap in a spare, requeue."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    ctx.obj = {"config_path": config_path}


def main(argv=None, prog_name: str = "slurm-ft") -> None:
    try:
        rv = cli.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("slurm-ft: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except SlurmFTError as exc:
        click.echo(f"slurm-ft: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # a bug of ours: one line, the traceback only with -vv
        logging.getLogger("slurm_ft").debug("internal error", exc_info=True)
        click.echo(f"slurm-ft: internal error: {type(exc).__name__}: {exc} (run with -vv for details)", err=True)
        sys.exit(70)
    sys.exit(rv if isinstance(rv, int) else 0)


__all__ = ["cli", "main", "COMMANDS", "EXIT_USAGE"]
