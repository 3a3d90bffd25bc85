"""Planning per failure domain (a rack, an NVL72 segment, a PDU): nodes that share one can fail together.

From the journal's drain episodes (fleet/report/drain_stats.py) and the domains of the config
(`planning.domains`: name -> hostlist), pure:
- a **domain outage** is two or more nodes of one domain faulting within `window_s` of the first of
  them: one event, however many nodes it took. Its rate per day has an exact (Garwood) interval.
- the other faults are **independent**: per domain, their rate per node-day with its interval, the
  nodes in repair L_d = (faults / days) x H / 24 (M/G/inf) and the spares s_d a pool of that domain
  alone would need (smallest s with P(Poisson(L_d) > s) < 1 - target).
- independent faults add up: the pooled need is s(sum L_d), less than the sum of the s_d. An outage
  does not: it takes n_d nodes at once, which no Poisson tail covers. Riding through the loss of
  domain d while the rest keep failing as usual takes n_d + s(L - L_d) spares, all outside d; the
  pool that survives the loss of any one domain is the largest of these.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.plan.history import garwood
from slurm_ft.plan.spares import poisson_tail, smallest_spares

if TYPE_CHECKING:       # drain episodes come from the fleet's journal; plan/ imports no room at run time
    from slurm_ft.fleet.report.drain_stats import Episode

DEFAULT_WINDOW_S = 600.0
Fault = Tuple[float, str]       # (time, node)


@dataclass(frozen=True)
class Outage:
    domain: str
    start: float
    nodes: Tuple[str, ...]          # the nodes that faulted in it


@dataclass
class DomainAnswer:
    name: str
    nodes: int
    faults: int                     # independent node faults (not part of an outage)
    rate_per_node_day: float
    rate_interval: Tuple[float, float]
    expected_in_repair: float       # L_d
    spares_alone: int               # s_d: a pool for this domain alone
    outages: int
    largest_outage: int             # nodes
    outage_rate_per_day: float
    outage_rate_interval: Tuple[float, float]
    spares_to_survive_loss: int     # n_d + s(L - L_d), outside this domain

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "nodes": self.nodes, "independent_faults": self.faults,
                "rate_per_node_day": self.rate_per_node_day, "rate_interval": list(self.rate_interval),
                "expected_nodes_in_repair": self.expected_in_repair, "spares_alone": self.spares_alone,
                "p_more_in_repair_than_spares_alone": poisson_tail(self.expected_in_repair, self.spares_alone),
                "outages": self.outages, "largest_outage_nodes": self.largest_outage,
                "outage_rate_per_day": self.outage_rate_per_day,
                "outage_rate_interval": list(self.outage_rate_interval),
                "spares_to_survive_its_loss": self.spares_to_survive_loss}


@dataclass
class DomainPlan:
    days: float
    repair_hours: float
    target: float
    confidence: float
    window_s: float
    domains: List[DomainAnswer]
    outages: List[Outage]
    unassigned_faults: int          # faults of nodes in no domain (left out of every figure here)
    pooled_in_repair: float         # L = sum L_d
    pooled_spares: int              # s(L)
    sum_of_domain_spares: int       # sum s_d
    spares_to_survive_any_loss: int  # max over d of n_d + s(L - L_d)
    worst_domain: Optional[str]

    def to_dict(self) -> Dict[str, Any]:
        return {"days": self.days, "repair_hours": self.repair_hours, "target": self.target,
                "confidence": self.confidence, "outage_window_s": self.window_s,
                "domains": [d.to_dict() for d in self.domains],
                "outages": [{"domain": o.domain, "start": o.start, "nodes": list(o.nodes)} for o in self.outages],
                "unassigned_faults": self.unassigned_faults,
                "pooled": {"expected_nodes_in_repair": self.pooled_in_repair, "spares": self.pooled_spares,
                           "sum_of_domain_spares": self.sum_of_domain_spares,
                           "spares_to_survive_any_domain_loss": self.spares_to_survive_any_loss,
                           "worst_domain": self.worst_domain}}


def outages_of(faults: Sequence[Fault], window_s: float) -> Tuple[List[List[Fault]], List[Fault]]:
    """Split one domain's (time, node) faults into outages (>= 2 nodes within window_s of the first)
    and independent faults."""
    groups: List[List[Fault]] = []
    for f in sorted(faults):
        if groups and f[0] - groups[-1][0][0] <= window_s:
            groups[-1].append(f)
        else:
            groups.append([f])
    outages = [g for g in groups if len({n for _, n in g}) >= 2]
    single = [f for g in groups if len({n for _, n in g}) < 2 for f in g]
    return outages, single


def plan_domains(domains: Mapping[str, Sequence[str]], episodes: Sequence[Episode], *, since: float, now: float,
                 repair_hours: float, target: float, confidence: float = 0.95,
                 window_s: float = DEFAULT_WINDOW_S) -> DomainPlan:
    """Per-domain rates, spares and outage needs over [since, now] (see the module doc)."""
    days = (now - since) / 86400.0
    if days <= 0:
        raise ValueError("the journal covers no time yet")
    risk = 1 - target
    where: Dict[str, str] = {n: d for d, names in domains.items() for n in names}
    faults: Dict[str, List[Fault]] = {d: [] for d in domains}
    unassigned = 0
    for e in episodes:
        if not since <= e.start <= now:
            continue
        d = where.get(e.node)
        if d is None:
            unassigned += 1
        else:
            faults[d].append((e.start, e.node))
    rows, all_outages, loads = [], [], {}
    for name, names in domains.items():
        n = len(names)
        outs, single = outages_of(faults[name], window_s)
        k = len(single)
        lo, hi = garwood(k, confidence)
        load = k / days * repair_hours / 24.0
        loads[name] = load
        olo, ohi = garwood(len(outs), confidence)
        all_outages += [Outage(name, g[0][0], tuple(sorted({nd for _, nd in g}))) for g in outs]
        rows.append(DomainAnswer(name, n, k, k / (n * days), (lo / (n * days), hi / (n * days)), load,
                                 smallest_spares(load, risk), len(outs),
                                 max((len({nd for _, nd in g}) for g in outs), default=0),
                                 len(outs) / days, (olo / days, ohi / days), 0))
    total = math.fsum(loads.values())
    worst, worst_need = None, 0
    for r in rows:
        r.spares_to_survive_loss = r.nodes + smallest_spares(max(0.0, total - loads[r.name]), risk)
        if r.spares_to_survive_loss > worst_need:
            worst, worst_need = r.name, r.spares_to_survive_loss
    return DomainPlan(days, repair_hours, target, confidence, window_s, rows, sorted(all_outages, key=lambda o: o.start),
                      unassigned, total, smallest_spares(total, risk), sum(r.spares_alone for r in rows), worst_need,
                      worst)


def render(plan: DomainPlan) -> List[str]:
    pct = f"{100 * plan.confidence:g}%"
    out = [f"Per failure domain ({len(plan.domains)} domains, {plan.days:.1f} days; an outage is >= 2 nodes of one "
           f"domain within {plan.window_s:g} s; H = {plan.repair_hours:.4g} h, target {plan.target:g}):",
           f"  {'domain':<12} {'nodes':>5} {'faults':>6} {'per node-day':>12} {pct + ' CI':>19} {'L_d':>7} "
           f"{'s_d':>4} {'outages':>7} {'largest':>7} {'ride-through':>12}"]
    for d in plan.domains:
        lo, hi = d.rate_interval
        out.append(f"  {d.name:<12} {d.nodes:>5} {d.faults:>6} {d.rate_per_node_day:>12.4g} "
                   f"{lo:>9.3g}-{hi:<9.3g} {d.expected_in_repair:>7.4g} {d.spares_alone:>4} {d.outages:>7} "
                   f"{d.largest_outage:>7} {d.spares_to_survive_loss:>12}")
    for o in plan.outages:
        out.append(f"  outage of {o.domain}: {len(o.nodes)} nodes within {plan.window_s:g} s ({', '.join(o.nodes)})")
    out.append(f"  independent faults pooled: L = sum L_d = {plan.pooled_in_repair:.4g} -> {plan.pooled_spares} spare(s) "
               f"(a pool per domain would need sum s_d = {plan.sum_of_domain_spares})")
    if plan.worst_domain is not None:
        out.append(f"  riding through the loss of a whole domain: n_d + s(L - L_d), worst {plan.worst_domain}: "
                   f"{plan.spares_to_survive_any_loss} spare(s), none of them inside the domain lost "
                   f"(a Poisson sum never covers n_d nodes failing at once)")
    if plan.unassigned_faults:
        out.append(f"  {plan.unassigned_faults} fault(s) on nodes in no domain are left out of this table")
    return out
