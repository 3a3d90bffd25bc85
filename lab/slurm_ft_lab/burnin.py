"""The lab's burn-in backend (`burnin.backend: lab`, or found by `auto`): added to slurm-ft's burn-in through the
entry-point group `slurm_ft.burnin`, so the product carries no knowledge of the fake driver.

Used ONLY with the lab's fake NVML library loaded: a CPU numpy matmul rate scaled by each fake GPU's SM
clock ratio (current/max, what `lab inject --slow F` sets). It exercises the whole verdict path in the lab;
it measures nothing about real GPUs and says so in its label.
"""
from __future__ import annotations

import time
from typing import Dict, Optional

import numpy as np

from slurm_ft.config import BurninConfig
from slurm_ft.gpu.sample import NodeSample

_FAKE_MARK = b"SLURM_FT_FAKE_NVML_STATE"   # a string only the lab's fake libnvidia-ml.so.1 contains


def fake_nvml_loaded() -> bool:
    """True when this process mapped the slurm-ft lab's fake libnvidia-ml.so.1 (never on a real node)."""
    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split()[-1] for line in fh if "libnvidia-ml.so" in line}
    except OSError:
        return False
    for p in paths:
        try:
            with open(p, "rb") as lib:
                if _FAKE_MARK in lib.read():
                    return True
        except OSError:
            continue
    return False


def lab(sample: NodeSample, cfg: BurninConfig, say) -> Optional[dict]:
    """The backend: None (not available) unless this process runs on the lab's fake NVML library."""
    if not fake_nvml_loaded():
        return None
    n = 256
    a = np.random.default_rng(1234).standard_normal((n, n), dtype=np.float32)
    best = 0.0
    for _ in range(3):             # best of three: other processes share these CPUs
        t0, iters = time.perf_counter(), 0
        while time.perf_counter() - t0 < 0.05:
            a @ a
            iters += 1
        best = max(best, 2.0 * n ** 3 * iters / (time.perf_counter() - t0) / 1e12)
    gpus: Dict[int, float] = {}
    errors: Dict[int, str] = {}
    for g in sample.gpus:
        say(g.index, len(sample.gpus), f"gpu {g.index + 1}/{len(sample.gpus)}: lab backend (CPU matmul x fake SM clock)")
        if g.lost:
            errors[g.index] = "GPU lost"
            continue
        cur, top = getattr(g, "sm_clock_mhz", None), getattr(g, "sm_clock_max_mhz", None)
        ratio = (cur / top) if cur and top else 1.0
        gpus[g.index] = best * ratio
    return {"backend": "lab", "label": "LAB backend: CPU matmul x fake SM clock, not a GPU measurement",
            "absolute": False, "gpus": gpus, "errors": errors}
