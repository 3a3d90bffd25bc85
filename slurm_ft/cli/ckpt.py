"""`slurm-ft ckpt`: the checkpoint contract from the command line (and `ckpt plan` when installed)."""
from __future__ import annotations

import json
from typing import Optional

import click

from slurm_ft.errors import EXIT_ENVIRONMENT, EXIT_NEGATIVE
from slurm_ft.job import ckpt as ckptlib


@click.group("ckpt")
def ckpt() -> None:
    """Checkpoints: find the newest complete one (latest); what they cost (plan)."""


@ckpt.command("latest")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="One JSON object: path, step, layout, skipped (with reasons).")
@click.option("--verify", is_flag=True, help="Also check sha256 of every file against the slurm-ft manifest.")
@click.option("-v", "--verbose", is_flag=True, help="List skipped checkpoints and why on stderr.")
@click.pass_context
def latest_cmd(ctx: click.Context, directory: str, as_json: bool, verify: bool, verbose: bool) -> None:
    """Print the newest COMPLETE checkpoint in DIRECTORY; exit 1 with the reason if there is none.

    Exit 4 when DIRECTORY exists but cannot be read, or holds checkpoint data none of which is complete
    (refuse: do not start from scratch over it; --json says "refuse": true and why).

    Each candidate is judged by the evidence inside it, not its name: slurm-ft (COMPLETE manifest),
    PyTorch DCP (.metadata naming its .distcp shards), Hugging Face (trainer_state.json), Megatron
    (mp_rank_*/, latest_checkpointed_iteration.txt), DeepSpeed (*model_states.pt, latest), torch.save zip
    files (*.ckpt, *.pt, *.pth). Half-written checkpoints are skipped, never returned.
    """
    result = ckptlib.latest(directory, verify=verify)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    elif result.path is not None:
        click.echo(result.path)
    if verbose or (result.path is None and not as_json):
        for s in result.skipped:
            click.echo(f"skipped {s.path}: {s.reason}", err=True)
    if result.path is None:
        if not as_json:
            click.echo(f"slurm-ft: {result.reason}", err=True)
        ctx.exit(EXIT_ENVIRONMENT if result.must_not_start else EXIT_NEGATIVE)


_plan: Optional[click.Command]
try:  # the planning engineer's `ckpt plan` (optional module)
    from slurm_ft.cli.ckpt_plan import plan as _plan
except ImportError:
    _plan = None
if _plan is not None:
    ckpt.add_command(_plan, "plan")
