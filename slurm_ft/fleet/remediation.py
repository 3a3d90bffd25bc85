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

`plan` reads one snapshot (lifecycle records and history, Slurm's nodes, the breaker's fleet view)
and returns one Step per node it concerns; fleet/sweep.py acts on them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.config import RemediationConfig
from slurm_ft.node import breaker as brk
from slurm_ft.fleet.states import Event, HistoryEntry, State
from slurm_ft.gpu.xid import lookup
from slurm_ft.slurm.types import Node
from slurm_ft.vocab import planned

# finding codes as node/drain.py writes them: XID79, SXID12028, GPU_LOST, NVLINK_DOWN, ECC_DBE_VOLATILE ...
_CODE = re.compile(r"\b(S?XID\d+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b(?:\s+gpu(\d+))?")
DEFAULT_MAX = {"reset_gpu": 2, "reboot": 1, "retest": 3}
REBOOTING_FLAGS = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED", "NOT_RESPONDING", "POWERING_UP"})


@dataclass(frozen=True)
class Finding:
    code: str
    gpu: Optional[int]
    text: str                       # the cause it was read from, for the history

    def label(self) -> str:
        return self.code + (f" gpu{self.gpu}" if self.gpu is not None else "")


@dataclass(frozen=True)
class Step:
    """What to do with one node now."""
    node: str
    act: str                        # reset_gpu | reboot | retest | rma | manual | hold | wait | done | timeout
    why: str
    finding: Optional[Finding] = None
    attempt: int = 0                # the attempt this step starts (reset_gpu, reboot)
    max_attempts: int = 0

    @property
    def acts(self) -> bool:
        """Changes the node (as opposed to manual/hold/wait: nothing to do this sweep)."""
        return self.act in ("reset_gpu", "reboot", "retest", "rma", "done", "timeout")

    def to_dict(self) -> Dict[str, Any]:
        return {"node": self.node, "action": self.act, "why": self.why,
                "finding": self.finding.label() if self.finding else None, "attempt": self.attempt or None,
                "max_attempts": self.max_attempts or None}


def finding_in(text: str) -> Optional[Finding]:
    """The first finding code (and its GPU) in a drain reason or a history cause, or None."""
    m = _CODE.search(text or "")
    if not m:
        return None
    return Finding(m.group(1), int(m.group(2)) if m.group(2) else None, text)


def action_for(code: str, policy: RemediationConfig, soft: bool = False) -> str:
    """The configured action for a code; an Xid's default is the catalog's action column; a planned swap's
    (`soft`): retest."""
    if code in policy.actions:
        return policy.actions[code]
    if soft:
        return "retest"
    if code.startswith("XID"):
        action = lookup(int(code[3:])).action
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


def last_finding(history: Sequence[HistoryEntry], reason: str) -> Optional[Finding]:
    """What the node was quarantined for: the latest fault or failed validation that names a code
    (a failed reboot names none: the finding of the remediation it ends), else the drain reason."""
    for e in reversed(sorted(history, key=lambda e: e.time)):
        if e.event in (Event.FAULT, Event.FAIL, Event.REMEDIATE):
            f = finding_in(e.cause.split(":", 1)[1] if e.event is Event.REMEDIATE else e.cause)
            if f is not None:
                return f
    return finding_in(reason)


def plan(records: Mapping[str, State], since: Mapping[str, float], histories: Mapping[str, Sequence[HistoryEntry]],
         nodes: Sequence[Node], fleet: Optional[brk.FleetView], now: float, policy: RemediationConfig, *,
         breaker_share: float = 0.0, breaker_nodes: int = 0, breaker_window_s: float = 3600.0) -> List[Step]:
    """One step per quarantined or remediating node, in name order. `fleet`: the breaker's view of the
    same snapshot (None with the breaker off)."""
    by_name = {n.name: n for n in nodes}
    window_s = policy.window_days * 86400.0
    steps: List[Step] = []
    taking: List[str] = []          # reboots this plan starts: each counts against the breaker
    for name in sorted(records):
        state, node = records[name], by_name.get(name)
        if node is None or state not in (State.QUARANTINED, State.REMEDIATING):
            continue
        history = histories.get(name, ())
        if state is State.REMEDIATING:
            steps.append(_progress(name, node, now - since.get(name, now), policy))
            continue
        finding = last_finding(history, node.reason)
        if finding is None:
            steps.append(Step(name, "manual", "no finding code in its history: a person decides"))
            continue
        action = action_for(finding.code, policy, planned(finding.text))
        if action == "retest" and planned(finding.text) and node.state in ("ALLOCATED", "MIXED"):
            steps.append(Step(name, "wait", f"{finding.label()}: out for a planned swap, its job still runs there"))
            continue
        if action == "reset_gpu" and finding.gpu is None:
            action = "reboot"       # a reset needs the GPU's index; a reboot resets them all
        if action in ("manual", "rma"):
            why = (f"{finding.label()}: a person repairs it" if action == "manual"
                   else f"{finding.label()}: the policy sends it to the RMA list")
            steps.append(Step(name, action, why, finding))
            continue
        cap = policy.max_attempts.get(action, DEFAULT_MAX[action])
        done = attempts(history, action, now, window_s)
        if done >= cap and action == "retest":
            steps.append(Step(name, "manual", f"{finding.label()} again after {done} retests within "
                                              f"{policy.window_days:g} days: a person looks", finding, done, cap))
            continue
        if done >= cap:
            steps.append(Step(name, "rma", f"{finding.label()} again after {done} {action} within "
                                           f"{policy.window_days:g} days (at most {cap})", finding, done, cap))
            continue
        if action == "reboot" and fleet is not None:
            d = brk.may_take_out(fleet, taking + [name], now, max_share=breaker_share, max_nodes=breaker_nodes,
                                 window_s=breaker_window_s)
            if not d.allowed:
                steps.append(Step(name, "hold", f"{finding.label()}: reboot held: {d.reason}", finding, done + 1, cap))
                continue
            taking.append(name)
        steps.append(Step(name, action, f"{finding.label()}: {action} (attempt {done + 1} of {cap})",
                          finding, done + 1, cap))
    return steps


def _progress(name: str, node: Node, elapsed: float, policy: RemediationConfig) -> Step:
    """A node slurm-ft is rebooting: still rebooting, back (validate it), or not back in time."""
    if "reboot timed out" in node.reason.lower():
        return Step(name, "timeout", f"Slurm: {node.reason}")
    rebooting = bool(REBOOTING_FLAGS & set(node.flags)) or node.state in ("UNKNOWN", "FUTURE")
    if rebooting:
        if elapsed > policy.reboot_timeout_s:
            return Step(name, "timeout", f"not back from its reboot after {elapsed:.0f} s "
                                         f"(lifecycle.remediation.reboot_timeout_s {policy.reboot_timeout_s:g})")
        return Step(name, "wait", f"rebooting for {elapsed:.0f} s ({'+'.join(sorted(node.flags)) or node.state})")
    return Step(name, "done", f"back from its reboot after {elapsed:.0f} s")


def describe(step: Step) -> str:
    """One line for `remediate --dry-run` and the sweep's dry-run report."""
    verb = {"reset_gpu": "reset the GPU, then validate", "retest": "validate it as it is", "reboot": "reboot (scontrol reboot ASAP nextstate=DOWN)",
            "rma": "put on the RMA list", "manual": "leave for a person", "hold": "hold",
            "wait": "wait", "done": "validate (reboot finished)", "timeout": "quarantine again (reboot failed)"}
    return f"{step.node}: {verb[step.act]}: {step.why}"


def reset_gpus(step: Step) -> Tuple[int, ...]:
    return (step.finding.gpu,) if step.finding and step.finding.gpu is not None else ()
