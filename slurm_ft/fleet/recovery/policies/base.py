"""A recovery policy, as the controller's plan uses it: one module per path a fault can take.

    path     the incident's path, journaled in its own column (journal.py)
    claims   whether this policy takes a job's fault (the first policy in policies.POLICIES that claims it)
    advance  the next steps of one open incident of this path, read off Slurm's state (pure)
    phases   the steps it takes, each named as a timeline shows it (`lab demo`)
    note     what the incident's note says of it for people when it opens (never read back)
    supervised  the job's supervisor acts on it (told of the nodes, no checkpoint hold: the job does not restart)
    closes_as   the status its incident closes with once the job runs on (`confirm`)

A policy decides; the controller acts (one method per step kind, controller.ACTS) and journals each act.
Where the job's own supervisor recovers in its allocation, the rule "may the supervisor handle this
fault" is job/paths.py's, the one the supervisor itself follows: the two sides never disagree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Mapping, Optional, Protocol, Sequence

from slurm_ft.fleet.recovery.policies.common import IncidentFields, ControllerSettings
from slurm_ft.fleet.recovery.records import Incident, Step
from slurm_ft.fleet.recovery.snapshot import Snapshot
from slurm_ft.job.tag import FtSpec
from slurm_ft.slurm.types import Job


@dataclass
class IncidentView:
    """What `advance` reads: the snapshot, every incident, the settings, the spares still free this cycle
    (a policy that takes some removes them: the incidents after it see the rest), the job and its tag."""
    inc: Incident
    snap: Snapshot
    incidents: Sequence[Incident]
    policy: ControllerSettings
    pool: List[str]
    now: float
    job: Job
    spec: Optional[FtSpec]
    base: IncidentFields


class RecoveryPolicy(Protocol):
    path: str
    phases: Mapping[str, str]
    supervised: bool
    closes_as: str

    def claims(self, job: Job, spec: Optional[FtSpec], failed: Sequence[str]) -> bool: ...

    def advance(self, view: IncidentView) -> List[Step]: ...

    def note(self, spec: FtSpec) -> str: ...
