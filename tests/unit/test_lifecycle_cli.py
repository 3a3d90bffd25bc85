"""The lifecycle commands as a person runs them: output, JSON and exit codes (Slurm modelled in memory)."""
from __future__ import annotations

import json
import os
import time

import pytest
import yaml

from slurm_ft.cli import main
from slurm_ft.fleet.lifecycle.transitions import Event, State
from slurm_ft.fleet.lifecycle.node_history import Store

from test_lifecycle_sweep import ModelSlurm   # same directory: pytest puts it on sys.path


@pytest.fixture
def env(tmp_path, monkeypatch):
    cfg = tmp_path / "slurm-ft.yaml"
    cfg.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"),
        "controller": {"job_partitions": ["train"]},
        "lifecycle": {"pool_target": 2, "spare_recheck_s": 0, "quarantine_grace_s": 0, "breaker_max_nodes": 1,
                      "breaker_max_share": 0, "metrics_path": str(tmp_path / "m.prom")}}))
    os.chmod(cfg, 0o644)
    slurm = ModelSlurm()
    monkeypatch.setattr("slurm_ft.cli.node.client_from_config", lambda config: slurm)
    monkeypatch.setenv("SLURM_FT_CONFIG", str(cfg))
    return tmp_path, slurm


def cli(capsys, *argv):
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_quarantine_repaired_history_and_list(env, capsys):
    tmp, slurm = env
    rc, out, _ = cli(capsys, "node", "quarantine", "gpu003", "--reason", "fans loud")
    assert rc == 0 and "gpu003: in_service -> quarantined (fans loud)" in out
    n = slurm.node("gpu003")
    assert n.drained and n.reason == "slurm-ft: QUARANTINED by " + n.reason.split("by ", 1)[1]
    assert "gpu003" not in slurm.parts["train"]
    rc, out, _ = cli(capsys, "node", "repaired", "gpu003", "--note", "fan replaced")
    assert rc == 0 and "quarantined -> repaired" in out and "next `slurm-ft sweep` validates gpu003" in out
    rc, out, _ = cli(capsys, "node", "history", "gpu003")
    lines = out.strip().splitlines()
    assert len(lines) == 2 and "in_service -> quarantined" in lines[0] and "[admin:" in lines[0]
    rc, out, _ = cli(capsys, "node", "list", "--json")
    rows = {r["node"]: r for r in json.loads(out)}
    assert rows["gpu003"]["state"] == "repaired" and rows["gpu005"]["state"] == "spare"
    rc, out, _ = cli(capsys, "node", "list", "--state", "repaired")
    assert "gpu003" in out and "gpu001" not in out


def test_bad_input_is_one_line_and_exit_2(env, capsys):
    rc, _, err = cli(capsys, "node", "repaired", "gpu999")
    assert rc == 2 and err.strip() == "slurm-ft: error: unknown node 'gpu999' (not in this cluster's slurm.conf)"
    rc, _, err = cli(capsys, "node", "repaired", "gpu001")
    assert rc == 2 and "only a quarantined node can be marked repaired" in err
    assert len(err.strip().splitlines()) == 1
    rc, _, err = cli(capsys, "node", "list", "--state", "broken")
    assert rc == 2


def test_node_commands_take_a_hostlist_and_report_per_node(env, capsys):
    tmp, slurm = env
    rc, out, _ = cli(capsys, "node", "quarantine", "gpu[001-002,004]", "--reason", "rack 7 PSU")
    assert rc == 0
    assert out.splitlines()[:3] == [f"gpu00{i}: in_service -> quarantined (rack 7 PSU)" for i in (1, 2, 4)]
    assert "`slurm-ft node repaired gpu[001-002,004]`" in out
    assert all(slurm.node(n).drained for n in ("gpu001", "gpu002", "gpu004")) and not slurm.node("gpu003").drained
    rc, out, _ = cli(capsys, "node", "history", "gpu[001-002]")
    lines = out.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["gpu001", "gpu002"] and "in_service -> quarantined" in lines[1]
    rc, out, _ = cli(capsys, "node", "history", "gpu[001-002]", "--json")
    assert [d["node"] for d in json.loads(out)] == ["gpu001", "gpu002"]
    rc, out, _ = cli(capsys, "node", "history", "gpu001", "--json")
    assert json.loads(out)["state"] == "quarantined"


def test_a_refused_node_of_a_hostlist_does_not_stop_the_others(env, capsys):
    cli(capsys, "node", "quarantine", "gpu001")
    rc, out, err = cli(capsys, "node", "repaired", "gpu[001-002]")
    assert rc == 2 and out.startswith("gpu001: quarantined -> repaired")
    assert err.strip().splitlines() == [err.strip()] and err.startswith("slurm-ft: error: gpu002: cannot apply 'repaired'")


@pytest.mark.parametrize("expr, message", [
    ("gpu[001-", "malformed hostlist 'gpu[001-': '[' without ']'"),
    ("gpu[004-001]", "malformed hostlist 'gpu[004-001]': range '004-001' goes backwards"),
    ("gpu[003-004],gpu[998-999]", "unknown nodes 'gpu[998-999]' (not in this cluster's slurm.conf)"),
])
def test_a_bad_hostlist_is_one_line_exit_2_and_touches_nothing(env, capsys, expr, message):
    tmp, slurm = env
    rc, _, err = cli(capsys, "node", "quarantine", expr)
    assert rc == 2 and err.strip() == f"slurm-ft: error: {message}"
    assert not any(n.drained for n in slurm.nodes())


def test_breaker_status_reset_and_status_screen(env, capsys):
    """The breaker is what Slurm shows: a slurm-ft drain in the window opens it, its resume closes it."""
    tmp, slurm = env
    slurm.drain(["gpu001"], "slurm-ft: XID79 gpu1 GPU has fallen off the bus")
    rc, out, _ = cli(capsys, "breaker", "status")
    assert rc == 1 and out.startswith("breaker OPEN since") and "drains in window: 1 of 1 (gpu001)" in out
    rc, out, _ = cli(capsys, "status")
    assert rc == 0 and "breaker OPEN" in out and "spare pool (spares): 2 healthy of target 2" in out
    rc, out, _ = cli(capsys, "status", "--json", "--write-metrics")
    d = json.loads(out)
    assert d["breaker"]["open"] and d["pool"]["healthy"] == 2 and d["nodes_by_state"]["spare"] == 2
    assert "slurm_ft_breaker_open 1" in (tmp / "m.prom").read_text()
    rc, out, _ = cli(capsys, "breaker", "reset")
    assert rc == 0 and "nothing local" not in out and "resumed" in out
    rc, out, _ = cli(capsys, "breaker", "status")
    assert rc == 1                                   # a reset on one host cannot hide the fleet's drains
    slurm.resume(["gpu001"])
    rc, out, _ = cli(capsys, "breaker", "status", "--json")
    assert rc == 0 and json.loads(out)["open"] is False and json.loads(out)["drains_in_window"] == 0


def test_sweep_is_silent_without_news_and_busy_exits_5(env, capsys):
    tmp, slurm = env
    rc, out, err = cli(capsys, "sweep")
    assert (rc, out, err) == (0, "", "")
    from slurm_ft.filelock import FileLock
    with FileLock(tmp / "state" / "sweep.lock"):
        rc, out, err = cli(capsys, "sweep")
    assert rc == 5 and "slurm-ft: error: another sweep is running (pid" in err
    slurm.drain(["gpu004"], "slurm-ft: ECC_DBE gpu0 double-bit")
    rc, out, _ = cli(capsys, "sweep", "--json")
    rep = json.loads(out)
    assert rc == 0 and rep["changes"][0].startswith("gpu004: in_service -> failed")


def test_metrics_writes_do_not_pile_up(env, capsys):
    """The every-minute cron `status --write-metrics` took no lock: while one run still read slow
    checkpoint directories, the next ones joined it. Now a second run exits 5 at once, one line."""
    tmp, slurm = env
    from slurm_ft.filelock import FileLock
    with FileLock(tmp / "state" / "metrics.lock", "metrics write"):
        rc, out, err = cli(capsys, "status", "--write-metrics")
        assert rc == 5 and out == "" and not (tmp / "m.prom").exists()
        assert err.startswith("slurm-ft: error: another metrics write is running (pid ") and err.count("\n") == 1
        rc, out, _ = cli(capsys, "status")                 # the screen alone reads no directory: no lock
        assert rc == 0 and "spare pool" in out
    rc, _, _ = cli(capsys, "status", "--write-metrics")
    assert rc == 0 and "slurm_ft_breaker_limit_nodes 1" in (tmp / "m.prom").read_text()


def test_quarantine_of_a_validating_node_is_refused_before_slurm_is_touched(env, capsys):
    tmp, slurm = env
    with Store(str(tmp / "state")) as st:
        st.enrol("gpu005", State.SPARE, time.time())
        st.apply("gpu005", Event.VALIDATE, time.time(), default=State.SPARE, cause="re-check job 123")
        st.set_validation("gpu005", 123, time.time())
    slurm.resv["slurm-ft-maint-gpu005"] = ["gpu005"]
    before = (dict(slurm.parts), slurm.node("gpu005"))
    rc, _, err = cli(capsys, "node", "quarantine", "gpu005")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "cannot apply 'quarantine' to a node in state 'validating'" in err and "`scancel 123`" in err
    assert (dict(slurm.parts), slurm.node("gpu005")) == before      # not drained, still in the pool
    with Store(str(tmp / "state")) as st:
        assert st.record("gpu005").state is State.VALIDATING and st.record("gpu005").validation_job == 123
