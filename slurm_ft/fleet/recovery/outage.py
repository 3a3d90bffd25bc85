"""An outage is not a fault: unresponsive nodes, waves of them, and the fleet-wide out-of-service budget.

Pure, like the plan: the controller keeps when it saw each node stop and start answering (`track`,
in memory: a restarted controller starts its graces again, which only waits longer), and the plan asks:

- `held_back`: unresponsive nodes that are not faults (yet). A node that is only NOT_RESPONDING is a
  fault once it stays so for `unresponsive_grace_s`; one Slurm marks DOWN is a fault at once, unless...
- `waves`: ... it is in a wave: a node that stopped answering with `wave_nodes` or more stopping within
  `wave_window_s` (counting it). That is a partition, an overloaded slurmctld or a power event, not
  failing GPUs. Every wave is held back, however many there are and however long one spreads (members
  within `wave_window_s` of each other are one wave): each member while any of its wave is still
  unresponsive, until `wave_settle_s` after the last one came back (the members still out then are
  single faults). A rate, not a share of the fleet: 478 of 960 nodes stopping together is as much a
  wave as 20 of 64.
- `breaker_room`: every node the controller takes out of service (quarantine: drain and partition
  removal) counts against the drain-rate breaker's window, the same count as the health checks' drains;
  a fault a check drained within that budget is recovered, one drained past it waits.
- `restorable`: a node we quarantined because it stopped answering, answering again for
  `restore_after_s` with our reason still on it (no health check drained it meanwhile): it goes to
  validation (the sweep), never straight back into service; `in_a_wave` says whether it stopped with a
  wave (then the lighter re-check is enough).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import datetime
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from slurm_ft.fleet.recovery.records import Incident

from slurm_ft.slurm.hostlist import compress
from slurm_ft.slurm.types import Node
from slurm_ft.vocab import slurm_time, unresponsive_cause

UNRESPONSIVE_WORDS = ("NOT_RESPONDING", "DOWN", "Not responding")


@dataclass(frozen=True)
class Seen:
    """One node's last spell of unresponsiveness as the controller saw it."""
    went_at: float
    back_at: Optional[float] = None       # None while it is still unresponsive


@dataclass(frozen=True)
class Wave:
    members: Tuple[str, ...]              # the nodes that stopped within the window, sorted
    still_out: Tuple[str, ...]
    first: float
    last: float
    settled_at: Optional[float]           # when the wave stops holding its members back (None: not yet known)

    def describe(self, now: float) -> str:
        back = len(self.members) - len(self.still_out)
        return (f"wave of unresponsive nodes: {len(self.members)} stopped answering within "
                f"{self.last - self.first:.0f} s ({compress(list(self.members))}) since "
                f"{_hms(self.first)}, {len(self.still_out)} still out"
                + (f" ({compress(list(self.still_out))})" if self.still_out and back else "")
                + ": recovery of these nodes paused (network partition, overloaded slurmctld or power?)")


def unresponsive(node: Node) -> bool:
    return node.down


def _slurm_down_time(node: Node) -> Optional[float]:
    """When Slurm marked the node DOWN for not responding (its ReasonTime), when it says so."""
    if node.state not in ("DOWN", "FAIL") or not node.reason.startswith("Not responding"):
        return None
    return slurm_time(node.reason_time)


def track(prev: Mapping[str, Seen], nodes: Iterable[Node], now: float, horizon_s: float) -> Dict[str, Seen]:
    """The next `seen` map from one read of the nodes; spells that ended over horizon_s ago are forgotten."""
    out: Dict[str, Seen] = {}
    for node in nodes:
        old = prev.get(node.name)
        if unresponsive(node):
            if old is not None and old.back_at is None:
                out[node.name] = old
            else:
                t = _slurm_down_time(node)
                out[node.name] = Seen(went_at=min(t, now) if t is not None else now)
        elif old is not None:
            back = old.back_at if old.back_at is not None else now
            if now - back <= horizon_s:
                out[node.name] = Seen(old.went_at, back)
    return out


def waves(seen: Mapping[str, Seen], now: float, *, nodes: int, window_s: float,
          settle_s: float) -> List[Wave]:
    """Every wave that still holds its members back, oldest first."""
    out: List[Wave] = []
    for members in _wave_groups(seen, nodes=nodes, window_s=window_s):
        group = [(n, seen[n]) for n in members]
        still = tuple(sorted(n for n, s in group if s.back_at is None))
        if not still:
            continue
        backs = [s.back_at for _, s in group if s.back_at is not None]
        settled = (max(backs) + settle_s) if backs else None
        if settled is not None and now >= settled:
            continue
        starts = [s.went_at for _, s in group]
        out.append(Wave(tuple(sorted(members)), still, min(starts), max(starts), settled))
    return out


def in_a_wave(name: str, seen: Mapping[str, Seen], *, nodes: int, window_s: float) -> bool:
    """Whether the node's last spell of not answering was one of a wave's (settled or not)."""
    return any(name in g for g in _wave_groups(seen, nodes=nodes, window_s=window_s))


def _wave_groups(seen: Mapping[str, Seen], *, nodes: int, window_s: float) -> List[List[str]]:
    """The spells that are wave members (`nodes` or more stops within some window_s that holds theirs),
    chained into waves: a member within window_s of the previous one belongs to the same wave."""
    if nodes <= 0 or len(seen) < nodes:
        return []
    names = sorted(seen)
    starts = sorted((seen[n].went_at, n) for n in names)
    times = [t for t, _ in starts]
    member = [False] * len(starts)
    covered = 0                         # starts[:covered] are marked already: O(n log n) in all
    for lo, t in enumerate(times):
        hi = bisect.bisect_right(times, t + window_s, lo)
        if hi - lo >= nodes:
            for i in range(max(lo, covered), hi):
                member[i] = True
            covered = max(covered, hi)
    groups: List[List[str]] = []
    last: Optional[float] = None
    for i, (t, name) in enumerate(starts):
        if not member[i]:
            continue
        if last is None or t - last > window_s:
            groups.append([])
        groups[-1].append(name)
        last = t
    return groups


def describe(active: Sequence[Wave], now: float) -> str:
    """One alert for every wave holding nodes back."""
    if len(active) == 1:
        return active[0].describe(now)
    return f"{len(active)} waves at once: " + "; ".join(w.describe(now) for w in active)


def held_back(snap_nodes: Mapping[str, Node], seen: Mapping[str, Seen], now: float, *, grace_s: float,
              active: Sequence[Wave]) -> Set[str]:
    """Unresponsive nodes that are not faults now: in grace (NOT_RESPONDING only), or in an active wave."""
    out: Set[str] = {n for w in active for n in w.still_out}
    for name, s in seen.items():
        node = snap_nodes.get(name)
        if node is None or s.back_at is not None:
            continue
        slurm_down = node.state in ("DOWN", "FAIL") or "FAIL" in node.flags
        if not slurm_down and now - s.went_at < grace_s:
            out.add(name)
    return out


def breaker_room(counted: Iterable[str], past_limit: Iterable[str], nodes: Sequence[str],
                 out_now: Iterable[str], limit: int) -> Optional[str]:
    """Why the recovery of a fault on `nodes` must wait for the drain-rate breaker, or None when it may go on.

    `counted`: the nodes slurm-ft took out of service within the breaker's window (drained by a check or
    quarantined by the controller); `past_limit`: those of them taken out beyond the limit (Slurm's drain
    after a failed hook, racing drains). `out_now`: the nodes of `nodes` out of service already (drained):
    quarantining them takes nothing new out, so the fault a check drained within the budget is
    recovered even when that drain used the budget's last unit; one drained past the limit waits. The
    others (down, not drained yet) are taken out by the quarantine: each costs one. limit 0: no limit."""
    if limit <= 0:
        return None
    have = set(counted)
    out_now = set(out_now)
    late = sorted(set(past_limit) & out_now & set(nodes))
    if late:
        return (f"drain-rate breaker: {compress(late)} taken out past the limit ({len(have)} nodes within the "
                f"window, limit {limit}); its recovery waits until the breaker has room")
    new = [n for n in nodes if n not in have and n not in out_now]
    if not new or len(have) + len(new) <= limit:
        return None
    return (f"drain-rate breaker: taking {len(new)} more node(s) out of service would make "
            f"{len(have) + len(new)} within the window (limit {limit}); not quarantining")


def restorable(node: Optional[Node], s: Optional[Seen], watching_since: float, now: float,
               restore_after_s: float) -> bool:
    """A node quarantined for not answering that answers again, with nothing else against it."""
    if node is None or node.down or not node.drained or "MAINTENANCE" in node.flags:
        return False
    why = unresponsive_cause(node.reason)
    if why is None:
        return False            # a health check drained it since (its own reason replaced ours)
    if not any(w in why.split(" during job")[0] for w in UNRESPONSIVE_WORDS):
        return False            # quarantined for a real fault (XID, ECC, ...)
    back = s.back_at if s is not None and s.back_at is not None else watching_since
    if s is not None and s.back_at is None:
        return False
    return now - back >= restore_after_s



def latest_incident_of(incidents: Sequence[Incident]) -> Dict[str, Incident]:
    out: Dict[str, Incident] = {}
    for inc in sorted(incidents, key=lambda i: i.id):
        for n in inc.nodes:
            out[n] = inc
    return out


def _hms(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%H:%M:%S")


__all__: List[str] = ["Seen", "Wave", "track", "waves", "in_a_wave", "describe", "held_back", "breaker_room",
                      "restorable", "latest_incident_of"]
