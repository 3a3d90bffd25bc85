"""The node lifecycle as pure rules: states, events, the transition table and the lemon rule.

    in_service --fault--> failed --quarantine--> quarantined --repaired--> repaired --validate-->
    validating --pass--> spare --swap_in--> in_service
                --fail--> quarantined (or rma)

With remediation on (fleet/lifecycle/remedy_plan.py), the sweep repairs what a reset or a reboot can fix:

    quarantined --remediate--> remediating --remediated--> repaired (then validated as above)
                                           --fail--> quarantined (the reboot did not finish)
    quarantined --send_rma--> rma              (the finding's action is rma, or attempts are used up)

A node with K incidents (faults or failed validations) within W days goes to `rma` instead of back
towards the pool, and leaves it only by an admin's `release`. Nothing here reads a clock or Slurm:
callers pass the history and the time.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Dict, Iterable, Optional, Tuple

from slurm_ft.errors import UsageError


class State(str, Enum):
    IN_SERVICE = "in_service"     # in a job partition, schedulable
    FAILED = "failed"             # a fault was seen; recovery not finished
    QUARANTINED = "quarantined"   # drained and out of the job and spare partitions, waits for repair
    REPAIRED = "repaired"         # an admin says it is fixed; the next sweep validates it
    VALIDATING = "validating"     # full + burn-in running as a job in a maintenance reservation
    SPARE = "spare"               # in the spares partition, resumed, known good
    RMA = "rma"                   # a lemon: never back to the pool without an admin's release
    REMEDIATING = "remediating"   # slurm-ft is rebooting it (fleet/lifecycle/remedy_plan.py); then validated

    def __str__(self) -> str:     # so that f-strings print "spare", not "State.SPARE"
        return self.value


class Event(str, Enum):
    FAULT = "fault"               # a fail finding / a slurm-ft drain / the node went down
    QUARANTINE = "quarantine"     # drained and taken out of the partitions
    REPAIRED = "repaired"         # admin: `slurm-ft node repaired NODE`
    VALIDATE = "validate"         # a sweep starts the validation job
    PASS = "pass"                 # validation passed: back in spares
    FAIL = "fail"                 # validation failed
    SWAP_IN = "swap_in"           # the controller moved the spare into a job partition
    RELEASE = "release"           # admin: off the RMA list after the vendor's repair
    ENROL = "enrol"               # first record of a spare, so that a later swap is seen as one
    REMEDIATE = "remediate"       # the sweep started a reset or a reboot (remediation policy)
    REMEDIATED = "remediated"     # ... and it finished: validate like a repaired node
    SEND_RMA = "send_rma"         # the remediation policy: straight to the RMA list

    def __str__(self) -> str:
        return self.value


# (state, event) -> next state. Events that are incidents may be redirected to RMA by the lemon rule.
TRANSITIONS: Dict[Tuple[State, Event], State] = {
    (State.IN_SERVICE, Event.FAULT): State.FAILED,
    (State.SPARE, Event.FAULT): State.FAILED,
    (State.VALIDATING, Event.FAULT): State.FAILED,
    (State.FAILED, Event.FAULT): State.FAILED,            # a second finding while recovery runs
    (State.FAILED, Event.QUARANTINE): State.QUARANTINED,
    (State.IN_SERVICE, Event.QUARANTINE): State.QUARANTINED,   # admin: `node quarantine`
    (State.SPARE, Event.QUARANTINE): State.QUARANTINED,
    (State.REPAIRED, Event.QUARANTINE): State.QUARANTINED,
    (State.QUARANTINED, Event.REPAIRED): State.REPAIRED,
    (State.REPAIRED, Event.VALIDATE): State.VALIDATING,
    (State.SPARE, Event.VALIDATE): State.VALIDATING,      # the periodic re-check of an idle spare
    (State.VALIDATING, Event.PASS): State.SPARE,
    (State.VALIDATING, Event.FAIL): State.QUARANTINED,
    (State.SPARE, Event.SWAP_IN): State.IN_SERVICE,
    (State.RMA, Event.RELEASE): State.REPAIRED,
    (State.QUARANTINED, Event.REMEDIATE): State.REMEDIATING,
    (State.REMEDIATING, Event.REMEDIATED): State.REPAIRED,
    (State.REMEDIATING, Event.FAIL): State.QUARANTINED,
    (State.QUARANTINED, Event.SEND_RMA): State.RMA,
}

# Events that count as an incident for the lemon rule.
INCIDENT_EVENTS = frozenset({Event.FAULT, Event.FAIL})
# Where a lemon is caught: the step that would otherwise send it on towards the pool.
LEMON_CHECKED = frozenset({Event.QUARANTINE, Event.FAIL})


@dataclass(frozen=True)
class HistoryEntry:
    """One recorded transition of one node."""
    node: str
    time: float                   # unix seconds
    event: Event
    from_state: Optional[State]
    to_state: State
    cause: str = ""
    actor: str = ""               # sweep | controller | check | admin:<user>

    def to_dict(self) -> Dict[str, Any]:
        return {
            "node": self.node, "time": self.time, "event": self.event.value,
            "from": self.from_state.value if self.from_state else None, "to": self.to_state.value,
            "cause": self.cause, "actor": self.actor,
        }


class TransitionError(UsageError):
    """An event that does not apply to the node's current state (exit 2)."""


def incidents(history: Iterable[HistoryEntry], now: float, window_s: float) -> int:
    """Incidents within the window, counted since the last release from the RMA list."""
    entries = sorted(history, key=lambda e: e.time)
    last_release = max((e.time for e in entries if e.event is Event.RELEASE), default=float("-inf"))
    return sum(
        1 for e in entries
        if e.event in INCIDENT_EVENTS and e.time > last_release and now - e.time <= window_s
        and not (e.event is Event.FAULT and e.from_state is State.FAILED)  # one fault, several findings
    )


def next_state(current: State, event: Event, *, incident_count: int = 0, lemon_k: int = 0) -> State:
    """The state after `event`; `incident_count` includes this event when it is an incident.

    Raises TransitionError with a sentence a person can act on when the event does not apply.
    """
    target = TRANSITIONS.get((current, event))
    if target is None:
        raise TransitionError(_refusal(current, event))
    if lemon_k and event in LEMON_CHECKED and incident_count >= lemon_k:
        return State.RMA
    return target


def default_state(partitions: Iterable[str], spare_partition: str) -> State:
    """What a node slurm-ft has no record of is taken to be: a spare if it sits in the spare pool."""
    return State.SPARE if spare_partition in tuple(partitions) else State.IN_SERVICE


def _refusal(current: State, event: Event) -> str:
    hints = {
        Event.REPAIRED: {
            State.RMA: "it is on the RMA list; after the vendor's repair run `slurm-ft node release NODE`",
            State.FAILED: "recovery has not quarantined it yet; wait for the controller or run "
                          "`slurm-ft node quarantine NODE`",
        },
        Event.RELEASE: {},
        Event.QUARANTINE: {State.QUARANTINED: "it is already quarantined", State.RMA: "it is on the RMA list",
                           State.VALIDATING: "its validation job runs in a maintenance reservation; cancel the "
                                             "job and the sweep quarantines it as a failed validation"},
    }
    hint = hints.get(event, {}).get(current)
    if hint is None and event is Event.RELEASE:
        hint = "only a node on the RMA list can be released"
    if hint is None and event is Event.REPAIRED:
        hint = "only a quarantined node can be marked repaired"
    text = f"cannot apply '{event.value}' to a node in state '{current.value}'"
    return f"{text}: {hint}" if hint else text
