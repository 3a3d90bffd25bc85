"""PCIe link: a GPU trained at fewer lanes than its slot (or the node type) allows is degraded.

Width does not drop on an idle GPU, so a narrow link fails. The generation does drop when idle (the
driver downclocks the link; DCGM checks it only in P0), so a low generation only warns here; burn-in
re-reads it under load.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from slurm_ft.finding import Action, Finding, Severity

from slurm_ft.gpu.sample import NodeSample

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "pcie"


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    out: List[Finding] = []
    nt = ctx.node_type
    for g in sample.gpus:
        p = g.pcie
        if g.lost or p is None:
            continue
        if p.width is not None:
            want = max(p.max_width or 0, nt.pcie_width or 0)
            if want and p.width < want:
                out.append(Finding(CHECK, Severity.FAIL, f"PCIe link x{p.width} of x{want}", "PCIE_WIDTH",
                                   g.index, Action.REBOOT))
        if p.gen is not None:
            want = max(p.max_gen or 0, nt.pcie_gen or 0)
            if want and p.gen < want:
                sev = Severity.FAIL if ctx.level == "burnin" else Severity.WARN
                out.append(Finding(CHECK, sev, f"PCIe gen{p.gen} of gen{want}" +
                                   ("" if sev is Severity.FAIL else " (may be idle power saving)"),
                                   "PCIE_GEN", g.index, Action.REBOOT if sev is Severity.FAIL else Action.NONE))
    return out
