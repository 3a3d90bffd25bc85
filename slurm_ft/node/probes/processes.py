"""Leftover GPU processes after a job (epilog): a process still holding a GPU context once Slurm has
killed the job's tasks is usually unkillable (stuck in the driver) and would starve the next job.

Only the ending job's processes count (`ctx.job`, from the hook's environment: node/jobscope.py): on one
of its GPUs, owned by its user. A neighbour's live rank on a shared node is not this job's leftover.
Programs listed in `health.ignore_processes` (persistence daemon, DCGM host engine) may hold a GPU: an
entry is an executable's full path, matched against /proc/PID/exe, and only a file root owns and alone
may write counts (a name in `comm` is whatever its owner picks). A bare name, as older configs have
it, matches such a file of that name in a system directory. Reading: `host.GpuProcesses` (reader
"processes": the pids on each GPU once the job's have had their grace, and what /proc says of them).
"""
from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, List, Sequence

from slurm_ft.finding import Action, Finding, Severity
from slurm_ft.gpu.sample import NodeSample
from slurm_ft.node.host import GpuProcesses, Process

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "processes"
SYSTEM_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin", "/usr/local/sbin")


def ignored(proc: Process, allowed: Sequence[str]) -> bool:
    """Is this process one of the programs allowed to hold a GPU between jobs?"""
    if not proc.exe or not proc.exe_root:
        return False
    for entry in allowed:
        if "/" in entry:
            if proc.exe == entry:
                return True
        elif posixpath.dirname(proc.exe) in SYSTEM_DIRS and posixpath.basename(proc.exe) == entry:
            return True
    return False


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    read = sample.host.of("processes", GpuProcesses)
    facts = read.facts if read else {}
    job = ctx.job.on({g.index: g.uuid for g in sample.gpus})
    out: List[Finding] = []
    for g in sample.gpus:
        if g.lost:
            continue
        left = []
        for pid in (read.held.get(g.index, ()) if read else g.processes):
            proc = facts.get(pid)
            if not job.owns(g.index, proc.uid if proc else None):
                continue                          # another job's, or another user's
            if proc is not None and ignored(proc, ctx.ignore_processes):
                continue
            left.append((pid, proc.name if proc else "?"))
        if left:
            shown = ", ".join(f"{pid} ({n})" for pid, n in left[:3]) + (" ..." if len(left) > 3 else "")
            out.append(Finding(CHECK, Severity.FAIL, f"{len(left)} process(es) still on the GPU after the job: {shown}",
                               "GPU_PROC_LEFT", g.index, Action.DRAIN))
    note = job.note()
    if note:
        out.append(Finding(CHECK, Severity.OK, note))
    return out
