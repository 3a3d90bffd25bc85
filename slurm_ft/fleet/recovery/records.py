"""The controller's plan and journal records: the Steps the pure plan decides, the Incidents the journal
keeps, where each run of a job was seen."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from slurm_ft.vocab import slurm_time


@dataclass(frozen=True)
class Step:
    """One thing the controller will do, decided by the pure plan: `kind` names the act.

    kinds: open, requeue, quarantine, swap, wait, hold, exclude, start, confirm, give_up, poll, released,
    note, abandon; alert (logged, no act; job 0: a wave of unresponsive nodes, -1: an outage); revalidate (a node, no incident step: fleet/recovery/outage.py); release
    (a job Slurm holds after a launch failure whose run the controller never saw: no incident); restore (a
    closed incident's partition changes that Slurm lost, done again: no incident step)
    """
    kind: str
    job_id: int
    incident_id: Optional[int] = None   # None only for `open`
    nodes: Tuple[str, ...] = ()         # the failed nodes
    spares: Tuple[str, ...] = ()        # spares taken (swap)
    partition: str = ""
    hold: bool = False                  # requeue held (waiting for a spare, or giving up)
    num_nodes: Optional[int] = None     # shrink to this size (elastic job, short pool)
    reason: str = ""                    # why, for people (journal detail, logs)
    restart_count: Optional[int] = None  # open: the run the fault hit, when Slurm has restarted the job since
    path: str = ""                      # open: the recovery policy that claims the incident (fleet/recovery/policies)


@dataclass(frozen=True)
class Placement:
    """Where one run of a job (its restart count) was seen RUNNING, and when first (the controller's journal)."""
    job_id: int
    restart_count: int
    nodes: Tuple[str, ...]
    seen_at: float
    job_submit: str = ""                # the job's SubmitTime then, as Slurm printed it ("" unknown)


@dataclass(frozen=True)
class StepRecord:
    """A step as the journal holds it: intent written before acting, result after."""
    name: str
    intent_at: float
    done_at: Optional[float] = None
    outcome: str = ""                   # "" = intent only (crashed or in progress), ok, skipped, failed
    detail: str = ""


@dataclass(frozen=True)
class Incident:
    """One fault of one fault-tolerant job, from detection to the job running again."""
    id: int
    job_id: int
    status: str                         # open, waiting, recovered, gave_up, abandoned; planned (a planned swap
                                        # done), deferred (no hot spare: at the job's next restart), superseded
    nodes: Tuple[str, ...]              # failed nodes
    faults: Tuple[str, ...] = ()        # the node reasons (drain reason or state) at detection
    partition: str = ""
    spares: Tuple[str, ...] = ()
    restart_count: int = 0              # the job's restart count when the incident opened
    job_nodes: int = 0                  # the job's node count when the incident opened
    shrink_to: Optional[int] = None
    ckpt_step: Optional[int] = None     # latest complete checkpoint step when opened (progress check)
    opened_at: float = 0.0
    fault_at: Optional[float] = None    # when the node was marked failed (drain time), if known
    closed_at: Optional[float] = None
    note: str = ""                      # for people; never read back to decide anything
    steps: Tuple[StepRecord, ...] = ()
    path: str = "requeue"               # the recovery policy that owns it (fleet/recovery/policies, job/paths.py)
    job_submit: str = ""                # the job's SubmitTime at the open, as Slurm printed it ("" unknown)

    @property
    def open(self) -> bool:
        return self.closed_at is None

    def done(self, name: str) -> bool:
        return any(s.name == name and s.outcome in ("ok", "skipped") for s in self.steps)

    def step(self, name: str) -> Optional[StepRecord]:
        found = [s for s in self.steps if s.name == name]
        return found[-1] if found else None



def same_submit(then: str, now: str) -> bool:
    """Two SubmitTimes as Slurm printed them (JSON or text reads) the same, or either unknown: within one
    restart count of one job it never changes, so a difference means the job id names another job now."""
    a, b = slurm_time(then), slurm_time(now)
    return a is None or b is None or abs(a - b) < 1.0
