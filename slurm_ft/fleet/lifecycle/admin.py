"""What an admin's `slurm-ft node quarantine|repaired|release` does to one node (controller host, as
root): the transition checked before Slurm is touched, a quarantine's drain and partitions, the history."""
from __future__ import annotations

import time

from slurm_ft.config import Config
from slurm_ft.fleet.lifecycle.transitions import Event, HistoryEntry, State, TransitionError, default_state, next_state
from slurm_ft.fleet.lifecycle.node_history import Store
from slurm_ft.fleet.lifecycle.sweep import Sweeper
from slurm_ft.slurm.api import SlurmApi
from slurm_ft.slurm.types import Node
from slurm_ft.vocab import admin_quarantine_reason


def apply(config: Config, client: SlurmApi, store: Store, node: Node, event: Event, cause: str,
          actor: str) -> HistoryEntry:
    """One admin event on one node; TransitionError (nothing touched) when it does not fit its state."""
    lc = config.lifecycle
    default = default_state(node.partitions, config.controller.spare_partition)
    # refuse before touching Slurm: a refused transition must leave the node as it was (drained and
    # moved out with the record unchanged, the sweep would put it back or lose track of it)
    rec = store.record(node.name)
    current = rec.state if rec else default
    try:
        next_state(current, event)
    except TransitionError as exc:
        if current is State.VALIDATING and rec and rec.validation_job:
            raise TransitionError(f"{exc} (`scancel {rec.validation_job}`)") from None
        raise
    sweeper = Sweeper(config, client, store, actor=actor)
    if event is Event.QUARANTINE:
        if not node.drained:
            client.drain([node.name], admin_quarantine_reason(actor.split(":", 1)[-1], cause))
        sweeper.take_out(node.name)
    entry = store.apply(node.name, event, time.time(), default=default, cause=cause, actor=actor,
                        lemon_k=lc.lemon_incidents, lemon_window_s=lc.lemon_window_days * 86400.0)
    if event is Event.QUARANTINE and node.drained:   # keep the fault, stop a healthy check from resuming it
        sweeper.mark_quarantined(node.name, entry.to_state)
    return entry
