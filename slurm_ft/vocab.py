"""slurm-ft's words on Slurm's objects, in one place: every room reads them; this imports nothing of slurm-ft.

Drain reasons. Every reason slurm-ft writes starts with OWNER, and slurm-ft resumes, rewrites or counts
as its own only a reason that does (an admin's drain is never touched). The forms:
    slurm-ft: CODE[ gpuN] <finding>[ (+K more)]       a node's check (node/drain.py)
    slurm-ft: quarantined, <how seen> during job J    the controller, a node that stopped answering
    slurm-ft: QUARANTINED by <admin>: <cause>         `slurm-ft node quarantine`
    slurm-ft: RMA ... | REBOOT ... | validation failed: ...   the sweep's rewrites
    slurm-ft: PLANNED CODE[ gpuN] <figure>            a soft signal's graceful drain (node/planned.py): no
                                                      fault, the jobs run on; QUARANTINED PLANNED once the
                                                      sweep quarantined it
    slurm-ft: REVALIDATE [outage, ]<quarantine reason>   the controller: a node quarantined for not
                                                      answering answers again; the sweep validates it
Slurm stores longer reasons; REASON_MAX keeps `sinfo -R` readable.
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Iterable, Optional, Tuple

OWNER = "slurm-ft:"

# The health levels, cheapest first; each runs the checks of those before it (node/probes). A level
# name reaches a validation job's script: the set is closed (config.py refuses any other).
LEVELS = ("quick", "prolog", "epilog", "full", "burnin")
REASON_MAX = 100
UNRESPONSIVE_QUARANTINE = f"{OWNER} quarantined, "
# A node quarantined for not answering that answers again: the sweep validates it before it may serve
# (`outage, `: it stopped with a wave of others, so the lighter spare re-check levels are enough).
REVALIDATE = f"{OWNER} REVALIDATE "
REVALIDATE_OUTAGE = "outage, "
# Slurm's own reasons for a node it drained after a failed prolog or epilog (its wording differs between
# versions) and after a task it could not kill: faults, and ours when our hook failed the node.
HOOK_FAULT_REASONS = ("Prolog error", "Epilog error", "Prolog failed", "Epilog failed")
SLURM_FAULT_REASONS = HOOK_FAULT_REASONS + ("Kill task failed",)
# Slurm's own reasons for a node it set DOWN: a node that stopped answering, or came back from a crash.
SLURM_DOWN_REASONS = ("Not responding", "Node unexpectedly rebooted")

# A job in one of these states will not run again unless someone requeues it. NODE_FAIL is not among
# them for the controller (a fault it may recover: fleet/plan.py), but ends a validation job.
ENDED_JOB_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE",
                              "BOOT_FAIL", "PREEMPTED", "SPECIAL_EXIT", "REVOKED"})


def owned(reason: str) -> bool:
    """A reason slurm-ft wrote."""
    return reason.strip().startswith(OWNER)


# A soft signal (node/soft.py) takes a node out gracefully: State=DRAIN, no job killed, a planned swap of
# the jobs on it. Such a node has not failed: no fault path may act on it (job/nodefault.py).
PLANNED = "PLANNED"
_PLANNED_RE = re.compile(re.escape(OWNER) + r"\s*(?:QUARANTINED\s+)?" + PLANNED + r"\s")


def planned(reason: str) -> bool:
    """A planned-swap drain of ours (`slurm-ft: PLANNED ...`, also once quarantined)."""
    return bool(_PLANNED_RE.match(reason.strip() + " "))


def planned_reason(code: str, gpu: Optional[int], figure: str) -> str:
    """`slurm-ft: PLANNED ECC_SBE_RATE gpu3 corrected ECC +1240 in 10 min`: one line, at most REASON_MAX."""
    where = f" gpu{gpu}" if gpu is not None else ""
    text = " ".join(f"{OWNER} {PLANNED} {code}{where} {figure}".encode("ascii", "replace").decode().split())
    return fit(text.replace("|", "/").replace("=", ":"))


def admins(reason: str, slurm_reasons: Iterable[str] = SLURM_FAULT_REASONS) -> bool:
    """A reason a person wrote: neither slurm-ft's nor one of Slurm's own (`slurm_reasons`, the DOWN ones).
    slurm-ft never takes such a node on as a fault, rewrites its reason or counts it."""
    text = reason.strip()
    return bool(text) and not owned(text) and not any(text.startswith(r) for r in (*slurm_reasons,
                                                                                   *SLURM_DOWN_REASONS))


def fit(text: str, limit: int = REASON_MAX) -> str:
    """One line of at most `limit` printable ASCII characters (anything else becomes '?': a reason may
    quote a node's earlier one or a finding); Slurm refuses a reason that ends in a space."""
    return "".join(c if " " <= c <= "~" else "?" for c in " ".join(text.split()))[:limit].rstrip()


def slurm_time(text: Optional[str]) -> Optional[float]:
    """Slurm's `2026-11-29T16:30:05` (local time) as epoch seconds; None when absent, Unknown or unreadable."""
    if not text or text in ("None", "Unknown", "(null)", "N/A"):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return None


# Events slurm-ft tells a running job with `scontrol notify` (one RPC, no polling by the job): the node's
# side after it drained the node (failed) or took it out gracefully for a soft signal (degraded: a planned
# swap at the job's next checkpoint, node/planned.py), the controller after it quarantined it. The batch step's output shows
# each as `slurmstepd-<host>: error: <line>`; the hot-spare supervisor reads them there. Anyone who can
# write to that output (the job's own ranks) can forge one, so a notice only ever steers that job itself.
EVENT_MARK = "slurm-ft-event v1"
EVENT_KINDS = ("failed", "quarantined", "degraded")
EVENT_MAX = 300
_EVENT_RE = re.compile(re.escape(EVENT_MARK) + r" (failed|quarantined|degraded) ([A-Za-z0-9_.\-]{1,64})(?: (.*))?$")


def event_line(kind: str, node: str, why: str = "") -> str:
    """`slurm-ft-event v1 failed gpu017 slurm-ft: XID79 gpu3 ...`: one line, printable ASCII, bounded."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown event kind {kind!r}")
    text = " ".join(f"{EVENT_MARK} {kind} {node} {why}".encode("ascii", "replace").decode().split())
    return "".join(c if c.isprintable() else "?" for c in text)[:EVENT_MAX].rstrip()


def parse_event(line: str) -> Optional[Tuple[str, str, str]]:
    """(kind, node, why) of the event in a line of a job's output (whatever precedes the mark), or None."""
    at = line.find(EVENT_MARK)
    if at < 0:
        return None
    m = _EVENT_RE.match(line[at:at + EVENT_MAX + 1].rstrip("\r\n"))
    return (m.group(1), m.group(2), m.group(3) or "") if m else None
