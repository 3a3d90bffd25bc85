""""May I drain this node?": the one question every drain in slurm-ft asks first.

Health checks (`check --drain`, the HealthCheckProgram, `watch`), the sweep's spare re-checks and the
controller's quarantines call `may_drain` before they touch Slurm. It decides with the drain-rate
breaker and records the drain in the journal in one transaction, so concurrent callers on one host (or
on hosts sharing the state directory) cannot overrun the limit together.

When the journal cannot be opened the answer is yes, with a warning: a node-local state problem must
not stop a real fault from being drained. The breaker protects the fleet wherever the state directory
is shared (the controller host, the lab, a cluster file system).
"""
from __future__ import annotations

import logging
import time
from typing import Optional

from slurm_ft.config import Config
from slurm_ft.errors import SlurmFTError
from slurm_ft.lifecycle import breaker as brk

log = logging.getLogger(__name__)


def journaled_decision(config: Config, node: str, reason: str = "", *, client=None,
                       total_nodes: Optional[int] = None, actor: str = "check",
                       now: Optional[float] = None) -> Optional[brk.Decision]:
    """Ask the breaker and record a yes as one drain in the window; None when the journal is unavailable."""
    lc = config.lifecycle
    now = time.time() if now is None else now
    if lc.breaker_max_share <= 0 and lc.breaker_max_nodes <= 0:
        return brk.Decision(True, "breaker disabled", 0, 1 << 30)
    from slurm_ft.lifecycle.store import Store   # the seam, imported only when a drain is on the table
    seen: list = []
    try:
        if client is None and total_nodes is None:
            from slurm_ft.slurm.client import client_from_config
            client = client_from_config(config)
        if client is not None:
            nodes = client.nodes()
            total_nodes = len(nodes) if total_nodes is None else total_nodes
            seen = recent_drains(nodes, now)
        with Store(config.state_dir) as store:
            decision = store.breaker_decide(node, now, total_nodes=total_nodes or 0, max_share=lc.breaker_max_share,
                                            max_nodes=lc.breaker_max_nodes, window_s=lc.breaker_window_s,
                                            reason=reason, actor=actor, seen=seen)
    except SlurmFTError as exc:
        log.warning("drain-rate breaker unavailable: %s", exc)
        return None
    if not decision.allowed:
        log.warning("%s", decision.reason)
    return decision


# Drains of ours that are not fresh faults: a quarantine's rewritten reason, a failed validation.
_NOT_NEW = ("slurm-ft: QUARANTINED", "slurm-ft: RMA", "slurm-ft: validation failed")


def recent_drains(nodes, now: float) -> list:
    """(node, drain time) of fresh slurm-ft drains as Slurm shows them: a fact every host can read."""
    from slurm_ft.lifecycle.reconcile import drained_by_us, reason_age
    out = []
    for n in nodes:
        if drained_by_us(n) and not n.reason.startswith(_NOT_NEW):
            age = reason_age(n, now)
            if age is not None:
                out.append((n.name, now - age))
    return out


def may_drain(config: Config, node: str, reason: str = "", *, client=None, total_nodes: Optional[int] = None,
              actor: str = "check", now: Optional[float] = None) -> brk.Decision:
    """The breaker's answer; yes (with a warning) when the journal cannot be read."""
    d = journaled_decision(config, node, reason, client=client, total_nodes=total_nodes, actor=actor, now=now)
    return d if d is not None else brk.Decision(True, "breaker unavailable (see log); drained anyway", 0, 0)


def is_open(config: Config) -> Optional[str]:
    """The reason the breaker is open, or None: for the controller to hold recoveries while it is."""
    from slurm_ft.lifecycle.store import Store
    try:
        with Store(config.state_dir) as store:
            state = store.breaker_state()
    except SlurmFTError:
        return None
    return state.open_reason if state.open else None
