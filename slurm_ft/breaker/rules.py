"""The drain-rate breaker, as a pure decision: may slurm-ft take N more nodes out of service now?

A bad probe or a driver update must not drain the fleet. slurm-ft takes at most `limit` nodes out
within a sliding window (the smaller of a share of all nodes and a count). The count comes from Slurm's
own node states and reasons, the one source every node, the sweep and the controller share: a node
drained with a `slurm-ft:` reason (any code: QUARANTINED and RMA rewrites included) or by Slurm for a
failed prolog/epilog (our hooks caused it), whose reason time (Slurm's ReasonTime; a rewrite only makes
it later, so a node counts longer, never less) lies within the window. While that count is at the
limit the breaker is open everywhere at once; it closes as nodes are resumed or their drains age out
of the window. `may_take_out` is the function; `FleetView` the snapshot it reads.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Collection, Dict, FrozenSet, Iterable, Optional, Tuple

from slurm_ft.vocab import HOOK_FAULT_REASONS, owned, slurm_time

if TYPE_CHECKING:
    from slurm_ft.slurm.types import Node


@dataclass(frozen=True)
class BreakerState:
    """The breaker as `slurm-ft status` shows it (computed from a snapshot, see lifecycle.collect)."""
    open_since: Optional[float] = None           # ReasonTime of the drain that reached the limit
    open_reason: str = ""

    @property
    def open(self) -> bool:
        return self.open_since is not None


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str                  # one line for a log, a check's output or `slurm-ft status`
    count: int                   # nodes drained within the window (before this one)
    limit: int
    tripped: bool = False        # this call opened the breaker
    counted: bool = False        # this call added a drain to the window (the caller must record it)

    def to_dict(self) -> Dict[str, object]:
        return {"allowed": self.allowed, "reason": self.reason, "count": self.count,
                "limit": self.limit, "tripped": self.tripped}


def limit(total_nodes: int, max_share: float, max_nodes: int) -> int:
    """Nodes slurm-ft may drain per window: floor(share x fleet) and the count, whichever is smaller.

    At least 1 while any limit is set, so that a small lab or cluster can still drain one node.
    Both 0 means no breaker (unlimited).
    """
    caps = []
    if max_share > 0:
        caps.append(max(1, math.floor(max_share * max(total_nodes, 0))))
    if max_nodes > 0:
        caps.append(max_nodes)
    return min(caps) if caps else 1 << 30


def _span(seconds: float) -> str:
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:g} d"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


# --- the fleet-wide breaker over a Slurm snapshot ---------------------------------------------------

@dataclass(frozen=True)
class FleetView:
    """What the breaker needs from one Slurm snapshot: fleet size and the nodes we took out, with when."""
    total: int
    out: Tuple[Tuple[str, float], ...]      # (node, unix time of its drain reason)
    taken_at: float


def taken_out_by_us(node: Node) -> bool:
    """Drained (or down) with a slurm-ft reason, or by Slurm for a failed prolog/epilog."""
    reason = (node.reason or "").strip()
    if not (node.drained or node.down) or not reason:
        return False
    return owned(reason) or reason in HOOK_FAULT_REASONS


def view(nodes: Collection[Node], now: float) -> FleetView:
    """The breaker's snapshot of `nodes` (slurm.types.Node). A reason without a readable time counts as now."""
    out = []
    for n in nodes:
        if taken_out_by_us(n):
            t = slurm_time(n.reason_time)
            out.append((n.name, t if t is not None else now))
    return FleetView(len(nodes), tuple(sorted(out)), now)


def may_take_out(fleet: FleetView, nodes: Iterable[str], now: float, *, max_share: float, max_nodes: int,
                 window_s: float) -> Decision:
    """May slurm-ft take `nodes` out of service now, given the fleet as `fleet` shows it?

    Nodes already out count once and cost nothing more. Yes iff the distinct nodes out within the
    window plus the new ones stay within `limit`. Pure: the same snapshot gives the same answer on
    every host."""
    cap = limit(fleet.total, max_share, max_nodes)
    recent = sorted({n for n, t in fleet.out if now - t <= window_s})
    want = list(dict.fromkeys(nodes))
    new = [n for n in want if n not in set(recent)]
    count = len(recent)
    what = ", ".join(want) or "no node"
    if not new:
        return Decision(True, f"{what} already out ({count}/{cap} within {_span(window_s)})", count, cap)
    if count + len(new) > cap:
        head = "drain-rate breaker open" if count >= cap else "drain-rate breaker would trip"
        return Decision(False, f"{head}: {count} nodes taken out by slurm-ft within {_span(window_s)} "
                               f"(limit {cap}); not taking out {', '.join(new)}", count, cap, tripped=count < cap)
    return Decision(True, f"take out {count + len(new)}/{cap} within {_span(window_s)}", count, cap, counted=True)


def keeps(fleet: FleetView, node: str, now: float, *, max_share: float, max_nodes: int, window_s: float) -> bool:
    """After taking `node` out: may it stay out, given a snapshot read after the drain?

    Checks on different hosts can each see room for one more and drain together. Each re-reads Slurm
    after its drain; a node stays out only if fewer than `limit` other nodes in the window went out at
    the same second or earlier. Ties count against it: racers in one second (ReasonTime has whole
    seconds) all step back rather than all stay: under a race the fleet may drain fewer, never more."""
    recent = {n: t for n, t in fleet.out if now - t <= window_s}
    mine = recent.get(node)
    cap = limit(fleet.total, max_share, max_nodes)
    if mine is None or len(recent) <= cap:
        return True
    return len([n for n, t in recent.items() if n != node and t <= mine]) < cap


def past_limit(fleet: FleetView, now: float, *, cap: int, window_s: float) -> FrozenSet[str]:
    """The nodes out within the window that went out beyond `cap`: `cap` or more others went out at the
    same second or earlier (`keeps`' rule, ties against). Empty while the count is within `cap`. A fault
    drained within the budget is recovered by the controller; one of these waits (fleet/recovery/outage.py)."""
    recent = {n: t for n, t in fleet.out if now - t <= window_s}
    if len(recent) <= cap:
        return frozenset()
    times = sorted(recent.values())
    return frozenset(n for n, t in recent.items() if bisect.bisect_right(times, t) - 1 >= cap)


def is_open(fleet: FleetView, now: float, *, max_share: float, max_nodes: int, window_s: float) -> bool:
    """At the limit: every further take-out is refused (the controller holds new recoveries too)."""
    if max_share <= 0 and max_nodes <= 0:
        return False
    cap = limit(fleet.total, max_share, max_nodes)
    return len({n for n, t in fleet.out if now - t <= window_s}) >= cap
