"""Pure rules that read Slurm's view of the nodes against the recorded lifecycle and say what changed.

The controller and the health checks act on Slurm (drain, swap a spare in); they need not know about
the lifecycle. A sweep calls `classify` with one fresh snapshot and the records, and gets back the
events to record (a slurm-ft drain is a fault; a failed node out of every partition is quarantined; a
spare found in a job partition was swapped in) and the work to do (validate, re-check, quarantine).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.slurm.types import Node
from slurm_ft.fleet.lifecycle.transitions import Event, State, default_state
from slurm_ft.vocab import admins, owned, revalidation, slurm_time


@dataclass(frozen=True)
class Change:
    node: str
    event: Event
    cause: str
    act: str = ""        # "" = only record; "quarantine" = take it out of the partitions first


@dataclass(frozen=True)
class Work:
    """What one sweep should do, from one snapshot."""
    changes: Tuple[Change, ...] = ()
    validate: Tuple[str, ...] = ()       # repaired nodes to validate
    recheck: Tuple[str, ...] = ()        # idle spares due for a re-check
    poll: Tuple[str, ...] = ()           # nodes with a validation job running
    enrol: Tuple[str, ...] = ()          # healthy spares seen for the first time
    revalidate: Tuple[str, ...] = ()     # quarantined for not answering, answering again (vocab.REVALIDATE)


def drained_by_us(node: Node) -> bool:
    return node.drained and owned(node.reason)


def reason_age(node: Node, now: float) -> Optional[float]:
    """Seconds since Slurm set the node's reason (its ReasonTime is local time), or None if unknown."""
    t = slurm_time(node.reason_time)
    return None if t is None else now - t


def state_of(node: Node, recorded: Mapping[str, State], spare_partition: str) -> State:
    """The lifecycle state of a node as a person should see it now, before any sweep records it."""
    st = recorded.get(node.name) or default_state(node.partitions, spare_partition)
    if st in (State.IN_SERVICE, State.SPARE) and drained_by_us(node):
        return State.FAILED
    if st is State.SPARE and spare_partition not in node.partitions and node.partitions:
        return State.IN_SERVICE
    return st


def classify(nodes: Sequence[Node], recorded: Mapping[str, State], last_pass: Mapping[str, Optional[float]],
             now: float, *, spare_partition: str, job_partitions: Sequence[str], grace_s: float,
             recheck_s: float, swapped: Iterable[str] = ()) -> Work:
    """`swapped`: spares the controller's incidents took, to see a swap of a node we never recorded."""
    changes: List[Change] = []
    enrol: List[str] = []
    swapped = set(swapped)
    validate: List[str] = []
    recheck: List[str] = []
    poll: List[str] = []
    revalidate: List[str] = []
    pools = set(job_partitions) | {spare_partition}
    for node in sorted(nodes, key=lambda n: n.name):
        st = recorded.get(node.name)
        if st is None:
            st = State.SPARE if node.name in swapped else default_state(node.partitions, spare_partition)
            if st is State.SPARE and spare_partition in node.partitions and not node.drained:
                enrol.append(node.name)
        in_pool = bool(pools & set(node.partitions))
        if st in (State.IN_SERVICE, State.SPARE) and drained_by_us(node):
            changes.append(Change(node.name, Event.FAULT, node.reason))
            st = State.FAILED
        if st is State.FAILED and admins(node.reason) and (node.drained or node.down):
            continue             # an admin took it on since (their reason): theirs, left where it is
        if (revalidation(node.reason) and node.drained and not node.down and not in_pool
                and not _reserved(node) and st in (State.IN_SERVICE, State.SPARE, State.FAILED, State.QUARANTINED)):
            revalidate.append(node.name)
        if st is State.FAILED:
            if not in_pool:
                changes.append(Change(node.name, Event.QUARANTINE, "drained and out of the partitions"))
            elif node.drained and _idle(node):
                age = reason_age(node, now)
                if age is None or age >= grace_s:
                    changes.append(Change(node.name, Event.QUARANTINE,
                                          f"drained and idle for {_age(age)}: out of the partitions",
                                          act="quarantine"))
        elif st is State.SPARE:
            if spare_partition not in node.partitions and (set(job_partitions) & set(node.partitions)):
                changes.append(Change(node.name, Event.SWAP_IN,
                                      f"in {','.join(sorted(set(job_partitions) & set(node.partitions)))}"))
            elif node.available and _idle(node) and not _reserved(node):
                lp = last_pass.get(node.name)
                if recheck_s > 0 and (lp is None or now - lp >= recheck_s):
                    recheck.append(node.name)
        elif st is State.REPAIRED:
            validate.append(node.name)
        elif st is State.VALIDATING:
            poll.append(node.name)
    return Work(tuple(changes), tuple(validate), tuple(recheck), tuple(poll), tuple(enrol), tuple(revalidate))


def leave_alone(work: Work, keep_off: Collection[str]) -> Tuple[Work, Dict[str, str]]:
    """`work` without the config's keep_off nodes, and for each one left out what the sweep would have done
    (enrolling a spare is only a record: left out silently)."""
    skipped: Dict[str, List[str]] = {}
    for c in work.changes:
        if c.node in keep_off:
            skipped.setdefault(c.node, []).append(f"record {c.event.value}"
                                                  + (" and take it out of the partitions" if c.act else ""))
    for what, names in (("validate it", work.validate), ("re-check it", work.recheck),
                        ("poll its validation", work.poll), ("revalidate it", work.revalidate)):
        for n in names:
            if n in keep_off:
                skipped.setdefault(n, []).append(what)
    def kept(names: Tuple[str, ...]) -> Tuple[str, ...]:
        return tuple(n for n in names if n not in keep_off)
    return Work(tuple(c for c in work.changes if c.node not in keep_off), kept(work.validate), kept(work.recheck),
                kept(work.poll), kept(work.enrol), kept(work.revalidate)), {n: ", ".join(w) for n, w in skipped.items()}


def _idle(node: Node) -> bool:
    return node.state in ("IDLE", "DOWN") and "COMPLETING" not in node.flags


def _reserved(node: Node) -> bool:
    return bool({"RESERVED", "MAINTENANCE", "MAINT"} & set(node.flags))


def _age(age: Optional[float]) -> str:
    return "an unknown time" if age is None else f"{age:.0f} s"


def count_states(states: Iterable[State]) -> Dict[str, int]:
    out = {s.value: 0 for s in State}
    for s in states:
        out[s.value] += 1
    return out
