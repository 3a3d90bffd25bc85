"""Planning from the journal: Garwood's exact interval, and a year the simulator wrote at a known rate
(`slurm-ft sim --write-journal`) recovered by `spares plan --from-journal` within the interval it states."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ft.errors import UsageError
from slurm_ft.fleet.report.fleet_view import drain_report
from slurm_ft.fleet.lifecycle.node_history import Store
from slurm_ft.plan.history import garwood, observe
from slurm_ft.plan.profiles import builtin_policy, profile_from_dict
from slurm_ft.plan.sim import SimParams, simulate
from slurm_ft.fleet.lifecycle.synthetic import write_sim_journal

DAY = 86400.0


@pytest.mark.parametrize("k,low,high", [(0, 0.0, 3.689), (1, 0.0253, 5.572), (10, 4.795, 18.39),
                                        (100, 81.364, 121.627)])
def test_garwood_matches_the_published_table(k, low, high):
    lo, hi = garwood(k)
    assert lo == pytest.approx(low, abs=2e-3) and hi == pytest.approx(high, abs=2e-2)


def _sim_year(tmp_path, seed, *, node_faults=60, nodes=64, spares=2):
    """A year of the simulator's faults at a known rate (`node_faults` node-taking faults a year on a
    `nodes`-node job, plus half as many software hangs) written as the journal of `state<seed>`."""
    prof = tmp_path / "profile.yaml"
    prof.write_text(f"name: known\ndays: 365\ngpus: {8 * nodes}\ngpus_per_node: 8\nsource: test\nclasses:\n"
                    f"  - {{name: GPU fell off the bus, count: {node_faults}, replace: true, kind: node}}\n"
                    f"  - {{name: NCCL hang, count: {node_faults // 2}, replace: false, kind: hang}}\n")
    state = tmp_path / f"state{seed}"
    p = subprocess.run([sys.executable, "-m", "slurm_ft", "sim", "--profile-file", str(prof), "--seed", str(seed),
                        "--seeds", "1", "--spares", str(spares), "--write-journal", str(state), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return state, json.loads(p.stdout)["journal"], node_faults / 365 / nodes


def _config(tmp_path, state) -> Path:
    """A slurm-ft.yaml naming `state` as the state dir (mode 0644: config writable by others is refused)."""
    cfg = tmp_path / "cfg" / "slurm-ft.yaml"
    cfg.parent.mkdir(mode=0o755)
    cfg.write_text(f"state_dir: {state}\n")
    os.chmod(cfg, 0o644)
    return cfg


def test_a_simulated_year_is_recovered_by_spares_plan_from_journal(tmp_path):
    state, journal, rate = _sim_year(tmp_path, seed=7)
    written = journal["node_faults"]
    assert journal["rate_per_node_day"] == pytest.approx(rate) and journal["fleet_nodes"] == 64
    cfg = _config(tmp_path, state)
    p = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(cfg), "spares", "plan", "--gpus", "512",
                        "--from-journal", "--fleet-nodes", "64", "--json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    obs = doc["from_journal"]
    assert obs["incidents"] == written and 35 < written < 90      # 60 expected
    lo, hi = obs["rate_interval"]
    assert lo <= rate <= hi, obs
    assert hi / lo < 2.5, obs               # ~55 faults: Garwood's 95% interval spans about 1.7x
    assert obs["repair_hours"]["count"] >= written - 3 and 40 < obs["repair_hours"]["mean"] < 110
    # every interruption the simulator met is a recovery incident: node faults went to a spare
    assert obs["recovery_s"]["spare"]["count"] >= written - 3 and obs["recovery_s"]["same_nodes"]["count"] > 5
    assert doc["repair_hours"] == pytest.approx(obs["repair_hours"]["mean"])
    assert doc["rate_source"].startswith(f"journal: {written} node faults over 64 nodes")
    text = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(cfg), "spares", "plan", "--gpus", "512",
                           "--from-journal", "--fleet-nodes", "64"], capture_output=True, text=True, timeout=60).stdout
    assert text.startswith("From the journal: journal:") and "95% CI" in text and "hot spares" in text


def test_the_interval_covers_the_true_rate_for_most_seeds(tmp_path):
    prof = profile_from_dict({"name": "known", "days": 365, "gpus": 128, "gpus_per_node": 8, "source": "test",
                              "classes": [{"name": "node", "count": 12, "replace": True, "kind": "node"}]}, "test")
    params = SimParams(gpus=128, gpus_per_node=8, days=365, spares=2, repair_hours=72, ckpt_interval_s=3600)
    covered = 0
    for seed in range(20):
        faults: list = []
        simulate(prof, builtin_policy("slurm-ft"), params, seed, faults=faults)
        now = 365 * DAY
        with Store(str(tmp_path / f"s{seed}")) as store:
            write_sim_journal(store, faults, job_nodes=16, spares=2, days=365, start=0.0, seed=seed)
            eps, _ = drain_report(store, now)
        obs = observe(eps, [], nodes=16, since=0.0, now=now)
        covered += obs.rate_low <= 12 / 365 / 16 <= obs.rate_high
    assert covered >= 17          # a 95% interval: 19 of 20 on average


def test_an_empty_journal_is_a_clear_error_not_a_rate_of_zero():
    with pytest.raises(UsageError, match="no node faults in the journal over 30.0 days"):
        observe([], [], nodes=10, since=0.0, now=30 * DAY)
    with pytest.raises(UsageError, match="fleet-nodes"):
        observe([], [], nodes=0, since=0.0, now=30 * DAY)


def test_sim_from_journal_simulates_at_the_journal_rate(tmp_path):
    state, journal, _ = _sim_year(tmp_path, seed=3)
    written = journal["node_faults"]
    cfg = _config(tmp_path, state)
    p = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(cfg), "sim", "--from-journal",
                        "--fleet-nodes", "64", "--gpus", "256", "--days", "365", "--seeds", "3", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"journal: {written} node faults over 64 nodes" in p.stdout
    refused = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(cfg), "sim", "--from-journal",
                              "--profile", "llama3"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--from-journal gives the failure rate" in refused.stderr


def test_the_simulated_journal_holds_every_fault_of_the_run_and_refuses_a_used_state_dir(tmp_path):
    prof = profile_from_dict({"name": "known", "days": 30, "gpus": 32, "gpus_per_node": 8, "source": "test",
                              "classes": [{"name": "node", "count": 40, "replace": True, "kind": "node"},
                                          {"name": "hang", "count": 20, "replace": False, "kind": "hang"}]}, "test")
    params = SimParams(gpus=32, gpus_per_node=8, days=30, spares=1, repair_hours=24, ckpt_interval_s=3600)
    faults: list = []
    simulate(prof, builtin_policy("slurm-ft"), params, 5, faults=faults)
    swaps = [f for f in faults if f.swap]
    assert len(swaps) > 20 and len(faults) > len(swaps)
    with Store(str(tmp_path / "s")) as store:
        assert write_sim_journal(store, faults, job_nodes=4, spares=1, days=30, start=1e9, seed=5) == len(swaps)
        history = store.history()
        assert sum(1 for e in history if e.event.value == "fault") == len(swaps)
        assert {e.node for e in history} <= {f"sim{i:05d}" for i in range(5)}
        from slurm_ft.fleet.recovery import journal
        incs = journal.incidents(store.db)
        assert len(incs) == len(faults)
        assert [i.fault_at for i in incs] == [1e9 + f.at for f in faults]
        assert all(i.closed_at >= i.fault_at for i in incs if i.closed_at)
        with pytest.raises(ValueError, match="already holds a history"):
            write_sim_journal(store, faults, job_nodes=4, spares=1, days=30, start=1e9, seed=5)


def test_write_journal_refuses_compare_and_a_used_state_dir(tmp_path):
    state, _, _ = _sim_year(tmp_path, seed=1)
    for extra, msg in ((["--compare"], "no --compare"), ([], "already holds a history")):
        p = subprocess.run([sys.executable, "-m", "slurm_ft", "sim", "--seeds", "1", "--days", "10",
                            "--write-journal", str(state)] + extra, capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and msg in p.stderr and "Traceback" not in p.stderr, p.stderr
