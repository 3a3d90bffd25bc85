"""bench/peers.py's rules (slurm_ft_lab.peerstats): what one fault cost a job, from its event log. The logs
here are built the way slurm_ft_lab.torchjob writes them (one JSON object per event)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ft_lab import peerstats
from slurm_ft_lab.peerstats import NotRecovered, Shape, analyze, summarize, table


def gang(s_star: int, period: float, phase: float, down: float, resumed: int, after: int = 6, nodes=("n1", "n2"),
         new_nodes=("n1", "n3")):
    """A DDP gang: steps 1..s_star every `period`, the fault `phase` s after the last, a new run `down` s
    after the fault, resumed from step `resumed`, then `after` steps."""
    ev = [{"event": "start", "run": "1.0.0.0.g0", "group": 0, "t": 0.0, "step": 0, "nodes": list(nodes)}]
    ev += [{"event": "up", "run": "1.0.0.0.g0", "group": 0, "t": 0.0, "node": n} for n in nodes]
    ev += [{"event": "step", "run": "1.0.0.0.g0", "group": 0, "t": k * period, "step": k} for k in range(1, s_star + 1)]
    fault = s_star * period + phase
    t1 = fault + down
    ev += [{"event": "up", "run": "1.1.0.0.g0", "group": 0, "t": t1 - 0.1, "node": n} for n in new_nodes]
    ev.append({"event": "start", "run": "1.1.0.0.g0", "group": 0, "t": t1, "step": resumed, "nodes": list(new_nodes)})
    ev += [{"event": "step", "run": "1.1.0.0.g0", "group": 0, "t": t1 + j * period, "step": resumed + j}
           for j in range(1, after + 1)]
    return ev, fault


def test_a_gang_that_resumes_from_an_older_checkpoint_loses_the_wait_and_the_steps_it_redoes():
    ev, fault = gang(s_star=13, period=0.5, phase=0.2, down=10.0, resumed=10)
    f = analyze(ev, fault, "n2", Shape(groups=1, slots=2, gpus=8))
    assert f.fault_to_first_step_s == pytest.approx(10.5)            # the new run's first step
    assert f.fault_to_full_s == pytest.approx(10.5)
    assert (f.steps_redone, f.last_step_before, f.resumed_step) == (3, 13, 10)
    # how late its progress is: step 14 came 0.5 s after step 13 before the fault; now it comes after 0.2 s to
    # the fault, 10 s down, and the 4 steps 11..14 (3 of them redone): (0.2 + 10 + 3 x 0.5) x 2 slots x 8 GPUs
    assert f.gpu_s_lost == pytest.approx((0.2 + 10.0 + 1.5) * 16)
    assert f.bad_node_left_out and f.starts_on_bad_node == 0


def test_a_gang_started_again_on_the_failed_node_is_not_credited_with_leaving_it_out():
    ev, fault = gang(s_star=13, period=0.5, phase=0.2, down=10.0, resumed=10, new_nodes=("n1", "n2"))
    f = analyze(ev, fault, "n2", Shape(1, 2, 8))
    assert not f.bad_node_left_out and f.starts_on_bad_node == 1


def test_a_step_of_the_old_run_that_ends_after_the_fault_is_not_the_recovery():
    ev, fault = gang(s_star=13, period=0.5, phase=0.2, down=10.0, resumed=10)
    ev.append({"event": "step", "run": "1.0.0.0.g0", "group": 0, "t": fault + 0.3, "step": 14})   # in flight
    f = analyze(ev, fault, "n2", Shape(1, 2, 8))
    assert f.fault_to_first_step_s == pytest.approx(10.5)
    assert f.gpu_s_lost == pytest.approx((0.2 + 10.0 + 1.5) * 16)   # done then, and again: step 15 is as late


def test_a_job_that_never_started_again_did_not_recover():
    ev, fault = gang(s_star=13, period=0.5, phase=0.2, down=10.0, resumed=10, after=0)
    with pytest.raises(NotRecovered, match="no step after the fault"):
        analyze(ev, fault, "n2", Shape(1, 2, 8))
    ev, fault = gang(s_star=13, period=0.5, phase=0.2, down=10.0, resumed=10, after=5)   # redone 3, 2 new
    with pytest.raises(NotRecovered, match="2 of 3 steps at full strength past step 13"):
        analyze(ev, fault, "n2", Shape(1, 2, 8))


@settings(max_examples=100, deadline=None)
@given(period=st.floats(0.05, 5.0), phase_share=st.floats(0.0, 0.99), down=st.floats(0.01, 900.0),
       redo=st.integers(0, 9), slots=st.integers(1, 64), s_star=st.integers(12, 200))
def test_a_gang_loses_its_idle_time_and_its_redone_steps_on_every_slot(period, phase_share, down, redo, slots, s_star):
    ev, fault = gang(s_star=s_star, period=period, phase=phase_share * period, down=down, resumed=s_star - redo,
                     after=redo + 5)
    f = analyze(ev, fault, "n2", Shape(1, slots, 8))
    assert f.fault_to_first_step_s == pytest.approx(down + period)
    assert f.steps_redone == redo
    assert f.gpu_s_lost == pytest.approx((phase_share * period + down + redo * period) * slots * 8,
                                         rel=1e-6, abs=1e-6)


def replica_groups(pause: float, back: float, period: float = 0.5, s_star: int = 20, heal_to: int = 0, tail: int = 5):
    """torchft, 2 groups of 1 node: both step every `period` in a quorum of 2 until the fault (0.1 s after
    step s_star), group 0 steps on alone after `pause`, group 1's new run starts `back` s after the fault,
    heals, and both step in a quorum of 2 again."""
    ev = []
    for g, node in ((0, "a"), (1, "b")):
        ev.append({"event": "start", "run": f"{10 + g}.0.0.0.g{g}", "group": g, "t": 0.0, "step": 0, "nodes": [node]})
        ev += [{"event": "step", "run": f"{10 + g}.0.0.0.g{g}", "group": g, "t": k * period, "step": k,
                "participants": 2} for k in range(1, s_star + 1)]
    fault = s_star * period + 0.1
    t, step = fault + pause, s_star
    while t < fault + back + period:
        step += 1
        ev.append({"event": "step", "run": "10.0.0.0.g0", "group": 0, "t": t, "step": step, "participants": 1})
        t += period
    ev.append({"event": "up", "run": "12.0.0.0.g1", "group": 1, "t": fault + back - 0.5, "node": "c"})
    ev.append({"event": "start", "run": "12.0.0.0.g1", "group": 1, "t": fault + back, "step": heal_to, "nodes": ["c"]})
    for _ in range(tail):
        step += 1
        for g, run in ((0, "10.0.0.0.g0"), (1, "12.0.0.0.g1")):
            ev.append({"event": "step", "run": run, "group": g, "t": t, "step": step, "participants": 2})
        t += period
    return ev, fault


def test_replica_groups_lose_only_the_failed_groups_time_and_the_healthy_groups_pause():
    ev, fault = replica_groups(pause=5.0, back=20.0)
    f = analyze(ev, fault, "b", Shape(groups=2, slots=1, gpus=8), failed_group=1)
    assert f.fault_to_first_step_s == pytest.approx(5.0)            # group 0 trains on without group 1
    assert f.fault_to_full_s > 20.0                                   # group 1 back in a quorum of both
    assert f.steps_redone == 0
    g1_idle = f.fault_to_full_s + 0.1                                 # from its last step to its first in the quorum
    g0_pause = 0.1 + 5.0 - 0.5                                        # one step period of that was work anyway
    assert f.gpu_s_lost == pytest.approx((g1_idle + g0_pause) * 8, abs=0.5 * 8)
    assert f.bad_node_left_out


def test_a_failed_group_never_back_in_the_quorum_did_not_recover():
    ev, fault = replica_groups(pause=5.0, back=20.0, tail=0)
    with pytest.raises(NotRecovered):
        analyze(ev, fault, "b", Shape(2, 1, 8), failed_group=1)
    ev = [e for e in replica_groups(pause=5.0, back=20.0)[0] if e.get("run") != "12.0.0.0.g1"]
    with pytest.raises(NotRecovered, match="group 1 was not started again"):
        analyze(ev, fault, "b", Shape(2, 1, 8), failed_group=1)


def test_a_contender_that_did_not_recover_from_one_fault_prints_no_figures():
    ev, fault = gang(s_star=13, period=0.5, phase=0.2, down=10.0, resumed=10)
    ok = analyze(ev, fault, "n2", Shape(1, 2, 8))
    rows = [summarize("slurm-ft-hot-spare", "slurm-ft hot spare", [(ok, "", []), (ok, "", [])], 3),
            summarize("nvrx", "NVRx ft_launcher", [(ok, "", []), (None, "not back within 300 s of the fault: x", [])], 3)]
    assert rows[0].kind == "measured" and rows[0].first_p50 == pytest.approx(10.5)
    assert rows[1].kind == "failed" and rows[1].first_p50 is None and rows[1].lost_p50 is None
    assert "did not recover from fault 2 of 2: not back within 300 s" in rows[1].note
    text = table(rows, "slurm-ft-hot-spare")
    nvrx = next(line for line in text.splitlines() if line.startswith("NVRx"))
    assert "failed: did not recover from fault 2 of 2" in nvrx and " s " not in nvrx.split("failed:")[0]


def test_the_table_puts_each_contender_over_the_reference_and_names_healthy_nodes_drained():
    fast, fault = gang(s_star=13, period=0.5, phase=0.2, down=10.0, resumed=13)
    slow, fault2 = gang(s_star=13, period=0.5, phase=0.2, down=30.0, resumed=10)
    a = analyze(fast, fault, "n2", Shape(1, 2, 8))
    b = analyze(slow, fault2, "n2", Shape(1, 2, 8))
    rows = [summarize("ref", "slurm-ft hot spare", [(a, "", [])], 3),
            summarize("other", "other", [(b, "", ["n7"])], 3)]
    line = table(rows, "ref").splitlines()[3]
    assert f"{b.fault_to_first_step_s / a.fault_to_first_step_s:.2f}x" in line
    assert f"{b.gpu_s_lost / a.gpu_s_lost:.2f}x" in line
    assert line.rstrip().endswith("n7")


def test_percentiles_interpolate():
    assert peerstats.pct([3.0], 95) == 3.0
    assert peerstats.pct([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert peerstats.pct([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
