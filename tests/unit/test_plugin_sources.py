"""The plugin's pieces outside Slurm: the SPANK plugin, job_submit.lua and tag.py agree on one grammar;
the lab's rendering of the policy's site rules; which field is trusted; the plugin's resolver mode."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ft.config import load_config
from slurm_ft.errors import ConfigError
from slurm_ft_lab import plugin
from slurm_ft.slurm.types import Job
from slurm_ft.job import ckpt, trust
from slurm_ft.job.submit import parse, plugin_options
from slurm_ft.job.tag import LIMITS, PREFIX, VERSION, FtSpec, encode, _KEYS

C_SOURCE = plugin.SPANK_DIR / "slurm_ft.c"


def test_the_c_plugin_has_the_tags_limits():
    text = C_SOURCE.read_text()
    found = {m.group(1).replace("-", "_"): (int(m.group(2)), int(m.group(3)))
             for m in re.finditer(r'\{"ft-([a-z-]+)", "SLURM_FT_[A-Z_]+", (\d+), (\d+), "", 0\}', text)}
    assert found.pop("ckpt_dir") == (1, 0)              # high < low: the directory, not a number
    assert found == LIMITS


def test_the_lua_policy_has_the_tags_head_keys_order_and_limits():
    text = plugin.LUA_POLICY.read_text()
    assert f'local TAG_HEAD = "{PREFIX}{VERSION}"' in text
    keys = re.findall(r'\{"SLURM_FT_[A-Z_]+", "([a-z_]+)"(?:, (\d+), (\d+))?\}', text)
    # train_nodes is no option: the policy writes it from -N for a job with hot spares (train_nodes())
    assert tuple(k for k, _, _ in keys) == tuple(k for k in _KEYS if k != "train_nodes")
    assert {k: (int(lo), int(hi)) for k, lo, hi in keys if lo} == LIMITS
    etc = Path(__file__).resolve().parents[2] / "etc"
    assert (etc / "slurm_ft_policy.lua").read_text() == text
    assert (etc / "job_submit.lua").read_text() == plugin.LUA_TEMPLATE.read_text()


def test_the_policy_knows_the_starter_that_supervises_hot_spares():
    from slurm_ft.job.submit import STARTER_MARK, starter_script
    text = plugin.LUA_POLICY.read_text()
    mark = re.search(r'local STARTER_MARK = "(.*)"', text).group(1)
    assert mark == "\\n" + STARTER_MARK and "\n" + STARTER_MARK in starter_script(["#SBATCH -N 3"])


def test_the_wrapper_speaks_the_plugins_options():
    spec = FtSpec(ckpt_dir="/c d", min_nodes=2, hot_spares=0, hang_timeout=60, max_restarts=3)
    assert plugin_options(spec) == ["--ft-ckpt-dir=/c d", "--ft-min-nodes=2", "--ft-hang-timeout=60",
                                    "--ft-max-restarts=3"]
    req = parse(["--ckpt-dir", "/c d", "--min-nodes", "2", "--hot-spares", "0", "--hang-timeout", "60",
                 "--max-restarts", "3", "-N", "4", "/bin/true"])
    assert req.spec == spec


@pytest.mark.parametrize("opt,value,message", [("--hang-timeout", "0", "must be >= 1"),
                                               ("--hot-spares", "10001", "must be <= 10000"),
                                               ("--max-restarts", "1001", "must be <= 1000")])
def test_the_wrapper_refuses_what_the_plugin_refuses(opt, value, message):
    """(--hot-spares above 0 through the plugins is refused too: test_plugin_lab, by the policy itself)"""
    from slurm_ft.errors import UsageError
    with pytest.raises(UsageError, match=message):
        parse([opt, value, "/bin/true"])


def test_site_rules_are_written_into_the_sites_script():
    text = plugin.job_submit_lua(["train", "gpu"], ["/ckpt"], expedite=True, site_rule=plugin.SITE_RULE)
    assert 'ft_partitions = {"train", "gpu"},' in text
    assert 'ckpt_roots = {"/ckpt"},' in text
    assert "expedite = true," in text
    assert f'if job_desc.name == "{plugin.SITE_REFUSED_NAME}" then' in text
    shipped = plugin.LUA_TEMPLATE.read_text()
    assert text.replace('{"train", "gpu"}', "{}").replace('{"/ckpt"}', "{}").replace(
        "expedite = true", "expedite = false").replace(plugin.SITE_RULE, "return slurm.SUCCESS       -- @site rules") \
        == shipped
    assert plugin.job_submit_lua() == shipped
    with pytest.raises(ValueError):
        plugin.job_submit_lua(["a\"; os.execute('x') --"])


@pytest.mark.parametrize("setting,plugins,field", [
    ("auto", ["lua"], "admin_comment"), ("auto", ["job_submit/lua"], "admin_comment"),
    ("auto", [], "comment"), ("auto", ["require_timelimit"], "comment"),
    ("comment", ["lua"], "comment"), ("admin_comment", [], "admin_comment")])
def test_which_field_is_trusted(setting, plugins, field):
    assert trust.resolve(setting, plugins) == field


def test_only_the_trusted_field_gives_a_tag():
    tag = encode(FtSpec(ckpt_dir="/c"))
    forged = Job(1, "x", "RUNNING", comment=tag)
    policy = Job(2, "x", "RUNNING", admin_comment=tag + " | slurm-ft: held: waiting for a spare")
    assert trust.spec_of(forged, "admin_comment") is None
    assert trust.spec_of(policy, "admin_comment") == FtSpec(ckpt_dir="/c")
    assert trust.spec_of(forged, "comment") == FtSpec(ckpt_dir="/c")


def test_an_unknown_trust_setting_is_a_config_error(tmp_path):
    cfg = tmp_path / "slurm-ft.yaml"
    cfg.write_text("controller:\n  trust: user\n")
    os.chmod(cfg, 0o644)
    with pytest.raises(ConfigError, match="controller.trust must be one of auto, admin_comment, comment"):
        load_config(str(cfg))


def _resolve(d, env=None):
    return subprocess.run([sys.executable, "-m", "slurm_ft.job.jobstart", "--resolve", "--ckpt-dir", str(d)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1", **(env or {})})


def test_the_plugins_resolver_prints_the_newest_checkpoint_and_logs_the_start(tmp_path):
    p = _resolve(tmp_path)
    assert p.returncode == 0 and p.stdout == "\n\n"               # none yet: "" and no step
    ckpt.write_checkpoint(str(tmp_path), 4, {"a": b"x"})
    ckpt.write_checkpoint(str(tmp_path), 9, {"a": b"x"})
    p = _resolve(tmp_path)
    assert p.returncode == 0 and p.stdout == f"{tmp_path / 'step_000009'}\n9\n"
    assert "resuming from" in p.stderr
    starts = [json.loads(x) for x in (tmp_path / "slurm-ft-starts.jsonl").read_text().splitlines()]
    assert [(s["job"], s["restart"], s["step"]) for s in starts] == [("7", 1, None), ("7", 1, 9)]


def test_the_plugins_resolver_refuses_checkpoints_none_of_which_is_complete(tmp_path):
    (tmp_path / "step_000003").mkdir()
    (tmp_path / "step_000003" / "model.pt").write_bytes(b"half")
    p = _resolve(tmp_path)
    assert p.returncode == 4 and p.stdout == ""
    assert "not starting" in p.stderr
