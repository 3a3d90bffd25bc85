"""`slurm-ft gpu-reset --gpu N`: reset one GPU of this node (the remediation's reset_gpu step).

Exit 0 reset done, 1 the reset failed (nvidia-smi's words on stdout), 2 bad input.
A successful reset acknowledges the Xids logged before it (the node's health state), as a resume does."""
from __future__ import annotations

import json
import time

import click

from slurm_ft.cli.check import node_name
from slurm_ft.config import load_config
from slurm_ft.errors import EXIT_NEGATIVE
from slurm_ft.node.gpu_reset import acknowledge_xids, reset_gpu


@click.command("gpu-reset")
@click.option("--gpu", "gpu", type=int, required=True, help="GPU index (as nvidia-smi -i takes it).")
@click.option("--node", metavar="NAME", help="Node name (default $SLURMD_NODENAME, else the hostname).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def gpu_reset(ctx: click.Context, gpu: int, node: "str | None", as_json: bool) -> None:
    """Reset GPU N with lifecycle.remediation.reset_command (default `nvidia-smi -r -i N`). Run it only
    when no job holds the node: the sweep runs it inside the node's maintenance reservation."""
    config = load_config(ctx.obj.get("config_path") if ctx.obj else None)
    rc = config.lifecycle.remediation
    started = time.time()
    result = reset_gpu(gpu, rc.reset_command, rc.reset_timeout_s)
    if result.ok:
        acknowledge_xids(config.health, node_name(node), started)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        click.echo(f"gpu{gpu}: {'reset' if result.ok else 'reset FAILED'}: {result.detail}")
    if not result.ok:
        ctx.exit(EXIT_NEGATIVE)
