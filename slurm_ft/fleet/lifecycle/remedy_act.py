"""The sweep's remediation step: plan (fleet/lifecycle/remedy_plan.py, pure) over one snapshot, then act.

Acts only with lifecycle.remediation.mode `on`; `dry_run` reports what it would do (each line once,
not every sweep). Every act is a lifecycle event in the journal (`node history` shows it):
  reboot     scontrol reboot ASAP nextstate=DOWN, then quarantined -> remediating
  done       remediating -> repaired (validated by this same sweep)
  reset_gpu  quarantined -> remediating -> repaired; the validation job resets the GPU first
  retest     quarantined -> remediating -> repaired; validated as it is
  timeout    remediating -> quarantined (an incident: the lemon rule counts it)
  rma        quarantined -> rma
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, List, Optional, Protocol, Sequence, Tuple

from slurm_ft.config import expand_domains
from slurm_ft.breaker import guard, hold as breaker_hold

from slurm_ft.fleet.lifecycle import remedy_plan
from slurm_ft.fleet.lifecycle.transitions import Event, State
from slurm_ft.vocab import planned, reboot_reason

if TYPE_CHECKING:
    from slurm_ft.config import Config
    from slurm_ft.fleet.lifecycle.transitions import HistoryEntry
    from slurm_ft.fleet.lifecycle.node_history import Store
    from slurm_ft.fleet.lifecycle.sweep_report import SweepReport
    from slurm_ft.slurm.api import SlurmApi
    from slurm_ft.slurm.types import Node

log = logging.getLogger(__name__)


class SweepApi(Protocol):
    """What remediation uses of the sweep that runs it (fleet/lifecycle/sweep.py's Sweeper)."""
    cfg: Config
    client: SlurmApi
    store: Store
    clock: Callable[[], float]

    def mark_quarantined(self, name: str, state: State) -> None: ...

    def _guarded(self, report: SweepReport, node: str, fn: Callable[[], object]) -> None: ...

    def _record(self, name: str, event: Event, cause: str, node: Optional[Node] = None) -> HistoryEntry: ...

RESET_KEY = "reset_gpus:"      # lifecycle_kv: GPUs the node's next validation job resets first
DRY_KEY = "remediation_dry_run:"
BUDGET_KEY = "remediation_budget"           # lifecycle_kv: the last sweep's budget (`slurm-ft report`)
WAITING_KEY = "remediation_budget_waiting"  # lifecycle_kv: who waited at the last alert (news once)
# nodes whose history the plan needs: remediation candidates, and repairs not yet through validation
_CONCERNED = (State.QUARANTINED, State.REMEDIATING, State.REPAIRED, State.VALIDATING)


def snapshot_plan(sweeper: SweepApi, nodes: Optional[Sequence[Node]] = None
                  ) -> Tuple[List[remedy_plan.Remedy], remedy_plan.Budget]:
    """The plan for the fleet as Slurm and the journal show it now, and the budget it spent."""
    cfg, store = sweeper.cfg, sweeper.store
    nodes = sweeper.client.nodes() if nodes is None else nodes
    records = store.records()
    concerned = [n for n, r in records.items() if r.state in _CONCERNED]
    lc = cfg.lifecycle
    now = sweeper.clock()
    fleet = guard.fleet_view(cfg, snapshot=nodes, now=now) if guard.enabled(cfg) else None
    held = breaker_hold.current(cfg, now)
    return remedy_plan.plan_and_budget(
        {n: r.state for n, r in records.items()}, {n: r.since for n, r in records.items()},
        {n: store.history(n) for n in concerned}, nodes, fleet, now, lc.remediation,
        breaker_share=lc.breaker_max_share, breaker_nodes=lc.breaker_max_nodes, breaker_window_s=lc.breaker_window_s,
        pools=remedy_plan.pool_of(expand_domains(cfg.planning.domains)),
        recent=store.history_since(now - lc.remediation.budget_window_s), keep_off=cfg.keep_off_nodes,
        breaker_hold=held.state if held is not None else "")


def run(sweeper: SweepApi, report: SweepReport, *, dry_run: bool = False, only_planned: bool = False,
        nodes: Optional[Sequence[Node]] = None) -> List[str]:
    """Plan and act (or only report with `dry_run`); returns the nodes to validate in this sweep.
    `only_planned`: the retests of nodes out for a planned swap alone (the sweep runs them in every mode).
    `nodes`: the sweep's read of Slurm where it still holds (else one is made)."""
    steps, budget = snapshot_plan(sweeper, nodes)
    if not only_planned:        # the budget is the repairs' (a retest spends none): the remediation pass's own
        sweeper.store.kv_set_json(BUDGET_KEY, budget.to_dict())
        _alert_budget(sweeper, report, budget)
    for s in steps:
        if s.why == remedy_plan.KEEP_OFF_WHY and not only_planned:     # once per sweep, for grep
            log.warning("keep_off: %s: remediation leaves it alone", s.node)
    soft = [s for s in steps if s.act == "retest" and s.finding is not None and planned(s.finding.text)]
    steps = soft if only_planned else [s for s in steps if s not in soft or not dry_run]
    if dry_run:
        for step in steps:
            line = f"would {remedy_plan.describe(step)}"
            if sweeper.store.kv_get(DRY_KEY + step.node) != line:   # news once, not every sweep
                sweeper.store.kv_set(DRY_KEY + step.node, line)
                report.changes.append(line)
        return []
    validate: List[str] = []
    for step in steps:
        if step.held_by == "breaker" and sweeper.store.kv_get(DRY_KEY + step.node) != step.why:
            sweeper.store.kv_set(DRY_KEY + step.node, step.why)
            report.alerts.append(f"{step.node}: {step.why}")
        if not step.acts:
            continue
        sweeper._guarded(report, step.node, lambda: validate.extend(_act(sweeper, report, step)))
    return validate


def _alert_budget(sweeper: SweepApi, report: SweepReport, budget: remedy_plan.Budget) -> None:
    """One alert when the set of nodes waiting for the budget changes (not one per node, not every sweep)."""
    waiting = sorted(s.node for s in budget.waiting)
    if sweeper.store.kv_get(WAITING_KEY) == ",".join(waiting):
        return
    sweeper.store.kv_set(WAITING_KEY, ",".join(waiting))
    if not waiting:
        return
    rma = [s for s in budget.waiting if s.act == "rma"]
    shown = ", ".join(waiting[:10]) + (f" (+{len(waiting) - 10} more)" if len(waiting) > 10 else "")
    text = f"remediation budget: {len(waiting)} node(s) wait: {shown}; {budget.waiting[0].why}"
    if rma:
        text += ("; a burst of RMA verdicts is more likely a slurm-ft, driver or probe problem than hardware: "
                 "look before releasing the budget")
    report.alerts.append(text)


def _act(sweeper: SweepApi, report: SweepReport, step: remedy_plan.Remedy) -> List[str]:
    name, store = step.node, sweeper.store
    if step.act == "rma":
        entry = sweeper._record(name, Event.SEND_RMA, f"remediation: {step.why}")
        sweeper.mark_quarantined(name, State.RMA)
        report.changes.append(f"{name}: {entry.from_state} -> rma ({step.why})")
        report.alerts.append(f"{name}: on the RMA list ({step.why})")
        return []
    if step.act == "reboot":
        label = step.finding.label() if step.finding else ""
        sweeper.client.reboot([name], reboot_reason(label, step.attempt, step.max_attempts))
        entry = sweeper._record(name, Event.REMEDIATE, f"reboot: {step.why}")
        report.changes.append(f"{name}: {entry.from_state} -> remediating ({step.why})")
        return []
    if step.act == "reset_gpu":
        sweeper._record(name, Event.REMEDIATE, f"reset_gpu: {step.why}")
        entry = sweeper._record(name, Event.REMEDIATED, "the validation job resets "
                                + ",".join(f"gpu{g}" for g in remedy_plan.reset_gpus(step)) + " first")
        store.kv_set(RESET_KEY + name, ",".join(str(g) for g in remedy_plan.reset_gpus(step)))
        report.changes.append(f"{name}: quarantined -> {entry.to_state} ({step.why})")
        return [name]
    if step.act == "retest":
        sweeper._record(name, Event.REMEDIATE, f"retest: {step.why}")
        entry = sweeper._record(name, Event.REMEDIATED, "validated as it is (no repair)")
        report.changes.append(f"{name}: quarantined -> {entry.to_state} ({step.why})")
        return [name]
    if step.act == "done":
        entry = sweeper._record(name, Event.REMEDIATED, step.why)
        report.changes.append(f"{name}: remediating -> {entry.to_state} ({step.why})")
        return [name]
    if step.act == "timeout":
        entry = sweeper._record(name, Event.FAIL, f"remediation failed: {step.why}")
        sweeper.mark_quarantined(name, entry.to_state)
        report.changes.append(f"{name}: remediating -> {entry.to_state} ({step.why})")
        if entry.to_state is State.RMA:
            report.alerts.append(f"{name}: on the RMA list ({entry.cause})")
        return []
    raise AssertionError(f"unhandled remediation step {step.act}")


def take_reset_gpus(store: Store, name: str) -> List[int]:
    """The GPUs to reset before this validation (read once: a later validation does not reset again)."""
    raw = store.kv_get(RESET_KEY + name)
    if raw:
        store.kv_set(RESET_KEY + name, "")
    return [int(g) for g in raw.split(",") if g.strip().isdigit()]
