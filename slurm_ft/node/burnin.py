"""Burn-in: a matmul stress on every GPU, measured in TFLOPS (a gatherer; probes/burnin.py judges).

Backends, tried in this order with `burnin.backend: auto`:
  torch   bf16 matmul (N x N) on each CUDA device for `burnin.seconds`; results compared with the
          first product (a mismatch is silent data corruption, the gpu-burn idea)
  cupy    the same in fp16
  dcgmi   `dcgmi diag -r 2` (memory + PCIe tests): pass/fail per GPU, no TFLOPS
  ...     then any backend another installed distribution adds (entry-point group `slurm_ft.burnin`,
          a function (sample, cfg, say) -> result or None when not available): the lab's `lab`
          backend (lab/slurm_ft_lab/burnin.py) is one, used only with the lab's fake NVML library
  none    a clear "skipped: no backend" result, which the probe reports as a warn, never a pass.
Result: {backend, label, skipped, absolute, gpus: {nvml index: tflops}, errors: {index: text}}.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from importlib.metadata import EntryPoint
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from slurm_ft import plugins
from slurm_ft.config import BurninConfig, NodeType
from slurm_ft.gpu.sample import NodeSample

log = logging.getLogger(__name__)
Say = Callable[[int, int, str], None]                  # (done, total, message)
Progress = Optional[Say]



def run(sample: NodeSample, cfg: BurninConfig, node_type: NodeType, progress: Progress = None) -> Dict[str, object]:
    say = progress or (lambda done, total, msg: None)
    added = added_backends()
    order = (*_BACKENDS, *sorted(added)) if cfg.backend == "auto" else (cfg.backend,)
    why_not = []
    for name in order:
        if name == "none":
            break
        fn = _BACKENDS.get(name) or (added[name].load() if name in added else None)
        if fn is None:
            known = ", ".join(["auto", *_BACKENDS, *sorted(added), "none"])
            return {"skipped": f"unknown burn-in backend {name!r} ({known})"}
        try:
            result = fn(sample, cfg, say)
        except Exception as exc:  # noqa: BLE001 - a backend that breaks is reported, the next one tried
            log.debug("burn-in backend %s failed", name, exc_info=True)
            why_not.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if result is not None:
            say(1, 1, "done")
            return result
        why_not.append(f"{name}: not available")
    return {"skipped": "no backend (" + "; ".join(why_not) + ")" if why_not else "no backend (burnin.backend: none)"}


# --- torch / cupy ----------------------------------------------------------------------------------

def _torch(sample: NodeSample, cfg: BurninConfig, say: Say) -> Optional[Dict[str, object]]:
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")   # CUDA indexes = NVML indexes
    try:
        import torch   # lazy: optional and heavy; only the burnin level's torch backend uses it
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    n = cfg.matrix_n
    gpus: Dict[int, float] = {}
    errors: Dict[int, str] = {}
    count = torch.cuda.device_count()
    for i in range(count):
        say(i, count, f"gpu {i + 1}/{count}: torch bf16 {n}x{n} matmul for {cfg.seconds:g} s")
        try:
            dev = torch.device(f"cuda:{i}")
            gen = torch.Generator(device=dev).manual_seed(1234)
            a = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen)
            b = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen)
            ref = a @ b
            torch.cuda.synchronize(dev)
            iters, t0 = 0, time.perf_counter()
            while True:
                for _ in range(10):
                    c = a @ b
                iters += 10
                torch.cuda.synchronize(dev)
                elapsed = time.perf_counter() - t0
                if elapsed >= cfg.seconds:
                    break
            gpus[i] = 2.0 * n ** 3 * iters / elapsed / 1e12
            if not torch.equal(c, ref):
                errors[i] = "matmul results differ between runs (silent data corruption?)"
            del a, b, c, ref
            torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001 - a GPU that cannot run the stress fails it
            errors[i] = f"{type(exc).__name__}: {exc}"
    return {"backend": "torch", "label": f"torch bf16 {n}x{n} matmul", "absolute": True, "gpus": gpus,
            "errors": errors}


def _cupy(sample: NodeSample, cfg: BurninConfig, say: Say) -> Optional[Dict[str, object]]:
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    try:
        import cupy   # lazy: optional and heavy; only the burnin level's cupy backend uses it
    except ImportError:
        return None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no CUDA driver
        return None
    n = cfg.matrix_n
    gpus: Dict[int, float] = {}
    errors: Dict[int, str] = {}
    for i in range(count):
        say(i, count, f"gpu {i + 1}/{count}: cupy fp16 {n}x{n} matmul for {cfg.seconds:g} s")
        try:
            with cupy.cuda.Device(i):
                rs = cupy.random.RandomState(1234)
                a = rs.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
                b = rs.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
                ref = a @ b
                cupy.cuda.Device(i).synchronize()
                iters, t0 = 0, time.perf_counter()
                while True:
                    for _ in range(10):
                        c = a @ b
                    iters += 10
                    cupy.cuda.Device(i).synchronize()
                    elapsed = time.perf_counter() - t0
                    if elapsed >= cfg.seconds:
                        break
                gpus[i] = 2.0 * n ** 3 * iters / elapsed / 1e12
                if not bool(cupy.array_equal(c, ref)):
                    errors[i] = "matmul results differ between runs (silent data corruption?)"
        except Exception as exc:  # noqa: BLE001
            errors[i] = f"{type(exc).__name__}: {exc}"
    # fp16 and bf16 peak rates match on Hopper, so the node type's bf16 figure stays comparable
    return {"backend": "cupy", "label": f"cupy fp16 {n}x{n} matmul", "absolute": True, "gpus": gpus,
            "errors": errors}


# --- dcgmi -----------------------------------------------------------------------------------------

def _dcgmi(sample: NodeSample, cfg: BurninConfig, say: Say) -> Optional[Dict[str, object]]:
    exe = shutil.which("dcgmi")
    if exe is None:
        return None
    # levels.validate loads this module on every check when an added backend is configured
    # lazy: only the dcgmi backend runs a command; such a check need not load subprocess
    from slurm_ft.runner import run as run_cmd
    say(0, 1, "dcgmi diag -r 2 (about two minutes)")
    res = run_cmd([exe, "diag", "-r", "2", "-j"], timeout=max(cfg.seconds, 600.0), check=False)
    try:
        data = json.loads(res.stdout)
    except ValueError:
        raise RuntimeError(f"dcgmi diag exited {res.returncode} without JSON: {(res.stderr or res.stdout)[-200:]}")
    errors: Dict[int, str] = {}
    for gpu, test, text in _dcgm_failures(data):
        errors.setdefault(gpu, f"dcgmi diag {test}: {text}"[:160])
    return {"backend": "dcgmi", "label": "dcgmi diag -r 2", "absolute": False, "gpus": {}, "errors": errors}


def _dcgm_failures(node: Any, test: str = "") -> Iterator[Tuple[int, str, str]]:
    """(gpu, test, text) for every result with status Fail anywhere in dcgmi's JSON."""
    if isinstance(node, dict):
        test = str(node.get("name") or node.get("test_name") or test)
        status = str(node.get("status", "")).lower()
        gpu = node.get("gpu_id", node.get("entity_id"))
        if status == "fail" and gpu is not None:
            info = node.get("info") or node.get("warnings") or node.get("error") or "failed"
            yield int(gpu), test, json.dumps(info) if not isinstance(info, str) else info
        for v in node.values():
            yield from _dcgm_failures(v, test)
    elif isinstance(node, list):
        for v in node:
            yield from _dcgm_failures(v, test)


_BACKENDS = {"torch": _torch, "cupy": _cupy, "dcgmi": _dcgmi}


def added_backends() -> Dict[str, EntryPoint]:
    """name -> entry point: the backends other installed distributions add (group `slurm_ft.burnin`)."""
    return {n: ep for n, ep in plugins.added(plugins.BURNIN).items() if n not in _BACKENDS}
