"""Planning from the cluster's own history: the failure rate per node-day with an exact (Garwood)
confidence interval, the repair-time distribution and the recovery time per path, from the journal's
drain episodes (fleet/report/drain_stats.py) and the controller's incidents. Pure: callers pass them in.

Garwood's interval for a Poisson count k over an exposure E (node-days): the rates L/E, U/E with
P(X >= k | L) = alpha/2 and P(X <= k | U) = alpha/2 (L = 0 when k = 0). Exact: it covers the true rate
with probability at least 1 - alpha whatever the rate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from slurm_ft.errors import UsageError

if TYPE_CHECKING:       # plan/ reads what the fleet journaled; it imports no room at run time
    from slurm_ft.fleet.report.drain_stats import Episode
    from slurm_ft.fleet.recovery.records import Incident


def _poisson_cdf(k: int, lam: float) -> float:
    """P(X <= k) for X ~ Poisson(lam), summed in log space (no overflow for k in the thousands)."""
    if lam <= 0:
        return 1.0
    log_p, total = -lam, 0.0
    for i in range(k + 1):
        if i:
            log_p += math.log(lam) - math.log(i)
        total += math.exp(log_p)
    return min(1.0, total)


def _solve(f: Callable[[float], float], lo: float, hi: float) -> float:
    """The root of the decreasing `f` in [lo, hi] by bisection."""
    for _ in range(200):
        mid = (lo + hi) / 2
        if f(mid) > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def garwood(k: int, confidence: float = 0.95) -> Tuple[float, float]:
    """Exact two-sided interval (L, U) for the mean of a Poisson variable observed as k."""
    if k < 0 or not 0 < confidence < 1:
        raise UsageError(f"garwood: k >= 0 and 0 < confidence < 1, got {k}, {confidence}")
    a = (1 - confidence) / 2
    hi = k + 20 * math.sqrt(k + 1) + 20
    # P(X >= k | m) rises with m, P(X <= k | m) falls: each crosses alpha/2 once
    lower = 0.0 if k == 0 else _solve(lambda m: a - (1 - _poisson_cdf(k - 1, m)), 0.0, hi)
    upper = _solve(lambda m: _poisson_cdf(k, m) - a, 0.0, hi)
    return lower, upper


def _quantile(values: Sequence[float], q: float) -> Optional[float]:
    v = sorted(values)
    if not v:
        return None
    pos = q * (len(v) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def distribution(values: Sequence[float]) -> Dict[str, Optional[float]]:
    return {"count": len(values), "mean": (sum(values) / len(values)) if values else None,
            "p50": _quantile(values, 0.5), "p90": _quantile(values, 0.9), "max": max(values) if values else None}


@dataclass
class Observed:
    """What the journal says about this fleet."""
    nodes: int
    days: float
    incidents: int                      # drains (node faults) in the window
    confidence: float
    rate_per_node_day: float
    rate_low: float
    rate_high: float
    repair_hours: Dict[str, Optional[float]] = field(default_factory=dict)   # distribution of fault -> back in the pool
    recovery_s: Dict[str, Dict[str, Optional[float]]] = field(default_factory=dict)   # per recovery path

    @property
    def node_mtbf_hours(self) -> float:
        return 24.0 / self.rate_per_node_day

    def source(self) -> str:
        return (f"journal: {self.incidents} node faults over {self.nodes} nodes x {self.days:.1f} days = "
                f"{self.rate_per_node_day:.3g} per node-day ({100 * self.confidence:g}% CI "
                f"{self.rate_low:.3g}-{self.rate_high:.3g}, Garwood)")

    def to_dict(self) -> Dict[str, Any]:
        return {"nodes": self.nodes, "days": self.days, "incidents": self.incidents, "confidence": self.confidence,
                "rate_per_node_day": self.rate_per_node_day, "rate_interval": [self.rate_low, self.rate_high],
                "node_mtbf_hours": self.node_mtbf_hours, "repair_hours": self.repair_hours,
                "recovery_s": self.recovery_s}


def observe(episodes: Sequence[Episode], incidents: Sequence[Incident], *, nodes: int, since: float, now: float,
            confidence: float = 0.95) -> Observed:
    """The rate of node faults per node-day over [since, now] on `nodes` nodes, from drain episodes."""
    if nodes < 1:
        raise UsageError(f"--fleet-nodes must be at least 1, got {nodes}")
    days = (now - since) / 86400.0
    if days <= 0:
        raise UsageError("the journal covers no time yet: nothing to plan from")
    k = sum(1 for e in episodes if since <= e.start <= now)
    if k == 0:
        raise UsageError(f"no node faults in the journal over {days:.1f} days: the rate is below "
                         f"{garwood(0, confidence)[1] / (nodes * days):.3g} per node-day ({100 * confidence:g}%), "
                         f"too few to plan from; give a rate (--node-mtbf-hours)")
    exposure = nodes * days
    lo, hi = garwood(k, confidence)
    repairs = [e.hours(now) for e in episodes if e.end is not None and e.outcome != "open"]
    paths: Dict[str, List[float]] = {}
    for inc in incidents:
        if inc.closed_at is None or inc.status != "recovered":
            continue
        path = "spare" if inc.spares else ("shrink" if inc.shrink_to else "same_nodes")
        paths.setdefault(path, []).append(max(0.0, inc.closed_at - (inc.fault_at or inc.opened_at)))
    return Observed(nodes, days, k, confidence, k / exposure, lo / exposure, hi / exposure,
                    distribution(repairs), {p: distribution(v) for p, v in sorted(paths.items())})
