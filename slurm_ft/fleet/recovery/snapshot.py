"""One read of the cluster, as the pure plan sees it (the controller fills it through the Slurm client)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, FrozenSet, Iterable, Mapping

from slurm_ft.fleet.recovery.records import Placement

from slurm_ft.slurm.types import Job, Node, Partition
from slurm_ft.fleet.recovery.outage import Seen  # noqa: F401 (the annotation)
from slurm_ft.job.tag import FtSpec

if TYPE_CHECKING:
    from typing import TypedDict

    from typing_extensions import Unpack

    class _Fields(TypedDict, total=False):
        """Snapshot's fields past the three lists (Snapshot.of's keywords)."""
        specs: Mapping[int, FtSpec]
        taken_at: float
        seen: Mapping[str, Seen]
        watching_since: float
        out_counted: FrozenSet[str]
        out_limit: int
        out_past_limit: FrozenSet[str]
        placements: Mapping[int, Mapping[int, Placement]]


@dataclass(frozen=True)
class Snapshot:
    nodes: Mapping[str, Node]
    jobs: Mapping[int, Job]
    partitions: Mapping[str, Partition]
    specs: Mapping[int, FtSpec] = field(default_factory=dict)   # fault-tolerant jobs only (decoded tags)
    taken_at: float = 0.0
    # outage.py: when the controller saw nodes stop/start answering (since watching_since), and the
    # fleet-wide out-of-service count: nodes slurm-ft took out within the breaker's window, its limit
    seen: Mapping[str, "Seen"] = field(default_factory=dict)
    watching_since: float = 0.0
    out_counted: FrozenSet[str] = frozenset()
    out_limit: int = 0                # 0: no limit
    out_past_limit: FrozenSet[str] = frozenset()   # of out_counted, those taken out past the limit
    # journal.placements: job id -> restart count -> where that run was seen RUNNING (before this read)
    placements: Mapping[int, Mapping[int, Placement]] = field(default_factory=dict)

    @classmethod
    def of(cls, nodes: Iterable[Node], jobs: Iterable[Job], partitions: Iterable[Partition],
           **kw: Unpack[_Fields]) -> "Snapshot":
        """Build from lists (tests, the controller)."""
        return cls(nodes={n.name: n for n in nodes}, jobs={j.job_id: j for j in jobs},
                   partitions={p.name: p for p in partitions}, **kw)
