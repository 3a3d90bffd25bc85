"""The unit tests' one stateful Slurm: a SlurmApi (slurm_ft/slurm/api.py) in memory, no daemons.

Not a parser fake: it stands behind the client interface and moves nodes and jobs the way the lab showed
Slurm 22.05 does: a drain sets DRAIN and the reason (and its time); a requeue leaves the job COMPLETING
until the next read, then PENDING on BeginTime (held: JobHeldAdmin); StartTime=now or a release lets the
scheduler (run on every read) start a pending job on idle, healthy nodes of its partition, minus the
job's excluded nodes. A node read carries its partitions, and MAINTENANCE+RESERVED while a reservation
holds it. Every write is recorded in `calls`, in Slurm's words: ("drain", nodes, reason), ("resume",
nodes), ("partition", name, nodes), ("requeue", job, hold), ("release", job), ("update", job, fields),
("shrink", job, nodes), ("update_node", node, fields), ("reboot", nodes, reason), ("cancel", job),
("notify", job, message). Every read is recorded in `reads`.
The real daemons are exercised by tests/lab/.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union

from slurm_ft.errors import CommandError
from slurm_ft.job.tag import FtSpec, encode
from slurm_ft.slurm.api import NodeSpec
from slurm_ft.slurm.client import JobNotFound, check_reason
from slurm_ft.slurm.hostlist import expand
from slurm_ft.slurm.types import Job, Node, Partition, Reservation

XID79 = "slurm-ft: XID79 gpu3 fell off the bus"


def node_names(spec: Optional[NodeSpec]) -> List[str]:
    if spec is None:
        return []
    return list(expand(spec)) if isinstance(spec, str) else list(spec)


class FakeSlurm:
    backend = "fake"
    backend_reason = "the unit tests' stand-in"

    def __init__(self, train: Sequence[str] = ("gpu001", "gpu002", "gpu003", "gpu004"),
                 spares: Sequence[str] = ("gpu005", "gpu006"), others: Sequence[str] = ()):
        self.n: Dict[str, Node] = {x: Node(x, "IDLE") for x in (*train, *spares, *others)}
        self.parts: Dict[str, List[str]] = {"train": list(train), "spares": list(spares)}
        self.j: Dict[int, Job] = {}
        self.resv: Dict[str, List[str]] = {}
        self.calls: List[tuple] = []
        self.job_submit: List[str] = []          # slurmctld's JobSubmitPlugins: none, unless a test sets it
        self.requeuing: Set[int] = set()         # requeued, COMPLETING until the next read
        self.fleet_reads_fail = False            # a read of every node fails (a swamped slurmctld's timeout);
                                                 # one node's read still answers
        self.reads: List[tuple] = []             # every read, in the client's words: ("fleet",), ("node", name),
                                                 # ("jobs",), ("job", id), ("partitions",),
                                                 # ("partition", name), ("steps", id)
        self.running_steps: Dict[int, List[int]] = {}   # job -> its numbered steps now running (a test sets it)
        self.step_names: Dict[Tuple[int, int], str] = {}  # (job, step) -> its name (srun --job-name)
        self.step_nodes: Dict[Tuple[int, int], Tuple[str, ...]] = {}  # (job, step) -> the nodes it runs on

    # --- reads ------------------------------------------------------------------------------------
    def version(self) -> Tuple[int, int, int]:
        return (22, 5, 8)

    def nodes(self, names: Optional[NodeSpec] = None) -> List[Node]:
        wanted = node_names(names) if names is not None else None
        if wanted is not None and len(wanted) == 1:   # as the client: one name is a single-node read
            return [self.node(wanted[0])]
        return self.fleet_nodes(wanted)

    def fleet_nodes(self, among: Optional[Iterable[str]] = None) -> List[Node]:
        self.reads.append(("fleet",))
        if self.fleet_reads_fail:
            raise CommandError(["scontrol", "show", "node"], 1, "Unable to contact slurm controller")
        self._tick()
        wanted = set(among) if among is not None else None
        return [self._node(x) for x in sorted(self.n) if wanted is None or x in wanted]

    def node(self, name: str) -> Node:
        self.reads.append(("node", name))
        return self._node(name)

    def jobs(self, job_ids: Optional[Iterable[int]] = None) -> List[Job]:
        self.reads.append(("jobs",))
        self._tick()
        wanted = set(job_ids) if job_ids is not None else None
        return [j for jid, j in self.j.items() if wanted is None or jid in wanted]

    def job(self, job_id: int) -> Job:
        self.reads.append(("job", job_id))
        self._tick()
        if job_id not in self.j:
            raise JobNotFound(f"job {job_id} not found")
        return self.j[job_id]

    def partitions(self, timeout: Optional[float] = None) -> List[Partition]:
        self.reads.append(("partitions",))
        return [Partition(p, tuple(ns)) for p, ns in self.parts.items()]

    def partition(self, name: str, timeout: Optional[float] = None) -> Partition:
        self.reads.append(("partition", name))
        return Partition(name, tuple(self.parts[name]))

    def reservations(self) -> List[Reservation]:
        return [Reservation(k, tuple(v)) for k, v in self.resv.items()]

    def running_config(self) -> Dict[str, str]:
        return {}

    def job_submit_plugins(self) -> List[str]:
        return list(self.job_submit)

    def expedited_requeue_available(self) -> bool:
        return False

    # --- nodes and partitions ---------------------------------------------------------------------
    def drain(self, nodes: NodeSpec, reason: str) -> List[str]:
        check_reason(reason)                     # what the real client refuses before calling Slurm
        got = node_names(nodes)
        self.calls.append(("drain", tuple(got), reason))
        for x in got:
            self._drain(x, reason)
        return got

    def resume(self, nodes: NodeSpec) -> List[str]:
        got = node_names(nodes)
        self.calls.append(("resume", tuple(got)))
        for x in got:
            self.n[x] = replace(self.n[x], flags=self.n[x].flags - {"DRAIN"}, reason="", reason_time="")
        return got

    def reboot(self, nodes: NodeSpec, reason: str) -> List[str]:
        check_reason(reason)
        got = node_names(nodes)
        self.calls.append(("reboot", tuple(got), reason))
        return got

    def update_node(self, name: str, **fields: object) -> None:
        if "Reason" in fields:
            check_reason(str(fields["Reason"]))
        self.calls.append(("update_node", name, tuple(sorted(fields.items()))))
        if "Comment" in fields:
            self.n[name] = replace(self.n[name], comment=str(fields["Comment"]))

    def set_partition_nodes(self, partition: str, nodes: NodeSpec) -> None:
        self.calls.append(("partition", partition, tuple(node_names(nodes))))
        self.parts[partition] = node_names(nodes)

    # --- jobs -------------------------------------------------------------------------------------
    def requeue(self, job_id: int, hold: bool = False) -> None:
        self.calls.append(("requeue", job_id, hold))
        j = self.j[job_id]
        self._free(j.nodes)
        self.j[job_id] = replace(j, state="COMPLETING", nodes=(), restart_count=j.restart_count + 1, held=hold,
                                 reason="JobHeldAdmin" if hold else "BeginTime")
        self.requeuing.add(job_id)

    def release(self, job_id: int) -> None:
        self.calls.append(("release", job_id))
        self.j[job_id] = replace(self.j[job_id], held=False, reason="BeginTime")

    def update_job(self, job_id: int, **fields: object) -> None:
        self.calls.append(("update", job_id, tuple(sorted(fields.items()))))
        j = self.j[job_id]
        if "ExcNodeList" in fields:
            j = replace(j, excluded_nodes=tuple(node_names(str(fields["ExcNodeList"]))))
        if "NumNodes" in fields:
            j = replace(j, num_nodes=int(str(fields["NumNodes"])))
        if "AdminComment" in fields:
            j = replace(j, admin_comment=str(fields["AdminComment"]))
        if fields.get("StartTime") == "now" and j.state == "PENDING":
            j = replace(j, reason="None")
        self.j[job_id] = j

    def shrink(self, job_id: int, keep: NodeSpec, timeout: Optional[float] = None) -> None:
        kept = tuple(node_names(keep))
        self.calls.append(("shrink", job_id, kept))
        j = self.j[job_id]
        self._free([x for x in j.nodes if x not in kept])
        self.j[job_id] = replace(j, nodes=kept, num_nodes=len(kept))

    def submit(self, argv_or_script: Union[Sequence[str], str], *, env: Optional[Mapping[str, str]] = None,
               cwd: Optional[str] = None, timeout: Optional[float] = None) -> int:
        raise NotImplementedError("FakeSlurm runs no batch scripts: add_job() places a job, or override submit")

    def notify(self, job_id: int, message: str) -> None:
        self.calls.append(("notify", job_id, message))

    def cancel(self, job_id: int, signal: Optional[str] = None) -> None:
        self.calls.append(("cancel", job_id))
        j = self.j[job_id]
        self._free(j.nodes)
        self.j[job_id] = replace(j, state="CANCELLED", nodes=())

    def steps(self, job_id: int, name: Optional[str] = None, on: Sequence[str] = ()) -> List[int]:
        self.reads.append(("steps", job_id))
        return [s for s in self.running_steps.get(job_id, []) if name is None or self.step_names.get((job_id, s)) == name
                if not on or set(on) & set(self.step_nodes.get((job_id, s), ()))]

    def cancel_step(self, job_id: int, step: int) -> None:
        self.calls.append(("cancel_step", job_id, step))
        self.running_steps[job_id] = [x for x in self.running_steps.get(job_id, []) if x != step]

    # --- reservations -----------------------------------------------------------------------------
    def create_reservation(self, nodes: NodeSpec, *, name: Optional[str] = None, start: str = "now",
                           duration: str = "UNLIMITED", users: Sequence[str] = ("root",),
                           flags: Sequence[str] = ("MAINT", "IGNORE_JOBS")) -> str:
        name = name or f"resv_{len(self.resv) + 1}"
        assert name not in self.resv, f"reservation {name} exists"
        self.resv[name] = node_names(nodes)
        return name

    def delete_reservation(self, name: str) -> None:
        del self.resv[name]

    # --- what the tests do to it ------------------------------------------------------------------
    def add_job(self, n: int, spec: Optional[FtSpec] = None, partition: str = "train",
                nodes: Optional[Sequence[str]] = None, **fields: object) -> int:
        """A RUNNING job (100, 101, ...) on `nodes`, else the first n nodes of `partition`, tagged with
        `spec` in Comment."""
        jid = 100 + len(self.j)
        got = tuple(nodes or self.parts[partition][:n])
        for x in got:
            self.n[x] = replace(self.n[x], state="ALLOCATED")
        self.j[jid] = Job(jid, partition, "RUNNING", partition=partition, nodes=got, num_nodes=n,
                          comment=encode(spec) if spec else "", requeue=True, **fields)
        return jid

    def fail(self, name: str, reason: str = XID79) -> None:
        """What a health check does to a failed node (not a call of the code under test)."""
        self._drain(name, reason)

    # --- the model ----------------------------------------------------------------------------------
    def _node(self, x: str) -> Node:
        parts = tuple(p for p, ns in self.parts.items() if x in ns)
        held = any(x in r for r in self.resv.values())
        return replace(self.n[x], partitions=parts,
                       flags=self.n[x].flags | ({"MAINTENANCE", "RESERVED"} if held else set()))

    def _drain(self, x: str, reason: str) -> None:
        self.n[x] = replace(self.n[x], flags=self.n[x].flags | {"DRAIN"}, reason=reason,
                            reason_time=time.strftime("%Y-%m-%dT%H:%M:%S"))

    def _free(self, nodes: Iterable[str]) -> None:
        for x in nodes:
            if self.n[x].state != "DOWN":
                self.n[x] = replace(self.n[x], state="IDLE")

    def _tick(self) -> None:
        for jid in list(self.requeuing):         # one read later the requeue is done: PENDING
            self.requeuing.discard(jid)
            self.j[jid] = replace(self.j[jid], state="PENDING")
            return
        for jid, j in self.j.items():
            if j.state == "PENDING" and not j.held and j.reason != "BeginTime":
                free = [x for x in self.parts.get(j.partition, ()) if self.n[x].available
                        and self.n[x].state == "IDLE" and x not in j.excluded_nodes]
                if len(free) >= j.num_nodes:
                    got = tuple(free[:j.num_nodes])
                    for x in got:
                        self.n[x] = replace(self.n[x], state="ALLOCATED")
                    self.j[jid] = replace(j, state="RUNNING", nodes=got, reason="None")
                else:
                    self.j[jid] = replace(j, reason="Resources")
