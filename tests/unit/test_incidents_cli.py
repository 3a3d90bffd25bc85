"""`slurm-ft incidents`: what an admin reads after a recovery, from the journal."""
from __future__ import annotations

import json

from click.testing import CliRunner

from slurm_ft.cli.group import cli
from slurm_ft.fleet.recovery import journal as jn
from slurm_ft.fleet import db


def _config(tmp_path):
    cfg = tmp_path / "slurm-ft.yaml"
    cfg.write_text(f"state_dir: {tmp_path / 'state'}\n")
    return cfg


def test_lists_job_node_fault_spare_steps_and_total(tmp_path):
    cfg = _config(tmp_path)
    conn = jn.connect(db.path_in(tmp_path / "state"))
    iid = jn.open_incident(conn, job_id=42, nodes=["gpu017"], faults=["gpu017: slurm-ft: XID79 gpu3 fell off the bus"],
                           partition="train", restart_count=0, job_nodes=64, ckpt_step=30, fault_at=999.0, now=1000.0)
    for name, t in (("requeue", 1000.1), ("quarantine", 1000.2), ("swap", 1000.3)):
        jn.record_result(conn, jn.record_intent(conn, iid, name, t), "ok", t + 0.05)
    jn.update_incident(conn, iid, spares=["gpu065"])
    jn.close_incident(conn, iid, "recovered", 1001.5)
    out = CliRunner().invoke(cli, ["--config", str(cfg), "incidents", "--json"])
    assert out.exit_code == 0, out.output
    [inc] = json.loads(out.output)
    assert inc["job_id"] == 42 and inc["nodes"] == ["gpu017"] and inc["spares"] == ["gpu065"]
    assert "XID79" in inc["faults"][0] and inc["total_s"] == 1.5 and inc["status"] == "recovered"
    assert [s["name"] for s in inc["steps"]] == ["open", "requeue", "quarantine", "swap"]
    assert inc["steps"][3]["since_open_s"] == 0.35
    text = CliRunner().invoke(cli, ["--config", str(cfg), "incidents"]).output
    assert "job 42" in text and "RECOVERED" in text and "gpu065" in text and "total 1.50 s" in text


def test_no_journal_yet_says_so(tmp_path):
    out = CliRunner().invoke(cli, ["--config", str(_config(tmp_path)), "incidents"])
    assert out.exit_code == 0 and "no incidents" in out.output
    assert not (tmp_path / "state").exists()     # reading never creates state
