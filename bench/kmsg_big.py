#!/usr/bin/env python3
"""Big kernel logs: what reading one costs the quick check and `slurm-ft xid explain --summary`.

    python bench/kmsg_big.py [--mb 200] [--runs 5]

Writes a kernel log of MB megabytes of Xid 13 lines (kmsg records, all within the look-back window)
with one Xid 79 appended, then reports medians of N runs of
1. `kmsg.read_xids(..., lookback_s=7200)`, the quick check's read: time, and whether the Xid 79 is seen;
2. `slurm-ft xid explain FILE --summary` as a fresh process: wall time and peak RSS.
The machine's CPUs may be shared: read medians.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_ft.gpu import kmsg
from slurm_ft.node import host


def write_log(path: Path, mb: int) -> None:
    usec = int((time.time() - 60 - host.boot_time()) * 1e6)
    line = (f"4,1,{usec},-;NVRM: Xid (PCI:0000:2a:00): 13, pid=4242, name=python, "
            f"Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address\n").encode()
    block = line * ((1 << 20) // len(line))
    with open(path, "wb") as fh:
        for _ in range(mb):
            fh.write(block)
        fh.write(f"4,2,{usec + 1},-;NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n".encode())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "kern.log"
        write_log(log, a.mb)
        reads, seen = [], []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            ev = kmsg.read_xids(str(log), lookback_s=7200, boot_time=host.boot_time())
            reads.append(time.perf_counter() - t0)
            seen.append(any(e.xid == 79 for e in ev))
        walls, rss = [], []
        exe = str(Path(sys.executable).parent / "slurm-ft")
        for _ in range(a.runs):
            t0 = time.perf_counter()
            p = subprocess.Popen([exe, "xid", "explain", str(log), "--summary"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, status, ru = os.wait4(p.pid, 0)
            walls.append(time.perf_counter() - t0)
            rss.append(ru.ru_maxrss / 1024)
        print(f"log: {a.mb} MiB of Xid 13 lines + one Xid 79; {a.runs} runs")
        print(f"quick-check read (read_xids, look-back 7200 s): median {statistics.median(reads):.3f} s, "
              f"Xid 79 seen in {sum(seen)}/{len(seen)}")
        print(f"xid explain --summary: median {statistics.median(walls):.2f} s, "
              f"peak RSS median {statistics.median(rss):.0f} MiB")


if __name__ == "__main__":
    main()
