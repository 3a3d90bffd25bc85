"""Leftover GPU processes after a job (epilog): a process still holding a GPU context once Slurm has
killed the job's tasks is usually unkillable (stuck in the driver) and would starve the next job.

Processes named in `health.ignore_processes` (persistence daemon, DCGM host engine) are allowed.
Names come from the gatherer (`extra["processes"]`: pid -> name, read from /proc).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List

from slurm_ft.finding import Action, Finding, Severity

from slurm_ft.gpu.sample import NodeSample

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "processes"


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    names: Dict[int, str] = sample.extra.get("processes", {}) or {}
    out: List[Finding] = []
    for g in sample.gpus:
        if g.lost:
            continue
        left = [(pid, names.get(pid, "?")) for pid in g.processes if names.get(pid, "?") not in ctx.ignore_processes]
        if left:
            shown = ", ".join(f"{pid} ({n})" for pid, n in left[:3]) + (" ..." if len(left) > 3 else "")
            out.append(Finding(CHECK, Severity.FAIL, f"{len(left)} process(es) still on the GPU after the job: {shown}",
                               "GPU_PROC_LEFT", g.index, Action.DRAIN))
    return out
