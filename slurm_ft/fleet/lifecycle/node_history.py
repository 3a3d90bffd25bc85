"""Node history, in the controller host's SQLite file (fleet/db.py).

Tables (component "lifecycle" of the file's schema table; recovery's incidents are beside them):
  node_state     node -> current lifecycle state, since when, why, validation job, last pass
  node_history   every transition: node, time, event, from, to, cause, actor
  breaker_drain  unused since the breaker counts from Slurm (breaker/rules.py); kept in schema v1
  lifecycle_kv   last sweep, last pool alert

Every read-decide-write runs in one `BEGIN IMMEDIATE` transaction.
"""
from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Optional

from slurm_ft.errors import ConfigError, EnvironmentProblem
from slurm_ft.fleet.lifecycle.transitions import Event, HistoryEntry, State, incidents, next_state
from slurm_ft.fleet import db

COMPONENT = "lifecycle"
# Append only: each entry is one schema version of the lifecycle tables.
MIGRATIONS: List[str] = ["""
CREATE TABLE IF NOT EXISTS node_state (
    node TEXT PRIMARY KEY, state TEXT NOT NULL, since REAL NOT NULL, cause TEXT NOT NULL DEFAULT '',
    validation_job INTEGER, validation_started REAL, last_pass REAL);
CREATE TABLE IF NOT EXISTS node_history (
    id INTEGER PRIMARY KEY, node TEXT NOT NULL, time REAL NOT NULL, event TEXT NOT NULL,
    from_state TEXT, to_state TEXT NOT NULL, cause TEXT NOT NULL DEFAULT '', actor TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS node_history_by_node ON node_history (node, time);
CREATE TABLE IF NOT EXISTS breaker_drain (
    node TEXT NOT NULL, time REAL NOT NULL, reason TEXT NOT NULL DEFAULT '', actor TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS lifecycle_kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""]


@dataclass(frozen=True)
class NodeRecord:
    node: str
    state: State
    since: float
    cause: str = ""
    validation_job: Optional[int] = None
    validation_started: Optional[float] = None
    last_pass: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        return {"node": self.node, "state": self.state.value, "since": self.since, "cause": self.cause,
                "validation_job": self.validation_job, "last_pass": self.last_pass}


class Store:
    """One connection to the journal file; use as a context manager or call close()."""

    def __init__(self, state_dir: str, *, create: bool = True) -> None:
        path = db.path_in(state_dir)
        if not create and not path.exists():
            raise ConfigError(f"{path}: no journal yet (nothing recorded)")
        try:
            self.db = db.connect(path)
            db.ensure_schema(self.db, COMPONENT, MIGRATIONS)
            self.db.execute("PRAGMA busy_timeout=30000")
        except sqlite3.Error as exc:
            raise EnvironmentProblem(f"{path}: cannot open the journal: {exc}") from None
        except OSError as exc:
            raise EnvironmentProblem(f"{path}: cannot open the journal: {exc.strerror}") from None
        self.path = path

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # --- node states and history -----------------------------------------------------------

    def record(self, node: str) -> Optional[NodeRecord]:
        row = self.db.execute("SELECT node, state, since, cause, validation_job, validation_started, last_pass "
                              "FROM node_state WHERE node = ?", (node,)).fetchone()
        return _record(row) if row else None

    def records(self) -> Dict[str, NodeRecord]:
        rows = self.db.execute("SELECT node, state, since, cause, validation_job, validation_started, last_pass "
                               "FROM node_state ORDER BY node").fetchall()
        return {r[0]: _record(r) for r in rows}

    def history(self, node: Optional[str] = None) -> List[HistoryEntry]:
        sql = "SELECT node, time, event, from_state, to_state, cause, actor FROM node_history"
        rows = self.db.execute(sql + (" WHERE node = ? ORDER BY id" if node else " ORDER BY id"),
                               (node,) if node else ()).fetchall()
        return [HistoryEntry(r[0], r[1], Event(r[2]), State(r[3]) if r[3] else None, State(r[4]), r[5], r[6])
                for r in rows]

    def history_since(self, t: float) -> List[HistoryEntry]:
        """Every node's history from time `t` on (the remediation budget's window)."""
        rows = self.db.execute("SELECT node, time, event, from_state, to_state, cause, actor FROM node_history "
                               "WHERE time >= ? ORDER BY id", (t,)).fetchall()
        return [HistoryEntry(r[0], r[1], Event(r[2]), State(r[3]) if r[3] else None, State(r[4]), r[5], r[6])
                for r in rows]

    def apply(self, node: str, event: Event, now: float, *, default: State, cause: str = "", actor: str = "",
              lemon_k: int = 0, lemon_window_s: float = 0.0) -> HistoryEntry:
        """Apply one event to one node (TransitionError if it does not fit) and record it."""
        with self._tx() as db:
            rec = self.record(node)
            current = rec.state if rec else default
            past = self.history(node)
            probe = HistoryEntry(node, now, event, current, current, cause, actor)
            count = incidents(past + [probe], now, lemon_window_s) if lemon_window_s else 0
            target = next_state(current, event, incident_count=count, lemon_k=lemon_k)
            if target is State.RMA and event is not Event.SEND_RMA:   # the lemon rule sent it there
                cause = f"{cause}; " if cause else ""
                cause += f"lemon: {count} incidents within {lemon_window_s / 86400:g} days"
            entry = HistoryEntry(node, now, event, current, target, cause, actor)
            db.execute("INSERT INTO node_history (node, time, event, from_state, to_state, cause, actor) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (node, now, event.value, current.value, target.value, cause, actor))
            keep_pass = rec.last_pass if rec else None
            if event is Event.PASS:
                keep_pass = now
            db.execute("INSERT OR REPLACE INTO node_state (node, state, since, cause, validation_job, "
                       "validation_started, last_pass) VALUES (?, ?, ?, ?, NULL, NULL, ?)",
                       (node, target.value, now, cause, keep_pass))
        return entry

    def enrol(self, node: str, state: State, now: float, *, cause: str = "", actor: str = "") -> bool:
        """Give a node its first record (no-op when it has one); True when written."""
        with self._tx() as db:
            if self.record(node) is not None:
                return False
            db.execute("INSERT INTO node_history (node, time, event, from_state, to_state, cause, actor) "
                       "VALUES (?, ?, 'enrol', NULL, ?, ?, ?)", (node, now, state.value, cause, actor))
            db.execute("INSERT INTO node_state (node, state, since, cause) VALUES (?, ?, ?, ?)",
                       (node, state.value, now, cause))
        return True

    def set_validation(self, node: str, job_id: Optional[int], started: Optional[float]) -> None:
        self.db.execute("UPDATE node_state SET validation_job = ?, validation_started = ? WHERE node = ?",
                        (job_id, started, node))

    # --- small values -----------------------------------------------------------------------

    def kv_get(self, key: str, default: str = "") -> str:
        row = self.db.execute("SELECT value FROM lifecycle_kv WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def kv_set(self, key: str, value: str) -> None:
        self._kv_set(key, value)

    def kv_set_json(self, key: str, value: Any) -> None:
        self._kv_set(key, json.dumps(value, sort_keys=True))

    def kv_get_json(self, key: str, default: Any = None) -> Any:
        raw = self.kv_get(key)
        return json.loads(raw) if raw else default

    def _kv_set(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO lifecycle_kv (key, value) VALUES (?, ?)", (key, value))


REPAIR_EVENTS = (Event.REMEDIATE, Event.REMEDIATED, Event.SEND_RMA, Event.REPAIRED, Event.VALIDATE, Event.PASS,
                 Event.FAIL, Event.RELEASE)


def repair_history(db: sqlite3.Connection, nodes: Iterable[str], since: float) -> List[HistoryEntry]:
    """What happened to `nodes` on their way back (remediation, repair, validation) since `since`, for
    `incidents`; [] when the lifecycle tables do not exist yet."""
    names = list(nodes)
    if not names:
        return []
    marks = ",".join("?" * len(names))
    events = ",".join(f"'{e.value}'" for e in REPAIR_EVENTS)
    try:
        rows = db.execute(f"SELECT node, time, event, from_state, to_state, cause, actor FROM node_history "
                          f"WHERE node IN ({marks}) AND time >= ? AND event IN ({events}) ORDER BY id",
                          (*names, since)).fetchall()
    except sqlite3.OperationalError:   # no lifecycle tables: nothing recorded
        return []
    return [HistoryEntry(r[0], r[1], Event(r[2]), State(r[3]) if r[3] else None, State(r[4]), r[5], r[6])
            for r in rows]


def _record(r: sqlite3.Row) -> NodeRecord:
    return NodeRecord(r[0], State(r[1]), r[2], r[3], r[4], r[5], r[6])
