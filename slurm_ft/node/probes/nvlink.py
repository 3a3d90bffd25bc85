"""NVLink: fewer active links than the node type expects fails the GPU; error counters warn.

Counters are cumulative since the driver loaded; DCGM fails on any replay/recovery increase within a
minute, which needs two samples. One sample can only say "many", so counters warn and links down fail.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from slurm_ft.finding import Action, Finding, Severity

from slurm_ft.gpu.sample import NodeSample

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "nvlink"


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    out: List[Finding] = []
    expected = ctx.node_type.nvlinks_per_gpu
    t = ctx.thresholds
    for g in sample.gpus:
        if g.lost:
            continue
        if expected:
            if "nvlink" in g.unsupported and not g.nvlinks:
                out.append(Finding(CHECK, Severity.FAIL, f"no NVLink (expected {expected} links)", "NVLINK_DOWN",
                                   g.index, Action.RESET_GPU))
                continue
            down = [l.link for l in g.nvlinks if not l.active]
            active = sum(1 for l in g.nvlinks if l.active)
            if active < expected:
                which = f" (down: {','.join(map(str, down))})" if down else ""
                out.append(Finding(CHECK, Severity.FAIL, f"{active} of {expected} NVLinks active{which}",
                                   "NVLINK_DOWN", g.index, Action.RESET_GPU))
        for name, attr, limit in (("CRC", "crc_errors", t.nvlink_crc_errors_warn),
                                  ("replay", "replay_errors", t.nvlink_replay_errors_warn),
                                  ("recovery", "recovery_errors", t.nvlink_recovery_errors_warn)):
            if not limit:
                continue
            bad = [(l.link, getattr(l, attr)) for l in g.nvlinks if (getattr(l, attr) or 0) >= limit]
            if bad:
                worst = max(bad, key=lambda b: b[1])
                out.append(Finding(CHECK, Severity.WARN,
                                   f"NVLink {name} errors on {len(bad)} link(s), worst link {worst[0]}: {worst[1]}",
                                   "NVLINK_ERRORS", g.index))
    return out
