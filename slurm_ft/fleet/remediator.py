"""The sweep's remediation step: plan (fleet/remediation.py, pure) over one snapshot, then act.

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
from typing import TYPE_CHECKING, List, Optional, Sequence

from slurm_ft.node import guard

from slurm_ft.fleet import remediation
from slurm_ft.fleet.states import Event, State
from slurm_ft.vocab import OWNER, fit, planned

if TYPE_CHECKING:
    from slurm_ft.fleet.store import Store
    from slurm_ft.fleet.sweep import Sweeper, SweepReport
    from slurm_ft.slurm.types import Node

log = logging.getLogger(__name__)

RESET_KEY = "reset_gpus:"      # lifecycle_kv: GPUs the node's next validation job resets first
DRY_KEY = "remediation_dry_run:"


def snapshot_plan(sweeper: Sweeper, nodes: Optional[Sequence[Node]] = None) -> List[remediation.Step]:
    """The plan for the fleet as Slurm and the journal show it now."""
    cfg, store = sweeper.cfg, sweeper.store
    nodes = sweeper.client.nodes() if nodes is None else nodes
    records = store.records()
    concerned = [n for n, r in records.items() if r.state in (State.QUARANTINED, State.REMEDIATING)]
    lc = cfg.lifecycle
    fleet = guard.fleet_view(cfg, snapshot=nodes, now=sweeper.clock()) if guard.enabled(cfg) else None
    return remediation.plan({n: r.state for n, r in records.items()}, {n: r.since for n, r in records.items()},
                            {n: store.history(n) for n in concerned}, nodes, fleet, sweeper.clock(),
                            lc.remediation, breaker_share=lc.breaker_max_share, breaker_nodes=lc.breaker_max_nodes,
                            breaker_window_s=lc.breaker_window_s)


def run(sweeper: Sweeper, report: SweepReport, *, dry_run: bool = False, only_planned: bool = False) -> List[str]:
    """Plan and act (or only report with `dry_run`); returns the nodes to validate in this sweep.
    `only_planned`: the retests of nodes out for a planned swap alone (the sweep runs them in every mode)."""
    steps = snapshot_plan(sweeper)
    soft = [s for s in steps if s.act == "retest" and s.finding is not None and planned(s.finding.text)]
    steps = soft if only_planned else [s for s in steps if s not in soft or not dry_run]
    if dry_run:
        for step in steps:
            line = f"would {remediation.describe(step)}"
            if sweeper.store.kv_get(DRY_KEY + step.node) != line:   # news once, not every sweep
                sweeper.store.kv_set(DRY_KEY + step.node, line)
                report.changes.append(line)
        return []
    validate: List[str] = []
    for step in steps:
        if step.act == "hold" and sweeper.store.kv_get(DRY_KEY + step.node) != step.why:
            sweeper.store.kv_set(DRY_KEY + step.node, step.why)
            report.alerts.append(f"{step.node}: {step.why}")
        if not step.acts:
            continue
        sweeper._guarded(report, step.node, lambda: validate.extend(_act(sweeper, report, step)))
    return validate


def _act(sweeper: Sweeper, report: SweepReport, step: remediation.Step) -> List[str]:
    name, store = step.node, sweeper.store
    if step.act == "rma":
        entry = sweeper._record(name, Event.SEND_RMA, f"remediation: {step.why}")
        sweeper.mark_quarantined(name, State.RMA)
        report.changes.append(f"{name}: {entry.from_state} -> rma ({step.why})")
        report.alerts.append(f"{name}: on the RMA list ({step.why})")
        return []
    if step.act == "reboot":
        label = step.finding.label() if step.finding else ""
        sweeper.client.reboot([name], fit(f"{OWNER} REBOOT {label} attempt {step.attempt}/{step.max_attempts}"))
        entry = sweeper._record(name, Event.REMEDIATE, f"reboot: {step.why}")
        report.changes.append(f"{name}: {entry.from_state} -> remediating ({step.why})")
        return []
    if step.act == "reset_gpu":
        sweeper._record(name, Event.REMEDIATE, f"reset_gpu: {step.why}")
        entry = sweeper._record(name, Event.REMEDIATED, "the validation job resets "
                                + ",".join(f"gpu{g}" for g in remediation.reset_gpus(step)) + " first")
        store.kv_set(RESET_KEY + name, ",".join(str(g) for g in remediation.reset_gpus(step)))
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
