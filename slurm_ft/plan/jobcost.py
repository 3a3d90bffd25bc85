"""What the job itself costs at a save and at a restart, from its size: the `ckpt plan` arithmetic.

With the model's parameters (`--params`), a save moves the training state over two hops (plan/ckpt_io.py):
each GPU copies its shard to host memory, then the hosts write it to storage. A synchronous save blocks
for both hops; an asynchronous one (PyTorch DCP `async_save`, two-stage saves) blocks for the copy only
and writes in the background. A restart reads the same bytes back over the same links (stated: read and
write bandwidths taken equal), after each rank's own start (imports, CUDA context, communicators: the
figures' `init_s`).

Without the parameters, the synchronous save's blocking time is given (`--checkpoint-cost-s`), an
asynchronous save blocks for that time times the ratio PyTorch DCP measured (figures: `async_blocking_ratio`)
and writes for the rest, and a restart's load takes as long as a synchronous save. Pure, with the
derivation of every number.
"""
from __future__ import annotations

from typing import Optional, Tuple

from slurm_ft.errors import UsageError
from slurm_ft.plan.ckpt_io import plan_checkpoint
from slurm_ft.plan.explain import Derivation, gnum
from slurm_ft.plan.figures import Figures
from slurm_ft.plan.levers import JobCosts


def job_costs(f: Figures, *, gpus: int, gpus_per_node: int, params: Optional[float] = None,
              bytes_per_param: float = 16.0, d2h_gbps: float = 25.0, node_storage_gbps: float = 50.0,
              storage_gbps: float = 2000.0, ckpt_cost_s: float = 10.0, init_s: Optional[float] = None,
              restart_s: Optional[float] = None) -> Tuple[JobCosts, Derivation]:
    """The job's costs and how they follow. `ckpt_cost_s`: a synchronous save's blocking time, used when
    `params` is not given; `restart_s`: one restart time for every way back (overrides the model)."""
    d = Derivation()
    nodes = gpus // gpus_per_node
    ini = f.get("init_s")
    init = d.given("init_s", "each rank's own start (init)", init_s if init_s is not None else ini.value, "s",
                   note="--init-s" if init_s is not None else f"{ini.kind}: {ini.source}")
    if params is not None:
        plan = plan_checkpoint(params, gpus=gpus, gpus_per_node=gpus_per_node, bytes_per_param=bytes_per_param,
                               d2h_gbps=d2h_gbps, node_storage_gbps=node_storage_gbps, storage_gbps=storage_gbps)
        state = d.given("state_gb", "training state (P × b)", plan.state_gb, "GB",
                        note=f"{gnum(params)} parameters × {gnum(bytes_per_param)} bytes")
        h1 = d.given("gpu_to_host_s", "hop 1, each GPU's shard to host memory", plan.gpu_to_host_s, "s",
                     note=f"{gnum(state / plan.shards)} GB at {gnum(d2h_gbps)} GB/s (`slurm-ft ckpt plan`)")
        h2 = d.given("host_to_storage_s", "hop 2, hosts to storage", plan.host_to_storage_s, "s",
                     note=f"the slower of the node links ({gnum(node_storage_gbps)} GB/s each) and the storage "
                          f"({gnum(storage_gbps)} GB/s): {plan.bottleneck}")
        sync = d.step("sync_blocking_s", "synchronous save blocks for", "hop 1 + hop 2", f"{gnum(h1)} + {gnum(h2)}",
                      h1 + h2, "s")
        asy = d.step("async_blocking_s", "asynchronous save blocks for", "hop 1", gnum(h1), h1, "s", exact=True)
        write = d.step("async_write_s", "... and writes in the background for", "hop 2", gnum(h2), h2, "s", exact=True)
        load = d.step("load_s", "checkpoint load at a restart (the same bytes back)", "hop 2 + hop 1",
                      f"{gnum(h2)} + {gnum(h1)}", h2 + h1, "s", note="stated: reads as fast as writes")
    else:
        if not ckpt_cost_s >= 0:
            raise UsageError(f"--checkpoint-cost-s must be zero or more, got {ckpt_cost_s}")
        ratio = f.get("async_blocking_ratio")
        sync = d.given("sync_blocking_s", "synchronous save blocks for (d)", ckpt_cost_s, "s",
                       note="--checkpoint-cost-s (or planning.checkpoint_cost_s)")
        q = d.given("async_blocking_ratio", "asynchronous / synchronous blocking (q)", ratio.value,
                    note=f"{ratio.kind}: {ratio.source}")
        asy = d.step("async_blocking_s", "asynchronous save blocks for", "d × q", f"{gnum(sync)} × {gnum(q)}",
                     sync * q, "s")
        write = d.step("async_write_s", "... and writes in the background for", "d - d × q",
                       f"{gnum(sync)} - {gnum(asy)}", sync - asy, "s")
        load = d.given("load_s", "checkpoint load at a restart (d)", sync, "s",
                       note="stated: a load reads what a synchronous save wrote, as fast")
    d.given("nodes", "training nodes (n)", nodes)
    if restart_s is not None:
        d.given("restart_s", "restart (every way back)", restart_s, "s", note="--restart-s: overrides the model")
    return JobCosts(nodes, init, load, sync, asy, write, restart_s), d
