"""Every change of a partition's or a reservation's nodes, as a delta under one fleet lock.

Slurm only offers "replace the whole node list" (`scontrol update PartitionName=p Nodes=...`). Two
writers that each read a list, change it and write it back lose each other's change: interleaved, the
controller's swap and the sweep's return-to-pool either lose a node (in no partition) or put one in two.
So every writer (the controller, the sweep, `slurm-ft node`) states what it wants as a delta (add these,
remove those) and `Membership` applies it under one flock, the fleet lock (config `fleet_lock`), from a
read taken after the lock: a concurrent writer's change is read back, never overwritten. Callers whose
decision depends on what they read (is the spare still in the pool, still healthy?) take the lock
around both the read and the write with `locked()`.

The lock is a file: it serialises writers on one host, or on hosts where that path is on one shared file
system (the controller and the sweep usually run on the same admin host). It is held for a few Slurm
calls; a writer waits for it at most WAIT_S and then fails (Busy, exit 5), retried by its next cycle.
"""
from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.filelock import FileLock
from slurm_ft.slurm.types import Partition

if TYPE_CHECKING:
    from typing import TypedDict

    from typing_extensions import Unpack

    from slurm_ft.config import Config
    from slurm_ft.slurm.api import SlurmApi

    class _ReservationOptions(TypedDict, total=False):
        """SlurmApi.create_reservation's keywords past the name."""
        start: str
        duration: str
        users: Sequence[str]
        flags: Sequence[str]

log = logging.getLogger(__name__)

WAIT_S = 30.0   # longer than any holder needs (a few scontrol calls, each bounded by slurm.timeout_s)


def lock_path(config: Config) -> Path:
    """The one fleet lock: config `fleet_lock`, or fleet.lock in the state directory."""
    return Path(getattr(config, "fleet_lock", "") or Path(config.state_dir) / "fleet.lock")


@dataclass(frozen=True)
class Delta:
    """Nodes to add to and remove from one partition; the rest of its list is left as Slurm has it."""
    add: Tuple[str, ...] = ()
    remove: Tuple[str, ...] = ()

    def on(self, current: Sequence[str]) -> List[str]:
        """The new list: current order kept, removals dropped, additions appended once."""
        out = [n for n in current if n not in self.remove]
        for n in self.add:
            if n not in out and n not in self.remove:
                out.append(n)
        return out


def apply_deltas(parts: Mapping[str, Sequence[str]], deltas: Mapping[str, Delta]) -> List[Tuple[str, List[str]]]:
    """The writes that take `parts` to the deltas' result, additions first: a crash between two writes
    leaves a moved node in both partitions (the redo finishes the move), never in neither."""
    writes = []
    for name, d in deltas.items():
        cur = list(parts[name])
        new = d.on(cur)
        if new != cur:
            writes.append((name, new))
    return sorted(writes, key=lambda w: not deltas[w[0]].add)


class Membership:
    """One writer's handle on partition and reservation membership (one per process or thread)."""

    def __init__(self, client: SlurmApi, path: str | os.PathLike[str], *, wait_s: float = WAIT_S,
                 who: str = "membership change") -> None:
        self.client = client
        self._lock = FileLock(path, who)
        self.wait_s = wait_s
        self._depth = 0

    @classmethod
    def from_config(cls, client: SlurmApi, config: Config, who: str = "membership change") -> "Membership":
        return cls(client, lock_path(config), who=who)

    @contextmanager
    def locked(self) -> Iterator["Membership"]:
        """Hold the fleet lock (re-entrant within this handle) around a read and the writes it decides."""
        if self._depth == 0:
            self._lock.acquire(self.wait_s)
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._lock.release()

    def partitions(self) -> Dict[str, Partition]:
        return {p.name: p for p in self.client.partitions()}

    def change(self, deltas: Mapping[str, Delta], parts: Optional[Mapping[str, Partition]] = None
               ) -> Dict[str, List[str]]:
        """Apply the deltas to the partitions as Slurm has them now; returns {partition: new list} written.
        `parts` saves a read when the caller read them within the same `locked()`; a partition that does
        not exist is skipped with a warning (an admin removed it)."""
        if parts is not None and self._depth == 0:
            raise RuntimeError("Membership.change(parts=...) outside locked(): that read may be stale")
        with self.locked():
            parts = self.partitions() if parts is None else parts
            known = {}
            for name, d in deltas.items():
                if name in parts:
                    known[name] = d
                else:
                    log.warning("partition %s not found: %s not applied", name, d)
            writes = apply_deltas({n: parts[n].nodes for n in known}, known)
            for name, nodes in writes:
                self.client.set_partition_nodes(name, nodes)
            return dict(writes)

    def add(self, partition: str, nodes: Iterable[str]) -> bool:
        return bool(self.change({partition: Delta(add=tuple(nodes))}))

    def remove(self, node: str, partitions: Iterable[str]) -> List[str]:
        """Take `node` out of those of `partitions` that hold it now; returns them."""
        with self.locked():
            parts = self.partitions()
            names = [p for p in partitions if p in parts and node in parts[p].nodes]
            self.change({p: Delta(remove=(node,)) for p in names}, parts)
            return names

    def reserve(self, nodes: Sequence[str], name: str, **kw: Unpack[_ReservationOptions]) -> str:
        with self.locked():
            return self.client.create_reservation(list(nodes), name=name, **kw)

    def unreserve(self, name: str) -> bool:
        """Delete the reservation when it exists; True when it did."""
        with self.locked():
            if any(r.name == name for r in self.client.reservations()):
                self.client.delete_reservation(name)
                return True
            return False
