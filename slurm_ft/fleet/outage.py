"""An outage is not a fault: unresponsive nodes, waves of them, and the fleet-wide out-of-service budget.

Pure, like the plan: the controller keeps when it saw each node stop and start answering (`track`,
in memory: a restarted controller starts its graces again, which only waits longer), and the plan asks:

- `held_back`: unresponsive nodes that are not faults (yet). A node that is only NOT_RESPONDING is a
  fault once it stays so for `unresponsive_grace_s`; one Slurm marks DOWN is a fault at once, unless...
- `wave`: ... it is one of a wave: `wave_nodes` or more nodes that stopped answering within
  `wave_window_s` of each other. That is a partition, an overloaded slurmctld or a power event, not
  failing GPUs: every member is held back while any of them is still unresponsive, until `wave_settle_s`
  after the last one came back (the members still out then are single faults). A rate, not a share of
  the fleet: 478 of 960 nodes stopping together is as much a wave as 20 of 64.
- `breaker_room`: every node the controller takes out of service (quarantine: drain and partition
  removal) counts against the drain-rate breaker's window, the same count as the health checks' drains.
- `restorable`: a node we quarantined because it stopped answering, answering again for
  `restore_after_s` with our reason still on it (no health check drained it meanwhile): it goes back.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import datetime
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from slurm_ft.fleet.records import Incident

from slurm_ft.slurm.hostlist import compress
from slurm_ft.slurm.types import Node
from slurm_ft.vocab import UNRESPONSIVE_QUARANTINE, slurm_time

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


def wave(seen: Mapping[str, Seen], now: float, *, nodes: int, window_s: float, settle_s: float) -> Optional[Wave]:
    """The latest wave that still holds its members back, or None."""
    if nodes <= 0 or len(seen) < nodes:
        return None
    spells = sorted(seen.items(), key=lambda kv: kv[1].went_at)
    starts = [s.went_at for _, s in spells]
    best: Optional[Wave] = None
    lo = 0
    while lo < len(spells):            # groups: every spell within window_s of the group's first
        hi = bisect.bisect_right(starts, starts[lo] + window_s)
        if hi - lo < nodes:
            lo += 1
            continue
        group = spells[lo:hi]
        lo = hi
        out = tuple(sorted(n for n, s in group if s.back_at is None))
        if not out:
            continue
        backs = [s.back_at for _, s in group if s.back_at is not None]
        settled = (max(backs) + settle_s) if backs else None
        if settled is not None and now >= settled:
            continue
        best = Wave(tuple(sorted(n for n, _ in group)), out, group[0][1].went_at, group[-1][1].went_at, settled)
    return best


def held_back(snap_nodes: Mapping[str, Node], seen: Mapping[str, Seen], now: float, *, grace_s: float,
              active: Optional[Wave]) -> Set[str]:
    """Unresponsive nodes that are not faults now: in grace (NOT_RESPONDING only), or in an active wave."""
    out: Set[str] = set(active.still_out) if active else set()
    for name, s in seen.items():
        node = snap_nodes.get(name)
        if node is None or s.back_at is not None:
            continue
        slurm_down = node.state in ("DOWN", "FAIL") or "FAIL" in node.flags
        if not slurm_down and now - s.went_at < grace_s:
            out.add(name)
    return out


def breaker_room(counted: Iterable[str], nodes: Sequence[str], limit: int) -> Optional[str]:
    """Why taking `nodes` out of service now would pass the fleet-wide limit, or None when it may.

    `counted`: the nodes already out of service by slurm-ft within the breaker's window (drained by a
    check or quarantined by the controller); a node already counted costs nothing again. limit 0: none."""
    if limit <= 0:
        return None
    have = set(counted)
    new = [n for n in nodes if n not in have]
    if len(have) + len(new) <= limit:
        return None
    return (f"drain-rate breaker: taking {len(new)} more node(s) out of service would make "
            f"{len(have) + len(new)} within the window (limit {limit}); not quarantining")


def restorable(node: Optional[Node], s: Optional[Seen], watching_since: float, now: float,
               restore_after_s: float) -> bool:
    """A node quarantined for not answering that answers again, with nothing else against it."""
    if node is None or node.down or not node.drained or "MAINTENANCE" in node.flags:
        return False
    if not node.reason.startswith(UNRESPONSIVE_QUARANTINE):
        return False            # a health check drained it since (its own reason replaced ours)
    why = node.reason[len(UNRESPONSIVE_QUARANTINE):]
    if not any(w in why.split(" during job")[0] for w in UNRESPONSIVE_WORDS):
        return False            # quarantined for a real fault (XID, ECC, ...)
    back = s.back_at if s is not None and s.back_at is not None else watching_since
    if s is not None and s.back_at is None:
        return False
    return now - back >= restore_after_s


def restore_target(inc: Incident, spare_partition: str) -> str:
    """Where a wrongly quarantined node goes back: the pool when a spare took its place, else its partition."""
    return spare_partition if inc.spares else inc.partition


def latest_incident_of(incidents: Sequence[Incident]) -> Dict[str, Incident]:
    out: Dict[str, Incident] = {}
    for inc in sorted(incidents, key=lambda i: i.id):
        for n in inc.nodes:
            out[n] = inc
    return out


def _hms(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%H:%M:%S")


__all__: List[str] = ["Seen", "Wave", "track", "wave", "held_back", "breaker_room", "restorable",
                      "restore_target", "latest_incident_of"]
