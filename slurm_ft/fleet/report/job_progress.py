"""What goodput needs from a job's checkpoint directory and the journal: bounded reads, one table.

The directory is the user's and the reader may be root: the starts log is read through the checkpoint
scanner's filesystem (job/ckptfs.py: regular files only, O_NOFOLLOW, its last MAX_STARTS_BYTES),
progress reports through `heartbeat.read_all` (bounded per file and in count), and the whole read runs
in a worker thread that is given up on after a deadline (a dead network filesystem must not hang a
sweep). A directory is read once however many jobs name it (read_dir, then files_of per job).
Everything read is data: parsed, checked, never executed; a malformed line is skipped.

The journal keeps, per run of a job, the first and last progress slurm-ft saw (table job_progress),
so that the step time and a restarted run's first step are measured after the reports are replaced.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurm_ft import heartbeat
from slurm_ft.fleet.recovery import journal
from slurm_ft.fleet.report.goodput import Goodput, Point, Start, compute
from slurm_ft.fleet.db import ensure_schema
from slurm_ft.fleet.report.pool_status import gpus_in_gres
from slurm_ft.job import trust
from slurm_ft.job.ckptfs import LocalFS, NotRegular
from slurm_ft.job.startprep import STARTS_LOG

if TYPE_CHECKING:
    from typing_extensions import TypeGuard

    from slurm_ft.config import Config
    from slurm_ft.job.tag import FtSpec
    from slurm_ft.slurm.api import SlurmApi
    from slurm_ft.slurm.types import Job, Node

MAX_STARTS_BYTES = 1 << 20
MAX_RANKS_READ = 4096
READ_DEADLINE_S = 10.0
KEEP_S = 30 * 86400.0           # runs last seen longer ago are forgotten

COMPONENT = "goodput"
MIGRATIONS = ["""
    CREATE TABLE job_progress (
        job_id     INTEGER NOT NULL,
        restart    INTEGER NOT NULL,
        launch     INTEGER NOT NULL,
        first_step INTEGER NOT NULL,
        first_t    REAL    NOT NULL,
        last_step  INTEGER NOT NULL,
        last_t     REAL    NOT NULL,
        PRIMARY KEY (job_id, restart, launch)
    );
"""]


class Unreadable(Exception):
    """The checkpoint directory could not be read in time (or at all): goodput is not known."""


@dataclass
class JobFiles:
    starts: List[Start]
    progress: List[Point]           # the current run's first step (its earliest rank) and latest report (its most advanced)


@dataclass
class DirFiles:
    """What one checkpoint directory holds for goodput, for every job that names it."""
    starts_text: str                # the starts log's last MAX_STARTS_BYTES, whole lines
    reports: List[Dict[str, Any]]   # the progress reports (heartbeat format), every rank's


def _num(v: object) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e11


def _int(v: object) -> TypeGuard[int]:
    return type(v) is int and 0 <= v < 1 << 40


def parse_point(rec: object, job: str, first: bool = False) -> Optional[Point]:
    """A progress report (heartbeat format) of job `job`, or None; with `first`, the first step the
    reporting process reported (first_step, first_t: the run's first step after its start), or None."""
    if not isinstance(rec, dict) or str(rec.get("job", "")) != job:
        return None
    step, t = (rec.get("first_step"), rec.get("first_t")) if first else (rec.get("step"), rec.get("t"))
    restart, launch = rec.get("restart", 0), rec.get("launch", 0)
    if not (_int(step) and _num(t) and _int(restart) and _int(launch)):
        return None
    return Point(restart, launch, step, float(t))


def parse_starts(text: str, job: str) -> List[Start]:
    """The starts of job `job` in the starts log (JSON lines; anything else skipped): the starter's
    `jobstart` at each (re)start of the job, and the hot-spare supervisor's `launch` of each training step."""
    out = []
    for line in text.splitlines():
        try:
            e = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(e, dict) or e.get("event") not in ("jobstart", "launch") or str(e.get("job", "")) != job:
            continue
        if "group" in e and (e["group"] != 0 or e.get("rejoin") is True):
            continue        # a replica group's launch: the job's start is group 0's, a group's rejoin none
        t, restart, step = e.get("t"), e.get("restart", 0), e.get("step")
        launch = e.get("launch", 0) if e["event"] == "launch" else 0
        if not (_num(t) and _int(restart) and _int(launch) and (step is None or _int(step))):
            continue
        before = parse_point(e.get("before"), job)
        out.append(Start(float(t), restart, launch, step if e.get("ckpt") else None, before))
    return out


def groups_of(text: str, job: str) -> List[Dict[str, Any]]:
    """A replica-group job's groups in its latest start, from the supervisor's lines in the starts log
    (groups.py): per group its nodes, launches, faults, and whether it runs or waits parked."""
    out: Dict[int, Dict[str, Any]] = {}
    restart = -1
    for line in text.splitlines():
        try:
            e = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(e, dict) or str(e.get("job", "")) != job or not _int(e.get("restart", 0)):
            continue
        if e["event"] == "lighthouse" and e.get("restart", 0) != restart:
            restart, out = e.get("restart", 0), {}       # a new start of the job: its groups start over
        g = e.get("group")
        if not _int(g) or not 0 <= g < 10000 or e.get("restart", 0) != restart:
            continue
        rec = out.setdefault(g, {"group": g, "state": "parked", "nodes": "", "launches": 0, "faults": 0,
                                 "last_fault": None, "since": None})
        if e["event"] == "launch" and isinstance(e.get("nodes"), str) and _num(e.get("t")):
            rec.update(state="running", nodes=e["nodes"][:200], since=e["t"])
            rec["launches"] += 1
        elif e["event"] == "fault":
            rec["faults"] += 1
            rec["last_fault"] = str(e.get("reason", ""))[:200]
        elif e["event"] == "park":
            rec.update(state="parked", nodes="", since=e.get("t") if _num(e.get("t")) else None)
    return [out[g] for g in sorted(out)]


def _read_dir(ckpt_dir: str) -> DirFiles:
    try:
        raw = LocalFS(READ_DEADLINE_S, root=ckpt_dir).read_tail(os.path.join(ckpt_dir, STARTS_LOG), MAX_STARTS_BYTES)
    except NotRegular:
        raw = None
    text = (raw or b"").decode("utf-8", "replace")
    if raw is not None and len(raw) >= MAX_STARTS_BYTES:
        text = text.split("\n", 1)[-1]          # the first line read may be cut
    return DirFiles(text, list(heartbeat.read_all(ckpt_dir, MAX_RANKS_READ).values()))


def files_of(d: DirFiles, job_id: int) -> JobFiles:
    """Job `job_id`'s starts and current progress among what its directory holds."""
    job = str(job_id)
    points = [p for p in (parse_point(r, job, first) for r in d.reports for first in (False, True)) if p]
    if not points:
        return JobFiles(parse_starts(d.starts_text, job), [])
    # the latest run's first and latest steps: when its first step ended, however late slurm-ft looks
    last = max(points, key=lambda p: (p.restart, p.launch, p.step, p.t))       # ties: the latest report
    first = min((p for p in points if (p.restart, p.launch) == (last.restart, last.launch)), key=lambda p: (p.step, p.t))
    return JobFiles(parse_starts(d.starts_text, job), [first, last] if first != last else [last])


def read_dir(ckpt_dir: str, deadline_s: float = READ_DEADLINE_S) -> DirFiles:
    """The directory's starts log and progress reports, or Unreadable after `deadline_s` (the worker
    thread is then given up on, never waited for)."""
    box: Dict[str, Any] = {}        # "ok": the DirFiles, or "err": what the read raised

    def work() -> None:
        try:
            box["ok"] = _read_dir(ckpt_dir)
        except Exception as exc:        # noqa: BLE001 - any failure reading the user's dir: reported, not raised
            box["err"] = exc

    th = threading.Thread(target=work, name="goodput-read", daemon=True)
    th.start()
    th.join(deadline_s)
    if th.is_alive():
        raise Unreadable(f"{ckpt_dir}: not read within {deadline_s:g} s")
    if "err" in box:
        raise Unreadable(f"{ckpt_dir}: {box['err']}")
    files: DirFiles = box["ok"]
    return files


def read_job_files(ckpt_dir: str, job_id: int, deadline_s: float = READ_DEADLINE_S) -> JobFiles:
    """The job's starts and current progress, or Unreadable after `deadline_s`."""
    return files_of(read_dir(ckpt_dir, deadline_s), job_id)


# --- the journal's table ----------------------------------------------------------------------------

def _schema(conn: sqlite3.Connection) -> None:
    ensure_schema(conn, COMPONENT, MIGRATIONS)


def remember(conn: sqlite3.Connection, job_id: int, points: List[Point]) -> None:
    """Keep the first and the last report seen of each run."""
    _schema(conn)
    for p in points:
        conn.execute(
            "INSERT INTO job_progress(job_id, restart, launch, first_step, first_t, last_step, last_t)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(job_id, restart, launch) DO UPDATE SET"
            " first_step = CASE WHEN excluded.first_step < first_step THEN excluded.first_step ELSE first_step END,"
            " first_t = CASE WHEN excluded.first_step < first_step THEN excluded.first_t ELSE first_t END,"
            " last_step = CASE WHEN excluded.last_step > last_step THEN excluded.last_step ELSE last_step END,"
            " last_t = CASE WHEN excluded.last_step > last_step THEN excluded.last_t ELSE last_t END",
            (job_id, p.restart, p.launch, p.step, p.t, p.step, p.t))


def remembered(conn: sqlite3.Connection, job_id: int) -> List[Point]:
    _schema(conn)
    out = []
    for r in conn.execute("SELECT restart, launch, first_step, first_t, last_step, last_t FROM job_progress"
                          " WHERE job_id = ?", (job_id,)):
        out += [Point(r[0], r[1], r[2], r[3]), Point(r[0], r[1], r[4], r[5])]
    return out


def forget_before(conn: sqlite3.Connection, t: float) -> None:
    """Drop the runs last seen before `t` (finished jobs, kept a while for their final figures)."""
    _schema(conn)
    conn.execute("DELETE FROM job_progress WHERE last_t < ?", (t,))


def job_gpus(job: Job, node_gres: Sequence[str] = ()) -> int:
    """GPUs the job holds: TresPerNode ('gres/gpu:8', 'gres:gpu:h100:8') x nodes, else its nodes' Gres."""
    tres = ",".join(re.sub(r"^gres[:/]", "", part.strip()) for part in (job.tres_per_node or "").split(","))
    per_node = gpus_in_gres(tres)
    if per_node:
        return per_node * (job.num_nodes or len(job.nodes))
    return sum(gpus_in_gres(g) for g in node_gres)


def observe(conn: sqlite3.Connection, job: Job, ckpt_dir: str, gpus: int, now: float,
            deadline_s: float = READ_DEADLINE_S, read: Optional[DirFiles] = None) -> Goodput:
    """Read the job's files (bounded; `read`: its directory, already read), remember its progress, and
    compute its goodput (fleet/report/goodput.py)."""
    files = files_of(read, job.job_id) if read is not None else read_job_files(ckpt_dir, job.job_id, deadline_s)
    seen = files.progress + [s.before for s in files.starts if s.before is not None]
    remember(conn, job.job_id, seen)
    forget_before(conn, now - KEEP_S)
    return compute(job.job_id, gpus=gpus, now=now, starts=files.starts, points=remembered(conn, job.job_id),
                   faults=faults_of(conn, job.job_id))


def faults_of(conn: sqlite3.Connection, job_id: int) -> List[Tuple[int, float]]:
    """(incident id, fault time) of the job's incidents."""
    journal.ensure(conn)
    return [(i.id, i.fault_at or i.opened_at) for i in journal.incidents(conn, job_id=job_id)]


# --- jobs from Slurm ----------------------------------------------------------------------------------

def trusted_field(config: Config, client: SlurmApi) -> str:
    """The job field holding fault-tolerance tags (config controller.trust; auto asks slurmctld)."""
    setting = config.controller.trust
    return trust.resolve(setting, client.job_submit_plugins() if setting == "auto" else ())


# a job whose goodput the metrics follow: it runs, or it ran and waits to run again (requeued by a
# recovery, held by slurm-ft): its recovery is what goodput counts. One that never started has none.
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED"})
REQUEUED_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})


def followed(job: Job) -> bool:
    """The metrics read this job's directory: it runs, or it was requeued after running."""
    return job.state in RUNNING_STATES or (job.state in REQUEUED_STATES and job.restart_count > 0)


def ft_jobs(config: Config, client: SlurmApi, job_ids: Optional[Iterable[int]] = None
            ) -> List[Tuple[Job, FtSpec]]:
    """(job, its tag) of the running or recovering fault-tolerant jobs with a checkpoint dir."""
    field_ = trusted_field(config, client)
    out = []
    for j in client.jobs(job_ids):
        spec = trust.spec_of(j, field_)
        if spec is not None and spec.ckpt_dir:
            out.append((j, spec))
    return out


def goodput_of(conn: sqlite3.Connection, client: SlurmApi, job: Job, spec: FtSpec, now: float,
               read: Optional[DirFiles] = None, nodes: Optional[Mapping[str, Node]] = None) -> Goodput:
    """The job's goodput, its GPUs counted from Slurm's record (TresPerNode, else its nodes' Gres);
    `read`: its checkpoint directory, already read (read_dir); `nodes`: the caller's read of every node
    (else the job's are read: for more than one node, a read of every node)."""
    gres: List[str] = []
    if job.nodes and not job.tres_per_node:
        if nodes is not None and all(x in nodes for x in job.nodes):
            gres = [nodes[x].gres for x in job.nodes]
        else:
            gres = [n.gres for n in client.nodes(list(job.nodes))]
    return observe(conn, job, spec.ckpt_dir, job_gpus(job, gres), now, read=read)
