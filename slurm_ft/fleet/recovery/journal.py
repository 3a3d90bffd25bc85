"""The controller's journal: the recovery tables (incidents, their steps, placements) in the controller
host's SQLite file (fleet/db.py).

Every recovery step is written twice: its intent before the controller acts, its result after. A
controller killed at any point reads the journal back on restart and the pure plan carries each open
incident on from where it stopped; every act checks Slurm before it writes, so redoing an intent whose
result is missing is harmless.

The other subsystems that read or write incidents on a connection of their own call `ensure(conn)`.
"""
from __future__ import annotations

import json
import os
import sqlite3
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, cast

from slurm_ft.errors import ConfigError
from slurm_ft.fleet import db
from slurm_ft.fleet.recovery.records import Incident, Placement, StepRecord, same_submit
from slurm_ft.job.paths import IN_ALLOCATION, REQUEUE
from slurm_ft.slurm.types import Job

if TYPE_CHECKING:
    from typing import TypedDict

    from typing_extensions import Unpack

    class _Update(TypedDict, total=False):
        """The incident fields update_incident may set (_FIELDS)."""
        status: str
        spares: Sequence[str]
        shrink_to: Optional[int]
        note: str
        path: str
        nodes: Sequence[str]
        faults: Sequence[str]

COMPONENT = "recovery"

# Append only: each entry is one schema version of the recovery tables.
MIGRATIONS: List[str] = [
    """
    CREATE TABLE incidents (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id        INTEGER NOT NULL,
        status        TEXT    NOT NULL,           -- open, waiting, recovered, gave_up, abandoned
        nodes         TEXT    NOT NULL,           -- JSON list of failed nodes
        faults        TEXT    NOT NULL DEFAULT '[]',
        partition     TEXT    NOT NULL DEFAULT '',
        spares        TEXT    NOT NULL DEFAULT '[]',
        restart_count INTEGER NOT NULL DEFAULT 0,
        job_nodes     INTEGER NOT NULL DEFAULT 0,
        shrink_to     INTEGER,
        ckpt_step     INTEGER,
        opened_at     REAL    NOT NULL,
        fault_at      REAL,
        closed_at     REAL,
        note          TEXT    NOT NULL DEFAULT ''
    );
    -- never two recoveries of one job at once
    CREATE UNIQUE INDEX incidents_one_open_per_job ON incidents(job_id) WHERE closed_at IS NULL;
    CREATE INDEX incidents_job ON incidents(job_id);
    CREATE TABLE steps (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        incident_id INTEGER NOT NULL REFERENCES incidents(id),
        name        TEXT    NOT NULL,
        intent_at   REAL    NOT NULL,
        done_at     REAL,
        outcome     TEXT    NOT NULL DEFAULT '',  -- '' = intent only, else ok, skipped or failed
        detail      TEXT    NOT NULL DEFAULT ''
    );
    CREATE INDEX steps_incident ON steps(incident_id);
    """,
    """
    -- where each fault-tolerant job ran, per run (restart count), as the controller saw it RUNNING:
    -- a job that Slurm itself moved (expedited requeue, >= 25.11) still names the node that failed
    CREATE TABLE placements (
        job_id        INTEGER NOT NULL,
        restart_count INTEGER NOT NULL,
        nodes         TEXT    NOT NULL,           -- JSON list
        seen_at       REAL    NOT NULL,           -- when the controller first saw this run
        PRIMARY KEY (job_id, restart_count)
    );
    """,
    """
    -- the recovery policy that owns the incident (fleet/recovery/policies): '' in rows written before this
    -- column, read back from their note (LEGACY_NOTE_PATHS)
    ALTER TABLE incidents ADD COLUMN path TEXT NOT NULL DEFAULT '';
    """,
    """
    -- the job's SubmitTime as Slurm showed it ('' in rows written before this column): tells this job's
    -- incidents and runs from those of an older job with the same id (policies/common.py, of_job)
    ALTER TABLE incidents ADD COLUMN job_submit TEXT NOT NULL DEFAULT '';
    ALTER TABLE placements ADD COLUMN job_submit TEXT NOT NULL DEFAULT '';
    """,
]
# Before the path had its column, an incident's note started with its path's mark (journals written by
# slurm-ft before schema 3): read so, they carry on where they stopped.
LEGACY_NOTE_PATHS = (("hot-spare: ", IN_ALLOCATION),)


def connect(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open the file (db.connect) with the recovery tables in it."""
    conn = db.connect(path)
    try:
        ensure(conn)
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{path}: not a usable slurm-ft journal: {exc}") from None
    return conn


def ensure(conn: sqlite3.Connection) -> None:
    """The recovery tables, on a connection opened elsewhere (applied once per schema version)."""
    db.ensure_schema(conn, COMPONENT, MIGRATIONS)


# --- incidents --------------------------------------------------------------------------------------

def open_incident(conn: sqlite3.Connection, *, job_id: int, nodes: Sequence[str], faults: Sequence[str],
                  partition: str, restart_count: int, job_nodes: int, ckpt_step: Optional[int],
                  fault_at: Optional[float], now: float, detail: str = "", path: str = REQUEUE, note: str = "",
                  job_submit: str = "") -> int:
    """Insert the incident and its `open` step in one transaction; a second open one for the job is refused."""
    try:
        with db.transaction(conn):
            cur = conn.execute(
                "INSERT INTO incidents(job_id, status, nodes, faults, partition, restart_count, job_nodes,"
                " ckpt_step, opened_at, fault_at, path, note, job_submit)"
                " VALUES (?, 'open', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job_id, json.dumps(list(nodes)), json.dumps(list(faults)), partition, restart_count,
                 job_nodes, ckpt_step, now, fault_at, path, note, job_submit))
            incident_id = _rowid(cur)
            conn.execute("INSERT INTO steps(incident_id, name, intent_at, done_at, outcome, detail)"
                         " VALUES (?, 'open', ?, ?, 'ok', ?)", (incident_id, now, now, detail))
    except sqlite3.IntegrityError:
        raise AlreadyOpen(f"job {job_id} already has an open incident") from None
    return incident_id


class AlreadyOpen(Exception):
    pass


def record_intent(conn: sqlite3.Connection, incident_id: int, name: str, now: float, detail: str = "") -> int:
    cur = conn.execute("INSERT INTO steps(incident_id, name, intent_at, detail) VALUES (?, ?, ?, ?)",
                       (incident_id, name, now, detail))
    return _rowid(cur)


def _rowid(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just added (sqlite3 sets lastrowid on every INSERT)."""
    assert cur.lastrowid is not None
    return cur.lastrowid


def record_result(conn: sqlite3.Connection, step_id: int, outcome: str, now: float, detail: str = "") -> None:
    if outcome not in ("ok", "skipped", "failed"):
        raise ValueError(f"bad outcome {outcome!r}")
    conn.execute("UPDATE steps SET done_at = ?, outcome = ?, detail = CASE WHEN ? = '' THEN detail ELSE ? END"
                 " WHERE id = ?", (now, outcome, detail, detail, step_id))


_FIELDS = {"status", "spares", "shrink_to", "note", "path", "nodes", "faults"}


def update_incident(conn: sqlite3.Connection, incident_id: int, **fields: Unpack[_Update]) -> None:
    bad = set(fields) - _FIELDS
    if bad:
        raise ValueError(f"cannot update {sorted(bad)}")
    values = {k: json.dumps(list(cast("Sequence[str]", v))) if k in ("spares", "nodes", "faults") else v
              for k, v in fields.items()}
    sets = ", ".join(f"{k} = ?" for k in values)
    conn.execute(f"UPDATE incidents SET {sets} WHERE id = ?", (*values.values(), incident_id))


def close_incident(conn: sqlite3.Connection, incident_id: int, status: str, now: float, note: str = "") -> bool:
    """Close it (once: a closed incident keeps its first close); whether this call closed it."""
    cur = conn.execute("UPDATE incidents SET status = ?, closed_at = ?, note = CASE WHEN ? = '' THEN note ELSE ? END"
                       " WHERE id = ? AND closed_at IS NULL", (status, now, note, note, incident_id))
    return cur.rowcount == 1


def incidents(conn: sqlite3.Connection, *, open_only: bool = False, job_id: Optional[int] = None,
              since: Optional[float] = None, limit: Optional[int] = None) -> List[Incident]:
    """Incidents with their steps, oldest first (the last `limit` when limited)."""
    where: List[str] = []
    args: List[float] = []
    if open_only:
        where.append("closed_at IS NULL")
    if job_id is not None:
        where.append("job_id = ?")
        args.append(job_id)
    if since is not None:
        where.append("(closed_at IS NULL OR opened_at >= ?)")
        args.append(since)
    sql = "SELECT * FROM incidents" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC"
    if limit:
        sql += f" LIMIT {int(limit)}"
    rows = list(reversed(conn.execute(sql, args).fetchall()))
    if not rows:
        return []
    ids = [r["id"] for r in rows]
    steps: Dict[int, List[StepRecord]] = {i: [] for i in ids}
    marks = ",".join("?" * len(ids))
    for s in conn.execute(f"SELECT * FROM steps WHERE incident_id IN ({marks}) ORDER BY id", ids):
        steps[s["incident_id"]].append(StepRecord(s["name"], s["intent_at"], s["done_at"], s["outcome"], s["detail"]))
    return [_incident(r, steps[r["id"]]) for r in rows]


def state(conn: sqlite3.Connection, now: float, history_s: float = 30 * 86400.0) -> List[Incident]:
    """What the plan needs: every open incident and those of the last `history_s` (max-restarts, spare ranking)."""
    return incidents(conn, since=now - history_s)


# --- placements -------------------------------------------------------------------------------------

def placements(conn: sqlite3.Connection) -> Dict[int, Dict[int, Placement]]:
    """job id -> restart count -> where that run of the job was seen running."""
    out: Dict[int, Dict[int, Placement]] = {}
    for r in conn.execute("SELECT * FROM placements"):
        out.setdefault(r["job_id"], {})[r["restart_count"]] = Placement(
            r["job_id"], r["restart_count"], tuple(json.loads(r["nodes"])), r["seen_at"], r["job_submit"])
    return out


def record_placements(conn: sqlite3.Connection, queued: Iterable[Job], known: Dict[int, Dict[int, Placement]],
                      now: float) -> None:
    """Remember each run of a job seen running (Job.running) for the first time; forget runs older than the one before
    the current, and jobs no longer in the queue. `queued`: the FT jobs in the queue, `known`: the rows."""
    jobs = {j.job_id: j for j in queued}
    # an id that names another job now (its current run under another SubmitTime, or a restart count
    # above the job's): every run recorded under it was the older job's
    reused = {jid for jid, runs in known.items() if jid in jobs and any(
        rc > jobs[jid].restart_count or (rc == jobs[jid].restart_count
                                         and not same_submit(p.job_submit, jobs[jid].submit_time))
        for rc, p in runs.items())}
    new = [j for j in jobs.values() if j.running and j.nodes
           and (j.job_id in reused or j.restart_count not in known.get(j.job_id, {}))]
    old = [(jid, rc) for jid, runs in known.items() for rc in runs
           if jid not in jobs or rc < jobs[jid].restart_count - 1]
    if not new and not old and not reused:
        return
    with db.transaction(conn):
        for jid in reused:
            conn.execute("DELETE FROM placements WHERE job_id = ?", (jid,))
        _insert_placements(conn, [Placement(j.job_id, j.restart_count, j.nodes, now, j.submit_time) for j in new])
        for jid, rc in old:
            conn.execute("DELETE FROM placements WHERE job_id = ? AND restart_count = ?", (jid, rc))


def add_placements(conn: sqlite3.Connection, runs: Iterable[Placement]) -> None:
    """Runs learnt otherwise than by seeing them (a failed prolog's wake): kept like those seen."""
    runs = list(runs)
    if not runs:
        return
    with db.transaction(conn):
        _insert_placements(conn, runs)


def _insert_placements(conn: sqlite3.Connection, runs: Iterable[Placement]) -> None:
    for p in runs:
        conn.execute("INSERT OR IGNORE INTO placements(job_id, restart_count, nodes, seen_at, job_submit)"
                     " VALUES (?, ?, ?, ?, ?)", (p.job_id, p.restart_count, json.dumps(list(p.nodes)), p.seen_at,
                                                 p.job_submit))


def _incident(r: sqlite3.Row, steps: List[StepRecord]) -> Incident:
    return Incident(
        id=r["id"], job_id=r["job_id"], status=r["status"], nodes=tuple(json.loads(r["nodes"])),
        faults=tuple(json.loads(r["faults"])), partition=r["partition"], spares=tuple(json.loads(r["spares"])),
        restart_count=r["restart_count"], job_nodes=r["job_nodes"], shrink_to=r["shrink_to"],
        ckpt_step=r["ckpt_step"], opened_at=r["opened_at"], fault_at=r["fault_at"], closed_at=r["closed_at"],
        note=r["note"], steps=tuple(steps), path=r["path"] or legacy_path(r["note"]), job_submit=r["job_submit"])


def legacy_path(note: str) -> str:
    """The path of an incident journaled before the path had its column, from its note's mark."""
    return next((path for mark, path in LEGACY_NOTE_PATHS if note.startswith(mark)), REQUEUE)
