"""A short seeded fault campaign (bench/chaos.py, issue 40): five minutes of faults drawn from the campaign's
mix, one every 30-45 s, on a 12 + 4-node lab of its own with the controller and a watcher per node running,
three jobs of three users (hot-spare and requeue). Ports from $SLURM_FT_TEST_PORT_BASE + 900.

What an operator would check after such a night: every faulted job runs again from its newest checkpoint,
no healthy node was drained, no incident is stuck, and each of the eight invariants held after every fault
(the campaign prints the evidence of any that broke). Seed 3 draws Xid 79s, application Xids and a
partition of a batch host in its first five minutes.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TEST_LAB_DIR, TEST_PORT_BASE

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]


def test_a_five_minute_seeded_campaign_loses_no_run_and_breaks_no_invariant():
    argv = [sys.executable, str(ROOT / "bench" / "chaos.py"), "--minutes", "5", "--seed", "3", "--gap", "30", "45",
            "--nodes", "12", "--spares", "4", "--jobs", "3", "--dir", f"{TEST_LAB_DIR}-chaos",
            "--port-base", str(TEST_PORT_BASE + 900), "--json"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=1500)
    assert p.stdout.strip(), f"chaos.py printed nothing (exit {p.returncode}): {p.stderr[-2000:]}"
    r = json.loads(p.stdout)
    broken = {name: vs for name, vs in r["violations"].items() if vs}
    assert broken == {}, json.dumps(broken, indent=1)
    assert p.returncode == 0, p.stderr[-2000:]
    assert r["faults"] >= 3, r["by_kind"]
    assert (r["runs_lost"], r["healthy_drained"]) == (0, 0)
    assert {k: v["recovered"] for k, v in r["by_kind"].items()} == {k: v["faults"] for k, v in r["by_kind"].items()}
    timed = [t for k in r["by_kind"].values() for t in k["stepping_again_s"]]
    assert timed and max(timed) < 300, r["by_kind"]     # a fatal fault among them, and each job back within 5 min
