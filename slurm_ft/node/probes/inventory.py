"""GPU inventory: NVML answers, every expected GPU is there, none is lost.

A GPU that fell off the bus either vanishes from the count or answers GPU_IS_LOST; both need a reboot
(GPUD, HyperPod and Azure all reboot on a count mismatch, RMA if it recurs).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from slurm_ft.finding import Action, Finding, Severity

from slurm_ft.gpu.sample import NodeSample

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "inventory"


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    expected = ctx.node_type.gpus
    if sample.install_error:
        # our package is missing, not the node's driver: an install error (exit 2), never a drain
        return [Finding(CHECK, Severity.ERROR, f"install error: {sample.install_error}", "INSTALL_ERROR")]
    if sample.nvml_error:
        if expected == 0:
            return []
        return [Finding(CHECK, Severity.FAIL, f"NVML unusable: {sample.nvml_error}", "NVML_INIT",
                        None, Action.REBOOT)]
    out: List[Finding] = []
    for g in sample.gpus:
        if g.lost:
            out.append(Finding(CHECK, Severity.FAIL, f"GPU lost ({g.error or 'GPU is lost'})", "GPU_LOST",
                               g.index, Action.REBOOT))
    seen = len(sample.gpus)
    if expected and seen < expected:
        out.append(Finding(CHECK, Severity.FAIL, f"{seen} of {expected} GPUs visible", "GPU_COUNT",
                           None, Action.REBOOT))
    elif expected and seen > expected:
        # more GPUs than the node type says: a config mistake, not a fault; say so without draining
        out.append(Finding(CHECK, Severity.WARN, f"{seen} GPUs visible, node type expects {expected}",
                           "GPU_COUNT_HIGH"))
    return out
