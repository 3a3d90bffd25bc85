"""The controller's cycle over a small in-memory Slurm model (no daemons): steps, journal, crash + restart.

The model is the unit tests' one stateful Slurm (fakeslurm.py). The real daemons are exercised by
tests/lab/test_controller_lab.py and test_crash_consistency.py.
"""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from slurm_ft.config import Config, ControllerConfig, LifecycleConfig
from slurm_ft.slurm.types import Job, Node
from slurm_ft.fleet.recovery import journal as jn
from slurm_ft.fleet import db
from slurm_ft.fleet.recovery.controller import Controller
from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path
from slurm_ft.job.tag import FtSpec, encode


class Crash(BaseException):
    pass


def model_slurm(n_train=4, n_spares=2, min_nodes=None, max_restarts=5) -> FakeSlurm:
    """The shared fake with one fault-tolerant job (100) on the whole train partition."""
    names = [f"gpu{i:03d}" for i in range(1, n_train + n_spares + 1)]
    s = FakeSlurm(train=names[:n_train], spares=names[n_train:])
    s.add_job(n_train, FtSpec(ckpt_dir="", min_nodes=min_nodes, max_restarts=max_restarts))
    return s


def _expand(expr):
    from slurm_ft.slurm.hostlist import expand
    return tuple(expand(expr))


def make(tmp_path, slurm, crash=None, lifecycle=None, keep_off=""):
    # breaker off: FakeSlurm.fail drains nodes past any limit (the breaker's own tests are test_fleet_breaker)
    cfg = Config(state_dir=str(tmp_path / "state"), controller=ControllerConfig(poll_s=0.0, read_progress=False,
                                                                                cycle_budget_s=5.0),
                 lifecycle=lifecycle or LifecycleConfig(breaker_max_share=0.0, breaker_max_nodes=0), keep_off=keep_off)
    def boom(kind, when):
        if (kind, when) == crash:
            raise Crash(f"{kind}:{when}")
    return Controller(slurm, jn.connect(db.path_in(cfg.state_dir)), cfg, sleep=lambda s: None, on_journal=boom)


def end_state(slurm, conn):
    job = slurm.j[100]
    incs = jn.incidents(conn)
    return dict(job=(job.state, job.restart_count, job.nodes), parts={k: sorted(v) for k, v in slurm.parts.items()},
                incidents=[(i.status, i.nodes, i.spares) for i in incs])


def test_one_fault_recovers_on_a_spare(tmp_path):
    s = model_slurm()
    s.fail("gpu002")
    c = make(tmp_path, s)
    c.cycle()
    st = end_state(s, c.conn)
    assert st["job"] == ("RUNNING", 1, ("gpu001", "gpu003", "gpu004", "gpu005"))
    assert st["parts"] == {"train": ["gpu001", "gpu003", "gpu004", "gpu005"], "spares": ["gpu006"]}
    assert st["incidents"] == [("recovered", ("gpu002",), ("gpu005",))]
    inc = jn.incidents(c.conn)[0]
    assert [x.name for x in inc.steps] == ["open", "quarantine", "swap", "requeue", "exclude", "start", "confirm"]
    assert [c for c in s.calls if c[0] == "requeue"] == [("requeue", 100, False)]
    c.cycle()                                   # nothing more to do: no second requeue for the same fault
    assert len([c for c in s.calls if c[0] == "requeue"]) == 1


def test_a_fault_on_a_keep_off_node_is_logged_once_and_left_alone(tmp_path, caplog):
    s = model_slurm()
    s.fail("gpu002")
    c = make(tmp_path, s, keep_off="gpu[002,005]")
    c.cycle()
    c.cycle()
    assert jn.incidents(c.conn) == [] and s.j[100].state == "RUNNING"
    assert "gpu002" in s.parts["train"] and "gpu005" in s.parts["spares"]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("keep_off:")]
    assert len(lines) == 1 and lines[0].startswith("keep_off: gpu002: ") and "left alone (no incident" in lines[0]


def test_an_admins_hold_closed_lets_the_controller_recover_past_the_breaker(tmp_path):
    from slurm_ft.breaker import hold
    for held in (False, True):
        s = model_slurm()
        s.drain(["gpu006"], "slurm-ft: XID79 gpu1 fell off the bus")   # the breaker's one drain (limit 1)
        s.fail("gpu002")                                                # drained past the limit: waits
        c = make(tmp_path / str(held), s, lifecycle=LifecycleConfig(breaker_max_share=0.0, breaker_max_nodes=1))
        if held:
            hold.set_hold(c.config, "closed", 600, "bad driver rolled back", "alice")
        c.cycle()
        assert [i.status for i in jn.incidents(c.conn)] == (["recovered"] if held else [])


STEPS = ["open", "quarantine", "swap", "requeue", "exclude", "start", "confirm"]


@pytest.mark.parametrize("kind", STEPS)
@pytest.mark.parametrize("when", ["intent", "result"])
def test_crash_at_any_step_then_restart_ends_the_same(tmp_path, kind, when):
    ref = model_slurm()
    ref.fail("gpu002")
    make(tmp_path / "ref", ref).cycle()
    s = model_slurm()
    s.fail("gpu002")
    with pytest.raises(Crash):
        make(tmp_path, s, crash=(kind, when)).cycle()
    c = make(tmp_path, s)                       # a new controller over the same journal
    c.cycle()
    assert end_state(s, c.conn) == end_state(ref, make(tmp_path / "ref", ref).conn)
    assert len([x for x in s.calls if x[0] == "requeue"]) == 1


def test_two_failed_nodes_one_incident_two_spares(tmp_path):
    s = model_slurm()
    s.fail("gpu001")
    s.fail("gpu003")
    c = make(tmp_path, s)
    c.cycle()
    st = end_state(s, c.conn)
    assert st["incidents"] == [("recovered", ("gpu001", "gpu003"), ("gpu005", "gpu006"))]
    assert st["parts"]["spares"] == [] and st["job"][0] == "RUNNING"


def test_empty_pool_waits_then_resumes_when_a_spare_returns(tmp_path):
    s = model_slurm(n_spares=0)
    s.fail("gpu002")
    c = make(tmp_path, s)
    c.cycle()
    inc = jn.incidents(c.conn)[0]
    assert inc.status == "waiting" and "waiting for a spare" in inc.note
    assert s.j[100].state == "PENDING" and s.j[100].held
    assert ("update", 100, (("AdminComment", "slurm-ft: " + inc.note),)) in s.calls
    c.cycle()
    assert [x for x in s.calls if x[0] == "requeue"] == [("requeue", 100, True)]
    s.n["gpu009"] = Node("gpu009", "IDLE")      # an admin returns a node to the pool
    s.parts["spares"] = ["gpu009"]
    c.cycle()
    assert jn.incidents(c.conn)[0].status == "recovered" and "gpu009" in s.j[100].nodes


def test_elastic_job_shrinks_when_pool_is_empty(tmp_path):
    s = model_slurm(n_spares=0, min_nodes=3)
    s.fail("gpu002")
    c = make(tmp_path, s)
    c.cycle()
    assert s.j[100].state == "RUNNING" and s.j[100].num_nodes == 3 and len(s.j[100].nodes) == 3
    inc = jn.incidents(c.conn)[0]
    assert inc.status == "recovered" and inc.shrink_to == 3


def test_stops_after_max_restarts_without_progress(tmp_path):
    s = model_slurm(n_spares=4, max_restarts=2)
    c = make(tmp_path, s)
    for _ in range(3):
        bad = s.j[100].nodes[0]
        s.fail(bad)
        c.cycle()
    statuses = [i.status for i in jn.incidents(c.conn)]
    assert statuses == ["recovered", "recovered", "gave_up"]
    assert s.j[100].state == "PENDING" and s.j[100].held
    c.cycle()
    assert len(jn.incidents(c.conn)) == 3       # no loop


def test_admin_drain_is_not_a_fault(tmp_path):
    s = model_slurm()
    s.fail("gpu002", reason="admin: new BIOS on friday")
    c = make(tmp_path, s)
    c.cycle()
    assert jn.incidents(c.conn) == [] and s.j[100].state == "RUNNING" and not s.calls


def test_a_fault_drained_within_the_default_breaker_is_recovered_on_a_small_cluster(tmp_path, caplog):
    """Finding 9: 8 + 2 nodes, the breaker at its defaults (10 % of 10 nodes: limit 1). The watcher's
    drain of gpu002 for an Xid 79 used the one unit, and the controller held its recovery for the
    breaker's window (an hour). Now it is recovered; a later drain Slurm made past the limit for a failed
    prolog is undone (the hooks share the breaker: the controller settles their bursts), loudly, and no
    spare moves for it."""
    s = model_slurm(n_train=8, n_spares=2)
    s.fail("gpu002")                                          # the watcher's drain: count 1 of limit 1
    c = make(tmp_path, s, lifecycle=LifecycleConfig())
    with caplog.at_level("ERROR"):
        c.cycle()
    [inc] = jn.incidents(c.conn)
    assert inc.status == "recovered" and inc.nodes == ("gpu002",) and inc.spares == ("gpu009",)
    assert s.j[100].state == "RUNNING" and s.j[100].restart_count == 1 and "gpu002" not in s.j[100].nodes
    assert "drain-rate breaker open" in caplog.text           # said once: no more drains
    later = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 5))
    s.n["gpu003"] = replace(s.n["gpu003"], flags=frozenset({"DRAIN"}), reason="Prolog error", reason_time=later)
    s.calls.clear()
    with caplog.at_level("ERROR"):
        c.cycle()
    assert len(jn.incidents(c.conn)) == 1 and s.calls == [("resume", ("gpu003",))] and s.j[100].restart_count == 1
    assert "ALERT: drain-rate breaker: prolog/epilog failures drained nodes past the limit 1" in caplog.text


def test_a_users_requeue_with_an_admins_down_node_in_the_partition_claims_nothing(tmp_path):
    """R2: bob's own `scontrol requeue` of his job (PENDING, BeginTime, restart 1, no nodes) while an
    admin's gpu005 is DOWN ("admin: DIMM swap, ticket 4711") and another user's gpu006 drained: the
    controller drained gpu005 over the admin's reason, moved two spares and restarted the job."""
    s = FakeSlurm(train=[f"gpu{i:03d}" for i in range(1, 7)], spares=["spare1", "spare2", "spare3"])
    s.add_job(2, FtSpec(ckpt_dir="", max_restarts=5))
    c = make(tmp_path, s)
    c.cycle()                                                 # the controller sees the job run on gpu001-002
    s.n["gpu005"] = replace(s.n["gpu005"], state="DOWN", reason="admin: DIMM swap, ticket 4711")
    s.n["gpu006"] = replace(s.n["gpu006"], flags=frozenset({"DRAIN"}), reason="Kill task failed")
    s.requeue(100)                                            # bob's own requeue: no fault
    s.calls.clear()
    c.cycle()
    assert jn.incidents(c.conn) == [] and s.calls == []       # no drain, no partition edit, no job update
    assert s.n["gpu005"].reason == "admin: DIMM swap, ticket 4711" and not s.n["gpu005"].drained
    assert s.parts["spares"] == ["spare1", "spare2", "spare3"]


def test_an_admins_reason_set_after_the_incident_opened_is_left_alone(tmp_path):
    """gpu003 stopped answering (a fault); before the quarantine an admin downs it for their own work:
    it stays where it is with their reason (never drained over, never out of its partition), and the
    job is recovered all the same."""
    s = model_slurm()
    s.n["gpu003"] = replace(s.n["gpu003"], state="DOWN", reason="Not responding")
    c = make(tmp_path, s)
    from slurm_ft.fleet.recovery.plan import plan
    snap = c.observe()
    [opening] = plan(snap, [], c.policy, snap.taken_at)
    c.act(opening)
    s.n["gpu003"] = replace(s.n["gpu003"], reason="admin: PSU swap")
    c.cycle()
    [inc] = jn.incidents(c.conn)
    assert inc.status == "recovered" and "gpu003" not in s.j[100].nodes
    assert s.n["gpu003"].reason == "admin: PSU swap" and not s.n["gpu003"].drained and "gpu003" in s.parts["train"]
    assert not [x for x in s.calls if x[0] == "drain"]
    # the same race between the plan and the act: the quarantine's fresh read leaves it to its admin
    s2 = model_slurm()
    s2.n["gpu003"] = replace(s2.n["gpu003"], state="DOWN", reason="Not responding")
    c2 = make(tmp_path / "race", s2)
    snap = c2.observe()
    [opening] = plan(snap, [], c2.policy, snap.taken_at)
    c2.act(opening)
    [inc] = jn.incidents(c2.conn)
    s2.n["gpu003"] = replace(s2.n["gpu003"], reason="admin: PSU swap")
    from slurm_ft.fleet.recovery.records import Step
    assert c2.act(Step("quarantine", 100, incident_id=inc.id, nodes=inc.nodes, partition="train")) == "skipped"
    assert "left to its admin" in jn.incidents(c2.conn)[0].step("quarantine").detail
    assert s2.n["gpu003"].reason == "admin: PSU swap" and "gpu003" in s2.parts["train"]


def test_a_down_node_is_drained_on_quarantine_through_the_breaker(tmp_path):
    s = model_slurm()
    s.n["gpu003"] = replace(s.n["gpu003"], state="DOWN", reason="Not responding")
    c = make(tmp_path, s)
    c.cycle()
    inc = jn.incidents(c.conn)[0]
    assert inc.status == "recovered" and inc.nodes == ("gpu003",)
    assert s.n["gpu003"].drained
    assert s.n["gpu003"].reason == "slurm-ft: quarantined, DOWN: Not responding during job 100"
    assert "drained gpu003" in inc.step("quarantine").detail


def _with_the_policy(s, job_id=100, spec=FtSpec(ckpt_dir="", max_restarts=5)):
    """slurmctld runs job_submit/lua: the job's tag is in AdminComment, its Comment its owner's."""
    s.job_submit = ["lua"]
    s.j[job_id] = replace(s.j[job_id], comment="", admin_comment=encode(spec))


def test_with_the_job_submit_policy_a_tag_in_comment_is_ignored(tmp_path):
    s = model_slurm()
    s.job_submit = ["lua"]                      # the tag stays where the owner wrote it: Comment
    s.fail("gpu002")
    c = make(tmp_path, s)
    c.cycle()
    assert jn.incidents(c.conn) == [] and not [x for x in s.calls if x[0] == "requeue"]
    assert s.j[100].state == "RUNNING" and s.j[100].restart_count == 0


def test_with_the_job_submit_policy_the_admin_comment_tag_is_followed(tmp_path):
    s = model_slurm()
    _with_the_policy(s)
    s.fail("gpu002")
    c = make(tmp_path, s)
    c.cycle()
    assert end_state(s, c.conn)["incidents"] == [("recovered", ("gpu002",), ("gpu005",))]


def test_the_controllers_note_keeps_the_admin_comment_tag(tmp_path):
    s = model_slurm(n_spares=0)
    _with_the_policy(s)
    tag = s.j[100].admin_comment
    s.fail("gpu002")
    c = make(tmp_path, s)
    c.cycle()
    inc = jn.incidents(c.conn)[0]
    assert s.j[100].admin_comment == f"{tag} | slurm-ft: {inc.note}"
    s.n["gpu009"] = Node("gpu009", "IDLE")      # the job is still followed: it recovers once a spare is back
    s.parts["spares"] = ["gpu009"]
    c.cycle()
    c.cycle()
    assert jn.incidents(c.conn)[0].status == "recovered" and "gpu009" in s.j[100].nodes


def test_unreadable_slurmctld_config_trusts_only_admin_comment(tmp_path):
    from slurm_ft.errors import CommandError

    s = model_slurm()

    def unreadable():
        raise CommandError(["scontrol", "show", "config"], 1, "slurm_load_ctl_conf error")
    s.job_submit_plugins = unreadable
    s.fail("gpu002")
    c = make(tmp_path, s)
    c.cycle()
    assert jn.incidents(c.conn) == []           # the Comment tag is not trusted while in doubt
    s.job_submit_plugins = lambda: []           # readable again, no policy: asked again, Comment it is
    c.cycle()
    assert end_state(s, c.conn)["incidents"] == [("recovered", ("gpu002",), ("gpu005",))]


@pytest.mark.parametrize("point", [("quarantine", "intent"), ("requeue", "intent"), ("requeue", "result"),
                                   ("wait", "intent"), ("wait", "result")])
def test_crash_while_the_pool_is_empty_still_waits_once_then_recovers(tmp_path, point):
    s = model_slurm(n_spares=0)
    s.fail("gpu002")
    with pytest.raises(Crash):
        make(tmp_path, s, crash=point).cycle()
    c = make(tmp_path, s)
    c.cycle()
    inc = jn.incidents(c.conn)[0]
    assert inc.status == "waiting" and s.j[100].held
    assert [x for x in s.calls if x[0] == "requeue"] == [("requeue", 100, True)]
    s.n["gpu009"] = Node("gpu009", "IDLE")
    s.parts["spares"] = ["gpu009"]
    c.cycle()
    assert jn.incidents(c.conn)[0].status == "recovered" and "gpu009" in s.j[100].nodes
    assert len([x for x in s.calls if x[0] == "requeue"]) == 1


def test_a_job_that_vanishes_mid_recovery_is_abandoned_not_a_crash(tmp_path):
    from slurm_ft.slurm.client import JobNotFound
    s = model_slurm()
    s.fail("gpu002")
    real_requeue = s.requeue

    def gone(job_id, hold=False):           # the user cancels it just as we requeue; MinJobAge passes
        del s.j[job_id]
        raise JobNotFound(f"job {job_id} not found")

    s.requeue = gone
    c = make(tmp_path, s)
    c.cycle()
    inc = jn.incidents(c.conn)[0]
    assert inc.status == "abandoned" and inc.step("requeue").outcome == "failed"
    assert "gpu005" in s.parts["spares"] or "gpu005" in s.parts["train"]       # the spare is in one partition
    s.requeue = real_requeue


def test_waiting_on_a_job_rereads_only_the_queue_until_it_changes(tmp_path):
    """While Slurm runs the epilogs (seconds), the controller polls one squeue, not the full snapshot:
    the restart's hooks and ranks share the CPUs with it. A change of the job ends the wait at once."""
    from slurm_ft.fleet.recovery.records import Step
    from slurm_ft.fleet.recovery import controller as ctl_mod
    from slurm_ft.fleet.recovery.snapshot import Snapshot

    class Queue:
        def __init__(self, job, change_after):
            self.job, self.change_after, self.reads = job, change_after, 0

        def jobs(self, job_ids=None):
            self.reads += 1
            if self.reads >= self.change_after:
                return [replace(self.job, state="PENDING", reason="BeginTime")]
            return [self.job]

        def nodes(self, names=None):
            raise AssertionError("a wait on a job must not read the nodes")

    job = Job(7, "t", "COMPLETING", nodes=("gpu001",), num_nodes=1)
    snap = Snapshot.of([], [job], [])
    waits = [Step("poll", 7, incident_id=1, reason="job is COMPLETING")]
    cfg = Config(state_dir=str(tmp_path / "state"), controller=ControllerConfig(poll_s=0.1))
    slept = []
    q = Queue(job, change_after=3)
    c = Controller(q, jn.connect(db.path_in(cfg.state_dir)), cfg, sleep=slept.append)
    c._await_job_change(snap, waits)
    assert q.reads == 3 and slept == [0.1] * 3                   # back to a full read at the change
    q = Queue(job, change_after=10 ** 6)
    c.client, slept[:] = q, []
    c._await_job_change(snap, waits)
    assert q.reads == len(slept) == int(ctl_mod.FULL_READ_S / 0.1)   # nothing changed: a full read anyway


def test_a_node_quarantined_for_not_answering_goes_to_validation_when_it_answers_again(tmp_path):
    """R13: 30 s after it answered it was resumed straight into the pool its spare had left, unvalidated.
    Now it stays drained and out of every partition; its reason hands it to the sweep's validation."""
    s = model_slurm()
    s.n["gpu003"] = replace(s.n["gpu003"], state="DOWN", flags=frozenset({"NOT_RESPONDING"}), reason="Not responding")
    now = [1_000_000.0]
    c = make(tmp_path, s)
    c.clock = lambda: now[0]
    c.cycle()
    inc = jn.incidents(c.conn)[0]
    assert inc.status == "recovered" and inc.spares == ("gpu005",) and "gpu003" not in s.parts["train"]
    s.n["gpu003"] = replace(s.n["gpu003"], state="IDLE", flags=frozenset({"DRAIN"}))     # it answers again
    c.cycle()
    assert s.n["gpu003"].reason.startswith("slurm-ft: quarantined, ")                   # not before restore_after_s
    now[0] += 31
    c.cycle()
    node = s.n["gpu003"]
    assert node.drained and node.reason.startswith("slurm-ft: REVALIDATE answers again; quarantined, DOWN")
    assert "gpu003" not in s.parts["spares"] and "gpu003" not in s.parts["train"]
    assert not [x for x in s.calls if x[0] == "resume"]
    now[0] += 60
    s.calls.clear()
    c.cycle()
    assert not s.calls                                        # handed over once
    assert [i.status for i in jn.incidents(c.conn)] == ["recovered"]


def _hot_spare_fault(tmp_path):
    """A hot-spare job (3 + 1 nodes) with gpu002 failed, its controller on a clock the test moves."""
    s = FakeSlurm()
    s.add_job(4, FtSpec(ckpt_dir="", hot_spares=1, train_nodes=3), batch_host="gpu001")
    s.fail("gpu002")
    now = [1_000_000.0]
    c = make(tmp_path, s)
    c.clock = lambda: now[0]
    return s, c, now


@pytest.mark.parametrize("passing", ["STOPPED", "COMPLETING"])
def test_a_passing_job_state_does_not_requeue_a_job_running_on_its_hot_spare(tmp_path, passing):
    """Issue 21 item 5: one read showing the job in a passing state (its owner's SIGSTOP shows STOPPED on
    22.05) made the hot path hand the incident to the requeue path, which requeued the running job."""
    s, c, now = _hot_spare_fault(tmp_path)
    for _ in range(4):                                        # open, quarantine, swap, then waits on the supervisor
        c.cycle(budget_s=0.0)
    [inc] = jn.incidents(c.conn)
    assert inc.note.startswith("hot-spare: ") and "gpu002" not in s.parts["train"]
    s.j[100] = replace(s.j[100], state=passing)
    c.cycle(budget_s=0.0)
    s.j[100] = replace(s.j[100], state="RUNNING")
    for _ in range(3):
        c.cycle(budget_s=0.0)
    assert not [x for x in s.calls if x[0] == "requeue"], s.calls
    s.shrink(100, ("gpu001", "gpu003", "gpu004"))            # the supervisor gives the node back
    c.cycle(budget_s=0.0)
    [inc] = jn.incidents(c.conn)
    assert inc.status == "recovered" and inc.step("released") and not inc.step("requeue")
    assert s.j[100].state == "RUNNING" and s.j[100].restart_count == 0


def test_a_step_the_supervisor_could_not_end_on_the_failed_node_is_cancelled_by_the_controller(tmp_path):
    """The user's RPCs wait on their rate limiter (srun ends a step through slurmctld): past the supervisor's
    grace the controller, not rate limited, cancels the job's steps on the failed node, those alone, once."""
    from slurm_ft.fleet.recovery.policies.in_allocation import OLD_STEP_GRACE_S
    s, c, now = _hot_spare_fault(tmp_path)
    s.running_steps[100] = [0, 1]
    s.step_nodes.update({(100, 0): ("gpu001", "gpu002", "gpu003"), (100, 1): ("gpu001",)})   # training, a check
    for _ in range(4):
        c.cycle(budget_s=0.0)
    assert not [x for x in s.calls if x[0] == "cancel_step"]            # the supervisor's own stop first
    now[0] += OLD_STEP_GRACE_S
    for _ in range(3):
        c.cycle(budget_s=0.0)
    assert [x for x in s.calls if x[0] == "cancel_step"] == [("cancel_step", 100, 0)]
    assert s.running_steps[100] == [1] and s.j[100].state == "RUNNING" and s.j[100].restart_count == 0
    [inc] = jn.incidents(c.conn)
    assert inc.step("end_steps").outcome == "ok" and "step(s) 0 on gpu002" in inc.step("end_steps").detail
    s.shrink(100, ("gpu001", "gpu003", "gpu004"))                     # relaunched on the hot spare, shrunk
    c.cycle(budget_s=0.0)
    [inc] = jn.incidents(c.conn)
    assert inc.status == "recovered" and not inc.step("requeue")


def test_a_wave_of_unresponsive_nodes_alerts_and_takes_nothing_out(tmp_path, caplog):
    s = model_slurm(n_train=12, n_spares=2)
    for x in s.parts["train"][:9]:
        s.n[x] = replace(s.n[x], state="DOWN", flags=frozenset({"NOT_RESPONDING"}), reason="Not responding")
    c = make(tmp_path, s)
    with caplog.at_level("ERROR"):
        c.cycle()
    assert jn.incidents(c.conn) == [] and not s.calls and len(s.parts["train"]) == 12
    assert "ALERT: wave of unresponsive nodes: 9 stopped answering" in caplog.text
    assert "gpu[001-009]" in caplog.text


def test_a_quarantine_asks_the_breaker_under_the_fleet_lock_before_the_partition_write(tmp_path, monkeypatch):
    s = model_slurm()
    s.n["gpu003"] = replace(s.n["gpu003"], state="DOWN", reason="Not responding")
    c = make(tmp_path, s)
    asked = []

    def refuse(node):
        asked.append((node, tuple(s.parts["train"]), c.membership._depth))
        return False, "drain-rate breaker open"
    monkeypatch.setattr(c, "_may_drain", refuse)
    c.cycle(budget_s=1.0)
    assert asked and asked[0][0] == "gpu003"
    assert "gpu003" in asked[0][1] and asked[0][2] >= 1      # before the write, inside membership.locked()
    assert "gpu003" in s.parts["train"] and not s.n["gpu003"].drained      # refused: it stays put
    assert jn.incidents(c.conn)[0].step("quarantine").outcome == "failed"


def test_a_hot_spare_incident_whose_job_was_requeued_is_handed_to_the_requeue_path_and_recovers(tmp_path):
    """The supervisor gave up on its allocation (an old step that would not end) and requeued the job
    itself: the incident takes the requeue path (its path column, not only its note) and the job starts
    again at once on healthy nodes, not after Slurm's requeue delay."""
    s, c, now = _hot_spare_fault(tmp_path)
    for _ in range(3):                                        # open, quarantine, swap
        c.cycle(budget_s=0.0)
    [inc] = jn.incidents(c.conn)
    assert inc.path == "in_allocation"
    s.requeue(100)                                            # the supervisor's own requeue
    for _ in range(8):
        now[0] += 1
        c.cycle(budget_s=0.0)
    [inc] = jn.incidents(c.conn)
    assert inc.path == "requeue" and inc.status == "recovered", (inc.path, inc.status, [x.name for x in inc.steps])
    assert [x.name for x in inc.steps][:4] == ["open", "quarantine", "swap", "handover"]
    job = s.j[100]
    assert job.state == "RUNNING" and "gpu002" not in job.nodes and job.restart_count == 1


def test_a_nodes_wake_opens_its_jobs_incident_before_any_read_of_every_node(tmp_path):
    """At 4,096 nodes a read of every node is most of a woken cycle's time: the woken node is read alone
    over the last full read, the incident opens (and the supervisor is told), then the cycle reads
    everything and the recovery goes on as without a wake."""
    from slurm_ft import wake
    s = model_slurm()
    opened_after = []
    c = make(tmp_path, s)
    c.on_journal = lambda kind, when: opened_after.append(list(s.reads)) if (kind, when) == ("open", "intent") else None
    c.cycle()                                   # the idle cycle: one full read, nothing to do
    assert not jn.incidents(c.conn)
    s.reads.clear()
    s.fail("gpu002")
    c.heard(wake.payload("gpu002"))
    c.cycle()
    assert opened_after and ("fleet",) not in opened_after[0]
    assert opened_after[0][:2] == [("node", "gpu002"), ("jobs",)]
    assert ("fleet",) in s.reads                 # then everything, for the rest of the recovery
    st = end_state(s, c.conn)
    assert st["incidents"] == [("recovered", ("gpu002",), ("gpu005",))]
    assert st["job"] == ("RUNNING", 1, ("gpu001", "gpu003", "gpu004", "gpu005"))


def test_a_wake_with_no_recent_full_read_or_from_a_healthy_node_reads_everything(tmp_path):
    from slurm_ft import wake
    s = model_slurm()
    c = make(tmp_path, s)
    s.fail("gpu002")
    c.heard(wake.payload("gpu002"))             # no full read yet: nothing to lay the node over
    c.cycle()
    assert s.reads[0] == ("fleet",)
    assert end_state(s, c.conn)["incidents"] == [("recovered", ("gpu002",), ("gpu005",))]
    s.reads.clear()
    c.heard(wake.payload("gpu003"))             # a wake whose node has no fault: read alone, nothing opens
    c.cycle()
    assert s.reads[:2] == [("node", "gpu003"), ("jobs",)] and ("fleet",) in s.reads
    assert len(jn.incidents(c.conn)) == 1


def test_a_wave_of_wakes_reads_every_node_once(tmp_path):
    from slurm_ft import wake
    from slurm_ft.fleet.recovery.controller import WOKEN_MAX
    names = [f"gpu{i:03d}" for i in range(1, WOKEN_MAX + 4)]
    s = FakeSlurm(train=names[:-2], spares=names[-2:])
    c = make(tmp_path, s)
    c.cycle()
    s.reads.clear()
    for n in names[:WOKEN_MAX + 1]:
        c.heard(wake.payload(n))
    c.cycle()
    assert s.reads[0] == ("fleet",) and not [r for r in s.reads if r[0] == "node"]


def test_a_new_job_with_an_old_jobs_id_gets_an_incident_of_its_own(tmp_path):
    """Issue 40: the journal outlives the job ids (a slurmctld state loss starts them again). Job 100's
    fault is recovered; later another job 100 runs (SubmitTime later, restart 0) and its node fails:
    a second incident opens (journaled with its SubmitTime), the node is quarantined and replaced."""
    s = model_slurm()
    s.j[100] = replace(s.j[100], submit_time="2026-12-07T09:00:00")
    s.fail("gpu002")
    c = make(tmp_path, s)
    c.cycle()
    first = jn.incidents(c.conn)
    assert [(i.status, i.nodes, i.job_submit) for i in first] == [("recovered", ("gpu002",), "2026-12-07T09:00:00")]
    # the old job ends and is forgotten; a new job takes id 100 on the same nodes, restart 0
    nodes = s.j[100].nodes
    s.j[100] = replace(s.j[100], restart_count=0, submit_time="2026-12-07T11:00:00", state="RUNNING")
    s.fail(nodes[0])
    c.cycle()
    second = jn.incidents(c.conn)[1:]
    assert [(i.nodes, i.job_submit) for i in second] == [((nodes[0],), "2026-12-07T11:00:00")]
    assert nodes[0] not in s.parts["train"]


def test_a_second_node_failing_during_the_recovery_joins_the_incident_and_gets_its_own_spare(tmp_path):
    """Issue 40: gpu003 fails just after the incident for gpu002 requeued the job: one incident for the
    run, both nodes out of train, two spares in, the job running on neither."""
    s = model_slurm()
    s.fail("gpu002")
    state = {"done": False}

    def second(kind, when):
        if (kind, when) == ("requeue", "result") and not state["done"]:
            state["done"] = True
            s.fail("gpu003")

    cfg = Config(state_dir=str(tmp_path / "state"), controller=ControllerConfig(poll_s=0.0, read_progress=False,
                                                                                cycle_budget_s=5.0),
                 lifecycle=LifecycleConfig(breaker_max_share=0.0, breaker_max_nodes=0))
    c = Controller(s, jn.connect(db.path_in(cfg.state_dir)), cfg, sleep=lambda x: None, on_journal=second)
    c.cycle()
    c.cycle()
    [inc] = jn.incidents(c.conn)
    assert inc.status == "recovered" and inc.nodes == ("gpu002", "gpu003") and len(inc.spares) == 2
    assert "join" in [x.name for x in inc.steps]
    job = s.j[100]
    assert job.state == "RUNNING" and not {"gpu002", "gpu003"} & set(job.nodes)
    assert not {"gpu002", "gpu003"} & set(s.parts["train"]) and s.parts["spares"] == []


def test_the_quarantine_never_drains_a_node_that_is_neither_drained_nor_down(tmp_path):
    """Found by bench/chaos.py: an incident's quarantine drained its node with an "unresponsive" reason
    though the node was healthy (the drain is for a node Slurm shows DOWN, to keep it out once it answers)."""
    s = model_slurm()
    c = make(tmp_path, s)
    iid = jn.open_incident(c.conn, job_id=100, nodes=["gpu002"], faults=["gpu002: DOWN"], partition="train",
                           restart_count=0, job_nodes=4, ckpt_step=None, fault_at=None, now=time.time())
    from slurm_ft.fleet.recovery.records import Step
    inc = jn.incidents(c.conn)[0]
    c._quarantine(Step("quarantine", 100, incident_id=iid, nodes=("gpu002",), partition="train"), inc)
    assert not s.n["gpu002"].drained and "gpu002" not in s.parts["train"]
