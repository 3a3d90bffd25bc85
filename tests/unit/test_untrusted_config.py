"""Config, starter script and file-safety checks that user or admin text must not get past
(issue 10, items 7 and 12)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ft.cli.group import cli
from slurm_ft.config import load_config
from slurm_ft.errors import ConfigError, UsageError
from slurm_ft.fsutil import refuse_unsafe
from slurm_ft.fleet.lifecycle.sweep import validation_script
from slurm_ft.job.submit import script_directives, starter_script


def _cfg(tmp_path, text: str):
    p = tmp_path / "cfg" / "slurm-ft.yaml"
    p.parent.mkdir(mode=0o755, exist_ok=True)
    p.write_text(text)
    os.chmod(p, 0o644)
    return p


def test_shell_text_as_a_validation_level_is_refused_by_the_config(tmp_path):
    p = _cfg(tmp_path, 'lifecycle:\n  validate_levels: [full, x"$(touch /tmp/pwned)"]\n')
    with pytest.raises(ConfigError, match=r"lifecycle.validate_levels\[1\]: unknown level"):
        load_config(str(p))


def test_validation_script_refuses_an_unknown_level_and_runs_no_data(tmp_path):
    with pytest.raises(UsageError, match="unknown validation level"):
        validation_script("gpu001", ['x"$(touch /tmp/pwned)"'], ["slurm-ft", "check"])
    marker = tmp_path / "pwned"
    node = f"gpu001$(touch {marker})\n`touch {marker}`"
    text = validation_script(node, ["full"], ["true"])
    subprocess.run(["sh", "-c", text], check=True, capture_output=True, timeout=10)
    assert not marker.exists()
    with pytest.raises(UsageError, match="control characters"):
        validation_script("gpu001", ["full"], ["true"], [f"--reservation=r\ntouch {marker}"])


@pytest.mark.parametrize("value", [".inf", ".nan", "-.inf"])
def test_non_finite_numbers_are_refused(tmp_path, value):
    p = _cfg(tmp_path, f"health:\n  deadline_s:\n    quick: {value}\n")
    with pytest.raises(ConfigError, match="health.deadline_s.quick must be a finite number"):
        load_config(str(p))


def test_a_share_above_one_and_a_zero_deadline_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="breaker_max_share is a share: at most 1"):
        load_config(str(_cfg(tmp_path, "lifecycle:\n  breaker_max_share: 5.0\n")))
    with pytest.raises(ConfigError, match="more than 0 seconds"):
        load_config(str(_cfg(tmp_path, "health:\n  deadline_s:\n    quick: 0\n")))
    assert load_config(str(_cfg(tmp_path, "lifecycle:\n  breaker_max_share: 1.0\n"))).lifecycle.breaker_max_share == 1.0


def test_group_writable_config_and_state_are_refused(tmp_path):
    p = _cfg(tmp_path, "{}\n")
    os.chown(p, 0, 1000)
    os.chmod(p, 0o664)
    with pytest.raises(ConfigError, match="writable by group 1000"):
        load_config(str(p))
    d = tmp_path / "state"
    d.mkdir()
    os.chown(d, 0, 1000)
    os.chmod(d, 0o770)
    with pytest.raises(ConfigError, match="writable by group"):
        refuse_unsafe(d, "state directory")


def test_config_in_a_sticky_world_writable_directory_is_refused(tmp_path):
    d = tmp_path / "tmp"
    d.mkdir()
    os.chmod(d, 0o1777)
    (d / "c.yaml").write_text("{}\n")
    with pytest.raises(ConfigError, match="config directory is writable by others"):
        load_config(str(d / "c.yaml"))


def test_spares_plan_refuses_zero_gpus_per_node():
    res = CliRunner().invoke(cli, ["spares", "plan", "--gpus", "64", "--gpus-per-node", "0"])
    assert res.exit_code == 2 and "--gpus-per-node" in res.output


def test_a_coding_word_in_the_first_directive_does_not_break_the_starter(tmp_path):
    text = starter_script(["#SBATCH --job-name=transcoding=x264"], python=sys.executable)
    compile(text, "starter", "exec")
    assert "#SBATCH --job-name=transcoding=x264" in text.splitlines()[:4]
    with pytest.raises(UsageError, match="control characters"):
        starter_script(["#SBATCH --comment=a\x00b"])


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_any_user_script_gives_a_starter_python_compiles(text):
    try:
        starter = starter_script(script_directives(text), python="/usr/bin/python3")
    except UsageError:
        return
    compile(starter, "starter", "exec")


def test_the_watchers_config_cache_parses_again_only_on_a_change_and_checks_ownership_every_time(tmp_path, monkeypatch):
    """The watcher answers every hook of its node: the config is parsed once per change, but a file or
    directory that others may now write is refused at once, parsed or not."""
    from slurm_ft import config as cfgmod
    d = tmp_path / "etc"
    d.mkdir(mode=0o755)
    f = d / "slurm-ft.yaml"
    f.write_text("health:\n  xid_lookback_s: 100\n")
    f.chmod(0o644)
    parses = []
    real = cfgmod._parse
    monkeypatch.setattr(cfgmod, "_parse", lambda p: parses.append(p) or real(p))
    cache = cfgmod.ConfigCache()
    assert cache.load(str(f)).health.xid_lookback_s == 100
    assert cache.load(str(f)).health.xid_lookback_s == 100 and len(parses) == 1
    f.write_text("health:\n  xid_lookback_s: 200\n")
    assert cache.load(str(f)).health.xid_lookback_s == 200 and len(parses) == 2
    d.chmod(0o777)
    with pytest.raises(ConfigError, match="writable by others"):
        cache.load(str(f))


def test_a_sites_job_backstop_reaches_the_supervisor_and_a_backstop_of_seconds_is_refused(tmp_path, monkeypatch):
    from slurm_ft.job.planned_run import settings as job_settings
    with pytest.raises(ConfigError, match="lifecycle.job_backstop_s must be at least 10 seconds"):
        load_config(str(_cfg(tmp_path, "lifecycle:\n  job_backstop_s: 2\n")))
    monkeypatch.setenv("SLURM_FT_CONFIG", str(_cfg(tmp_path, "lifecycle:\n  job_backstop_s: 900\n")))
    assert job_settings("gpu001")[2] == 900.0
    monkeypatch.setenv("SLURM_FT_CONFIG", str(tmp_path / "none.yaml"))     # unreadable: the default, 5 minutes
    assert job_settings("gpu001")[2] == 300.0
