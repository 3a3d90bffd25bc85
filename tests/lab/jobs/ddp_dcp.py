"""A small real PyTorch job for the lab: DDP over gloo on CPU, one rank per Slurm task, saving with
torch.distributed.checkpoint (DCP) into CKPT/step_N/ (DCP writes the shards, then .metadata last).

    srun python ddp_dcp.py --ckpt-dir CKPT --resume {ckpt} [--steps N] [--step-time S] [--save-every K]

    torchrun ... ddp_dcp.py ...   (tests/lab/jobs/torchrun_job.sh: RANK and WORLD_SIZE from torchrun)

`--resume PATH` (what `slurm-ft sbatch` puts for {ckpt}: the newest complete checkpoint, "" for none)
loads the model and the step with dcp.load. Rank 0 prints one line per event to the job's output:
``rdv launch=L node=NODE init=URL``, ``start restart=R world=W from=PATH step=N``, ``step=N loss=X``,
``saved step=N path=P``, ``done step=N``.
The ranks meet through env:// when MASTER_ADDR and MASTER_PORT are set (torchrun, or the hot-spare
supervisor, which sets them per launch), else through a FileStore in CKPT, fresh per job start and
launch, so no port is fixed here.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.nn.parallel import DistributedDataParallel as DDP


def say(rank: int, text: str) -> None:
    if rank == 0:
        print(text, flush=True)


def main(argv) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--resume", default="")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--step-time", type=float, default=0.2)
    p.add_argument("--save-every", type=int, default=5)
    a = p.parse_args(argv)
    env = os.environ
    rank = int(env.get("RANK", env.get("SLURM_PROCID", "0")))
    world = int(env.get("WORLD_SIZE", env.get("SLURM_NTASKS", "1")))
    job, restart = env.get("SLURM_JOB_ID", "0"), env.get("SLURM_RESTART_COUNT", "0")
    launch = env.get("SLURM_FT_LAUNCH", "0")
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        init, shown = "env://", f"env://{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    else:
        init = shown = "file://" + os.path.join(a.ckpt_dir, f".rdv-{job}-{restart}-{launch}")
    say(rank, f"rdv launch={launch} node={env.get('SLURMD_NODENAME', '-')} init={shown}")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    if a.resume:
        state = {"model": model.state_dict(), "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=a.resume)
        model.load_state_dict(state["model"])
        step = int(state["step"])
    say(rank, f"start restart={restart} world={world} from={a.resume or '-'} step={step}")
    gen = torch.Generator().manual_seed(1000 + rank)
    while step < a.steps:
        step += 1
        x = torch.randn(8, 16, generator=gen)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()                  # the gradient all-reduce over gloo
        opt.step()
        say(rank, f"step={step} loss={loss.item():.5f}")
        if a.save_every and step % a.save_every == 0:
            path = os.path.join(a.ckpt_dir, f"step_{step}")
            dcp.save({"model": model.state_dict(), "step": torch.tensor(step)}, checkpoint_id=path)
            say(rank, f"saved step={step} path={path}")
        time.sleep(a.step_time)
    say(rank, f"done step={step}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
