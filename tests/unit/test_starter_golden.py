"""The batch script `slurm-ft sbatch` submits, byte for byte: jobs already queued run the one written at
their submit, so a change to it is a change to what every queued job runs (and job_submit.lua grants hot
spares only to a script bearing its mark). A deliberate change rewrites tests/data/starter/ and says why.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from slurm_ft.job.submit import STARTER_MARK, starter_script

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "starter"
LUA = Path(__file__).resolve().parents[2] / "slurm_ft" / "data" / "slurm_ft_policy.lua"


def test_the_starter_is_the_golden_one_with_sys_argv():
    got = starter_script(["#SBATCH --job-name=transcoding=x264", "#SBATCH -N 4"], python="/usr/bin/python3")
    assert got == (GOLDEN / "plain.txt").read_text()


def test_the_starter_is_the_golden_one_with_its_arguments_written_in():
    got = starter_script([], python="/opt/venv/bin/python",
                         argv=["--ckpt-dir", "/ck", "--hot-spares", "1", "--train-nodes", "4", "--", "train.py",
                               "--resume", "{ckpt}"])
    assert got == (GOLDEN / "argv.txt").read_text()


def test_the_policys_mark_is_the_starters():
    lua_mark = re.search(r'local STARTER_MARK = "\\n(.*)"', LUA.read_text()).group(1)
    assert lua_mark == STARTER_MARK
    for name in ("plain.txt", "argv.txt"):
        assert "\n" + STARTER_MARK in (GOLDEN / name).read_text()


def test_a_starter_written_before_today_still_runs(tmp_path):
    """The golden starter, run as Slurm runs it (the SPANK plugin's --resolve form): the entry it imports
    is still there and answers."""
    script = tmp_path / "starter"
    script.write_text((GOLDEN / "plain.txt").read_text().replace("#!/usr/bin/python3", f"#!{sys.executable}", 1))
    (tmp_path / "ck" / "step_5").mkdir(parents=True)
    (tmp_path / "ck" / "step_5" / "COMPLETE").write_text('{"format": "slurm-ft-ckpt", "step": 5, "files": {}}')
    p = subprocess.run([sys.executable, str(script), "--resolve", "--ckpt-dir", str(tmp_path / "ck")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"{tmp_path / 'ck' / 'step_5'}\n5\n"
