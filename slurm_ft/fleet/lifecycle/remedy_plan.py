"""The remediation policy: what the sweep does by itself to a quarantined node, as a pure function.

A quarantined node waits for a person unless its finding has a remedy slurm-ft can apply:
  reset_gpu  the validation job resets the GPU first (`gpu-reset`, on the node, inside the node's
             maintenance reservation: no job holds the GPU), then runs the usual levels;
  reboot     `scontrol reboot ASAP nextstate=DOWN`: Slurm's RebootProgram and ResumeTimeout do the
             waiting; a node back from its reboot is validated like a repaired one;
  retest     no repair: validate the node as it is (for a check known to fire on healthy nodes; the
             report counts such drains as probable false positives when the node passes);
  rma        straight to the RMA list;
  manual     nothing: a person repairs it and runs `slurm-ft node repaired` (the default for every
             code that is not an Xid with a reset/reboot/rma action in the catalog).
A node out for a planned swap (a soft signal: `slurm-ft: PLANNED ...`) has not failed: its default is
retest, and the sweep runs that retest whatever the mode (a validation repairs nothing; its result is the
soft signal's precision in `slurm-ft report`).
Attempts are bounded: a node that has had `max_attempts[action]` of that action within the window and
is quarantined again goes to the RMA list (after retests: to a person). Every new reboot asks the fleet-wide drain-rate breaker
(a reboot re-asserts that slurm-ft took the node out); a refused one waits for a later sweep.

The remediation budget (docs/remediation.md, "The budget") slows what the policy starts, whatever the
breaker says: per pool (a failure domain of planning.domains; the nodes in none are one pool) at most
max(budget_nodes, budget_share x the pool's nodes) repairs (reboots and GPU resets) started within
budget_window_s, and as many RMA listings, counted apart; fleet-wide at most max_concurrent nodes in
remediation at once (a reboot or reset until its validation ends). A burst beyond that is more likely
slurm-ft's bug, a driver or a bad probe than hardware: the rest waits, oldest quarantine first, each
with the time its pool's next slot frees.

`plan` reads one snapshot (lifecycle records and history, Slurm's nodes, the breaker's fleet view, the
recent history of every node for the budget) and returns one Remedy per node it concerns; `plan_and_budget`
returns the budget as well. fleet/lifecycle/remedy_act.py acts on them.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Collection, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.config import RemediationConfig
from slurm_ft.breaker import rules as brk
from slurm_ft.fleet.lifecycle.transitions import Event, HistoryEntry, State
from slurm_ft.gpu.xid import drained_action
from slurm_ft.slurm.types import Node
from slurm_ft.vocab import admins, finding_code, planned

DEFAULT_MAX = {"reset_gpu": 2, "reboot": 1, "retest": 3}
REBOOTING_FLAGS = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED", "NOT_RESPONDING", "POWERING_UP"})
REPAIRS = ("reboot", "reset_gpu")   # what the budget's repairs count (a retest changes nothing on the node)
NO_POOL = "(no domain)"             # the pool of the nodes in no planning.domains domain (not a domain name)


@dataclass(frozen=True)
class DrainCause:
    """The finding a node was taken out for, as its drain reason or its history names it."""
    code: str
    gpu: Optional[int]
    text: str                       # the cause it was read from, for the history

    def label(self) -> str:
        return self.code + (f" gpu{self.gpu}" if self.gpu is not None else "")


KEEP_OFF_WHY = "in keep_off: slurm-ft leaves it alone"


@dataclass(frozen=True)
class Remedy:
    """What to do with one node now."""
    node: str
    act: str                        # reset_gpu | reboot | retest | rma | manual | hold | wait | done | timeout
    why: str
    finding: Optional[DrainCause] = None
    attempt: int = 0                # the attempt this step starts (reset_gpu, reboot)
    max_attempts: int = 0
    pool: str = ""                  # the node's budget pool
    held_by: str = ""               # hold: breaker | concurrency | repair_budget | rma_budget
    until: Optional[float] = None   # hold by a pool's budget: when its next slot frees

    @property
    def acts(self) -> bool:
        """Changes the node (as opposed to manual/hold/wait: nothing to do this sweep)."""
        return self.act in ("reset_gpu", "reboot", "retest", "rma", "done", "timeout")

    def to_dict(self) -> Dict[str, Any]:
        return {"node": self.node, "action": self.act, "why": self.why,
                "finding": self.finding.label() if self.finding else None, "attempt": self.attempt or None,
                "max_attempts": self.max_attempts or None, "pool": self.pool or None,
                "held_by": self.held_by or None, "until": self.until}


def finding_in(text: str) -> Optional[DrainCause]:
    """The first finding code (and its GPU) in a drain reason or a history cause, or None."""
    found = finding_code(text)
    return DrainCause(found[0], found[1], text) if found else None


def action_for(code: str, policy: RemediationConfig, soft: bool = False) -> str:
    """The configured action for a code; an Xid's default is what its drain needs (`xid.drained_action`); a
    planned swap's (`soft`): retest."""
    if code in policy.actions:
        return policy.actions[code]
    if soft:
        return "retest"
    if code.startswith("XID"):
        action = drained_action(int(code[3:]))
        return action if action in ("reset_gpu", "reboot", "rma") else "manual"
    return "manual"


def since_release(history: Iterable[HistoryEntry]) -> List[HistoryEntry]:
    entries = sorted(history, key=lambda e: e.time)
    last = max((i for i, e in enumerate(entries) if e.event is Event.RELEASE), default=-1)
    return entries[last + 1:]


def attempts(history: Iterable[HistoryEntry], action: str, now: float, window_s: float) -> int:
    """`action` remediations started within the window, since the last release from the RMA list."""
    return sum(1 for e in since_release(history)
               if e.event is Event.REMEDIATE and e.cause.startswith(f"{action}:") and now - e.time <= window_s)


def last_finding(history: Sequence[HistoryEntry], reason: str) -> Optional[DrainCause]:
    """What the node was quarantined for: the latest fault or failed validation that names a code
    (a failed reboot names none: the finding of the remediation it ends), else the drain reason."""
    for e in reversed(sorted(history, key=lambda e: e.time)):
        if e.event in (Event.FAULT, Event.FAIL, Event.REMEDIATE):
            f = finding_in(e.cause.split(":", 1)[1] if e.event is Event.REMEDIATE else e.cause)
            if f is not None:
                return f
    return finding_in(reason)


def pool_of(domains: Mapping[str, Sequence[str]]) -> Dict[str, str]:
    """node -> its budget pool: its failure domain (planning.domains, already expanded and checked: a node
    is in one at most); nodes in none are the pool NO_POOL."""
    return {n: name for name, members in domains.items() for n in members}


def pool_limit(size: int, policy: RemediationConfig) -> Optional[int]:
    """Repairs (and, apart, RMA listings) a pool of `size` nodes may start per window: the larger of
    budget_nodes and floor(budget_share x size); None when both are 0 (no budget)."""
    if policy.budget_nodes <= 0 and policy.budget_share <= 0:
        return None
    return max(policy.budget_nodes, math.floor(policy.budget_share * size))


@dataclass
class PoolBudget:
    """One pool's budget over the window: what was started in it (this plan's included, at `now`)."""
    name: str
    size: int
    limit: Optional[int]                                                # None: no budget
    repairs: List[Tuple[float, str]] = field(default_factory=list)      # (started, node)
    rma: List[Tuple[float, str]] = field(default_factory=list)          # (listed, node)

    def full(self, kind: str) -> bool:
        return self.limit is not None and len(self._of(kind)) >= self.limit

    def next_slot(self, kind: str, window_s: float) -> Optional[float]:
        """When the window has room for one more of `kind` again (None: it has room now)."""
        if not self.full(kind) or self.limit is None:
            return None
        times = sorted(t for t, _ in self._of(kind))
        return times[len(times) - self.limit] + window_s

    def _of(self, kind: str) -> List[Tuple[float, str]]:
        return self.repairs if kind == "repair" else self.rma


@dataclass
class Budget:
    """The remediation budget as one plan saw and spent it (`remediate --dry-run`, `report`)."""
    now: float
    window_s: float
    max_concurrent: int                                  # 0: no cap
    floor: int = 0                                       # budget_nodes
    share: float = 0.0                                   # budget_share
    in_remediation: List[str] = field(default_factory=list)   # nodes in remediation, this plan's starts included
    pools: Dict[str, PoolBudget] = field(default_factory=dict)
    waiting: List[Remedy] = field(default_factory=list)    # held by the budget (not the breaker)

    def pool(self, name: str) -> PoolBudget:
        if name not in self.pools:
            self.pools[name] = PoolBudget(name, 0, None)
        return self.pools[name]

    def refusal(self, node: str, pool: str, kind: str) -> Optional[Tuple[str, str, Optional[float]]]:
        """(held_by, why, until) when `node` may not start a repair (kind "repair") or be listed for RMA
        ("rma") now; None when it may."""
        p = self.pool(pool)
        if kind == "repair" and self.max_concurrent and len(self.in_remediation) >= self.max_concurrent:
            shown = ", ".join(self.in_remediation[:5]) + (" ..." if len(self.in_remediation) > 5 else "")
            return ("concurrency", f"{len(self.in_remediation)} of at most {self.max_concurrent} nodes in remediation "
                                   f"at once (lifecycle.remediation.max_concurrent): waits until one is validated "
                                   f"({shown})", None)
        if p.full(kind):
            until = p.next_slot(kind, self.window_s)
            what = "repairs started" if kind == "repair" else "RMA listings"
            return (f"{kind}_budget", f"{len(p._of(kind))} {what} in pool {p.name} within {_span(self.window_s)} "
                                      f"(at most {p.limit} = max({self.floor}, {self.share:g} x {p.size} nodes)); "
                                      f"next slot at {stamp(until)}", until)
        return None

    def take(self, node: str, pool: str, kind: str) -> None:
        (self.pool(pool).repairs if kind == "repair" else self.pool(pool).rma).append((self.now, node))
        if kind == "repair":
            self.in_remediation.append(node)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "time": self.now, "window_s": self.window_s, "max_concurrent": self.max_concurrent or None,
            "in_remediation": list(self.in_remediation),
            "pools": {name: {"nodes": p.size, "limit": p.limit, "repairs_in_window": len(p.repairs),
                             "rma_in_window": len(p.rma),
                             "next_repair_slot": p.next_slot("repair", self.window_s),
                             "next_rma_slot": p.next_slot("rma", self.window_s)}
                      for name, p in sorted(self.pools.items())},
            "waiting": [{"node": s.node, "action": s.act, "held_by": s.held_by, "until": s.until,
                         "pool": s.pool, "why": s.why} for s in self.waiting],
        }


def budget_lines(doc: Mapping[str, Any]) -> List[str]:
    """Budget.to_dict() as lines for people (also read back from the journal by `slurm-ft report`)."""
    window = _span(float(doc.get("window_s") or 3600.0))
    cap = doc.get("max_concurrent")
    busy = doc.get("in_remediation") or []
    out = [f"in remediation: {len(busy)}" + (f" of at most {cap}" if cap else " (no cap)")
           + (f" ({', '.join(busy)})" if busy else "")]
    for name, p in (doc.get("pools") or {}).items():
        of = "" if p.get("limit") is None else f" of {p['limit']}"
        line = f"pool {name} ({p.get('nodes')} nodes): {p.get('repairs_in_window')}{of} repairs started within {window}"
        if p.get("next_repair_slot"):
            line += f" (next slot {stamp(p['next_repair_slot'])})"
        line += f"; {p.get('rma_in_window')}{of} RMA listings"
        if p.get("next_rma_slot"):
            line += f" (next slot {stamp(p['next_rma_slot'])})"
        out.append(line + ("" if of else " (no budget)"))
    for w in doc.get("waiting") or []:
        until = f" until {stamp(w['until'])}" if w.get("until") else ""
        out.append(f"waiting: {w.get('node')} ({w.get('action')}, {w.get('held_by')}{until})")
    return out


def in_remediation(state: State, history: Iterable[HistoryEntry]) -> bool:
    """The node is being repaired by slurm-ft: rebooting, or reset/rebooted and not yet through the
    validation that follows (a retest is no repair)."""
    if state is State.REMEDIATING:
        return True
    if state not in (State.REPAIRED, State.VALIDATING):
        return False
    entries = sorted(history, key=lambda e: e.time)
    last = max((i for i, e in enumerate(entries) if e.event is Event.REMEDIATE), default=-1)
    if last < 0 or not entries[last].cause.startswith(tuple(f"{a}:" for a in REPAIRS)):
        return False
    return all(e.event in (Event.REMEDIATED, Event.VALIDATE) for e in entries[last + 1:])


def budget_of(records: Mapping[str, State], histories: Mapping[str, Sequence[HistoryEntry]],
              recent: Iterable[HistoryEntry], nodes: Sequence[Node], pools: Mapping[str, str], now: float,
              policy: RemediationConfig) -> Budget:
    """The budget before this plan spends any: per pool, the repairs started and RMA listings within the
    window (from `recent`, every node's history since now - window), and the nodes in remediation."""
    b = Budget(now, policy.budget_window_s, policy.max_concurrent, policy.budget_nodes, policy.budget_share)
    for n in nodes:
        b.pool(pools.get(n.name, NO_POOL)).size += 1
    for p in b.pools.values():
        p.limit = pool_limit(p.size, policy)
    for e in recent:
        if now - e.time >= policy.budget_window_s:   # (one from a clock set back still counts)
            continue
        pool = b.pool(pools.get(e.node, NO_POOL))
        if e.event is Event.REMEDIATE and e.cause.startswith(tuple(f"{a}:" for a in REPAIRS)):
            pool.repairs.append((e.time, e.node))
        elif e.to_state is State.RMA and e.from_state is not State.RMA:   # the policy's or the lemon rule's
            pool.rma.append((e.time, e.node))
    b.in_remediation = sorted(n for n, s in records.items() if in_remediation(s, histories.get(n, ())))
    return b


def plan(records: Mapping[str, State], since: Mapping[str, float], histories: Mapping[str, Sequence[HistoryEntry]],
         nodes: Sequence[Node], fleet: Optional[brk.FleetView], now: float, policy: RemediationConfig, *,
         breaker_share: float = 0.0, breaker_nodes: int = 0, breaker_window_s: float = 3600.0,
         pools: Optional[Mapping[str, str]] = None, recent: Iterable[HistoryEntry] = (),
         keep_off: Collection[str] = (), breaker_hold: str = "") -> List[Remedy]:
    """One step per quarantined or remediating node, in name order (see plan_and_budget)."""
    return plan_and_budget(records, since, histories, nodes, fleet, now, policy, breaker_share=breaker_share,
                           breaker_nodes=breaker_nodes, breaker_window_s=breaker_window_s, pools=pools,
                           recent=recent, keep_off=keep_off, breaker_hold=breaker_hold)[0]


def plan_and_budget(records: Mapping[str, State], since: Mapping[str, float],
                    histories: Mapping[str, Sequence[HistoryEntry]], nodes: Sequence[Node],
                    fleet: Optional[brk.FleetView], now: float, policy: RemediationConfig, *,
                    breaker_share: float = 0.0, breaker_nodes: int = 0, breaker_window_s: float = 3600.0,
                    pools: Optional[Mapping[str, str]] = None, recent: Iterable[HistoryEntry] = (),
                    keep_off: Collection[str] = (), breaker_hold: str = "") -> Tuple[List[Remedy], Budget]:
    """One step per quarantined or remediating node, in name order, and the budget as this plan spent it.
    `fleet`: the breaker's view of the same snapshot (None with the breaker off); `histories`: the history
    of each node concerned (quarantined, remediating, or repaired/validating after a repair); `recent`:
    every node's history within the budget's window; `pools`: node -> its pool (pool_of); `keep_off`: the
    config's nodes slurm-ft never touches (a `manual` step saying so: nothing acts on them); `breaker_hold`:
    an admin's hold in force (breaker/hold.py: "open" holds every reboot, "closed" lifts the breaker)."""
    by_name = {n.name: n for n in nodes}
    pools = pools or {}
    budget = budget_of(records, histories, recent, nodes, pools, now, policy)
    window_s = policy.window_days * 86400.0
    steps: Dict[str, Remedy] = {}
    taking: List[str] = []          # reboots this plan starts: each counts against the breaker
    # the oldest quarantine first: the budget is spent in the order the nodes came
    for name in sorted(records, key=lambda n: (since.get(n, now), n)):
        state, node = records[name], by_name.get(name)
        if node is None or state not in (State.QUARANTINED, State.REMEDIATING):
            continue
        history = histories.get(name, ())
        pool = pools.get(name, NO_POOL)
        if name in keep_off:
            steps[name] = Remedy(name, "manual", KEEP_OFF_WHY, pool=pool)
            continue
        if state is State.REMEDIATING:
            steps[name] = _progress(name, node, now - since.get(name, now), policy)
            continue
        if admins(node.reason) and (node.drained or node.down):
            steps[name] = Remedy(name, "manual", f"an admin's reason on it ({node.reason[:60]}): theirs", pool=pool)
            continue
        finding = last_finding(history, node.reason)
        if finding is None:
            steps[name] = Remedy(name, "manual", "no finding code in its history: a person decides", pool=pool)
            continue
        action = action_for(finding.code, policy, planned(finding.text))
        if action == "retest" and planned(finding.text) and node.state in ("ALLOCATED", "MIXED"):
            steps[name] = Remedy(name, "wait", f"{finding.label()}: out for a planned swap, its job still runs there",
                               pool=pool)
            continue
        if action == "reset_gpu" and finding.gpu is None:
            action = "reboot"       # a reset needs the GPU's index; a reboot resets them all
        if action == "manual":
            steps[name] = Remedy(name, action, f"{finding.label()}: a person repairs it", finding, pool=pool)
            continue
        done = cap = 0
        why = f"{finding.label()}: the policy sends it to the RMA list"
        if action != "rma":
            cap = policy.max_attempts.get(action, DEFAULT_MAX[action])
            done = attempts(history, action, now, window_s)
            if done >= cap and action == "retest":
                steps[name] = Remedy(name, "manual", f"{finding.label()} again after {done} retests within "
                                                   f"{policy.window_days:g} days: a person looks", finding, done, cap,
                                   pool=pool)
                continue
            if done >= cap:
                action, why = "rma", (f"{finding.label()} again after {done} {action} within "
                                      f"{policy.window_days:g} days (at most {cap})")
        if action == "rma":
            steps[name] = _within(budget, Remedy(name, "rma", why, finding, done, cap, pool=pool), "rma")
            continue
        step = Remedy(name, action, f"{finding.label()}: {action} (attempt {done + 1} of {cap})", finding, done + 1,
                    cap, pool=pool)
        if action in REPAIRS:
            held = budget.refusal(name, pool, "repair")
            if held is not None:
                steps[name] = _held(budget, step, held)
                continue
        if action == "reboot" and breaker_hold == "open":
            steps[name] = Remedy(name, "hold", f"{finding.label()}: reboot held: the drain-rate breaker is held open",
                                 finding, done + 1, cap, pool=pool, held_by="breaker")
            continue
        if action == "reboot" and fleet is not None and breaker_hold != "closed":
            d = brk.may_take_out(fleet, taking + [name], now, max_share=breaker_share, max_nodes=breaker_nodes,
                                 window_s=breaker_window_s)
            if not d.allowed:
                steps[name] = Remedy(name, "hold", f"{finding.label()}: reboot held: {d.reason}", finding, done + 1,
                                   cap, pool=pool, held_by="breaker")
                continue
            taking.append(name)
        if action in REPAIRS:
            budget.take(name, pool, "repair")
        steps[name] = step
    budget.waiting.sort(key=lambda s: s.node)
    return [steps[n] for n in sorted(steps)], budget


def _within(budget: Budget, step: Remedy, kind: str) -> Remedy:
    """`step` if the budget has room for it (and spend it), else a hold saying until when."""
    held = budget.refusal(step.node, step.pool, kind)
    if held is not None:
        return _held(budget, step, held)
    budget.take(step.node, step.pool, kind)
    return step


def _held(budget: Budget, step: Remedy, held: Tuple[str, str, Optional[float]]) -> Remedy:
    by, why, until = held
    what = "RMA listing" if step.act == "rma" else step.act
    label = step.finding.label() if step.finding else step.node
    out = Remedy(step.node, "hold", f"{label}: {what} waits for the remediation budget: {why}", step.finding,
               step.attempt, step.max_attempts, pool=step.pool, held_by=by, until=until)
    budget.waiting.append(Remedy(out.node, step.act, out.why, out.finding, out.attempt, out.max_attempts,
                               pool=out.pool, held_by=by, until=until))
    return out


def _span(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 and seconds % 3600 == 0 else f"{seconds:g} s"


def stamp(t: Optional[float]) -> str:
    """Local time, to the second ('-' for None)."""
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _progress(name: str, node: Node, elapsed: float, policy: RemediationConfig) -> Remedy:
    """A node slurm-ft is rebooting: still rebooting, back (validate it), or not back in time."""
    if "reboot timed out" in node.reason.lower():
        return Remedy(name, "timeout", f"Slurm: {node.reason}")
    rebooting = bool(REBOOTING_FLAGS & set(node.flags)) or node.state in ("UNKNOWN", "FUTURE")
    if rebooting:
        if elapsed > policy.reboot_timeout_s:
            return Remedy(name, "timeout", f"not back from its reboot after {elapsed:.0f} s "
                                         f"(lifecycle.remediation.reboot_timeout_s {policy.reboot_timeout_s:g})")
        return Remedy(name, "wait", f"rebooting for {elapsed:.0f} s ({'+'.join(sorted(node.flags)) or node.state})")
    return Remedy(name, "done", f"back from its reboot after {elapsed:.0f} s")


def describe(step: Remedy) -> str:
    """One line for `remediate --dry-run` and the sweep's dry-run report."""
    verb = {"reset_gpu": "reset the GPU, then validate", "retest": "validate it as it is", "reboot": "reboot (scontrol reboot ASAP nextstate=DOWN)",
            "rma": "put on the RMA list", "manual": "leave for a person", "hold": "hold",
            "wait": "wait", "done": "validate (reboot finished)", "timeout": "quarantine again (reboot failed)"}
    return f"{step.node}: {verb[step.act]}: {step.why}"


def reset_gpus(step: Remedy) -> Tuple[int, ...]:
    return (step.finding.gpu,) if step.finding and step.finding.gpu is not None else ()
