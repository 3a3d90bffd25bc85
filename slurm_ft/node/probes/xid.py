"""Xids from the kernel log (and NVML events), judged by the catalog in `slurm_ft.gpu.xid`.

* Catalog severity fail -> a fail finding with the catalog's action (reset_gpu, reboot, rma, drain).
* warn -> warn; ignore -> an informational ok line (shown, never a drain).
* a syslog line (`trusted` False: `logger -t kernel` writes the same) that would fail warns instead,
  as UNVERIFIED_XIDn; NVML reporting the same Xid makes it count (node/gather.py).
* Application-caused Xids (13, 31, 43, 45, 68, ...) never fail. If the same one keeps coming back on
  the same GPU across different jobs (`ctx.xid_history`, kept by the epilog in the node state file),
  it warns: a heuristic for a GPU that only looks like an application bug.
Only Xids logged at or after `ctx.xid_since` count (the job's start for the epilog, the look-back
window otherwise); several identical Xids on one GPU make one finding with a count.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Tuple, Union

from slurm_ft.gpu import xid as catalog
from slurm_ft.finding import Action, Finding, Severity
from slurm_ft.gpu.sample import NodeSample, XidEvent

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "xid"

_SEVERITY = {"fail": Severity.FAIL, "warn": Severity.WARN, "ignore": Severity.OK}


def recent(sample: NodeSample, since: Optional[float], untimed: bool = True) -> List[XidEvent]:
    """Xids logged at or after `since`; a line without a time counts only when `untimed` (it cannot be
    shown newer than an admin's resume, so after one it is history)."""
    return [e for e in sample.xids
            if since is None or (untimed if e.timestamp is None else e.timestamp >= since)]


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    groups: Dict[Tuple[str, int, Union[int, str]], List[XidEvent]] = {}
    for e in recent(sample, ctx.xid_since, ctx.xid_untimed):
        key = (e.kind if e.trusted else "unverified", e.xid, e.gpu if e.gpu is not None else e.pci_bus_id)
        groups.setdefault(key, []).append(e)
    out: List[Finding] = []
    for (kind, code, _), events in groups.items():
        # the worst verdict among the group's lines (an NVLink5 Xid may be Fatal once, Nonfatal else)
        verdicts = [catalog.verdict(e) for e in events]
        v = max(verdicts, key=lambda i: ("ignore", "warn", "fail").index(i.severity))
        e = events[-1]
        where = "" if e.gpu is not None else f" at PCI {e.pci_bus_id}"
        times = f" x{len(events)}" if len(events) > 1 else ""
        sev = _SEVERITY[v.severity]
        action = Action(v.action) if sev is Severity.FAIL else Action.NONE
        reason = f"{_short(v.name)}{where}{times}"
        if v.user_caused:
            sev, action = Severity.OK, Action.NONE
            seen = ctx.xid_history.get((e.gpu, code), 0) if e.gpu is not None else 0
            limit = ctx.thresholds.xid_app_recurrence_warn
            if limit and seen >= limit:
                sev = Severity.WARN
                reason += f"; recurred on this GPU in {seen} jobs (hardware suspect)"
            else:
                reason += " (application error, not a node fault)"
        prefix = {"sxid": "SXID", "forged": "FORGED_XID", "unverified": "UNVERIFIED_XID"}.get(kind, "XID")
        out.append(Finding(CHECK, sev, reason, f"{prefix}{code}", e.gpu, action))
    return out


def _short(name: str) -> str:
    """Catalog names carry notes in parentheses; the finding keeps the words before them."""
    cut = name.split(" (")[0].strip()
    return cut or name
