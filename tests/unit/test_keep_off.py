"""`keep_off`: the nodes slurm-ft never touches, as a site sets it and an operator sees it (issue 39 item 5).

The checks, the controller's plan, the sweep and remediation are tested where they live (test_health_run,
test_plan, test_lifecycle_sweep, test_remediation); here: the config key and the operator's commands."""
from __future__ import annotations

import json
import os

import pytest
import yaml
from click.testing import CliRunner

from slurm_ft.cli import main
from slurm_ft.cli.group import cli as click_cli
from slurm_ft.config import load_config
from slurm_ft.errors import ConfigError

from test_lifecycle_sweep import ModelSlurm   # same directory: pytest puts it on sys.path


def write(tmp_path, doc):
    d = tmp_path / "etc"
    d.mkdir(mode=0o755, exist_ok=True)
    p = d / "slurm-ft.yaml"
    p.write_text(yaml.safe_dump(doc))
    os.chmod(p, 0o644)
    return p


def test_a_bad_keep_off_hostlist_is_refused_at_load_and_by_config_check(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_FT_CONFIG", raising=False)
    p = write(tmp_path, {"keep_off": "gpu[001-", "health": {"kmsg_path": str(tmp_path)}})
    want = f"{p}: keep_off: malformed hostlist 'gpu[001-': '[' without ']'"
    with pytest.raises(ConfigError) as exc:
        load_config(str(p))
    assert str(exc.value) == want
    res = CliRunner().invoke(click_cli, ["config", "check", str(p)])
    assert res.exit_code == 2 and f"slurm-ft: error: {want}" in res.stderr.splitlines()
    p = write(tmp_path, {"keep_off": ["gpu001"]})
    with pytest.raises(ConfigError, match="keep_off must be a string"):
        load_config(str(p))
    p = write(tmp_path, {"keep_off": "gpu[001-003],login1"})
    assert load_config(str(p)).keep_off_nodes == {"gpu001", "gpu002", "gpu003", "login1"}


@pytest.fixture
def env(tmp_path, monkeypatch):
    cfg = write(tmp_path, {
        "state_dir": str(tmp_path / "state"), "keep_off": "gpu[002,006]",
        "controller": {"job_partitions": ["train"]},
        "lifecycle": {"pool_target": 2, "spare_recheck_s": 0, "quarantine_grace_s": 0, "breaker_max_nodes": 1,
                      "breaker_max_share": 0, "metrics_path": str(tmp_path / "m.prom")}})
    slurm = ModelSlurm()
    monkeypatch.setattr("slurm_ft.cli.node.client_from_config", lambda config: slurm)
    monkeypatch.setenv("SLURM_FT_CONFIG", str(cfg))
    return tmp_path, slurm


def cli(capsys, *argv):
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_status_and_node_list_mark_keep_off_nodes_and_the_pool_leaves_them_out(env, capsys):
    rc, out, _ = cli(capsys, "status")
    assert rc == 0 and "keep_off (slurm-ft leaves alone): gpu[002,006]" in out
    assert "spare pool (spares): 1 healthy of target 2  SHORT by 1  [gpu005]" in out
    rc, out, _ = cli(capsys, "status", "--json")
    assert json.loads(out)["keep_off"] == ["gpu002", "gpu006"]
    rc, out, _ = cli(capsys, "node", "list")       # in service, yet listed: slurm-ft is not watching over it
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "[keep_off: slurm-ft leaves it alone]" in rows["gpu002"] and "gpu001" not in rows
    rc, out, _ = cli(capsys, "node", "list", "--json")
    assert {r["node"]: r["keep_off"] for r in json.loads(out)}["gpu002"] is True


def test_an_admin_event_that_would_make_slurm_ft_act_on_a_keep_off_node_is_refused(env, capsys):
    tmp, slurm = env
    rc, out, err = cli(capsys, "node", "quarantine", "gpu[001-002]")
    assert rc == 2 and out == "" and err.startswith("slurm-ft: error: gpu002 in keep_off (")
    assert "remove it from keep_off first" in err and len(err.strip().splitlines()) == 1
    assert not any(n.drained for n in slurm.nodes())
