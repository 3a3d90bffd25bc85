"""`slurm-ft gpu-reset --gpu N`: reset one GPU of this node (the remediation's reset_gpu step).

Exit 0 reset done, 1 the reset failed (nvidia-smi's words on stdout), 2 bad input."""
from __future__ import annotations

import json

import click

from slurm_ft.config import load_config
from slurm_ft.errors import EXIT_NEGATIVE


@click.command("gpu-reset")
@click.option("--gpu", "gpu", type=int, required=True, help="GPU index (as nvidia-smi -i takes it).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def gpu_reset(ctx: click.Context, gpu: int, as_json: bool) -> None:
    """Reset GPU N with lifecycle.remediation.reset_command (default `nvidia-smi -r -i N`). Run it only
    when no job holds the node: the sweep runs it inside the node's maintenance reservation."""
    from slurm_ft.gpu.reset import reset_gpu
    rc = load_config(ctx.obj.get("config_path") if ctx.obj else None).lifecycle.remediation
    result = reset_gpu(gpu, rc.reset_command, rc.reset_timeout_s)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        click.echo(f"gpu{gpu}: {'reset' if result.ok else 'reset FAILED'}: {result.detail}")
    if not result.ok:
        ctx.exit(EXIT_NEGATIVE)
