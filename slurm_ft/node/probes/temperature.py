"""GPU temperature against the warn/fail thresholds (a fail is a cooling fault: drain and inspect)."""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from slurm_ft.finding import Action, Finding, Severity

from slurm_ft.gpu.sample import NodeSample

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "temperature"


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    out: List[Finding] = []
    t = ctx.thresholds
    for g in sample.gpus:
        if g.lost or g.temperature_c is None:
            continue
        if t.temperature_fail_c and g.temperature_c >= t.temperature_fail_c:
            out.append(Finding(CHECK, Severity.FAIL, f"temperature {g.temperature_c} C >= {t.temperature_fail_c} C",
                               "TEMP_HIGH", g.index, Action.DRAIN))
        elif t.temperature_warn_c and g.temperature_c >= t.temperature_warn_c:
            out.append(Finding(CHECK, Severity.WARN, f"temperature {g.temperature_c} C >= {t.temperature_warn_c} C",
                               "TEMP_HIGH", g.index))
    return out
