"""How often slurm-ft drained a node for nothing: per check and per Xid, from the journal alone (pure).

A drain episode runs from a node's fault (the `slurm-ft: CODE ...` drain the sweep recorded) to its
return to the pool (a passed validation), the RMA list, or now. It is
  confirmed                   a repair was needed: a reboot, a person's `node repaired`, a failed
                              validation, or the RMA list;
  probable_false_positive     it passed validation after no repair at all (`retest`) or only a GPU
                              reset (which clears transient state: the drain may have been for nothing);
  open                        still out of service.
Hours out of service run from the fault to the pass (or now). Spare node-hours consumed: the same hours
when the controller swapped a spare in for the node (the pool was one short meanwhile).

A planned swap's drain (`slurm-ft: PLANNED CODE ...`, a soft signal: node/soft.py) is an episode of its
own signal, counted per soft signal rather than per check: a swap confirmed (validation failed, a repair,
the RMA list) or a false alarm (validated as it was and passed): each signal's precision.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.fleet.lifecycle.remedy_plan import finding_in
from slurm_ft.fleet.lifecycle.transitions import Event, HistoryEntry, State
from slurm_ft.fleet.recovery.records import Incident
from slurm_ft.node.probes import check_of
from slurm_ft.vocab import planned

# one row of the summary (JSON): drains, confirmed, probable_false_positives, open, node-hours, false_positive_rate
Stats = Dict[str, Any]


@dataclass
class Episode:
    node: str
    code: str                       # XID79, TEMP_HIGH, ... ("" when the cause names none)
    start: float
    end: Optional[float] = None
    outcome: str = "open"
    repairs: List[str] = field(default_factory=list)   # reboot, reset_gpu, retest, admin, failed_validation
    spare_swapped: bool = False
    planned: bool = False           # a soft signal's graceful drain for a planned swap

    def hours(self, now: float) -> float:
        return max(0.0, ((self.end if self.end is not None else now) - self.start) / 3600.0)

    @property
    def check(self) -> str:
        return (check_of(self.code) or "other") if self.code else "unknown"

    @property
    def xid(self) -> Optional[str]:
        return self.code[3:] if self.code.startswith("XID") else None

    def to_dict(self, now: float) -> Dict[str, Any]:
        return {"node": self.node, "code": self.code, "check": self.check, "start": self.start, "end": self.end,
                "outcome": self.outcome, "repairs": self.repairs, "spare_swapped": self.spare_swapped,
                "planned": self.planned, "hours_out": round(self.hours(now), 4)}


def episodes(history: Iterable[HistoryEntry], incidents: Sequence[Incident] = ()) -> List[Episode]:
    """Drain episodes of every node in `history` (all nodes' entries, any order)."""
    by_node: Dict[str, List[HistoryEntry]] = {}
    for e in history:
        by_node.setdefault(e.node, []).append(e)
    out: List[Episode] = []
    for node, entries in sorted(by_node.items()):
        current: Optional[Episode] = None
        for e in sorted(entries, key=lambda e: e.time):
            if e.event is Event.FAULT and current is None:
                f = finding_in(e.cause)
                current = Episode(node, f.code if f else "", e.time, planned=planned(e.cause))
                out.append(current)
                continue
            if current is None:
                continue
            if e.event is Event.REMEDIATE:
                current.repairs.append(e.cause.split(":", 1)[0])
            elif e.event is Event.REPAIRED:
                current.repairs.append("admin")
            elif e.event is Event.FAIL:
                current.repairs.append("failed_validation")
            if e.event is Event.PASS or e.to_state is State.RMA:
                current.end = e.time
                fixed = set(current.repairs) - {"reset_gpu", "retest"}
                current.outcome = ("probable_false_positive" if e.event is Event.PASS and not fixed
                                   else "confirmed")
                current = None
    for ep in out:   # a recovery that took a spare for this node while it was out
        ep.spare_swapped = any(ep.node in inc.nodes and inc.spares and ep.start - 600 <= inc.opened_at
                               and (ep.end is None or inc.opened_at <= ep.end) for inc in incidents)
    return out


def _blank() -> Stats:
    return {"drains": 0, "confirmed": 0, "probable_false_positives": 0, "open": 0, "node_hours_out": 0.0,
            "spare_node_hours": 0.0}


def summarize(eps: Sequence[Episode], now: float) -> Dict[str, Any]:
    """{"by_check": {check: stats}, "by_xid": {xid: stats}, "by_soft_signal": {code: swaps}, "total": stats}."""
    by_check: Dict[str, Stats] = {}
    by_xid: Dict[str, Stats] = {}
    total = _blank()
    for ep in eps:
        rows = [by_check.setdefault(ep.check, _blank()), total] if not ep.planned else [total]
        if ep.xid is not None and not ep.planned:
            rows.append(by_xid.setdefault(ep.xid, _blank()))
        key = {"confirmed": "confirmed", "probable_false_positive": "probable_false_positives", "open": "open"}
        for r in rows:
            r["drains"] += 1
            r[key[ep.outcome]] += 1
            r["node_hours_out"] += ep.hours(now)
            r["spare_node_hours"] += ep.hours(now) if ep.spare_swapped else 0.0
    for r in [total, *by_check.values(), *by_xid.values()]:
        r["node_hours_out"] = round(r["node_hours_out"], 4)
        r["spare_node_hours"] = round(r["spare_node_hours"], 4)
        closed = r["confirmed"] + r["probable_false_positives"]
        r["false_positive_rate"] = round(r["probable_false_positives"] / closed, 4) if closed else None
    return {"by_check": dict(sorted(by_check.items())), "by_xid": dict(sorted(by_xid.items(), key=lambda kv: int(kv[0]))),
            "by_soft_signal": soft_signals(eps), "total": total}


def soft_signals(eps: Sequence[Episode]) -> Dict[str, Dict[str, Any]]:
    """Per soft signal (the code of the planned drain): swaps, confirmed by validation, false alarms,
    still open, and precision = confirmed / (confirmed + false alarms)."""
    out: Dict[str, Dict[str, Any]] = {}
    for ep in eps:
        if not ep.planned:
            continue
        r = out.setdefault(ep.code or "unknown", {"swaps": 0, "confirmed": 0, "false_alarms": 0, "open": 0})
        r["swaps"] += 1
        # a failed validation confirms the signal at once, even while the node waits for its repair
        confirmed = ep.outcome == "confirmed" or "failed_validation" in ep.repairs
        r["confirmed" if confirmed else "false_alarms" if ep.outcome == "probable_false_positive" else "open"] += 1
    for r in out.values():
        closed = r["confirmed"] + r["false_alarms"]
        r["precision"] = round(r["confirmed"] / closed, 4) if closed else None
    return dict(sorted(out.items()))


def metric_rows(summary: Mapping[str, Any]) -> List[Tuple[str, str, Stats]]:
    """(label name, label value, stats) for the Prometheus textfile."""
    rows = [("check", k, v) for k, v in summary.get("by_check", {}).items()]
    return rows + [("xid", k, v) for k, v in summary.get("by_xid", {}).items()]
