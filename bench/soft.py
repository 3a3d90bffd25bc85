#!/usr/bin/env python3
"""What the watcher's soft-signal pass costs a node (node/softpass.py): the NVML read, the judgement over a
full history, the history file. Against the lab's fake libnvidia-ml.so.1 (8 GPUs x 18 NVLinks), so the
figures are slurm-ft's own Python plus the library calls, not a real driver's latency.

    python bench/soft.py [--passes 200] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NODE = "gpu001"


def _reexec_with_the_fake_driver(tmp: Path) -> None:
    """pynvml dlopens libnvidia-ml.so.1 by name: the library's directory must be on the path from the start."""
    from slurm_ft_lab import fake_nvml, inject
    lib = fake_nvml.build(tmp / "lib")
    inject.init_node(tmp / "lab", NODE, gpus=8)
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib.parent), SLURM_FT_LAB_DIR=str(tmp / "lab"), SLURMD_NODENAME=NODE,
               SLURM_FT_BENCH_TMP=str(tmp))
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def ms(xs):
    return {"p50_ms": round(1000 * statistics.median(xs), 3), "max_ms": round(1000 * max(xs), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passes", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if "SLURM_FT_BENCH_TMP" not in os.environ:
        _reexec_with_the_fake_driver(Path(tempfile.mkdtemp(prefix="slurm-ft-bench-soft-")))
    from dataclasses import replace

    from slurm_ft.config import Config, HealthConfig, NodeType, SoftSignals
    from slurm_ft.node import soft
    from slurm_ft.node.gather import nvml_reader
    from slurm_ft.node.softpass import SoftPass, history_path
    from slurm_ft_lab import inject

    tmp = Path(os.environ["SLURM_FT_BENCH_TMP"])
    inject.inject(tmp / "lab", NODE, "ecc_sbe_rate", gpu=3, value="60/min")      # a counter that moves
    out = {"node": "8 GPUs x 18 NVLinks (fake driver)", "passes": args.passes}
    for name, signals in (("without NVLink counters", SoftSignals(nvlink_replay=0, nvlink_crc=0)),
                          ("with NVLink counters", SoftSignals())):
        cfg = Config(state_dir=str(tmp / "state"),
                     health=HealthConfig(state_file=str(tmp / f"{name[:4]}-{{node}}.json"),
                                         node_types={"default": NodeType(soft=signals)}))
        sp = SoftPass(NODE, cfg, None)
        reads, passes = [], []
        for i in range(args.passes):
            t0 = time.perf_counter()
            nvml_reader(NODE, sp.parts)
            reads.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            sp.run(1_000_000.0 + 60.0 * i)
            passes.append(time.perf_counter() - t0)
        # the history the defaults keep (an hour at 60 s: 61 passes), and as full as it gets (MAX_SAMPLES)
        reading = soft.readings(nvml_reader(NODE, sp.parts))
        judged = {}
        for n in (61, soft.MAX_SAMPLES):
            full = soft.empty(NODE)
            for i in range(n):
                soft.record(full, 60.0 * i, reading, 1e12)
            judged[n] = []
            for _ in range(20):
                t0 = time.perf_counter()
                soft.judge(full, replace(signals, window_s=1e9, clock_window_s=1e9), 60.0 * n)
                judged[n].append(time.perf_counter() - t0)
        sp.history = full
        t0 = time.perf_counter()
        sp.save()
        saved = time.perf_counter() - t0
        out[name] = {"nvml_read": ms(reads), "pass": ms(passes), "judge_default_history": ms(judged[61]),
                     "judge_full_history": ms(judged[soft.MAX_SAMPLES]),
                     "save_ms": round(1000 * saved, 3),
                     "history_file_bytes": history_path(cfg, NODE).stat().st_size,
                     "nvml_groups": sorted(sp.parts)}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"soft-signal pass on {out['node']}, {args.passes} passes each")
    for name in ("without NVLink counters", "with NVLink counters"):
        r = out[name]
        print(f"  {name}:")
        print(f"    NVML read         p50 {r['nvml_read']['p50_ms']:8.2f} ms   max {r['nvml_read']['max_ms']:8.2f} ms")
        print(f"    whole pass        p50 {r['pass']['p50_ms']:8.2f} ms   max {r['pass']['max_ms']:8.2f} ms")
        print(f"    judge, 61 passes (an hour at 60 s)   p50 {r['judge_default_history']['p50_ms']:8.2f} ms")
        print(f"    judge, {soft.MAX_SAMPLES} passes (the cap)       p50 {r['judge_full_history']['p50_ms']:8.2f} ms")
        print(f"    history file      {r['history_file_bytes'] / 1024:8.1f} KiB (full), written in {r['save_ms']:.2f} ms")
    print("  at the default period (60 s): the pass costs the node well under 0.1 % of one core; no Slurm call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
