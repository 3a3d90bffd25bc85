"""`slurm-ft ckpt plan`: the checkpoint I/O arithmetic that sets the blocking cost of a save."""
from __future__ import annotations

import json
from typing import Optional

import click

from slurm_ft.plan import ckpt_io


@click.command("plan")
@click.option("--params", type=float, required=True, help="Model parameters, e.g. 70e9.")
@click.option("--gpus", type=int, required=True, help="GPUs of the job.")
@click.option("--gpus-per-node", type=int, default=8, show_default=True)
@click.option("--shards", type=int, default=None,
              help="Pieces the state is split into, one written per rank (default: --gpus, fully sharded).")
@click.option("--bytes-per-param", type=float, default=16.0, show_default=True,
              help="Training state per parameter (mixed-precision Adam: 16; without gradients: 14).")
@click.option("--d2h-gbps", type=float, default=25.0, show_default=True, help="GPU to host memory, GB/s per GPU.")
@click.option("--node-storage-gbps", type=float, default=50.0, show_default=True,
              help="One node's write bandwidth to storage, GB/s (400 Gb/s = 50 GB/s).")
@click.option("--storage-gbps", type=float, default=2000.0, show_default=True,
              help="The storage system's aggregate write bandwidth, GB/s.")
@click.option("--interval-min", type=float, default=30.0, show_default=True, help="Minutes between saves.")
@click.option("--json", "as_json", is_flag=True, help="Everything as one JSON object, derivation included.")
def plan(params: float, gpus: int, gpus_per_node: int, shards: Optional[int], bytes_per_param: float,
         d2h_gbps: float, node_storage_gbps: float, storage_gbps: float, interval_min: float,
         as_json: bool) -> None:
    """Training-state size, bytes per rank, time per hop, synchronous vs two-stage asynchronous blocking
    time, and the share of run time checkpointing costs, with the arithmetic shown."""
    p = ckpt_io.plan_checkpoint(params, gpus=gpus, gpus_per_node=gpus_per_node, shards=shards,
                                bytes_per_param=bytes_per_param, d2h_gbps=d2h_gbps,
                                node_storage_gbps=node_storage_gbps, storage_gbps=storage_gbps,
                                interval_min=interval_min)
    click.echo(json.dumps(p.to_dict(), indent=2) if as_json else "\n".join(ckpt_io.render(p)))
