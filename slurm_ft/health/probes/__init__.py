"""Probes: pure functions `probe(sample, ctx) -> list[Finding]`, one module per signal.

Reading and judging are separate (NHC's "gather, then check"): `slurm_ft.health.gather` fills a
NodeSample once, and every probe here only looks at it. No NVML, no subprocess, no clock reads: the
time a probe needs comes in `ctx.now`. A probe is tested by handing it a hand-built sample.

A probe returns only what is worth saying (warn/fail, or an informational ok such as a user-caused
Xid); run.py adds one "ok" line for a check that found nothing.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from slurm_ft.config import NodeType, Thresholds
from slurm_ft.finding import Finding
from slurm_ft.gpu.sample import NodeSample

Probe = Callable[[NodeSample, "ProbeContext"], List[Finding]]

# check name -> module under slurm_ft.health.probes (imported only when a level uses it)
PROBES: Dict[str, str] = {
    "inventory": "inventory",
    "xid": "xid",
    "ecc": "ecc",
    "remap": "remap",
    "retired": "retired",
    "pcie": "pcie",
    "nvlink": "nvlink",
    "clocks": "clocks",
    "temperature": "temperature",
    "processes": "processes",
    "disk": "disk",
    "infiniband": "infiniband",
    "burnin": "burnin",
}


@dataclass(frozen=True)
class ProbeContext:
    """What a probe may know besides the sample: expectations, thresholds, the level and the time."""
    node_type: NodeType = field(default_factory=NodeType)
    thresholds: Thresholds = field(default_factory=Thresholds)
    level: str = "quick"
    now: float = 0.0
    xid_since: Optional[float] = None           # Xids logged before this time are history, not findings
    xid_untimed: bool = True                    # count Xid lines without a time (not after a resume)
    ignore_processes: Tuple[str, ...] = ()      # process names allowed to hold a GPU between jobs
    # (gpu index, xid) -> number of distinct jobs in which that app-class Xid was seen (node state file)
    xid_history: Mapping[Tuple[int, int], int] = field(default_factory=dict)


def get(name: str) -> Probe:
    """The probe function for a check name; KeyError for an unknown one."""
    return importlib.import_module(f"{__name__}.{PROBES[name]}").probe
