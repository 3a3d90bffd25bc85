"""The journal: SQLite file, root-only permissions, intent/result records, one open incident per job."""
from __future__ import annotations

import os
import stat

import pytest

from slurm_ft.errors import ConfigError
from slurm_ft.fleet import db
from slurm_ft.fleet.lifecycle.node_history import Store
from slurm_ft.fleet.recovery import journal as jn


def _open(conn, job_id=7, now=100.0):
    return jn.open_incident(conn, job_id=job_id, nodes=["gpu002"], faults=["gpu002: slurm-ft: XID79 gpu3"],
                            partition="train", restart_count=0, job_nodes=64, ckpt_step=40, fault_at=99.5,
                            now=now)


def test_creates_root_only_dir_and_file_in_wal_mode(tmp_path):
    path = tmp_path / "state" / "journal.db"
    conn = jn.connect(path)
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.schema_version(conn, jn.COMPONENT) == len(jn.MIGRATIONS)


def test_refuses_world_writable_state_dir(tmp_path):
    d = tmp_path / "state"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(ConfigError, match="writable by others"):
        jn.connect(d / "journal.db")


def test_refuses_a_file_that_is_not_a_journal(tmp_path):
    p = tmp_path / "journal.db"
    p.write_bytes(b"this is not sqlite" * 100)
    os.chmod(p, 0o600)
    with pytest.raises(ConfigError, match="not a usable slurm-ft journal"):
        jn.connect(p)


def test_incident_round_trip_with_intent_and_result(tmp_path):
    conn = jn.connect(tmp_path / "j.db")
    iid = _open(conn)
    sid = jn.record_intent(conn, iid, "requeue", 101.0, "at once")
    inc = jn.incidents(conn)[0]
    assert inc.open and inc.status == "open" and inc.nodes == ("gpu002",) and inc.job_nodes == 64
    assert inc.step("requeue").outcome == "" and not inc.done("requeue")    # intent only: a crash here redoes it
    jn.record_result(conn, sid, "ok", 101.2)
    jn.update_incident(conn, iid, spares=["gpu065"], shrink_to=None)
    jn.close_incident(conn, iid, "recovered", 103.0)
    inc = jn.incidents(conn)[0]
    assert inc.done("requeue") and inc.step("requeue").done_at == 101.2 and inc.step("requeue").detail == "at once"
    assert inc.spares == ("gpu065",) and inc.status == "recovered" and inc.closed_at == 103.0
    assert [s.name for s in inc.steps] == ["open", "requeue"]


def test_never_two_open_incidents_for_one_job(tmp_path):
    conn = jn.connect(tmp_path / "j.db")
    first = _open(conn)
    with pytest.raises(jn.AlreadyOpen):
        _open(conn)
    _open(conn, job_id=8)                   # another job is fine
    jn.close_incident(conn, first, "recovered", 110.0)
    _open(conn, now=200.0)                  # and the same job again once the first closed
    assert [i.job_id for i in jn.incidents(conn, open_only=True)] == [8, 7]


def test_survives_a_reopen_and_other_components_add_tables(tmp_path):
    path = tmp_path / "j.db"
    conn = jn.connect(path)
    _open(conn)
    conn.close()
    conn = jn.connect(path)
    assert len(jn.incidents(conn)) == 1
    v = db.ensure_schema(conn, "lifecycle", ["CREATE TABLE node_history (node TEXT, state TEXT, at REAL)"])
    assert v == 1 and db.schema_version(conn, "lifecycle") == 1
    assert db.ensure_schema(conn, "lifecycle", ["CREATE TABLE node_history (node TEXT, state TEXT, at REAL)"]) == 1


def _tables(conn):
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_each_subsystem_makes_its_own_tables_and_opening_the_file_makes_none(tmp_path):
    path = tmp_path / "state" / db.FILE_NAME
    assert _tables(db.connect(path)) == set()
    with Store(str(path.parent)) as store:          # the lifecycle alone: no recovery table
        assert "node_state" in _tables(store.db) and "incidents" not in _tables(store.db)
        assert db.schema_version(store.db, jn.COMPONENT) == 0
        jn.ensure(store.db)                         # a reader of incidents asks for them
        assert {"incidents", "steps", "placements"} <= _tables(store.db)
        assert jn.incidents(store.db) == []
    conn = jn.connect(path)                         # the controller's own open: nothing applied twice
    assert db.schema_version(conn, jn.COMPONENT) == len(jn.MIGRATIONS)
    assert db.schema_version(conn, "lifecycle") == 1


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "j.db"
    conn = jn.connect(path)
    conn.execute("UPDATE schema SET version = 99 WHERE component = 'recovery'")
    conn.close()
    with pytest.raises(ConfigError, match="newer than this slurm-ft"):
        jn.connect(path)


def test_state_keeps_open_and_recent_incidents(tmp_path):
    conn = jn.connect(tmp_path / "j.db")
    old = _open(conn, job_id=1, now=10.0)
    jn.close_incident(conn, old, "recovered", 11.0)
    _open(conn, job_id=2, now=5.0)          # open, however old
    recent = _open(conn, job_id=3, now=1000.0)
    jn.close_incident(conn, recent, "recovered", 1001.0)
    assert sorted(i.job_id for i in jn.state(conn, now=1100.0, history_s=500)) == [2, 3]


def test_bad_outcome_is_a_bug(tmp_path):
    conn = jn.connect(tmp_path / "j.db")
    sid = jn.record_intent(conn, _open(conn), "swap", 1.0)
    with pytest.raises(ValueError):
        jn.record_result(conn, sid, "maybe", 2.0)


def test_placements_keep_each_run_first_seen_and_forget_old_runs_and_gone_jobs(tmp_path):
    from slurm_ft.slurm.types import Job
    conn = jn.connect(tmp_path / "j.db")

    def run(job_id, restart, nodes, state="RUNNING"):
        return Job(job_id=job_id, name="t", state=state, nodes=tuple(nodes), restart_count=restart)

    jn.record_placements(conn, [run(7, 0, ["gpu001", "gpu002"]), run(8, 0, [], "PENDING")], {}, 10.0)
    first = jn.placements(conn)
    assert list(first) == [7] and first[7][0].nodes == ("gpu001", "gpu002") and first[7][0].seen_at == 10.0
    jn.record_placements(conn, [run(7, 0, ["gpu001", "gpu002"])], first, 20.0)    # seen again: first sight kept
    assert jn.placements(conn)[7][0].seen_at == 10.0
    jn.record_placements(conn, [run(7, 1, ["gpu001", "gpu003"])], jn.placements(conn), 30.0)
    jn.record_placements(conn, [run(7, 2, ["gpu004", "gpu003"])], jn.placements(conn), 40.0)
    assert sorted(jn.placements(conn)[7]) == [1, 2]          # the run before the current one is kept
    jn.record_placements(conn, [], jn.placements(conn), 50.0)                         # left the queue
    assert jn.placements(conn) == {}


def test_a_journal_from_before_the_path_column_keeps_each_incident_on_its_path(tmp_path):
    """Schema 2 journals (before `path`): an open hot-spare incident is read from its note's mark and
    carries on on the in-allocation path; any other is the requeue path. New incidents keep theirs."""
    import sqlite3
    path = tmp_path / "state" / "journal.db"
    path.parent.mkdir(mode=0o700)
    old = sqlite3.connect(str(path))
    db.ensure_schema(old, jn.COMPONENT, jn.MIGRATIONS[:2])
    for job, note in ((7, "hot-spare: 1 hot spare(s), 3 training nodes"), (8, "checkpoint hold: unreadable")):
        old.execute("INSERT INTO incidents(job_id, status, nodes, opened_at, note) VALUES (?, 'open', '[\"n1\"]', 1.0, ?)",
                    (job, note))
    old.commit()
    old.close()
    conn = jn.connect(path)
    assert db.schema_version(conn, jn.COMPONENT) == len(jn.MIGRATIONS) == 4
    assert {i.job_id: i.path for i in jn.incidents(conn)} == {7: "in_allocation", 8: "requeue"}
    assert {i.job_submit for i in jn.incidents(conn)} == {""}      # unknown: matched by id and restart count
    new = jn.open_incident(conn, job_id=9, nodes=["n2"], faults=[], partition="train", restart_count=0, job_nodes=4,
                           ckpt_step=None, fault_at=None, now=2.0, path="replica_group", note="replica groups: 2 of 2")
    assert [i.path for i in jn.incidents(conn) if i.id == new] == ["replica_group"]


def test_an_incident_keeps_the_jobs_submit_time_as_slurm_printed_it(tmp_path):
    """Schema 4: what tells this job's incidents from an older job's with the same id (policies/common.py)."""
    conn = jn.connect(tmp_path / "state" / "journal.db")
    iid = jn.open_incident(conn, job_id=7, nodes=["n1"], faults=[], partition="train", restart_count=0, job_nodes=4,
                           ckpt_step=None, fault_at=None, now=1.0, job_submit="2026-12-07T11:00:00")
    assert [i.job_submit for i in jn.incidents(conn) if i.id == iid] == ["2026-12-07T11:00:00"]
