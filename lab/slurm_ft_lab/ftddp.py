"""The lab's torchft job: R replica groups training one model with FT-DDP over gloo on CPU, under the
replica-group supervisor (`slurm-ft sbatch --replica-groups R`), which runs one `srun` step per group.

    srun python -m slurm_ft_lab.ftddp --ckpt-dir DIR --resume {ckpt} [--steps N] [--step-time S]
                                      [--save-every K] [--gpu-check auto|on|off]

Inside a group (SLURM_PROCID of SLURM_NTASKS, one rank per node) the ranks meet through gloo at the
group's own store (MASTER_ADDR/MASTER_PORT, per launch from the supervisor) and all-reduce each step's
loss: the group is a gang, as a model-parallel shard group is. Across groups, torchft does the data
parallelism: a Manager per group (replica id g{REPLICA_GROUP_ID}, the Lighthouse at TORCHFT_LIGHTHOUSE),
its ProcessGroupGloo, DistributedDataParallel and Optimizer wrappers: each step the groups in the quorum
average their gradients; a group that joins late heals live from a peer (torchft's recovery).

Checkpoints (DCP): every K committed steps the group with replica rank 0 in the quorum saves model,
optimizer and the Manager's step into DIR/step_N. Every start loads {ckpt}, a group started while the
others train on (SLURM_FT_GROUP_REJOIN=1) too: torchft then heals it from a peer ahead of it, and where
its first quorum has no peer (the others stopped or stuck in a collective past the Lighthouse's join
timeout) it trains on from the checkpoint; without one it would start from step 0 and the others would
heal from it when they come back, losing the run.

Without a Lighthouse (no TORCHFT_LIGHTHOUSE: the same job as one gang, e.g. under `--hot-spares K` alone)
it is plain DDP over every rank of the step, saving DCP checkpoints from every rank and resuming from
{ckpt}: a fault restarts the whole step (the comparison for replica groups).

Each rank watches its node's GPUs as the gang trainer does (slurm_ft_lab.trainer.GpuWatch, the lab's
fake NVML): a fatal Xid kills it (exit 1, a CUDA error), and srun's --kill-on-bad-exit its group.
Rank 0 of each group appends to DIR/trainer-log.jsonl (trainer.EventLog): `start` (group, resumed
step), `step` (group, step, committed, participants, quorum), `ckpt`, `fault`, `done`.
"""
from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
import time

import slurm_ft
from slurm_ft_lab.trainer import EventLog, GpuWatch, visible_gpus


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m slurm_ft_lab.ftddp", description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--resume", default="", help="DCP checkpoint to start from ('' = none); pass {ckpt}")
    p.add_argument("--steps", type=int, default=1000000)
    p.add_argument("--step-time", type=float, default=0.2, help="seconds of 'compute' per step")
    p.add_argument("--save-every", "--ckpt-every", type=int, default=20,
                   help="DCP checkpoint every K committed steps (0 = never)")
    p.add_argument("--timeout", type=float, default=30.0, help="torchft's collective timeout, seconds")
    p.add_argument("--quorum-timeout", type=float, default=120.0, help="torchft's quorum timeout, seconds")
    p.add_argument("--gpu-check", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--on-fault", choices=("die", "hang"), default="die",
                   help="a fatal Xid kills the rank (a CUDA error), or hangs it (its group's Manager heartbeats on)")
    return p.parse_args(list(argv))


def main(argv=()) -> int:
    a = parse_args(argv)
    env = os.environ
    rank, world = int(env.get("SLURM_PROCID", "0")), int(env.get("SLURM_NTASKS", "1"))
    group, groups = int(env.get("REPLICA_GROUP_ID", "0")), int(env.get("NUM_REPLICA_GROUPS", "1"))
    rejoin = env.get("SLURM_FT_GROUP_REJOIN") == "1"
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    log = EventLog(a.ckpt_dir, {"job": env.get("SLURM_JOB_ID", "0"), "restart": int(env.get("SLURM_RESTART_COUNT", "0") or 0),
                                "launch": int(env.get("SLURM_FT_LAUNCH", "0") or 0), "group": group})
    t0 = time.time()
    watch = None
    if a.gpu_check != "off":
        try:
            watch = GpuWatch(visible_gpus())
        except Exception as exc:             # no pynvml or no driver: a toy can still train
            if a.gpu_check == "on":
                print(f"ftddp: rank {rank}: cannot watch GPUs: {exc}", file=sys.stderr)
                return 4

    import torch  # lazy: torch and torchft are test extras; the lab imports this module without them
    import torch.distributed as dist  # lazy: as above
    import torch.distributed.checkpoint as dcp  # lazy: as above
    from torchft import Manager, Optimizer, ProcessGroupGloo  # lazy: as above

    addr, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
    if not env.get("TORCHFT_LIGHTHOUSE"):
        return gang(a, rank, world, addr, port, log, watch, node, t0)
    # the group's own gang, and the TCPStore the Manager needs (created here by rank 0, as torchrun would)
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=a.quorum_timeout))
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 8)
    opt_inner = torch.optim.SGD(model.parameters(), lr=0.01)

    def state_dict():
        return {"model": model.state_dict(), "optim": opt_inner.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt_inner.load_state_dict(sd["optim"])

    timeout = datetime.timedelta(seconds=a.timeout)
    manager = Manager(pg=ProcessGroupGloo(timeout=timeout), min_replica_size=1, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=f"g{group}", timeout=timeout,
                      quorum_timeout=datetime.timedelta(seconds=a.quorum_timeout),
                      connect_timeout=datetime.timedelta(seconds=a.quorum_timeout), rank=rank, world_size=world,
                      store_addr=addr, store_port=port, lighthouse_addr=env.get("TORCHFT_LIGHTHOUSE"),
                      hostname=addr)
    ddp = ddp_class()(manager, model)
    opt = Optimizer(manager, opt_inner)
    start = 0
    if a.resume:
        sd = {"model": model.state_dict(), "optim": opt_inner.state_dict(), "torchft": manager.state_dict()}
        dcp.load(sd, checkpoint_id=a.resume)
        load_state_dict(sd)
        manager.load_state_dict(sd["torchft"])
        start = manager.current_step()
    if rank == 0:
        log.write("start", step=start, resumed_from=a.resume or None, rejoin=rejoin,
                  world=world, groups=groups, nodes=env.get("SLURM_JOB_NODELIST", node),
                  startup_s=round(time.time() - t0, 3))
    gen = torch.Generator().manual_seed(1000 + 100 * group + rank)
    last_saved = start
    while manager.current_step() < a.steps:
        if watch is not None:
            fault = watch.check()
            if fault:
                print(f"RuntimeError: CUDA error: unspecified launch failure ({fault} on {node}, rank {rank})",
                      file=sys.stderr, flush=True)
                log.write("fault", rank=rank, node=node, reason=fault, step=manager.current_step(), action=a.on_fault)
                if a.on_fault == "hang":
                    while True:              # a kernel that never returns: torchft's threads heartbeat on
                        time.sleep(3600)
                os._exit(1)
        if a.step_time:
            time.sleep(a.step_time)
        before = manager.current_step()
        opt.zero_grad()                              # starts this step's quorum
        x = torch.randn(16, 32, generator=gen)
        loss = ddp(x).pow(2).mean()
        loss.backward()                              # the gradients' all-reduce across the groups in the quorum
        shard = loss.detach().clone()
        dist.all_reduce(shard)                       # and the group's own gang
        opt.step()                                   # should_commit: False after a peer's fault mid-step
        step = manager.current_step()
        committed = step > before
        slurm_ft.progress(step)
        if rank == 0:
            log.write("step", step=step, committed=bool(committed), participants=manager.num_participants(),
                      quorum=getattr(manager, "_quorum_id", None), healed=bool(getattr(manager, "_healing", False)),
                      loss=round(float(shard) / world, 6))
        if (committed and a.save_every and step % a.save_every == 0 and step > last_saved
                and manager.participating_rank() == 0):
            path = os.path.join(a.ckpt_dir, f"step_{step}")
            dcp.save({"model": model.state_dict(), "optim": opt_inner.state_dict(), "torchft": manager.state_dict()},
                     checkpoint_id=path)
            last_saved = step
            if rank == 0:
                log.write("ckpt", step=step, path=path)
    if rank == 0:
        log.write("done", step=manager.current_step())
    manager.shutdown(wait=False)
    dist.destroy_process_group()
    return 0


def ddp_class():
    """torchft's DistributedDataParallel, its gradient hook made to survive a peer lost mid-all-reduce.

    torchft 0.2.0's hook asserts on the work's future, which a failed wait leaves unset: a group whose
    peer dies during the all-reduce (a fault's group stopped at that moment) raises AssertionError and
    exits, and a healthy group restarts. Here the failed wait (the Manager has the error, so
    should_commit says False and the step is retried with the next quorum) returns the local gradients.
    """
    import torch  # lazy: as in main
    from torchft import DistributedDataParallel  # lazy: as in main

    class FaultTolerantDDP(DistributedDataParallel):
        @staticmethod
        def _comm_hook(state, bucket):
            work = state.allreduce(bucket.buffer())
            if work.wait():
                return work.get_future()._fut
            done = torch.futures.Future()
            done.set_result(bucket.buffer())
            return done

    return FaultTolerantDDP


def gang(a, rank: int, world: int, addr: str, port: int, log, watch, node: str, t0: float) -> int:
    """The same model as one gang: plain DDP over every rank, DCP checkpoints, resume from --resume."""
    import torch  # lazy: torch is a test extra; the lab imports this module without it
    import torch.distributed as dist  # lazy: as above
    import torch.distributed.checkpoint as dcp  # lazy: as above
    from torch.nn.parallel import DistributedDataParallel as DDP  # lazy: as above

    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=a.quorum_timeout))
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 8)
    ddp = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    if a.resume:
        sd = {"model": model.state_dict(), "optim": opt.state_dict(), "step": torch.tensor(0)}
        dcp.load(sd, checkpoint_id=a.resume)
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])
        step = int(sd["step"])
    if rank == 0:
        log.write("start", step=step, resumed_from=a.resume or None, rejoin=False, world=world, groups=1,
                  startup_s=round(time.time() - t0, 3))
    gen = torch.Generator().manual_seed(1000 + rank)
    while step < a.steps:
        if watch is not None:
            fault = watch.check()
            if fault:
                print(f"RuntimeError: CUDA error: unspecified launch failure ({fault} on {node}, rank {rank})",
                      file=sys.stderr, flush=True)
                log.write("fault", rank=rank, node=node, reason=fault, step=step)
                os._exit(1)
        if a.step_time:
            time.sleep(a.step_time)
        opt.zero_grad()
        loss = ddp(torch.randn(16, 32, generator=gen)).pow(2).mean()
        loss.backward()                              # the all-reduce over every rank: one gang
        opt.step()
        step += 1
        slurm_ft.progress(step)
        if rank == 0:
            log.write("step", step=step, committed=True, participants=1, quorum=None, loss=round(float(loss), 6))
        if a.save_every and step % a.save_every == 0:
            path = os.path.join(a.ckpt_dir, f"step_{step}")
            dcp.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": torch.tensor(step)},
                     checkpoint_id=path)
            if rank == 0:
                log.write("ckpt", step=step, path=path)
    if rank == 0:
        log.write("done", step=step)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
