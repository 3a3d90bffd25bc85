"""ECC counters: any volatile (this boot) uncorrectable error fails the GPU (DCGM MEM: DBE > 0 -> FAIL).

Corrected errors only warn above a threshold; aggregate counts are lifetime history (row remapping
and retired pages judge those).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from slurm_ft.finding import Action, Finding, Severity

from slurm_ft.gpu.sample import NodeSample

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "ecc"


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    out: List[Finding] = []
    for g in sample.gpus:
        e = g.ecc
        if g.lost or e is None:
            continue
        if e.volatile_uncorrected:
            out.append(Finding(CHECK, Severity.FAIL, f"uncorrectable ECC errors (volatile {e.volatile_uncorrected})",
                               "ECC_DBE", g.index, Action.RESET_GPU))
        limit = ctx.thresholds.ecc_corrected_volatile_warn
        if limit and e.volatile_corrected is not None and e.volatile_corrected >= limit:
            out.append(Finding(CHECK, Severity.WARN, f"corrected ECC errors {e.volatile_corrected} >= {limit}",
                               "ECC_SBE_HIGH", g.index))
    return out
