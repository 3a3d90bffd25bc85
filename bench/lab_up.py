#!/usr/bin/env python3
"""Time `lab up` (until every node is idle) and `lab down` for a 64+4 node lab, N times.

    python bench/lab_up.py [--runs 3] [--nodes 64] [--spares 4] [--port-base 18000]

Prints each run and the medians. Goal (issue 2): up under 15 s at 64 nodes. The figure depends on
the machine's load: every slurmd start costs CPU, and other labs running beside this one share it.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from slurm_ft_lab.cluster import Lab, LabSpec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--spares", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--port-base", type=int, default=18000)
    args = ap.parse_args()
    top = Path(tempfile.mkdtemp(prefix="slurm-ft-bench-", dir="/tmp"))
    os.chmod(top, 0o755)                    # munged wants the socket's parents searchable
    spec = LabSpec(nodes=args.nodes, spares=args.spares, gpus_per_node=args.gpus_per_node,
                   port_base=args.port_base)
    ups, downs = [], []
    load = os.getloadavg()[0]
    try:
        for i in range(1, args.runs + 1):
            lab = Lab(top / f"lab{i}", spec)
            res = lab.up(timeout=120)
            t0 = time.monotonic()
            lab.down()
            down_s = time.monotonic() - t0
            ups.append(res.elapsed_s)
            downs.append(down_s)
            print(f"run {i}: up {res.elapsed_s:6.2f} s ({res.nodes} nodes idle)   down {down_s:5.2f} s", flush=True)
    finally:
        for d in top.iterdir():
            Lab(d).down(quiet=True)
        shutil.rmtree(top, ignore_errors=True)
    print(f"median up {statistics.median(ups):.2f} s, median down {statistics.median(downs):.2f} s "
          f"over {len(ups)} runs ({args.nodes}+{args.spares} nodes; load average {load:.1f} at start, "
          f"{os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
