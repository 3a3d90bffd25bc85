#!/usr/bin/env python3
"""Fleet scale: the lab at 2,048 + 64 nodes, and what one controller cycle costs there.

    python bench/scale.py [--nodes 2048] [--spares 64] [--jobs 200] [--repeat 5] [--dir D] [--port-base P]
                          [--keep] [--json]

Prints, each a median of --repeat runs where it repeats:
  lab up        wall time of `lab up` (fresh, --fast-hooks), and the memory of its daemons (PSS: shared
                pages counted once)
  slurm reads   the three reads one cycle needs (nodes: sinfo --json, jobs: squeue --json, partitions),
                wall time and the CPU of the Slurm commands (children's CPU)
  cycle         one `Controller.cycle()` with 200 running fault-tolerant jobs and nothing to recover:
                wall, the controller's own CPU (this process) and the Slurm commands' CPU, side by side
  plan          `plan()` alone on that cycle's snapshot (CPU time): the pure part
The lab is taken down at the end unless --keep. Run it alone: it needs ~2 GB and the machine's cores.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_ft.config import load_config                            # noqa: E402
from slurm_ft.lab.cluster import Lab, LabSpec, ephemeral_port_range  # noqa: E402
from slurm_ft.recovery import journal as jn                        # noqa: E402
from slurm_ft.recovery.controller import Controller                # noqa: E402
from slurm_ft.recovery.plan import plan                            # noqa: E402
from slurm_ft.recovery.tag import FtSpec, encode                   # noqa: E402
from slurm_ft.runner import run                                    # noqa: E402
from slurm_ft.slurm.client import SlurmClient                      # noqa: E402


def cpu():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def measure(fn, repeat: int) -> dict:
    """Medians of wall, own CPU and children's CPU over `repeat` calls."""
    walls, mine, kids = [], [], []
    for _ in range(repeat):
        c0, k0 = cpu()
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        c1, k1 = cpu()
        mine.append(c1 - c0)
        kids.append(k1 - k0)
    return {"wall_s": statistics.median(walls), "own_cpu_s": statistics.median(mine),
            "slurm_cpu_s": statistics.median(kids)}


def pss_mb(lab: Lab) -> float:
    total = 0
    for d in lab.daemons():
        if not d["alive"]:
            continue
        try:
            for line in open(f"/proc/{d['pid']}/smaps_rollup"):
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def submit_jobs(lab: Lab, jobs: int, nodes_each: int, out_dir: Path) -> list:
    """`jobs` fault-tolerant jobs (the slurm-ft tag, requeueable), each sleeping on nodes_each nodes."""
    tag = encode(FtSpec(ckpt_dir=str(out_dir / "ckpt")))
    ids = []
    for i in range(jobs):
        p = run(["sbatch", "--parsable", "--requeue", "--exclusive", "-N", str(nodes_each), f"--comment={tag}",
                 "-o", str(out_dir / "job-%j.out"), "-J", f"scale{i}", "--wrap", "sleep 36000"],
                timeout=60, env=lab.env())
        ids.append(int(p.stdout.strip().split(";")[0]))
    return ids


def wait_running(client: SlurmClient, ids: list, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        running = sum(1 for j in client.jobs() if j.job_id in set(ids) and j.state == "RUNNING")
        if running == len(ids) or time.monotonic() > deadline:
            return running
        time.sleep(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--spares", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/slurm-ft-scale-lab")
    ap.add_argument("--port-base", type=int, default=None,
                    help="default: just below the kernel's ephemeral port range (lab up refuses ports in it)")
    ap.add_argument("--keep", action="store_true", help="leave the lab up")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.port_base is None:
        rng = ephemeral_port_range()
        a.port_base = (rng[0] if rng else 32768) - (a.nodes + a.spares + 1) - 16

    lab = Lab(a.dir, LabSpec(nodes=a.nodes, spares=a.spares, port_base=a.port_base, fast_hooks=True))
    out: dict = {"nodes": a.nodes, "spares": a.spares, "gpus": (a.nodes + a.spares) * 8, "jobs": a.jobs}
    if lab.running():
        lab.down()
    try:
        res = lab.up(timeout=600)
        out["lab_up"] = {"wall_s": res.elapsed_s, "daemons": len(lab.daemons()), "pss_mb": pss_mb(lab)}
        client = SlurmClient(env={"SLURM_CONF": str(lab.conf)})
        work = Path(tempfile.mkdtemp(prefix="scale-", dir="/tmp"))
        work.chmod(0o755)
        ids = submit_jobs(lab, a.jobs, max(1, a.nodes // a.jobs), work)
        out["jobs_running"] = wait_running(client, ids, timeout=600)

        config = load_config(str(lab.config_path))
        config = dataclasses.replace(config, state_dir=str(work / "state"))
        ctl = Controller(client, jn.connect(jn.path_in(config.state_dir)), config)
        out["slurm_reads"] = {
            "nodes": measure(client.nodes, a.repeat),
            "jobs": measure(client.jobs, a.repeat),
            "partitions": measure(client.partitions, a.repeat),
        }
        out["slurm_reads"]["sum"] = {k: sum(r[k] for r in out["slurm_reads"].values())
                                     for k in ("wall_s", "own_cpu_s", "slurm_cpu_s")}
        out["cycle"] = measure(lambda: ctl.cycle(budget_s=5), a.repeat)
        snap = ctl.observe()
        incidents = jn.state(ctl.conn, snap.taken_at)
        times = []
        for _ in range(max(20, a.repeat)):
            t0 = time.process_time()
            plan(snap, incidents, ctl.policy, snap.taken_at)
            times.append(time.process_time() - t0)
        out["plan_cpu_s"] = statistics.median(times)
        out["snapshot"] = {"nodes": len(snap.nodes), "jobs": len(snap.jobs), "ft_jobs": len(snap.specs)}
    finally:
        if not a.keep:
            lab.down()
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"lab up  {a.nodes}+{a.spares} nodes ({out['gpus']} fake GPUs): {out['lab_up']['wall_s']:.1f} s, "
          f"{out['lab_up']['daemons']} daemons, {out['lab_up']['pss_mb']:.0f} MB (PSS)")
    print(f"jobs    {out['jobs_running']}/{a.jobs} fault-tolerant jobs running; snapshot {out['snapshot']}")
    print(f"{'medians of ' + str(a.repeat):<22}{'wall s':>8}{'own CPU s':>11}{'Slurm CPU s':>13}")
    rows = [(f"read {k}", v) for k, v in out["slurm_reads"].items()] + [("controller cycle", out["cycle"])]
    for name, r in rows:
        print(f"{name:<22}{r['wall_s']:>8.3f}{r['own_cpu_s']:>11.3f}{r['slurm_cpu_s']:>13.3f}")
    print(f"plan() on the snapshot: {out['plan_cpu_s'] * 1000:.1f} ms CPU")


if __name__ == "__main__":
    main()
