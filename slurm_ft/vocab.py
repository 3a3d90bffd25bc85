"""slurm-ft's words on Slurm's objects, in one place: every room reads them; this imports nothing of slurm-ft.

Drain reasons. Every reason slurm-ft writes starts with OWNER, and slurm-ft resumes, rewrites or counts
as its own only a reason that does (an admin's drain is never touched). Each form is rendered and read
back here alone (tests/unit/test_lint.py holds every other module to it):
    slurm-ft: CODE[ gpuN] <finding>[ (+K more)]       a node's check (node/drain.py)
    slurm-ft: quarantined, <how seen> during job J    the controller, a node that stopped answering
    slurm-ft: QUARANTINED by <admin>: <cause>         `slurm-ft node quarantine`
    slurm-ft: QUARANTINED|RMA <the reason it replaced>   the sweep's rewrites (an earlier tag replaced)
    slurm-ft: REBOOT <code gpuN> attempt A/M          the remediation's reboot
    slurm-ft: validation failed: <why>                the sweep, a node its validation failed
    slurm-ft: hang check: CODE gpuN <finding>; ...    why a job's hang checks name a node (not a drain)
    slurm-ft: SIM <class> (<kind> fault, simulated)   a simulated journal's faults (never on a node)
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
# them for the controller (a fault it may recover: fleet/recovery/plan.py), but ends a validation job.
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


def planned_unquarantined(reason: str) -> bool:
    """A planned-swap drain the sweep has not quarantined yet (`slurm-ft: PLANNED ...`)."""
    return reason.startswith(f"{OWNER} {PLANNED} ")


def planned_reason(code: str, gpu: Optional[int], figure: str) -> str:
    """`slurm-ft: PLANNED ECC_SBE_RATE gpu3 corrected ECC +1240 in 10 min`: one line, at most REASON_MAX."""
    where = f" gpu{gpu}" if gpu is not None else ""
    return fit(f"{OWNER} {PLANNED} {code}{where} {_clean(figure)}")


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
EVENT_KINDS = ("failed", "quarantined", "degraded", "ended")   # ended: the controller cancelled the job's steps there
EVENT_MAX = 300
_EVENT_RE = re.compile(re.escape(EVENT_MARK) + r" (failed|quarantined|degraded|ended) ([A-Za-z0-9_.\-]{1,64})(?: (.*))?$")


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


# --- drain reasons: every form slurm-ft writes is rendered below, and read back below -----------------

REWRITE_TAGS = ("QUARANTINED", "RMA", "REBOOT")   # the lifecycle's rewrites: each keeps the reason it replaces
# finding codes as a node's check writes them: XID79, SXID12028, GPU_LOST, NVLINK_DOWN, ECC_DBE_VOLATILE ...
_FINDING_CODE = re.compile(r"\b(S?XID\d+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b(?:\s+gpu(\d+))?")
_REASON_HEAD = re.compile(r"^\s*" + re.escape(OWNER) + r"\s*(\S+)")
HANG_CHECK = "hang check: "


def _clean(text: str) -> str:
    # one line of printable ASCII: Slurm prints reasons unquoted, some tools split on '|' or '=', and the
    # client refuses a control byte (a process name is a user's: the probe escapes it, this is the last guard)
    text = re.sub(r"\s+", " ", text).replace("|", "/").replace("=", ":")
    return re.sub(r"[^\x20-\x7e]", "?", text).strip()


def check_reason(code: str, gpu: Optional[int], finding: str, more: int = 0) -> str:
    """`slurm-ft: XID79 gpu3 GPU has fallen off the bus (+1 more)`: a node's check, the worst fail finding."""
    where = f" gpu{gpu}" if gpu is not None else ""
    tail = f" (+{more} more)" if more else ""
    text = f"{OWNER} {code}{where} {_clean(finding)}".rstrip()     # Slurm refuses a reason ending in a space
    if len(text) + len(tail) > REASON_MAX:
        text = text[:REASON_MAX - len(tail) - 3].rstrip() + "..."
    return text + tail


def unresponsive_reason(seen: str, job_id: int) -> str:
    """`slurm-ft: quarantined, DOWN+NOT_RESPONDING: Not responding during job 7`: the controller's quarantine
    of a node that stopped answering under a job."""
    return fit(f"{UNRESPONSIVE_QUARANTINE}{seen} during job {job_id}")


def unresponsive_cause(reason: str) -> Optional[str]:
    """How a node we quarantined for not answering was seen, from its reason as the controller wrote it or
    as the sweep rewrote it (QUARANTINED); None for any other reason."""
    for head in (UNRESPONSIVE_QUARANTINE, f"{OWNER} QUARANTINED {UNRESPONSIVE_QUARANTINE[len(OWNER) + 1:]}"):
        if reason.startswith(head):
            return reason[len(head):]
    return None


def revalidate_reason(reason: str, outage: bool) -> str:
    """`slurm-ft: REVALIDATE [outage, ]answers again; quarantined, <how seen>`: a node quarantined for not
    answering answers again; the sweep validates it."""
    why = unresponsive_cause(reason) or reason
    return fit(f"{REVALIDATE}{REVALIDATE_OUTAGE if outage else ''}answers again; quarantined, {why}")


def revalidation(reason: str) -> Optional[Tuple[str, bool]]:
    """(cause, stopped in an outage) of a REVALIDATE reason, or None."""
    if not reason.startswith(REVALIDATE):
        return None
    cause = reason[len(REVALIDATE):]
    return cause, cause.startswith(REVALIDATE_OUTAGE)


def admin_quarantine_reason(who: str, cause: str) -> str:
    """`slurm-ft: QUARANTINED by alice: fans loud`: `slurm-ft node quarantine`."""
    return fit(f"{OWNER} QUARANTINED by {who}: {cause}")


def rewritten_reason(tag: str, reason: str) -> str:
    """The lifecycle's rewrite (`tag`: QUARANTINED or RMA) of a node's reason, keeping what it said:
    `slurm-ft: XID79 gpu3 ...` -> `slurm-ft: QUARANTINED XID79 gpu3 ...` (an earlier tag is replaced)."""
    if tag not in REWRITE_TAGS:
        raise ValueError(f"unknown reason tag {tag!r}")
    rest = reason[len(OWNER):].strip() if owned(reason) else reason
    for old in REWRITE_TAGS:
        rest = rest[len(old) + 1:] if rest.startswith(old + " ") else rest
    return fit(f"{OWNER} {tag} {rest}")


def reboot_reason(label: str, attempt: int, max_attempts: int) -> str:
    """`slurm-ft: REBOOT XID79 gpu3 attempt 1/2`: the remediation's reboot."""
    return fit(f"{OWNER} REBOOT {label} attempt {attempt}/{max_attempts}")


def validation_failed_reason(why: str) -> str:
    return fit(f"{OWNER} validation failed: {why}")


def sim_reason(cls: str, kind: str) -> str:
    """A simulated fault's reason in a journal the simulator writes (never on a real node)."""
    return f"{OWNER} SIM {cls} ({kind} fault, simulated)"


def hang_culprit(findings: Iterable[Tuple[str, Optional[int], str]]) -> str:
    """`slurm-ft: hang check: XID79 gpu3 ...; ECC_DBE gpu1 ...`: why the hang checks name a node."""
    return (f"{OWNER} {HANG_CHECK}" + "; ".join(
        f"{code} {'gpu' + str(gpu) if gpu is not None else ''} {reason}".strip() for code, gpu, reason in findings))[:300]


def hang_code(why: str) -> str:
    """The first finding code of a hang culprit's why."""
    m = re.match(r"[^\s;]*", why.split(HANG_CHECK, 1)[-1])
    return m.group(0) if m else ""


def job_comment(text: str) -> str:
    """What the controller writes in a job's AdminComment (ours: the prefix says so)."""
    return f"{OWNER} {text}"


def code_of(reason: str) -> str:
    """The word after `slurm-ft:` (a check's finding code, or a rewrite's tag); "" for a reason not ours."""
    m = _REASON_HEAD.match(reason or "")
    return m.group(1) if m else ""


def finding_code(text: str) -> Optional[Tuple[str, Optional[int]]]:
    """The first finding code (and its GPU) in a drain reason or a history cause, or None."""
    m = _FINDING_CODE.search(text or "")
    return (m.group(1), int(m.group(2)) if m.group(2) else None) if m else None
