"""Slurm's objects as slurm-ft reads them (nodes, jobs, partitions, reservations): frozen, filled by the
client's parsers (slurm/parse.py) or the pyslurm backend."""
from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, Tuple

# Job state flags that only a running job carries (Slurm sets them beside RUNNING and prints the flag in
# its place where it prints one word: 22.05's JSON, `scontrol show job`): the job holds its nodes and runs.
# STOPPED follows the owner's `scancel --signal=STOP`, SIGNALING lasts while a STOP/CONT is delivered.
RUNNING_FLAGS = frozenset({"CONFIGURING", "RESIZING", "SIGNALING", "STOPPED"})


@dataclass(frozen=True)
class Node:
    name: str
    state: str                      # base state as Slurm prints it: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: FrozenSet[str] = frozenset()  # DRAIN, NOT_RESPONDING, COMPLETING, MAINTENANCE, RESERVED, ...
    reason: str = ""
    reason_user: str = ""
    reason_time: str = ""
    partitions: Tuple[str, ...] = ()
    gres: str = ""
    cpus: int = 0
    real_memory_mb: int = 0
    comment: str = ""
    addr: str = ""                  # NodeAddr: where the node is reached (Slurm defaults it to the host name)

    @property
    def drained(self) -> bool:
        """DRAIN flag set (DRAINING while jobs run, DRAINED once idle)."""
        return "DRAIN" in self.flags

    @property
    def down(self) -> bool:
        return self.state in ("DOWN", "FAIL") or "NOT_RESPONDING" in self.flags or "FAIL" in self.flags

    @property
    def available(self) -> bool:
        """Healthy and schedulable: nothing an admin or a fault put on it."""
        return not (self.drained or self.down or "MAINTENANCE" in self.flags)


@dataclass(frozen=True)
class Job:
    job_id: int
    name: str
    state: str                      # as scontrol prints it: a state flag (COMPLETING, STOPPED, ...) in place of the base
    reason: str = ""
    user: str = ""
    partition: str = ""
    nodes: Tuple[str, ...] = ()     # allocated nodes (expanded)
    num_nodes: int = 0
    excluded_nodes: Tuple[str, ...] = ()
    comment: str = ""
    admin_comment: str = ""         # only admins (and the job_submit policy) can set it
    restart_count: int = 0
    requeue: bool = False
    held: bool = False
    command: str = ""
    work_dir: str = ""
    std_out: str = ""
    submit_time: str = ""
    start_time: str = ""
    eligible_time: str = ""
    tres_per_node: str = ""
    batch_host: str = ""            # the node running the batch script
    exit_code: str = ""             # "exit:signal" as scontrol prints it
    priority: int = 0               # 0 while held
    base_state: str = ""            # the base state where Slurm lists it apart from the flags (>= 23.02 JSON)

    @property
    def running(self) -> bool:
        """Runs on its allocation: RUNNING, also while Slurm shows a flag of a running job in its place
        (a stopped or signalled job, one still configuring). Not a job ending or requeued (COMPLETING)."""
        if self.base_state:
            return self.base_state == "RUNNING"
        return self.state == "RUNNING" or self.state in RUNNING_FLAGS


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: Tuple[str, ...] = ()     # expanded
    state: str = "UP"
    default: bool = False


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: Tuple[str, ...] = ()
    flags: FrozenSet[str] = frozenset()
    start_time: str = ""
    end_time: str = ""
    state: str = ""

