"""Drain and resume a node for its health findings, through the Slurm client; never touch others' drains.

* The reason is `slurm-ft: <code> gpu<N> <short cause>` (plus "(+K more)"), ASCII, at most
  REASON_MAX characters, so that `sinfo -R` shows the fault at a glance and scripts can match the code.
* A node drained (or set DOWN) by somebody else (an admin, another tool) keeps its reason. A node that
  Slurm drained for a failed prolog/epilog ("Prolog error") gets our exact reason: that drain was ours.
* A healthy run resumes a node only if its reason starts with `slurm-ft:`, the run's level covers the
  check that found the drained fault, and no active finding from another level remains (state file).
* A node in the config's `keep_off` is never drained, resumed or re-reasoned: `decide` says what it would
  have done, as "left", and the check's output line says why.
* `may_drain` is the one gate every new drain passes: the fleet drain-rate breaker lives behind it.
* `decide` is the whole judgement, pure over the node as Slurm shows it; `apply` only writes what it says.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, ContextManager, Dict, Iterable, List, Optional, Sequence

from slurm_ft.finding import Action, Finding, Severity
from slurm_ft.node.probes import check_of
from slurm_ft.vocab import SLURM_FAULT_REASONS, admins, check_reason, code_of, owned, planned_unquarantined

if TYPE_CHECKING:
    from slurm_ft.config import Config
    from slurm_ft.slurm.api import SlurmApi
    from slurm_ft.slurm.types import Node

log = logging.getLogger(__name__)


# worst first: what the admin must do decides which finding names the drain
_ACTION_RANK = {Action.RMA: 0, Action.REBOOT: 1, Action.RESET_GPU: 2, Action.DRAIN: 3, Action.NONE: 4}

def fails(findings: Iterable[Finding]) -> List[Finding]:
    return [f for f in findings if f.severity is Severity.FAIL]


def primary(findings: Sequence[Finding]) -> Optional[Finding]:
    bad = fails(findings)
    return min(bad, key=lambda f: (_ACTION_RANK.get(f.action, 9), f.gpu if f.gpu is not None else -1)) if bad else None


def reason_text(findings: Sequence[Finding]) -> str:
    """`slurm-ft: XID79 gpu3 GPU has fallen off the bus (+1 more)` for the worst fail finding."""
    first = primary(findings)
    return check_reason(first.code, first.gpu, first.reason, len(fails(findings)) - 1) if first else ""


# --- the gate ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Gate:
    allowed: bool
    why: str


def may_drain(node: str, *, client: SlurmApi, config: Optional[Config], now: float) -> Gate:
    """May slurm-ft drain `node` now? The single decision point every new drain passes.

    The fleet drain-rate breaker (`slurm_ft.breaker.guard`) answers from Slurm's own node states, the
    count every node and the controller share; an unknown count refuses (our trouble drains nothing).
    """
    if config is None:
        return Gate(True, "no config: no drain limit")
    from slurm_ft.breaker import guard   # lazy: only a new drain asks the breaker; the verdict line needs no guard
    d = guard.may_drain(config, node, client=client, actor="check", now=now)
    return Gate(d.allowed, d.reason)


def _serialized(config: Optional[Config]) -> ContextManager[None]:
    if config is None:
        return contextlib.nullcontext()
    from slurm_ft.breaker import guard   # lazy: the breaker lock is taken for a new drain only
    return guard.serialized(config)


def _settle(node: str, reason: str, client: SlurmApi, config: Optional[Config]) -> str:
    """Undo our drain when drains racing on other hosts passed the breaker (see guard.settle)."""
    if config is None:
        return ""
    from slurm_ft.breaker import guard   # lazy: settling follows a new drain only
    return guard.settle(config, node, reason, client=client)


# --- apply -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    action: str          # drained | reason_updated | kept | resumed | left | refused | none (decide: drain)
    message: str
    reason: str = ""

    def to_dict(self) -> Dict[str, str]:
        return {"action": self.action, "message": self.message, "reason": self.reason}


KEEP_OFF_WRITES = ("drain", "reason_updated", "resumed")


def decide(node: Node, findings: Sequence[Finding], *, checks: Iterable[str], active: Sequence[Finding] = (),
           auto_resume: bool = True, hold: str = "", keep_off: bool = False) -> Outcome:
    """`_decide`, with a node in `keep_off` left as it is: the outcome says what slurm-ft would have done."""
    plan = _decide(node, findings, checks=checks, active=active, auto_resume=auto_resume, hold=hold)
    if not keep_off or plan.action not in KEEP_OFF_WRITES:
        return plan
    return Outcome("left", f"{node.name} is in keep_off: slurm-ft leaves it alone (would be: {plan.message})",
                   plan.reason)


def _decide(node: Node, findings: Sequence[Finding], *, checks: Iterable[str], active: Sequence[Finding] = (),
            auto_resume: bool = True, hold: str = "") -> Outcome:
    """What this run's findings (plus still-active ones) ask of the node as Slurm shows it: pure.

    `drain` (a new drain: `apply` passes it through the breaker first), `reason_updated`, `resumed`: a
    write to Slurm (`apply`); `kept`, `left`, `none`: nothing to write. `hold`: why this run must not
    resume a drain of ours even if healthy (its sample is older than the drain)."""
    name = node.name
    bad = fails(list(findings)) + [f for f in active if f.severity is Severity.FAIL
                                  and (f.check, f.code, f.gpu) not in {(x.check, x.code, x.gpu) for x in findings}]
    if bad:
        reason = reason_text(bad)
        if not node.drained:
            if node.down and admins(node.reason):     # set DOWN by a person: their node, their reason
                return Outcome("left", f"{name} is down by someone else ({node.reason!r}); left as is "
                                       f"(would be: {reason})", reason)
            return Outcome("drain", f"drain {name}: {reason}", reason)
        if node.reason == reason:
            return Outcome("kept", f"{name} already drained: {reason}", reason)
        # rewrite only a health-check reason of ours, a planned swap's (the node failed before its jobs
        # moved: they must hear of the fault) or Slurm's own fault reason; a lifecycle reason
        # ("slurm-ft: QUARANTINED ...", "slurm-ft: RMA ...") stays: it decides how the node returns
        if (owned(node.reason) and check_of(code_of(node.reason))) or node.reason.strip() in SLURM_FAULT_REASONS \
                or planned_unquarantined(node.reason):
            return Outcome("reason_updated", f"{name} reason {node.reason!r} -> {reason!r}", reason)
        if owned(node.reason):
            return Outcome("kept", f"{name} already drained by slurm-ft ({node.reason!r}); "
                                   f"reason kept (found now: {reason})", node.reason)
        return Outcome("left", f"{name} is drained by someone else ({node.reason!r}); left as is "
                               f"(would be: {reason})", reason)
    if node.drained and owned(node.reason):
        check = check_of(code_of(node.reason))
        if not auto_resume:
            return Outcome("kept", f"{name} healthy; auto_resume off, still drained: {node.reason}", node.reason)
        if hold:
            return Outcome("kept", f"{name} healthy in this run, but {hold}; still drained: {node.reason}", node.reason)
        if check is None or check not in set(checks):
            return Outcome("kept", f"{name} healthy at this level, but this level does not run the check "
                                   f"behind {node.reason!r}; still drained", node.reason)
        return Outcome("resumed", f"resumed {name}: {node.reason!r} no longer found")
    return Outcome("none", f"{name} healthy" + (f"; drained by someone else ({node.reason!r}), left as is"
                                                 if node.drained else ""))


def apply(client: SlurmApi, node_name: str, plan: Outcome, *, config: Optional[Config] = None,
          now: float = 0.0) -> Outcome:
    """Write what `decide` said to Slurm; a new drain passes the breaker first (and is undone when
    racing drains passed it meanwhile). The outcome: `plan`, or drained/refused for a new drain."""
    if plan.action == "reason_updated":
        client.drain([node_name], plan.reason)      # already drained: this only rewrites the reason
    elif plan.action == "resumed":
        client.resume([node_name])
    elif plan.action == "drain":
        with _serialized(config):
            gate = may_drain(node_name, client=client, config=config, now=now)
            if not gate.allowed:
                log.warning("%s", gate.why)
                return Outcome("refused", gate.why, plan.reason)
            client.drain([node_name], plan.reason)
            undone = _settle(node_name, plan.reason, client, config)
        if undone:
            return Outcome("refused", undone, plan.reason)
        return Outcome("drained", f"drained {node_name}: {plan.reason} ({gate.why})", plan.reason)
    return plan
