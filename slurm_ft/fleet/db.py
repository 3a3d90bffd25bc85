"""The controller host's SQLite file (stdlib): one under the state dir, root-only, shared by the
subsystems that keep tables in it (recovery's incidents, the lifecycle's node history, job progress).

Opening the file applies no one's schema: each subsystem calls `ensure_schema(conn, component,
[sql_v1, sql_v2, ...])` for the tables it uses; a component's migrations are applied once, in order,
and its version is kept in the `schema` table.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from types import TracebackType
from typing import Iterable, Literal, Optional, Sequence, Type

from slurm_ft.errors import ConfigError
from slurm_ft.fsutil import refuse_unsafe

FILE_NAME = "journal.db"


def path_in(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / FILE_NAME


def connect(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open (creating 0700 dir / 0600 file) the file, in WAL mode; no tables are made here."""
    p = Path(path)
    if not p.parent.exists():
        p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    refuse_unsafe(p.parent, "state directory")
    if not p.exists():
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o600))
    refuse_unsafe(p, "journal")
    try:
        conn = sqlite3.connect(str(p), timeout=10.0, isolation_level=None)  # autocommit; explicit BEGIN
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")   # WAL + NORMAL: durable across a process kill
        conn.execute("PRAGMA foreign_keys=ON")
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{p}: not a usable slurm-ft journal: {exc}") from None
    return conn


def ensure_schema(conn: sqlite3.Connection, component: str, migrations: Sequence[str]) -> int:
    """Apply the component's migrations it has not seen yet; return its schema version."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
    have = schema_version(conn, component)
    if have > len(migrations):
        raise ConfigError(f"journal schema for {component} is version {have}, newer than this slurm-ft "
                          f"({len(migrations)}): upgrade slurm-ft")
    for version in range(have + 1, len(migrations) + 1):
        with transaction(conn):
            for statement in _statements(migrations[version - 1]):
                conn.execute(statement)
            conn.execute("INSERT INTO schema(component, version) VALUES (?, ?) "
                         "ON CONFLICT(component) DO UPDATE SET version = excluded.version", (component, version))
    return max(have, len(migrations))


def schema_version(conn: sqlite3.Connection, component: str) -> int:
    """The component's schema version in this file; 0 where it has none (or no component has any)."""
    try:
        row = conn.execute("SELECT version FROM schema WHERE component = ?", (component,)).fetchone()
    except sqlite3.OperationalError:   # no `schema` table: nothing was ever applied
        return 0
    return row[0] if row else 0


class transaction:
    """`with transaction(conn):` BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
        return False


def _statements(sql: str) -> Iterable[str]:
    # Our migrations hold no semicolons inside literals, so a plain split is enough.
    for part in sql.split(";"):
        lines = [ln for ln in part.splitlines() if ln.strip() and not ln.strip().startswith("--")]
        if lines:
            yield "\n".join(lines)
