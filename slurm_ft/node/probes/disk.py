"""Free space on the checkpoint and scratch file systems (`health.disk_paths`).

A full /tmp or checkpoint disk kills the next job at its first save, but jobs fill it, not the
hardware: it is reported (`warn`, the next job's owner sees it) and never drains the node, or one job
could take its nodes out of service. A path that cannot be read (a hung or missing mount) is the
node's fault and fails. Reading: `host.Disks` (reader "disk").
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from slurm_ft.finding import Action, Finding, Severity

from slurm_ft.gpu.sample import NodeSample
from slurm_ft.node.host import Disks

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "disk"


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    out: List[Finding] = []
    t = ctx.thresholds
    disks = sample.host.of("disk", Disks) or Disks()
    for d in disks.paths:
        path = d.path
        if d.error:
            out.append(Finding(CHECK, Severity.FAIL, f"{path}: {d.error}", "DISK_UNREADABLE", None, Action.DRAIN))
            continue
        if d.total_bytes <= 0:
            continue
        pct = 100.0 * d.free_bytes / d.total_bytes
        if t.disk_free_fail_pct and pct < t.disk_free_fail_pct:
            out.append(Finding(CHECK, Severity.WARN, f"{path} {pct:.1f}% free < {t.disk_free_fail_pct:g}% "
                               f"(filled by jobs: reported, not drained)", "DISK_FULL"))
        elif t.disk_free_warn_pct and pct < t.disk_free_warn_pct:
            out.append(Finding(CHECK, Severity.WARN, f"{path} {pct:.1f}% free < {t.disk_free_warn_pct:g}%",
                               "DISK_FULL"))
    return out
