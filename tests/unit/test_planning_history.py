"""Planning from the journal: Garwood's exact interval, and a synthetic year at a known rate recovered
by `spares plan --from-journal` within the interval it states."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_ft.errors import UsageError
from slurm_ft.lifecycle.collect import drain_report
from slurm_ft.lifecycle.store import Store
from slurm_ft.planning.history import garwood, observe
from slurm_ft.planning.synthetic import write_history

DAY = 86400.0


@pytest.mark.parametrize("k,low,high", [(0, 0.0, 3.689), (1, 0.0253, 5.572), (10, 4.795, 18.39),
                                        (100, 81.364, 121.627)])
def test_garwood_matches_the_published_table(k, low, high):
    lo, hi = garwood(k)
    assert lo == pytest.approx(low, abs=2e-3) and hi == pytest.approx(high, abs=2e-2)


def _year(tmp_path, seed, rate=0.002, nodes=64, repair_hours=72.0):
    now = time.time()
    state = tmp_path / f"state{seed}"
    with Store(str(state)) as store:
        n = write_history(store, [f"gpu{i:03d}" for i in range(nodes)], days=365, rate_per_node_day=rate,
                          repair_hours=repair_hours, start=now - 365 * DAY, seed=seed)
        eps, _ = drain_report(store, now)
    return state, n, eps, now


def _config(tmp_path, state) -> Path:
    """A slurm-ft.yaml naming `state` as the state dir (mode 0644: config writable by others is refused)."""
    cfg = tmp_path / "cfg" / "slurm-ft.yaml"
    cfg.parent.mkdir(mode=0o755)
    cfg.write_text(f"state_dir: {state}\n")
    os.chmod(cfg, 0o644)
    return cfg


def test_a_synthetic_year_is_recovered_by_spares_plan_from_journal(tmp_path):
    state, written, _, _ = _year(tmp_path, seed=7)
    cfg = _config(tmp_path, state)
    p = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(cfg), "spares", "plan", "--gpus", "512",
                        "--from-journal", "--fleet-nodes", "64", "--json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    obs = doc["from_journal"]
    assert obs["incidents"] == written and 20 < written < 80      # ~47 expected at 0.002 x 64 x 365
    lo, hi = obs["rate_interval"]
    assert lo <= 0.002 <= hi, obs
    assert obs["repair_hours"]["count"] == written and 40 < obs["repair_hours"]["mean"] < 110
    assert doc["repair_hours"] == pytest.approx(obs["repair_hours"]["mean"])
    assert doc["rate_source"].startswith(f"journal: {written} node faults over 64 nodes")
    text = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(cfg), "spares", "plan", "--gpus", "512",
                           "--from-journal", "--fleet-nodes", "64"], capture_output=True, text=True, timeout=60).stdout
    assert text.startswith("From the journal: journal:") and "95% CI" in text and "hot spares" in text


def test_the_interval_covers_the_true_rate_for_most_seeds(tmp_path):
    covered = 0
    for seed in range(20):
        _, _, eps, now = _year(tmp_path, seed, nodes=16)
        obs = observe(eps, [], nodes=16, since=now - 365 * DAY, now=now)
        covered += obs.rate_low <= 0.002 <= obs.rate_high
    assert covered >= 17          # a 95% interval: 19 of 20 on average


def test_an_empty_journal_is_a_clear_error_not_a_rate_of_zero():
    with pytest.raises(UsageError, match="no node faults in the journal over 30.0 days"):
        observe([], [], nodes=10, since=0.0, now=30 * DAY)
    with pytest.raises(UsageError, match="fleet-nodes"):
        observe([], [], nodes=0, since=0.0, now=30 * DAY)


def test_sim_from_journal_simulates_at_the_journal_rate(tmp_path):
    state, written, _, _ = _year(tmp_path, seed=3)
    cfg = _config(tmp_path, state)
    p = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(cfg), "sim", "--from-journal",
                        "--fleet-nodes", "64", "--gpus", "256", "--days", "365", "--seeds", "3", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"journal: {written} node faults over 64 nodes" in p.stdout
    refused = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(cfg), "sim", "--from-journal",
                              "--profile", "llama3"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--from-journal gives the failure rate" in refused.stderr
