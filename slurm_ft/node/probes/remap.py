"""Row remapping (Ampere and later): pending -> reset the GPU; failure -> RMA (NVIDIA's RMA criterion)."""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from slurm_ft.finding import Action, Finding, Severity

from slurm_ft.gpu.sample import NodeSample

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "remap"


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    out: List[Finding] = []
    for g in sample.gpus:
        r = g.remap
        if g.lost or r is None:
            continue
        if r.failure:
            out.append(Finding(CHECK, Severity.FAIL, "row remapping failed", "REMAP_FAILURE", g.index, Action.RMA))
        if r.pending:
            out.append(Finding(CHECK, Severity.FAIL, "row remap pending (needs GPU reset)", "REMAP_PENDING",
                               g.index, Action.RESET_GPU))
        limit = ctx.thresholds.remap_uncorrectable_warn
        if limit and r.uncorrected >= limit:
            out.append(Finding(CHECK, Severity.WARN, f"{r.uncorrected} rows remapped for uncorrectable errors",
                               "REMAP_UNC_HIGH", g.index))
    return out
