"""The real PyTorch job every contender of bench/peers.py keeps alive: DDP over gloo on CPU, saving with
torch.distributed.checkpoint (DCP) into CKPT/step_N/, one rank per node (--gres=gpu:8).

    srun python -m slurm_ft_lab.torchjob --ckpt-dir CKPT --log LOG --resume {ckpt} [--mode plain]
    ft_launcher ... -m slurm_ft_lab.torchjob --mode nvrx ...           (NVIDIA's launcher, heartbeats)
    srun python -m slurm_ft_lab.torchjob --mode torchft ...            (one Slurm job per replica group)

Each step "computes" (--step-time), checks the node's GPUs through the real pynvml (the lab's fake
libnvidia-ml.so.1, as the toy trainer does), then all-reduces the gradients. A GPU that is lost or
reports a fatal Xid kills the rank as a CUDA error would (exit 1), or stops it (--on-fault hang); a rank
started on a GPU that fell off the bus dies at its first step. So every contender meets the same fault,
and nobody is credited with one its ranks never felt.

Modes:
* plain: ranks from SLURM_PROCID/SLURM_NTASKS (or RANK/WORLD_SIZE: torchrun, the hot-spare supervisor);
  they meet through MASTER_ADDR/MASTER_PORT when set, else through a FileStore in CKPT.
* nvrx: as plain, under NVIDIA's ft_launcher: RankMonitorClient heartbeats, one a step.
* torchft: one replica group per Slurm job (REPLICA_GROUP_ID, NUM_REPLICA_GROUPS, TORCHFT_LIGHTHOUSE):
  gradients are averaged inside the group (a gloo group of its ranks) and across the groups by torchft's
  Manager (FT-DDP: per-step quorum from the Lighthouse, live recovery of the weights from a healthy
  group). Group 0 saves DCP checkpoints as the fallback.

Every event is one JSON line appended to --events: ``up`` (each rank: its node), ``imported`` and
``joined`` (each rank: torch imported, the process group formed), ``start`` (rank 0 of the
run: step, resumed_from, world, nodes), ``step`` (rank 0: step, participants in torchft), ``saved``,
``fault``, ``heal`` (torchft: weights received from a peer), ``done``. Each carries ``run`` (job, Slurm
restart, supervisor launch, launcher restart, replica group), ``t`` and ``group``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import socket
import sys
import time

from slurm_ft_lab.trainer import GpuWatch, read_jsonl, visible_gpus

EXIT_CUDA = 1


class EventLog:
    def __init__(self, path: str, base: dict):
        self.path = path
        self.base = base

    def write(self, event: str, **fields) -> None:
        rec = {"event": event, "t": round(time.time(), 6), **self.base, **fields}
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (json.dumps(rec, sort_keys=True) + "\n").encode())   # one write: lines never interleave
        finally:
            os.close(fd)


def read_log(path: str) -> list:
    """The events so far; a torn last line is ignored."""
    return read_jsonl(path)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m slurm_ft_lab.torchjob", description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--events", required=True, help="the event log (JSON lines), outside the checkpoint directory")
    p.add_argument("--resume", default="", help="a DCP checkpoint directory ('' = from scratch); pass {ckpt}; "
                   "'latest': the newest complete one in --ckpt-dir, found by the job itself (a launcher that "
                   "restarts it in place, as NVIDIA's ft_launcher does, passes the same arguments every time)")
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--step-time", type=float, default=0.5)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--mode", choices=("plain", "nvrx", "torchft"), default="plain")
    p.add_argument("--on-fault", choices=("die", "hang"), default="die")
    p.add_argument("--gpu-check", choices=("auto", "on", "off"), default="on")
    p.add_argument("--collective-timeout", type=float, default=600.0,
                   help="gloo's timeout for the job's own process group (NCCL's default: 600 s)")
    p.add_argument("--torchft-timeout", type=float, default=5.0,
                   help="torchft mode: the replica process group's timeout (torchft's train_ddp.py: 5 s)")
    return p.parse_args(list(argv))


def latest_checkpoint(ckpt_dir: str) -> str:
    """The newest step_N directory holding DCP's .metadata (written last: the save is complete), or ''."""
    best = (-1, "")
    try:
        names = os.listdir(ckpt_dir)
    except FileNotFoundError:
        return ""
    for name in names:
        head, _, num = name.partition("_")
        if head == "step" and num.isdigit() and os.path.exists(os.path.join(ckpt_dir, name, ".metadata")):
            best = max(best, (int(num), os.path.join(ckpt_dir, name)))
    return best[1]


def _env_int(*names: str, default: int = 0) -> int:
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            return int(v)
    return default


def _fault(log: EventLog, rank: int, node: str, what: str, step: int, how: str) -> None:
    print(f"RuntimeError: CUDA error: unspecified launch failure ({what} on {node}, rank {rank})",
          file=sys.stderr, flush=True)
    log.write("fault", rank=rank, node=node, reason=what, action=how, step=step)
    if how == "hang":
        while True:             # a hung kernel: holds its sockets, never reaches the collective
            signal.pause()
    os._exit(EXIT_CUDA)


def _gpu_watch(mode: str):
    if mode == "off":
        return None
    try:
        return GpuWatch(visible_gpus())
    except Exception as exc:      # noqa: BLE001 - no NVML: a toy can still train, unless asked not to
        if mode == "on":
            raise SystemExit(f"torchjob: cannot watch GPUs: {exc}")
        return None


def _rendezvous(args, rank: int, world: int, key: str):
    """Join the job's (or the group's) process group; returns its store's (host, port), which torchft's
    Manager joins too. env:// where a launcher set MASTER_ADDR/PORT (torchrun, ft_launcher, the hot-spare
    supervisor); else rank 0 serves a TCPStore on a free port and publishes it through a FileStore in the
    checkpoint directory (fresh per run)."""
    import torch.distributed as dist  # lazy: torch is a test extra; the lab imports this module without it
    env = os.environ
    timeout = datetime.timedelta(seconds=args.collective_timeout)
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world, timeout=timeout)
        return env["MASTER_ADDR"], int(env["MASTER_PORT"])
    files = dist.FileStore(os.path.join(args.ckpt_dir, f".rdv-{key}"), world)
    host = "127.0.0.1"
    if rank == 0:
        store = dist.TCPStore(host, 0, world, True, timeout=timeout, wait_for_workers=False)
        files.set("port", str(store.port))
    else:
        store = dist.TCPStore(host, int(files.get("port")), world, False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    return host, store.port


def main(argv=()) -> int:
    args = parse_args(argv)
    env = os.environ
    job = env.get("SLURM_JOB_ID", "0")
    restart = _env_int("SLURM_RESTART_COUNT")
    launch = _env_int("SLURM_FT_LAUNCH")
    elastic = _env_int("TORCHELASTIC_RESTART_COUNT")
    group = _env_int("REPLICA_GROUP_ID") if args.mode == "torchft" else 0
    groups = _env_int("NUM_REPLICA_GROUPS", default=1) if args.mode == "torchft" else 1
    rank = _env_int("RANK", "SLURM_PROCID")
    world = _env_int("WORLD_SIZE", "SLURM_NTASKS", default=1)
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    run = f"{job}.{restart}.{launch}.{elastic}.g{group}"
    log = EventLog(args.events, {"run": run, "job": job, "group": group})
    log.write("up", rank=rank, node=node, pid=os.getpid())
    watch = _gpu_watch(args.gpu_check)         # a GPU lost before this rank started: found at step 1

    import torch  # lazy: torch is a test extra; the lab imports this module without it
    import torch.distributed as dist  # lazy: as above
    import torch.distributed.checkpoint as dcp  # lazy: as above

    log.write("imported", rank=rank)
    host, port = _rendezvous(args, rank, world, f"{job}-{restart}-{launch}-{elastic}-g{group}")
    log.write("joined", rank=rank)
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    inner = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    if args.resume == "latest":
        args.resume = latest_checkpoint(args.ckpt_dir)
    if args.resume:
        state = {"model": model.state_dict(), "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=args.resume)
        model.load_state_dict(state["model"])
        step = int(state["step"])

    manager = monitor = None
    if args.mode == "torchft":
        manager, opt = _torchft(args, model, inner, rank, world, host, port, group, log)
        ddp = model if world == 1 else torch.nn.parallel.DistributedDataParallel(model)
        step = manager.current_step()
    else:
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = inner
    if args.mode == "nvrx":
        # lazy: only --mode nvrx (nvidia-resiliency-ext has a wheel for Python 3.11 alone)
        from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient
        monitor = RankMonitorClient()
        monitor.init_workload_monitoring()

    nodes = [None] * world
    dist.all_gather_object(nodes, node)
    if rank == 0:
        log.write("start", step=step, resumed_from=args.resume or None, world=world, nodes=nodes, groups=groups,
                  elastic=elastic)
    gen = torch.Generator().manual_seed(1000 + rank + 100 * group)
    while step < args.steps:
        if args.step_time:
            time.sleep(args.step_time)
        if watch is not None:
            fault = watch.check()
            if fault:
                _fault(log, rank, node, fault, step + 1, args.on_fault)
        x = torch.randn(8, 16, generator=gen)
        opt.zero_grad()                  # torchft: starts this step's quorum
        loss = ddp(x).pow(2).mean()
        loss.backward()                  # the all-reduce inside the job (or the group) over gloo
        if manager is not None:
            works = [manager.allreduce(p.grad) for p in model.parameters() if p.grad is not None]
            for w in works:
                w.wait()                 # across the replica groups, in the current quorum
            committed_before = manager.current_step()
            opt.step()                   # commits only if every participant's all-reduce went through
            if manager.current_step() == committed_before:
                continue
            step = manager.current_step()
        else:
            opt.step()
            step += 1
        if monitor is not None:
            monitor.send_heartbeat()
        if rank == 0:
            extra = {"participants": manager.num_participants()} if manager is not None else {}
            log.write("step", step=step, loss=round(float(loss.item()), 6), **extra)
        if args.save_every and step % args.save_every == 0 and group == 0:
            path = os.path.join(args.ckpt_dir, f"step_{step}")
            state = {"model": model.state_dict(), "step": torch.tensor(step)}
            dcp.save(state, checkpoint_id=path)     # torchft: group 0's ranks, the fallback if all groups die
            if rank == 0:
                log.write("saved", step=step, path=path)
    if monitor is not None:
        monitor.shutdown_workload_monitoring()
    if rank == 0:
        log.write("done", step=step)
    if manager is not None:
        manager.shutdown(wait=False)
    dist.destroy_process_group()
    return 0


def _torchft(args, model, inner, rank, world, host, port, group, log):
    """torchft's Manager for this replica group, as its train_ddp.py sets it up on CPU (gloo)."""
    from torchft import Manager, ProcessGroupGloo  # lazy: only --mode torchft (torchft is a test extra)
    from torchft.optim import OptimizerWrapper  # lazy: as above

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        inner.load_state_dict(sd["optim"])
        log.write("heal", rank=rank)

    def state_dict():
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    pg = ProcessGroupGloo(timeout=datetime.timedelta(seconds=args.torchft_timeout))
    manager = Manager(pg=pg, min_replica_size=1, load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id=f"group_{group}", timeout=datetime.timedelta(seconds=30), rank=rank,
                      world_size=world, store_addr=host, store_port=port, hostname="127.0.0.1")
    return manager, OptimizerWrapper(manager, inner)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
