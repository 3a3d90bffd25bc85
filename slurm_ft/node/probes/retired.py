"""Retired pages (Volta and older): a pending retirement needs a reset; a full table is an RMA."""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from slurm_ft.finding import Action, Finding, Severity

from slurm_ft.gpu.sample import NodeSample

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "retired"


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    out: List[Finding] = []
    for g in sample.gpus:
        r = g.retired
        if g.lost or r is None:
            continue
        total = r.single_bit + r.double_bit
        limit = ctx.thresholds.retired_pages_fail
        if limit and total >= limit:
            out.append(Finding(CHECK, Severity.FAIL, f"{total} retired pages >= {limit}", "RETIRED_PAGES",
                               g.index, Action.RMA))
        if r.pending:
            out.append(Finding(CHECK, Severity.FAIL, "page retirement pending (needs GPU reset)",
                               "RETIRE_PENDING", g.index, Action.RESET_GPU))
    return out
