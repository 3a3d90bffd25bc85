"""The shipped admin files: the sweep shim runs slurm-ft, cron and systemd entries name real things."""
from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sweep_shim_execs_slurm_ft_sweep(tmp_path):
    shim = ROOT / "spares" / "slurm-ft-sweep"
    assert os.access(shim, os.X_OK)
    fake = tmp_path / "slurm-ft"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} -m slurm_ft \"$@\"\n")
    fake.chmod(0o755)
    p = subprocess.run([str(shim), "--help"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, SLURM_FT_BIN=str(fake)))
    assert p.returncode == 0 and "One lifecycle pass for cron" in p.stdout
    p = subprocess.run([str(shim)], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/nonexistent", "SLURM_FT_BIN": ""})
    assert p.returncode == 4 and "slurm-ft not found" in p.stderr


def test_cron_file_lines_are_well_formed():
    for line in (ROOT / "etc" / "cron.d" / "slurm-ft").read_text().splitlines():
        if not line.strip() or line.startswith("#") or re.match(r"^[A-Z_]+=", line):
            continue
        fields = line.split(None, 6)
        assert len(fields) == 7 and fields[5] == "root", line     # m h dom mon dow user command
        assert "/opt/slurm-ft/spares/slurm-ft-sweep" in line or "slurm-ft status" in line


def test_systemd_units_parse_and_the_timer_starts_the_sweep():
    units = {}
    for path in (ROOT / "etc" / "systemd").iterdir():
        cp = configparser.ConfigParser(strict=False, interpolation=None)
        cp.optionxform = str
        cp.read_string(path.read_text())
        units[path.name] = cp
    assert set(units) == {"slurm-ft-controller.service", "slurm-ft-watch.service", "slurm-ft-sweep.service",
                          "slurm-ft-sweep.timer"}
    assert units["slurm-ft-controller.service"]["Service"]["ExecStart"].endswith("slurm-ft controller run")
    assert units["slurm-ft-watch.service"]["Service"]["ExecStart"].endswith("slurm-ft watch")
    sweep = units["slurm-ft-sweep.service"]["Service"]
    assert sweep["Type"] == "oneshot" and sweep["SuccessExitStatus"] == "5"
    assert "OnUnitInactiveSec" in units["slurm-ft-sweep.timer"]["Timer"]


def test_slurm_conf_snippet_names_the_repo_entry_points():
    text = (ROOT / "etc" / "slurm.conf.snippet").read_text()
    for key, path in (("HealthCheckProgram", "healthcheck/slurm-ft-healthcheck"), ("Prolog", "prolog.d/*"),
                      ("Epilog", "epilog.d/*")):
        assert re.search(rf"^{key}=/opt/slurm-ft/{re.escape(path)}$", text, re.M), key
        assert list(ROOT.glob(path)), path
    assert re.search(r"^SchedulerParameters=nohold_on_prolog_fail$", text, re.M)
    assert re.search(r"^PartitionName=spares .*Hidden=YES", text, re.M)
