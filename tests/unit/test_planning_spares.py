"""`spares plan`: the Poisson answer against exact sums computed here, and the printed arithmetic."""
from __future__ import annotations

import json

import pytest

from planning_helpers import check_printed_steps, exact_poisson_tail, run_cli
from slurm_ft.errors import UsageError
from slurm_ft.plan import spares as sp


@pytest.mark.parametrize("gpus,mtbf,repair,lam", [
    (8, 24.0, 7.2, 0.3),        # one node failing once a day, 7.2 h to repair: a tiny pool
    (320, 24.0, 24.0, 40.0),    # 40 nodes, one failure a day each, a day to repair: a big pool
])
@pytest.mark.parametrize("target", [0.9, 0.99, 0.999, 0.99999])
def test_spares_match_exact_poisson_sums(gpus, mtbf, repair, lam, target):
    plan = sp.plan_spares(gpus, 8, node_mtbf_hours=mtbf, repair_hours=repair, target=target)
    assert plan.expected_nodes_in_repair == pytest.approx(lam)
    s = plan.spare_nodes
    risk = 1 - target
    assert exact_poisson_tail(lam, s) < risk
    if s > 0:
        assert exact_poisson_tail(lam, s - 1) >= risk
    assert plan.tail_at_spares == pytest.approx(exact_poisson_tail(lam, s), rel=1e-9)
    for k, p_eq, p_le, p_gt in plan.table:
        assert p_gt == pytest.approx(exact_poisson_tail(lam, k), rel=1e-9)
        assert p_le == pytest.approx(1 - exact_poisson_tail(lam, k), rel=1e-9, abs=1e-15)


def test_known_answers_for_small_and_large_pools():
    # P(N > 2) for mean 0.3 is 0.0036; P(N > 3) is 0.00027: a 99.9% target needs 3 spares
    assert sp.plan_spares(8, 8, node_mtbf_hours=24, repair_hours=7.2, target=0.999).spare_nodes == 3
    # mean 40: the 99.9% quantile of Poisson(40) is 61 (P(N > 60) = 0.00117, P(N > 61) = 0.00076)
    assert sp.plan_spares(320, 8, node_mtbf_hours=24, repair_hours=24, target=0.999).spare_nodes == 61


def test_llama3_rates_and_the_anchor_note():
    plan = sp.plan_spares(16384, 8, profile="llama3", replace_fraction=1.0, repair_hours=24, target=0.99)
    assert plan.job_interruptions_per_day == pytest.approx(419 / 54, abs=5e-4)
    assert plan.mtbi_hours == pytest.approx(54 * 24 / 419, abs=5e-4)
    # research note 7.4: 2,048 nodes, 1-day turnaround, every interruption takes a node: P99 = 15 spares
    assert plan.spare_nodes == 15
    # the profile's own share of node-taking classes: 356 of 419
    assert sp.plan_spares(16384, 8).replace_fraction == pytest.approx(356 / 419, abs=5e-5)


def test_daly_interval_and_ettr_match_the_worked_example():
    # research note 7.3: M = 11,135 s, 60 s blocking checkpoint, 10 min restart -> Daly 18.6 min, ETTR 0.84
    plan = sp.plan_spares(16384, 8, ckpt_cost_s=60, restart_s=600)
    assert plan.interval_daly_s / 60 == pytest.approx(18.6, abs=0.05)
    assert plan.interval_young_s == pytest.approx((2 * 60 * 11135) ** 0.5, rel=1e-3)
    assert plan.ettr == pytest.approx(0.84, abs=0.005)
    assert sp.daly_interval(100, 40) == 40           # d >= 2M: checkpoint every M


def test_printed_arithmetic_is_right_to_the_digits_shown(capsys):
    for args in (["--gpus", "16384"],
                 ["--gpus", "1024", "--node-mtbf-hours", "5000", "--repair-hours", "24"],
                 ["--gpus", "512", "--interruptions-per-day", "2.5", "--at-gpus", "4096", "--replace-fraction",
                  "0.6", "--target", "0.99", "--checkpoint-cost-s", "45", "--restart-s", "420"],
                 ["--gpus", "65536", "--gpus-per-node", "4", "--repair-hours", "168", "--target", "0.9999"]):
        code, out, err = run_cli(capsys, "spares", "plan", *args)
        assert code == 0, err
        check_printed_steps(out, minimum=10)
        data_code, data, _ = run_cli(capsys, "spares", "plan", "--json", *args)
        d = json.loads(data)
        assert f"hot spares (s), smallest s with P(N > s) < 1 - q: {d['spare_nodes']} nodes" in out


def test_json_keys(capsys):
    code, out, _ = run_cli(capsys, "spares", "plan", "--gpus", "16384", "--json")
    assert code == 0
    d = json.loads(out)
    for key in ("spare_nodes", "expected_nodes_in_repair", "job_interruptions_per_day", "node_failure_rate_per_day",
                "mtbi_hours", "checkpoint_interval_s", "ettr", "derivation", "poisson_table"):
        assert key in d
    assert set(d["checkpoint_interval_s"]) == {"young", "daly"}
    assert d["spare_nodes"] == 35 and d["expected_nodes_in_repair"] == pytest.approx(19.78)
    steps = {s["name"]: s for s in d["derivation"]}
    assert steps["expected_nodes_in_repair"]["formula"] == "a × H / 24"


@pytest.mark.parametrize("args,fragment", [
    (["--gpus", "0"], "--gpus must be positive"),
    (["--gpus", "100"], "not a multiple of --gpus-per-node"),
    (["--gpus", "64", "--node-mtbf-hours", "-5"], "--node-mtbf-hours must be positive"),
    (["--gpus", "64", "--interruptions-per-day", "-1"], "--interruptions-per-day must be positive"),
    (["--gpus", "64", "--interruptions-per-day", "nan"], "finite"),
    (["--gpus", "64", "--target", "1"], "--target must be between 0 and 1"),
    (["--gpus", "64", "--target", "1.5"], "--target must be between 0 and 1"),
    (["--gpus", "64", "--target", "0"], "--target must be between 0 and 1"),
    (["--gpus", "64", "--profile", "nosuch"], "unknown profile 'nosuch'"),
    (["--gpus", "64", "--repair-hours", "-1"], "--repair-hours must be zero or more"),
    (["--gpus", "64", "--replace-fraction", "1.2"], "--replace-fraction must be between 0 and 1"),
    (["--gpus", "64", "--profile", "llama3", "--node-mtbf-hours", "100"], "give one failure rate"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, args, fragment):
    code, out, err = run_cli(capsys, "spares", "plan", *args)
    assert code == 2
    assert fragment in err
    assert err.startswith("slurm-ft: error:") and err.count("\n") == 1 and "Traceback" not in err


def test_zero_repair_time_needs_no_spares():
    assert sp.plan_spares(64, 8, node_mtbf_hours=100, repair_hours=0).spare_nodes == 0


def test_api_rejects_non_finite_checkpoint_cost():
    with pytest.raises(UsageError):
        sp.plan_spares(64, 8, ckpt_cost_s=float("inf"))


def test_profile_file_and_config_section(capsys, tmp_path, monkeypatch):
    prof = tmp_path / "site.yaml"
    prof.write_text("name: site\ndays: 30\ngpus: 2048\nclasses:\n"
                    "  - {name: gpu, count: 45, replace: true, kind: crash}\n"
                    "  - {name: bug, count: 15}\n")
    code, out, err = run_cli(capsys, "spares", "plan", "--gpus", "2048", "--profile-file", str(prof), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["job_interruptions_per_day"] == 2 and d["replace_fraction"] == 0.75
    assert d["expected_nodes_in_repair"] == pytest.approx(2 * 0.75 * 72 / 24)
    # the config's planning section fills what no flag gave
    cfg = tmp_path / "slurm-ft.yaml"
    cfg.write_text("planning:\n  node_mtbf_hours: 24\n  repair_hours: 7.2\n  target: 0.99\n")
    cfg.chmod(0o644)
    code, out, err = run_cli(capsys, "--config", str(cfg), "spares", "plan", "--gpus", "8", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["expected_nodes_in_repair"] == pytest.approx(0.3) and d["target"] == 0.99
    assert d["spare_nodes"] == 2          # P(N > 1) = 0.037, P(N > 2) = 0.0036 for mean 0.3
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ndays: 30\ngpus: 8\nclasses: [{count: 1, kind: solar}]\n")
    code, out, err = run_cli(capsys, "spares", "plan", "--gpus", "8", "--profile-file", str(bad))
    assert code == 2 and "kind must be one of" in err


def test_plan_from_a_config_section():
    from slurm_ft.config import PlanningConfig
    assert sp.plan_from_settings(16384, 8, PlanningConfig()).spare_nodes == 35
    cfg = PlanningConfig(node_mtbf_hours=24, repair_hours=7.2, target=0.99)
    plan = sp.plan_from_settings(8, 8, cfg)
    assert plan.expected_nodes_in_repair == pytest.approx(0.3) and plan.spare_nodes == 2
    plan = sp.plan_from_settings(512, 8, PlanningConfig(interruptions_per_day=4, at_gpus=4096))
    assert plan.job_interruptions_per_day == 0.5 and plan.replace_fraction == 1.0
