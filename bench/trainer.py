#!/usr/bin/env python3
"""What the toy trainer costs, and how long a requeued trainer job takes to be training again.

    python bench/trainer.py [--ranks 64] [--steps 40] [--step-time 0.2]            # no Slurm
    python bench/trainer.py --lab DIR [--nodes 64] [--requeues 5]                  # in a running lab

1. Local (no daemons): N ranks as processes with srun's SLURM_* variables and the fake NVML library,
   --steps steps, a checkpoint every 5. Prints the CPU seconds they used in all (startup + steps), per
   rank, per rank-step, and the median step period against --step-time (the barrier's overhead).
2. --lab: a --nodes-node trainer job through `slurm-ft sbatch`; R times: wait for a checkpoint, requeue
   through the client, StartTime=now in the next wall-clock second (Slurm 22.05 refuses a batch launch
   whose credential is from the second of the requeue's kill), then time requeue -> job RUNNING ->
   batch script (the {ckpt} starter) -> trainer start (all ranks met) -> first step, and the steps redone. Medians and p95 of each.
The CPUs may be shared with other work: read medians, not minima.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_ft_lab.trainer import read_log, runs  # noqa: E402
from slurm_ft_lab.waits import start_now  # noqa: E402

PY = sys.executable


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def local(ranks: int, steps: int, step_time: float) -> dict:
    from slurm_ft_lab.fake_nvml import build
    work = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    try:
        build(work / "lab" / "lib")
        ck = work / "ck"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        procs = []
        for r in range(ranks):
            env = {**os.environ, "SLURM_PROCID": str(r), "SLURM_NTASKS": str(ranks), "SLURM_JOB_ID": "7",
                   "SLURMD_NODENAME": f"gpu{r + 1:03d}", "SLURM_FT_LAB_DIR": str(work / "lab")}
            procs.append(subprocess.Popen([PY, "-m", "slurm_ft_lab.trainer", "--ckpt-dir", str(ck), "--steps",
                                           str(steps), "--step-time", str(step_time), "--ckpt-every", "5",
                                           "--collective-timeout", "120", "--gpu-check", "on"],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        rcs = [p.wait() for p in procs]
        wall = time.time() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        run = runs(read_log(str(ck)))[0]
        steps_t = [e["t"] for e in read_log(str(ck)) if e["event"] == "step"]
        periods = [b - a for a, b in zip(steps_t, steps_t[1:])]
        return {
            "ranks": ranks, "steps": steps, "step_time_s": step_time, "exit_codes": sorted(set(rcs)),
            "wall_s": round(wall, 2), "startup_s": round(run["start_t"] - t0, 2),
            "cpu_s_total": round(cpu, 2), "cpu_s_per_rank": round(cpu / ranks, 3),
            "step_period_median_s": round(statistics.median(periods), 3),
            "step_period_p95_s": round(pct(periods, 0.95), 3),
            "barrier_overhead_median_s": round(statistics.median(periods) - step_time, 3),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def in_lab(lab_dir: str, nodes: int, requeues: int, step_time: float) -> dict:
    from slurm_ft_lab.cluster import Lab
    from slurm_ft.slurm.client import SlurmClient
    lab = Lab(lab_dir)
    if not lab.running():
        sys.exit(f"no lab running in {lab_dir}: slurm-ft lab up --dir {lab_dir}")
    env = lab.env()
    client = SlurmClient(env={"SLURM_CONF": env["SLURM_CONF"]})
    work = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    os.chmod(work, 0o755)
    ck = work / "ck"
    p = subprocess.run([PY, "-m", "slurm_ft", "sbatch", "--parsable", "--ckpt-dir", str(ck), "-N", str(nodes),
                        "--ntasks-per-node=1", "--open-mode=append", "-o", str(work / "job.out"),
                        "srun", PY, "-m", "slurm_ft_lab.trainer", "--ckpt-dir", str(ck), "--resume", "{ckpt}",
                        "--steps", "100000", "--step-time", str(step_time), "--ckpt-every", "5"],
                       capture_output=True, text=True, timeout=120, env=env)
    if p.returncode:
        sys.exit(p.stderr)
    job_id = int(p.stdout)
    rows = []

    def wait(pred, timeout=300.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = pred()
            if got:
                return got
            time.sleep(0.05)
        raise SystemExit(f"timed out; job {client.job(job_id).state}")

    try:
        for i in range(requeues):
            wait(lambda: [e for e in read_log(str(ck)) if e["event"] == "ckpt" and e["restart"] == i])
            time.sleep(step_time * 2)
            t_requeue = time.time()
            client.requeue(job_id)
            time.sleep(max(0.0, int(time.time()) + 1.02 - time.time()))
            start_now(client, job_id)
            t_running = wait(lambda: client.job(job_id).state == "RUNNING" and time.time())
            run = wait(lambda: [r for r in runs(read_log(str(ck))) if r["restart"] == i + 1
                                and r["first_step_t"] is not None])[0]
            starts = [json.loads(line) for line in (ck / "slurm-ft-starts.jsonl").read_text().splitlines()]
            t_jobstart = [x["t"] for x in starts if x["restart"] == i + 1][0]
            rows.append({"requeue_to_running_s": t_running - t_requeue,
                         "requeue_to_batch_script_s": t_jobstart - t_requeue,
                         "requeue_to_trainer_start_s": run["start_t"] - t_requeue,
                         "requeue_to_first_step_s": run["first_step_t"] - t_requeue,
                         "steps_redone": run["steps_lost"]})
            print(json.dumps({k: round(v, 3) for k, v in rows[-1].items()}), file=sys.stderr)
    finally:
        client.cancel(job_id)
    out = {"nodes": nodes, "requeues": len(rows), "step_time_s": step_time, "ckpt_every": 5}
    for key in rows[0]:
        vals = [r[key] for r in rows]
        out[key] = {"p50": round(statistics.median(vals), 3), "p95": round(pct(vals, 0.95), 3)}
    shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--step-time", type=float, default=0.2)
    ap.add_argument("--lab", metavar="DIR", help="a running lab: measure requeue -> first step there")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--requeues", type=int, default=5)
    a = ap.parse_args()
    if a.lab:
        print(json.dumps(in_lab(a.lab, a.nodes, a.requeues, a.step_time), indent=2))
    else:
        print(json.dumps(local(a.ranks, a.steps, a.step_time), indent=2))


if __name__ == "__main__":
    main()
