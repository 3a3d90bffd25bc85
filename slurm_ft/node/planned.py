"""A soft signal on this node: take it out gracefully and tell its jobs (a planned swap), within a budget.

`act` is the one way a soft finding (node/soft.py) touches Slurm. It never kills a job: State=DRAIN with
`slurm-ft: PLANNED CODE gpuN <figure>` (vocab.planned) keeps new jobs away while the running ones go on;
each running job is told `degraded` (`scontrol notify`, node/tell.py): a hot-spare job moves off this node
at its next checkpoint, any other at its next restart (the controller swaps a spare in then). The
controller is woken as for a fault. The node then goes to validation (quarantine -> validate -> pool).

Two limits, both counted from Slurm's own node reasons (the count every node shares, no state to reset):
the drain-rate breaker (a planned drain takes a node out like any other: guard.may_take_out) and the
planned swaps' own budget, `lifecycle.planned_swaps_per_hour` nodes drained PLANNED within the last hour
(`budget`: the breaker's arithmetic over planned drains alone). Racing nodes that each saw room are
settled after the drain, ties against (breaker.keeps), as the breaker does. Unknown counts say no.

Slurm reads, only when a soft finding is new on a node not drained already (rare; never on a healthy
node): this node (`sinfo -n NODE`, a single-node read), the whole fleet twice (`scontrol show node -o`,
before and after the drain) and the drain itself. A refused or failed try is retried at most every
RETRY_S (the node state file remembers the last one), so a degraded node held back by the budget costs
slurmctld one fleet read per RETRY_S, not one per pass.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Sequence

from slurm_ft.errors import SlurmFTError
from slurm_ft.finding import Finding
from slurm_ft.breaker import guard, rules as brk
from slurm_ft.node import soft, state as st, tell
from slurm_ft.vocab import planned, planned_reason, slurm_time

if TYPE_CHECKING:
    from slurm_ft.config import Config
    from slurm_ft.slurm.api import SlurmApi
    from slurm_ft.slurm.types import Node

log = logging.getLogger(__name__)

WINDOW_S = 3600.0          # the budget is per hour
RETRY_S = 600.0            # a refused or failed planned drain is tried again after this long at the soonest


@dataclass(frozen=True)
class Outcome:
    action: str                     # drained | already | left | refused | waiting | error | none
    message: str
    reason: str = ""
    told: List[int] = field(default_factory=list)

    def to_dict(self) -> Dict[str, object]:
        return {"action": self.action, "message": self.message, "reason": self.reason, "told": self.told}


def reason_for(findings: Sequence[Finding], planned_codes: Sequence[str] = ()) -> str:
    """The drain reason naming the first soft finding (soft.first) and how many more there are."""
    top = soft.first(findings, planned_codes)
    if top is None:
        return ""
    more = len(findings) - 1
    return planned_reason(top.code, top.gpu, top.reason + (f" (+{more} more)" if more else ""))


def view(nodes: Sequence[Node], now: float) -> brk.FleetView:
    """The budget's view of a snapshot: the nodes out with a planned reason, and since when."""
    out = []
    for n in nodes:
        if (n.drained or n.down) and planned(n.reason):
            t = slurm_time(n.reason_time)
            out.append((n.name, t if t is not None else now))
    return brk.FleetView(len(nodes), tuple(sorted(out)), now)


def budget(nodes: Sequence[Node], node: str, now: float, per_hour: int) -> brk.Decision:
    """May `node` be drained for a planned swap now: fewer than `per_hour` planned drains within the hour?"""
    if per_hour <= 0:
        return brk.Decision(False, "planned swaps are off (lifecycle.planned_swaps_per_hour 0)", 0, 0)
    d = brk.may_take_out(view(nodes, now), [node], now, max_share=0.0, max_nodes=per_hour, window_s=WINDOW_S)
    if d.allowed:
        return d
    return brk.Decision(False, f"planned-swap budget used up: {d.count} planned drain(s) within the hour "
                               f"(lifecycle.planned_swaps_per_hour {per_hour}); not draining {node}", d.count, d.limit)


def act(client: SlurmApi, config: Config, node: str, findings: Sequence[Finding], now: float,
        planned_codes: Sequence[str] = ()) -> Outcome:
    """Drain `node` gracefully for `findings` (warn, soft) and tell its jobs, if the budget and the breaker
    let it; never raises for Slurm's trouble (logged, retried after RETRY_S)."""
    if not findings:
        return Outcome("none", "no soft finding")
    reason = reason_for(findings, planned_codes)
    if config.keeps_off(node):
        log.warning("keep_off: %s: no planned drain (would be: %s)", node, reason)
        return Outcome("left", f"{node} is in keep_off: slurm-ft leaves it alone (would be: {reason})", reason)
    path = st.path_for(config.health, node)
    try:
        with st.locked(path, node) as state:
            tried = float(state.get("planned_tried") or 0.0)
            if now - tried < RETRY_S:
                return Outcome("waiting", f"{node}: last planned-drain try {now - tried:.0f} s ago; next after "
                                          f"{RETRY_S:g} s", reason)
            state["planned_tried"] = now
            running = st.running_jobs(state)
    except (OSError, SlurmFTError) as exc:
        log.warning("%s: state file %s: %s; no planned drain without it (a try per pass is too many)", node, path, exc)
        return Outcome("error", f"state file {path}: {exc}", reason)
    try:
        with st.drain_lock(path):   # one drain decision at a time per node: a fault's drain must not be overwritten
            return _drain(client, config, node, reason, running, now)
    except SlurmFTError as exc:
        log.error("%s: planned drain not done (%s): %s", node, reason, exc)
        return Outcome("error", str(exc), reason)


def _drain(client: SlurmApi, config: Config, node: str, reason: str, running: List[int], now: float) -> Outcome:
    current = client.node(node)
    if current.drained:
        if planned(current.reason):
            return Outcome("already", f"{node} already drained for a planned swap: {current.reason}", current.reason)
        return Outcome("left", f"{node} is drained already ({current.reason!r}); left as is (would be: {reason})",
                       reason)
    per_hour = config.lifecycle.planned_swaps_per_hour
    with guard.serialized(config):
        snapshot = client.fleet_nodes()
        d = budget(snapshot, node, now, per_hour)
        if d.allowed:
            d = guard.may_take_out(config, [node], client=client, snapshot=snapshot, actor="planned swap", now=now)
        if not d.allowed:
            log.warning("%s: soft signal (%s): %s", node, reason, d.reason)
            return Outcome("refused", d.reason, reason)
        client.drain([node], reason)
        undone = guard.settle(config, node, reason, client=client, actor="planned swap") or _settle(
            client, node, reason, per_hour)
    if undone:
        return Outcome("refused", undone, reason)
    told = tell.after_drain(client, config, node, reason, running, kind="degraded")
    log.warning("%s drained for a planned swap: %s; told job(s) %s", node, reason, ",".join(map(str, told)) or "none")
    return Outcome("drained", f"drained {node} for a planned swap: {reason}", reason, told)


def _settle(client: SlurmApi, node: str, reason: str, per_hour: int) -> str:
    """Right after the drain: undo it when planned drains racing on other nodes passed the budget."""
    now = time.time()
    try:
        fleet = view(client.fleet_nodes(), now)
        if brk.keeps(fleet, node, now, max_share=0.0, max_nodes=per_hour, window_s=WINDOW_S):
            return ""
        why = f"planned-swap budget: drains racing on other nodes passed {per_hour} within the hour; {node} resumed"
    except SlurmFTError as exc:
        why = f"planned-swap count unknown after draining {node} ({exc}); drain undone"
    try:
        if client.node(node).reason == reason:
            client.resume([node])
    except SlurmFTError as exc:
        return f"{why} (resume failed: {exc})"
    log.error("%s", why)
    return why

