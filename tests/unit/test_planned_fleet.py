"""The controller, the sweep and the report on planned swaps (issue 24): a node drained PLANNED in a running
fault-tolerant job is no fault (never a requeue); `incidents` says which path it takes; the sweep validates
it as it is; `report` counts each soft signal's swaps, confirmations and false alarms. Over the shared fake
Slurm."""
from __future__ import annotations

from slurm_ft.config import Config, ControllerConfig, LifecycleConfig
from slurm_ft.fleet.report import drain_stats
from slurm_ft.fleet.recovery import journal as jn
from slurm_ft.fleet import db
from slurm_ft.fleet.recovery.controller import Controller
from slurm_ft.fleet.lifecycle.transitions import Event, HistoryEntry, State
from slurm_ft.job.tag import FtSpec
from slurm_ft.vocab import parse_event

from fakeslurm import FakeSlurm

DEG = "slurm-ft: PLANNED ECC_SBE_RATE gpu3 corrected ECC errors +1240 in 10 min"
XID = "slurm-ft: XID79 gpu1 GPU has fallen off the bus"


def ctl(tmp_path, s):
    cfg = Config(state_dir=str(tmp_path / "state"),
                 controller=ControllerConfig(poll_s=0.0, read_progress=False, cycle_budget_s=2.0, wake_port=0),
                 lifecycle=LifecycleConfig(breaker_max_share=0.0, breaker_max_nodes=0, planned_wait_s=60.0))
    return Controller(s, jn.connect(db.path_in(cfg.state_dir)), cfg, sleep=lambda x: None)


def hot():
    s = FakeSlurm(train=("n1", "n2", "n3", "n4"), spares=("n5", "n6"))
    s.add_job(4, FtSpec(ckpt_dir="", hot_spares=1, train_nodes=3, max_restarts=5), batch_host="n1")
    return s


def plain():
    s = FakeSlurm(train=("n1", "n2", "n3"), spares=("n5", "n6"), others=("n4",))
    s.parts["train"].append("n4")
    s.add_job(3, FtSpec(ckpt_dir="", max_restarts=5), batch_host="n1")
    return s


def told(s):
    return [parse_event(c[2])[:2] for c in s.calls if c[0] == "notify"]


def test_a_hot_spare_job_keeps_running_its_supervisor_is_told_and_the_pool_refills_the_partition(tmp_path):
    s = hot()
    s.fail("n3", DEG)
    c = ctl(tmp_path, s)
    c.cycle(budget_s=0.5)
    [inc] = jn.incidents(c.conn)
    assert inc.status == "open" and inc.note.startswith("planned, hot spare: the job's supervisor moves off n3")
    assert s.j[100].state == "RUNNING" and not [x for x in s.calls if x[0] in ("requeue", "cancel", "update")]
    assert "n3" not in s.parts["train"] and "n5" in s.parts["train"]        # quarantined; the pool refilled
    assert told(s) == [("degraded", "n3"), ("quarantined", "n3")]
    s.shrink(100, ("n1", "n2", "n4"))                                      # the supervisor moved at its checkpoint
    c.cycle(budget_s=0.5)
    [inc] = jn.incidents(c.conn)
    assert inc.status == "planned" and [x.name for x in inc.steps] == ["open", "quarantine", "swap", "planned"]


def test_without_a_hot_spare_the_swap_is_deferred_to_the_jobs_next_restart_and_said_so(tmp_path):
    s = plain()
    s.fail("n2", DEG)
    c = ctl(tmp_path, s)
    c.cycle(budget_s=0.5)
    c.cycle(budget_s=0.5)                                  # seen again: no second incident
    [inc] = jn.incidents(c.conn)
    assert inc.status == "deferred" and "a spare takes its place at the job's next restart" in inc.note
    assert s.j[100].state == "RUNNING" and s.parts["train"] == ["n1", "n2", "n3", "n4"] and not s.calls
    # the next restart, here for a fault: both go, two spares come, one requeue
    s.fail("n3", XID)
    c.cycle(budget_s=0.5)
    inc = jn.incidents(c.conn)[-1]
    assert inc.nodes == ("n3", "n2") and inc.status == "recovered" and len(inc.spares) == 2
    assert [x for x in s.calls if x[0] == "requeue"] == [("requeue", 100, False)]
    assert "n2" not in s.j[100].nodes and "n3" not in s.j[100].nodes


def test_a_restart_for_another_reason_takes_the_node_out_before_the_job_starts_again(tmp_path):
    s = plain()
    s.fail("n2", DEG)
    c = ctl(tmp_path, s)
    c.cycle(budget_s=0.5)
    s.requeue(100)                                         # its user requeued it
    s.jobs()
    c.cycle(budget_s=1.0)
    inc = jn.incidents(c.conn)[-1]
    assert inc.note.startswith("planned, at restart: a spare takes the place of n2")
    assert inc.status == "planned" and "n2" not in s.j[100].nodes and s.j[100].state == "RUNNING"
    assert "n2" not in s.parts["train"]


def fault_after_degraded(tmp_path, s):
    """n3 degraded (a planned swap opened), then n2 fails: the controller and its incidents."""
    s.fail("n3", DEG)
    c = ctl(tmp_path, s)
    c.cycle(budget_s=0.5)
    s.fail("n2", XID)
    c.cycle(budget_s=0.5)
    return c, jn.incidents(c.conn)


def test_a_fault_in_the_job_supersedes_an_open_planned_swap_and_takes_the_node_along(tmp_path):
    s = FakeSlurm(train=("n1", "n2", "n3", "n4", "n5"), spares=("n6", "n7"))
    s.add_job(5, FtSpec(ckpt_dir="", hot_spares=2, train_nodes=3, max_restarts=5), batch_host="n1")
    c, (first, second) = fault_after_degraded(tmp_path, s)
    assert first.status == "superseded" and "a fault in the job (n2)" in first.note
    assert second.nodes == ("n2", "n3") and second.note.startswith("hot-spare: ")
    assert not [x for x in s.calls if x[0] == "requeue"]


def test_a_degraded_node_stays_when_without_it_the_job_would_need_a_requeue(tmp_path):
    s = hot()                                     # 3 + 1: n2 failed and n3 degraded leave 2 of the 3 needed
    c, (first, second) = fault_after_degraded(tmp_path, s)
    assert first.status == "superseded"
    assert second.nodes == ("n2",) and second.note.startswith("hot-spare: ")      # the supervisor's, no requeue
    assert not [x for x in s.calls if x[0] == "requeue"]


def test_the_report_counts_each_soft_signals_swaps_confirmed_and_false_alarms():
    def entry(node, t, event, to, cause=""):
        return HistoryEntry(node, t, event, None, to, cause)
    hist = [
        entry("n1", 10, Event.FAULT, State.FAILED, "slurm-ft: PLANNED ECC_SBE_RATE gpu3 +1240"),
        entry("n1", 20, Event.QUARANTINE, State.QUARANTINED),
        entry("n1", 30, Event.REMEDIATE, State.REMEDIATING, "retest: ECC_SBE_RATE gpu3"),
        entry("n1", 31, Event.REMEDIATED, State.REPAIRED),
        entry("n1", 40, Event.PASS, State.SPARE, "passed (job 9)"),
        entry("n2", 10, Event.FAULT, State.FAILED, "slurm-ft: PLANNED CLOCK_SLOW gpu0 SM clock at 50%"),
        entry("n2", 20, Event.QUARANTINE, State.QUARANTINED),
        entry("n2", 30, Event.REMEDIATE, State.REMEDIATING, "retest: CLOCK_SLOW gpu0"),
        entry("n2", 40, Event.FAIL, State.QUARANTINED, "BURNIN_TFLOPS gpu0 0.5 of the node's best"),
        entry("n3", 10, Event.FAULT, State.FAILED, "slurm-ft: PLANNED ECC_SBE_RATE gpu1 +2000"),
        entry("n4", 10, Event.FAULT, State.FAILED, "slurm-ft: XID79 gpu1 fell off the bus"),
    ]
    summary = drain_stats.summarize(drain_stats.episodes(hist), 100.0)
    assert summary["by_soft_signal"] == {
        "CLOCK_SLOW": {"swaps": 1, "confirmed": 1, "false_alarms": 0, "open": 0, "precision": 1.0},
        "ECC_SBE_RATE": {"swaps": 2, "confirmed": 0, "false_alarms": 1, "open": 1, "precision": 0.0}}
    assert set(summary["by_check"]) == {"xid"} and summary["total"]["drains"] == 4


def test_the_degraded_node_itself_failing_before_the_swap_takes_the_fault_path(tmp_path):
    s = hot()
    s.fail("n3", DEG)
    c = ctl(tmp_path, s)
    c.cycle(budget_s=0.5)
    s.fail("n3", XID)                              # the node's check rewrote the planned reason (node/drain.py)
    c.cycle(budget_s=0.5)
    first, second = jn.incidents(c.conn)
    assert first.status == "superseded" and second.nodes == ("n3",) and second.note.startswith("hot-spare: ")


def test_the_sweep_validates_a_planned_swaps_node_as_it_is_even_with_remediation_off(tmp_path):
    from test_lifecycle_sweep import ModelSlurm, config, sweep
    from slurm_ft.fleet.lifecycle.node_history import Store
    cfg, s = config(tmp_path), ModelSlurm()
    assert cfg.lifecycle.remediation.mode == "off"
    sweep(cfg, s)
    s.recover("gpu002", "gpu005", reason=DEG)          # the controller quarantined it and refilled `train`
    r = sweep(cfg, s)
    assert r.changes[:2] == [f"gpu002: in_service -> failed ({DEG})",
                             "gpu002: failed -> quarantined (drained and out of the partitions)"]
    assert any(c.startswith("gpu002: quarantined -> repaired (ECC_SBE_RATE gpu3: retest") for c in r.changes), r.changes
    assert "gpu002: validating -> spare (passed (job 100))" in r.changes
    with Store(cfg.state_dir) as st:
        assert st.record("gpu002").state is State.SPARE
        eps = drain_stats.episodes(st.history("gpu002"))
    assert drain_stats.soft_signals(eps) == {"ECC_SBE_RATE": {"swaps": 1, "confirmed": 0, "false_alarms": 1,
                                                              "open": 0, "precision": 0.0}}


def test_a_planned_node_still_running_its_job_waits_for_its_validation(tmp_path):
    from slurm_ft.config import RemediationConfig
    from slurm_ft.fleet.lifecycle import remedy_plan
    from slurm_ft.slurm.types import Node
    node = Node("gpu002", "ALLOCATED", frozenset({"DRAIN"}), reason="slurm-ft: QUARANTINED PLANNED ECC_SBE_RATE gpu3 x")
    hist = [HistoryEntry("gpu002", 1.0, Event.FAULT, State.IN_SERVICE, State.FAILED, DEG)]
    [step] = remedy_plan.plan({"gpu002": State.QUARANTINED}, {"gpu002": 1.0}, {"gpu002": hist}, [node], None, 10.0,
                              RemediationConfig())
    assert step.act == "wait" and "its job still runs there" in step.why
    [step] = remedy_plan.plan({"gpu002": State.QUARANTINED}, {"gpu002": 1.0}, {"gpu002": hist},
                              [Node("gpu002", "IDLE", frozenset({"DRAIN"}), reason=node.reason)], None, 10.0,
                              RemediationConfig())
    assert step.act == "retest"


def test_a_planned_incident_holds_its_job_no_longer_than_a_hot_fault_does(tmp_path):
    s = hot()
    s.fail("n3", DEG)
    now = [1_000_000.0]
    cfg = Config(state_dir=str(tmp_path / "state"),
                 controller=ControllerConfig(poll_s=0.1, read_progress=False, cycle_budget_s=2.0, wake_port=0),
                 lifecycle=LifecycleConfig(breaker_max_share=0.0, breaker_max_nodes=0))

    def sleep(x):
        now[0] += x
    c = Controller(s, jn.connect(db.path_in(cfg.state_dir)), cfg, clock=lambda: now[0], sleep=sleep)
    c.cycle(budget_s=0.5)
    assert jn.incidents(c.conn)[0].status == "open"
    now[0] += 30                          # the supervisor has not given n3 back (or Slurm refused the shrink)
    c.cycle(budget_s=0.5)
    [inc] = jn.incidents(c.conn)
    assert inc.status == "planned" and "stays in the job, unused, where Slurm refuses the shrink" in inc.note
