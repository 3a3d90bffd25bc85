"""`sim`: the Llama 3 acceptance figures over fixed seeds, the time accounting, the pool and elastic models."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

import pytest

from planning_helpers import check_printed_steps, run_cli
from slurm_ft.errors import UsageError
from slurm_ft.plan import profiles as pr
from slurm_ft.plan.sim import CAUSES, SimParams, run_seeds, simulate, summarise
from slurm_ft.plan.spares import daly_interval

SEEDS = range(20)
M = 1 / (pr.LLAMA3.rate_per_gpu_s() * 16384)
BASE = SimParams(gpus=16384, gpus_per_node=8, days=54, spares=35, repair_hours=72,
                 ckpt_interval_s=daly_interval(10, M), ckpt_cost_s=10, restart_s=180)


def mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs)


@pytest.fixture(scope="module")
def by_policy():
    return {name: run_seeds(pr.LLAMA3, pol, BASE, SEEDS)
            for name, pol in (("slurm", pr.SLURM), ("llama3-like", pr.LLAMA3_LIKE), ("slurm-ft", pr.slurm_ft_policy()))}


def test_profile_is_table_5():
    assert pr.LLAMA3.total == 419 and len(pr.LLAMA3.classes) == 18
    assert pr.LLAMA3.replace_count == 356
    assert {c.kind for c in pr.LLAMA3.classes} == set(pr.KINDS)


def test_llama3_profile_gives_419_interruptions_within_10_percent(by_policy):
    for name, results in by_policy.items():
        assert 377 <= mean(r.interruptions for r in results) <= 461, name


def test_llama3_like_policy_lands_near_their_90_percent(by_policy):
    ettr = mean(r.ettr for r in by_policy["llama3-like"])
    assert 0.90 <= ettr <= 0.96


def test_slurm_ft_beats_slurm_alone(by_policy):
    ft = mean(r.ettr for r in by_policy["slurm-ft"])
    alone = mean(r.ettr for r in by_policy["slurm"])
    assert ft >= 0.90
    assert alone < 0.85
    assert ft - alone > 0.08
    # Slurm alone loses its time to the manual swap and the 121 s requeue delay ...
    sched = mean(r.lost_s["scheduling"] for r in by_policy["slurm"]) / 3600
    assert sched > 100
    # ... slurm-ft's scheduling time is its ~5 s recovery per interruption
    assert mean(r.lost_s["scheduling"] for r in by_policy["slurm-ft"]) / 3600 < 1


def test_every_second_is_charged_once():
    for p in (BASE, replace(BASE, spares=0), replace(BASE, spares=0, elastic_min_nodes=1900),
              replace(BASE, repair_dist="fixed", spares=5), replace(BASE, ckpt_interval_s=7200, days=7)):
        for pol in (pr.SLURM, pr.slurm_ft_policy()):
            r = simulate(pr.LLAMA3, pol, p, seed=3)
            assert r.useful_s + sum(r.lost_s.values()) == pytest.approx(r.elapsed_s, rel=1e-9)
            assert all(v >= 0 for v in r.lost_s.values())
            assert 0 <= r.ettr <= 1


def test_lost_work_is_at_most_one_interval_per_interruption():
    for s in range(5):
        r = simulate(pr.LLAMA3, pr.slurm_ft_policy(), BASE, seed=s)
        assert r.lost_s["lost_work"] <= r.interruptions * BASE.ckpt_interval_s
        # half an interval on average (faults fall uniformly within an interval)
        assert 0.3 < r.lost_s["lost_work"] / (r.interruptions * BASE.ckpt_interval_s) < 0.7


def test_seeds_are_reproducible_and_differ():
    a = simulate(pr.LLAMA3, pr.SLURM, BASE, seed=7)
    b = simulate(pr.LLAMA3, pr.SLURM, BASE, seed=7)
    c = simulate(pr.LLAMA3, pr.SLURM, BASE, seed=8)
    assert a.to_dict() == b.to_dict()
    assert a.to_dict() != c.to_dict()


def test_an_empty_pool_makes_the_job_wait_and_elastic_jobs_shrink_instead():
    few = run_seeds(pr.LLAMA3, pr.slurm_ft_policy(), replace(BASE, spares=10), range(5))
    planned = run_seeds(pr.LLAMA3, pr.slurm_ft_policy(), BASE, range(5))
    assert mean(r.pool_exhaustions for r in few) > 5
    assert mean(r.lost_s["waiting_for_spares"] for r in few) > mean(r.lost_s["waiting_for_spares"] for r in planned)
    assert mean(r.ettr for r in few) < mean(r.ettr for r in planned)
    elastic = run_seeds(pr.LLAMA3, pr.slurm_ft_policy(), replace(BASE, spares=10, elastic_min_nodes=1900), range(5))
    assert mean(r.shrinks for r in elastic) > 5
    assert all(r.pool_exhaustions == 0 and r.lost_s["waiting_for_spares"] == 0 for r in elastic)
    assert mean(r.lost_s["shrunk"] for r in elastic) > 0
    assert mean(r.ettr for r in elastic) > mean(r.ettr for r in few)


def test_no_spares_and_long_repairs_stall_a_job_that_needs_every_node():
    # 2,048 nodes, ~20 in repair on average, no spare: the job almost never has all its nodes
    r = simulate(pr.LLAMA3, pr.slurm_ft_policy(), replace(BASE, spares=0), seed=1)
    assert r.ettr < 0.2 and r.pool_exhaustions > 0


def test_more_spares_never_hurt_much_and_checkpoint_interval_has_an_optimum():
    ettr = {s: mean(r.ettr for r in run_seeds(pr.LLAMA3, pr.slurm_ft_policy(), replace(BASE, spares=s), range(5)))
            for s in (10, 20, 35, 60)}
    assert ettr[10] < ettr[20] < ettr[35] + 0.002 and abs(ettr[60] - ettr[35]) < 0.005
    by_iv = {f: mean(r.ettr for r in run_seeds(pr.LLAMA3, pr.slurm_ft_policy(),
                                               replace(BASE, ckpt_interval_s=BASE.ckpt_interval_s * f), range(5)))
             for f in (0.1, 1, 10)}
    assert by_iv[1] > by_iv[0.1] and by_iv[1] > by_iv[10]


def test_one_seed_of_54_days_on_16k_gpus_is_fast():
    t0 = time.perf_counter()
    simulate(pr.LLAMA3, pr.SLURM, BASE, seed=0)
    assert time.perf_counter() - t0 < 2.0


def test_summary_has_spread():
    s = summarise(run_seeds(pr.LLAMA3, pr.SLURM, BASE, range(6)))
    assert set(s["ettr"]) >= {"mean", "min", "max", "stdev", "p5", "p95"}
    assert s["ettr"]["min"] <= s["ettr"]["mean"] <= s["ettr"]["max"]
    assert set(s["lost_hours_by_cause"]) == set(CAUSES)


# --- profiles, policies, figures ---------------------------------------------------------------------

def test_custom_profile_and_policy_from_mappings():
    prof = pr.profile_from_dict({"name": "mine", "days": 10, "gpus": 1024, "classes": [
        {"name": "gpu", "count": 20, "replace": True, "kind": "crash"},
        {"name": "bug", "count": 5}]}, "p.yaml")
    assert prof.total == 25 and prof.replace_fraction == 0.8 and prof.gpus_per_node == 8
    pol = pr.policy_from_dict({"detect_s": {"crash": 5, "node": 60, "hang": 120}, "requeue_s": 0, "swap_s": 30,
                               "restart_s": 90}, "q.yaml")
    r = simulate(prof, pol, SimParams(1024, 8, 10, 4, 24, 1800), seed=0)
    assert r.useful_s + sum(r.lost_s.values()) == pytest.approx(r.elapsed_s)


@pytest.mark.parametrize("data,fragment", [
    ({"days": 10, "gpus": 8, "classes": []}, "classes must be a non-empty list"),
    ({"days": 10, "gpus": 8, "classes": [{"count": -1}]}, "count must be zero or more"),
    ({"days": 10, "gpus": 8, "classes": [{"count": 1, "kind": "meteor"}]}, "kind must be one of"),
    ({"days": 0, "gpus": 8, "classes": [{"count": 1}]}, "days must be positive"),
    ({"days": 1, "gpus": 8, "colour": 1, "classes": [{"count": 1}]}, "unknown key colour"),
])
def test_bad_profiles(data, fragment):
    with pytest.raises(UsageError, match=fragment):
        pr.profile_from_dict(data, "p.yaml")


def test_bad_policy():
    with pytest.raises(UsageError, match="requeue_s must be zero or more"):
        pr.policy_from_dict({"detect_s": {"crash": 1, "node": 1, "hang": 1}, "requeue_s": -3, "swap_s": 0}, "q")
    with pytest.raises(UsageError, match="missing key hang"):
        pr.policy_from_dict({"detect_s": {"crash": 1, "node": 1}, "requeue_s": 0, "swap_s": 0}, "q")


@pytest.mark.parametrize("text,expected", [
    ('{"detect_s": {"p50": 0.8, "p95": 1.5}, "recovery_s": {"p50": 4.2}}', (0.8, 4.2)),
    ('{"detect_p50_s": 1.1, "recovery_p50_s": 6}', (1.1, 6.0)),
    ('{"summary": {"detection": {"median": 0.5}, "recovery": {"p50": 3}}}', (0.5, 3.0)),
    ('{"fault_to_resume_s": {"p50": 6.1, "p95": 8}, "faults": 5}', (0.0, 6.1)),
])
def test_recovery_figures(text, expected):
    assert pr.recovery_figures(text, "f.json")[:2] == expected


def test_recovery_figures_missing():
    with pytest.raises(UsageError, match="recovery_s.p50"):
        pr.recovery_figures('{"detect_s": {"p50": 1}}', "f.json")


# --- the command ---------------------------------------------------------------------------------------

def test_sim_json(capsys):
    code, out, err = run_cli(capsys, "sim", "--seeds", "3", "--json")
    assert code == 0, err
    d = json.loads(out)
    for key in ("interruptions", "ettr", "lost_hours_by_cause", "pool_exhaustion_events", "summary", "runs"):
        assert key in d
    assert set(d["lost_hours_by_cause"]) == set(CAUSES)
    assert len(d["runs"]) == 3 and d["policy"] == "slurm-ft" and d["spares"] == 35
    # built from the features slurm-ft ships and the figures measured on its lab (the shipped file)
    assert d["policy_source"].startswith("built from fast_detection, requeue_now, spare_swap")
    assert "figures-lab.json" in d["policy_source"] and d["figures"]["measured"]["slurm"]


def test_sim_text_shows_worked_inputs_and_policy_source(capsys, tmp_path):
    figs = tmp_path / "recovery.json"
    figs.write_text('{"detect_s": {"p50": 0.7}, "recovery_s": {"p50": 3.9}}')
    code, out, err = run_cli(capsys, "sim", "--seeds", "2", "--recovery-figures", str(figs))
    assert code == 0, err
    assert "measured by bench/recovery.py" in out and "recovery p50 3.9 s" in out
    assert "requeue 3.9 s" in out
    check_printed_steps(out, minimum=3)
    assert "ETTR = useful / elapsed" in out and "pool exhaustion events" in out


def test_sim_custom_policy_file(capsys, tmp_path):
    f = tmp_path / "pol.yaml"
    f.write_text("name: site\ndetect_s: {crash: 10, node: 100, hang: 300}\nrequeue_s: 0\nswap_s: 120\n")
    code, out, err = run_cli(capsys, "sim", "--policy", "custom", "--policy-file", str(f), "--seeds", "1",
                             "--days", "7", "--gpus", "1024", "--json")
    assert code == 0, err
    assert json.loads(out)["policy_figures"]["swap_s"] == 120
    code, out, err = run_cli(capsys, "sim", "--policy-file", str(f), "--seeds", "1", "--days", "7", "--json")
    assert code == 0 and json.loads(out)["policy"] == "site"          # a policy file alone means custom
    code, out, err = run_cli(capsys, "sim", "--policy", "slurm", "--policy-file", str(f), "--seeds", "1")
    assert code == 2 and "--policy-file goes with --policy custom" in err


@pytest.mark.parametrize("args,fragment", [
    (["--profile", "nosuch"], "unknown profile 'nosuch'"),
    (["--gpus", "0"], "--gpus must be positive"),
    (["--gpus", "1001"], "not a multiple"),
    (["--days", "-1"], "--days must be positive"),
    (["--repair-hours", "-2"], "--repair-hours must be zero or more"),
    (["--seeds", "0"], "--seeds must be at least 1"),
    (["--policy", "custom"], "needs --policy-file"),
    (["--spares", "-1"], "--spares must be zero or more"),
    (["--target", "1"], "--target must be between 0 and 1"),
    (["--checkpoint-interval", "0"], "--checkpoint-interval must be positive"),
])
def test_sim_bad_input(capsys, args, fragment):
    code, out, err = run_cli(capsys, "sim", "--seeds", "1", *args)
    assert code == 2, (out, err)
    assert fragment in err and err.count("\n") == 1


def test_plot_without_matplotlib_is_a_clear_error(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # import matplotlib -> ImportError
    code, out, err = run_cli(capsys, "sim", "--seeds", "1", "--plot", str(tmp_path / "x.png"))
    assert code == 4
    assert "needs matplotlib" in err and "pip install" in err
    assert not (tmp_path / "x.png").exists()


def test_plot_writes_a_png(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    out_png = tmp_path / "ettr.png"
    code, out, err = run_cli(capsys, "sim", "--seeds", "2", "--days", "14", "--plot", str(out_png), "--json")
    assert code == 0, err
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    d = json.loads(out)["plot"]
    assert d["spares"][0]["spares"] == 0 and len(d["interval_s"]) >= 5


def test_compare_runs_every_policy_on_the_same_faults(capsys):
    code, out, err = run_cli(capsys, "sim", "--compare", "--seeds", "4", "--json")
    assert code == 0, err
    runs = json.loads(out)["compare"]
    assert [r["policy"] for r in runs] == ["slurm", "llama3-like", "slurm-ft"]
    # common random numbers: every hardware fault reaches every policy at the same moment
    for i in range(4):
        assert len({r["runs"][i]["replacements"] for r in runs}) == 1
    ettr = {r["policy"]: r["ettr"] for r in runs}
    assert ettr["slurm"] < ettr["llama3-like"] and ettr["slurm"] < ettr["slurm-ft"]
    code, text, err = run_cli(capsys, "sim", "--compare", "--seeds", "2")
    assert code == 0 and "same faults" in text and text.count("%") >= 6
    code, _, err = run_cli(capsys, "sim", "--compare", "--policy", "slurm", "--seeds", "1")
    assert code == 2 and "leave out --policy" in err


def test_simulated_ettr_agrees_with_the_first_order_formula_when_waste_is_small(by_policy):
    # independent arithmetic: R = mean over classes of detect + max(requeue, swap if swapped) + restart
    pol = pr.slurm_ft_policy()
    total = sum(c.count for c in pr.LLAMA3.classes)
    R = sum(c.count * (pol.detect_s(c.kind) + max(pol.requeue_s, pol.swap_s if c.replace else 0) + 180)
            for c in pr.LLAMA3.classes) / total
    tau, d = BASE.ckpt_interval_s, BASE.ckpt_cost_s
    first_order = 1 - (d / tau + (tau / 2 + R) / M)
    assert first_order == pytest.approx(0.931, abs=0.001)
    assert mean(r.ettr for r in by_policy["slurm-ft"]) == pytest.approx(first_order, abs=0.005)


def test_a_class_can_need_a_swap_for_a_share_of_its_faults():
    prof = pr.profile_from_dict({"days": 54, "gpus": 16384, "classes": [
        {"name": "gpu", "count": 300, "replace": 0.5, "kind": "crash"},
        {"name": "bug", "count": 100, "replace": False}]}, "p.yaml")
    assert prof.replace_count == 150 and prof.replace_fraction == 0.375
    rs = run_seeds(prof, pr.slurm_ft_policy(), BASE, range(10))
    share = sum(r.replacements for r in rs) / sum(r.interruptions for r in rs)
    assert 0.33 < share < 0.42
    with pytest.raises(UsageError, match="replace must be true, false or a share"):
        pr.profile_from_dict({"days": 1, "gpus": 8, "classes": [{"count": 1, "replace": 1.5}]}, "p.yaml")


def test_shorter_timeouts_can_be_tried_on_any_policy(capsys):
    base = json.loads(run_cli(capsys, "sim", "--seeds", "5", "--json")[1])
    code, out, err = run_cli(capsys, "sim", "--seeds", "5", "--json", "--detect-hang-s", "120",
                             "--detect-node-s", "30")
    assert code == 0, err
    fast = json.loads(out)
    crash = base["policy_figures"]["detect_s"]["crash"]        # the watcher's drain, as measured (the figures)
    assert fast["policy_figures"]["detect_s"] == {"crash": crash, "node": 30.0, "hang": 120.0}
    assert "overridden: hang detection 120 s" in fast["policy_source"]
    # software faults still wait for the collective timeout (their own way back: nothing to drain)
    assert fast["lost_hours_by_cause"]["detection"] < base["lost_hours_by_cause"]["detection"] * 0.7
    assert fast["ettr"] > base["ettr"]
    code, _, err = run_cli(capsys, "sim", "--seeds", "1", "--detect-hang-s", "-1")
    assert code == 2 and "--detect-hang-s must be zero or more" in err
