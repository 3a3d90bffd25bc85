#!/usr/bin/env python3
"""A hang without an Xid to the first resumed step, on the lab: `slurm-ft sbatch --hang-timeout S`.

    python bench/hang.py [--hangs 3] [--hang-timeout 10] [--nodes 2] [--hot-spares 0] [--step-time 0.3]
                         [--dir /tmp/slurm-ft-bench-hang] [--port-base 18000] [--keep-lab] [--json]

Each hang is one job of the lab trainer, submitted by the lab's job user (as on a cluster: its checks run
as that user), whose rank 1 stops stepping after step 8 (`--stall-at 8`, first run only): no Xid, no
drain, the gang waits at its barrier. The job's supervisor sees no progress report
(slurm_ft.progress) for S seconds, runs the prolog-level checks on the step's nodes (one srun), finds no
culprit and restarts the step in place from the latest complete checkpoint. Printed per phase, from the
stall (the trainer's own log line), p50 and max over the hangs: hang detected (S after the last report),
checks done, relaunched, first step after. The acceptance: first step after <= S + 10 s.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_ft_lab.cluster import Lab, LabSpec                       # noqa: E402
from slurm_ft_lab.trainer import read_log                          # noqa: E402

PHASES = ("hang detected", "checks done", "relaunched", "first step after")


def starts(ck: Path) -> list:
    p = ck / "slurm-ft-starts.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def one_hang(lab: Lab, work: Path, args) -> dict:
    ck = work / "ck"
    spares = ["--hot-spares", str(args.hot_spares)] if args.hot_spares else []
    env = dict(lab.user_env(), LD_LIBRARY_PATH=str(lab.dir / "lib"))
    p = subprocess.run(lab.user_argv([sys.executable, "-m", "slurm_ft", "sbatch", "--parsable", "--ckpt-dir", str(ck),
                                      *spares, "--hang-timeout", str(args.hang_timeout), "-N", str(args.nodes),
                                      "--ntasks-per-node=1", "-o", str(work / "job.out"), sys.executable, "-m",
                                      "slurm_ft_lab.trainer", "--ckpt-dir", str(ck), "--resume", "{ckpt}", "--step-time",
                                      str(args.step_time), "--ckpt-every", "5", "--stall-at", "8", "--stall-rank", "1",
                                      "--gpu-check", "off"]),
                       capture_output=True, text=True, timeout=60, env=env, cwd=str(work))
    if p.returncode != 0:
        raise SystemExit(f"sbatch failed: {p.stderr.strip()}")
    job = p.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + args.hang_timeout * 3 + 180
        while time.monotonic() < deadline:
            log = read_log(str(ck))
            first = next((e for e in log if e["event"] == "step" and e.get("launch") == 1), None)
            if first:
                break
            time.sleep(0.3)
        else:
            raise SystemExit(f"job {job}: no step after the hang within the deadline; see {work}/job.out")
    finally:
        subprocess.run(["scancel", job], env=lab.env(), timeout=30, check=False)
    stall = next(e for e in log if e["event"] == "stall")["t"]
    ev = starts(ck)
    t = {"hang detected": next(e for e in ev if e["event"] == "hang")["t"],
         "checks done": next(e for e in ev if e["event"] == "hang_check")["t"],
         "relaunched": next(e for e in ev if e["event"] == "launch" and e["launch"] == 1)["t"],
         "first step after": first["t"]}
    return {k: round(v - stall, 2) for k, v in t.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hangs", type=int, default=3)
    ap.add_argument("--hang-timeout", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--hot-spares", type=int, default=0)
    ap.add_argument("--step-time", type=float, default=0.3)
    ap.add_argument("--dir", default="/tmp/slurm-ft-bench-hang")
    ap.add_argument("--port-base", type=int, default=18000)
    ap.add_argument("--keep-lab", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.hangs < 1 or args.nodes < 2 or args.hang_timeout < 1:
        ap.error("--hangs >= 1, --nodes >= 2, --hang-timeout >= 1")
    lab = Lab(args.dir, LabSpec(nodes=args.nodes + args.hot_spares, spares=1, port_base=args.port_base))
    started = not lab.running()
    runs = []
    try:
        lab.up(timeout=180)
        for i in range(args.hangs):
            work = lab.work_dir(f"bench-hang-{i}")          # the job user's
            try:
                runs.append(one_hang(lab, work, args))
            finally:
                shutil.rmtree(work, ignore_errors=True)
            print(f"hang {i + 1}: " + ", ".join(f"{k} {v:.1f} s" for k, v in runs[-1].items()), file=sys.stderr)
    finally:
        if started and not args.keep_lab:
            lab.down()
    summary = {k: {"p50": sorted(r[k] for r in runs)[len(runs) // 2], "max": max(r[k] for r in runs)} for k in PHASES}
    out = {"hang_timeout_s": args.hang_timeout, "hangs": len(runs), "nodes": args.nodes, "hot_spares": args.hot_spares,
           "phases_since_stall_s": summary, "runs": runs,
           "within_goal": summary["first step after"]["max"] <= args.hang_timeout + 10}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"hang (a rank stops stepping, no Xid) -> ..., seconds since the stall, {len(runs)} hangs, "
              f"hang timeout {args.hang_timeout} s, {args.nodes} nodes:")
        for k in PHASES:
            print(f"  {k:<18} p50 {summary[k]['p50']:6.1f}  max {summary[k]['max']:6.1f}")
        print(f"goal: first step after <= hang timeout + 10 s = {args.hang_timeout + 10} s: "
              f"{'met' if out['within_goal'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
