"""The job's side of a planned swap (issue 24): the hot-spare supervisor asks for a checkpoint when a node
of its step is degraded and relaunches without it from that checkpoint (job/planned.py decides, pure);
stragglers from the ranks' busy_s; the request file the ranks read (slurm_ft.checkpoint_requested()).
The supervisor's real loop over the shared fake Slurm, the training step stood in for as in
test_supervisor_events.py."""
from __future__ import annotations

import json
import os
import time

import pytest

from fakeslurm import FakeSlurm
from slurm_ft import heartbeat
from slurm_ft.job import ckpt, ckptrequest, hotplan as hp, planned as pl
from slurm_ft.job.notices import Follower
from test_supervisor_events import Stepless as EventsStepless, run_in_thread as go, say, wait_for   # same dir
from slurm_ft.vocab import event_line

ALLOC = ("n1", "n2", "n3", "n4")          # -N 3 --hot-spares 1; n1 the batch host
DEG = "slurm-ft: PLANNED ECC_SBE_RATE gpu3 corrected ECC errors +1240 in 10 min"


def view(**kw):
    base = dict(allocation=ALLOC, faults={}, degraded={"n3": DEG}, batch_host="n1", train_nodes=3,
                step_nodes=("n1", "n2", "n3"), now=100.0, wait_s=600.0)
    return pl.View(**{**base, **kw})


def test_nothing_degraded_in_the_step_is_nothing_to_do():
    assert pl.decide(view(degraded={})).kind == "none"
    assert pl.decide(view(degraded={"n4": DEG})).kind == "none"         # an idle hot spare: just not used


def test_a_degraded_node_of_the_step_asks_for_a_checkpoint_first():
    act = pl.decide(view())
    assert (act.kind, act.nodes, act.failed, act.release) == ("request", ("n1", "n2", "n4"), ("n3",), ("n3",))


def test_the_swap_waits_for_the_step_to_stop_after_the_checkpoint_it_was_asked_for():
    asked = pl.Ask(t=100.0, step=47, ckpt=40, nodes=("n3",))
    assert pl.decide(view(asked=asked, newest_ckpt=40, now=102.0)).kind == "wait"
    # the step stopped itself after saving (the contract): the checkpoint newer than the ask is it
    act = pl.decide(view(asked=asked, newest_ckpt=48, step_rc=0, now=102.0))
    assert (act.kind, act.nodes) == ("swap", ("n1", "n2", "n4")) and "checkpoint step 48 (asked at step 47" in act.reason
    assert pl.decide(view(asked=asked, newest_ckpt=40, step_rc=0, now=102.0)).kind == "wait"
    # a periodic checkpoint while the step runs: the trainer still has HONOUR_S to stop by itself ...
    assert pl.decide(view(asked=asked, newest_ckpt=50, now=100.0 + pl.HONOUR_S - 1)).kind == "wait"
    # ... then one at or after the step reached when asked will do (one being written then does not)
    assert pl.decide(view(asked=asked, newest_ckpt=45, now=100.0 + pl.HONOUR_S)).kind == "wait"
    act = pl.decide(view(asked=asked, newest_ckpt=50, now=100.0 + pl.HONOUR_S))
    assert act.kind == "swap" and "did not stop by itself" in act.reason


def test_a_job_that_never_checkpoints_is_swapped_from_its_latest_after_the_wait():
    asked = pl.Ask(t=100.0, step=47, ckpt=40, nodes=("n3",))
    act = pl.decide(view(asked=asked, newest_ckpt=40, now=701.0))
    assert act.kind == "swap" and "no checkpoint within 600 s" in act.reason


def test_no_healthy_node_to_take_its_place_or_the_batch_host_moves_at_the_next_restart():
    act = pl.decide(view(faults={"n4": "slurm-ft: XID79"}))
    assert act.kind == "none" and "next restart" in act.reason and act.failed == ("n3",)
    assert pl.decide(view(degraded={"n1": DEG})).kind == "none"
    act = pl.decide(view(degraded={"n3": DEG, "n1": DEG}, allocation=ALLOC + ("n5",)))
    assert act.kind == "request" and "n1" not in act.release


def test_a_fault_relaunch_leaves_the_degraded_nodes_out_too():
    v = hp.View(allocation=ALLOC + ("n5",), faults={"n2": "slurm-ft: XID79"}, batch_host="n1", train_nodes=3,
                step_nodes=("n1", "n2", "n3"), avoid={"n3": DEG})
    act = hp.decide(v)
    assert (act.kind, act.nodes, act.release) == ("relaunch", ("n1", "n4", "n5"), ("n2", "n3"))
    # a degraded node beats no relaunch at all; and alone it is never a reason for one
    v = hp.View(allocation=ALLOC, faults={"n2": "slurm-ft: XID79"}, batch_host="n1", train_nodes=3,
                step_nodes=("n1", "n2", "n3"), avoid={"n3": DEG})
    assert hp.decide(v).nodes == ("n1", "n3", "n4")
    assert hp.decide(hp.View(allocation=ALLOC, faults={}, batch_host="n1", train_nodes=3,
                             step_nodes=("n1", "n2", "n3"), avoid={"n3": DEG})).kind == "wait"


# --- stragglers -----------------------------------------------------------------------------------

def reports(busy, t):
    return {i: {"rank": i, "node": n, "step": 10, "t": t, "busy_s": b} for i, (n, b) in enumerate(busy)}


def test_a_node_far_slower_than_the_others_for_the_window_is_a_straggler():
    s = pl.Stragglers(ratio=0.7, window_s=30.0)
    busy = [("n1", 0.5), ("n1", 0.51), ("n2", 0.5), ("n3", 1.0)]
    assert s.update(reports(busy, 1000.0), 1000.0) == {}
    assert s.update(reports(busy, 1020.0), 1020.0) == {}
    [(node, why)] = s.update(reports(busy, 1031.0), 1031.0).items()
    assert node == "n3" and why.startswith("STRAGGLER: 0.51 of the other nodes' median speed (1.000 s a step vs 0.505 s)")


def test_one_normal_sample_starts_the_window_again_and_stale_reports_say_nothing():
    s = pl.Stragglers(ratio=0.7, window_s=30.0)
    slow, fine = [("n1", 0.5), ("n2", 0.5), ("n3", 1.0)], [("n1", 0.5), ("n2", 0.5), ("n3", 0.6)]
    s.update(reports(slow, 1000.0), 1000.0)
    s.update(reports(fine, 1020.0), 1020.0)
    assert s.update(reports(slow, 1040.0), 1040.0) == {}
    assert s.update(reports(slow, 1040.0), 1100.0 + pl.STALE_S) == {}      # nobody reported for a minute
    assert pl.slow_nodes({"n1": 1.0}, 0.7) == {}                            # one node: nothing to compare with
    assert set(pl.slow_nodes({"n1": 0.5, "n2": 1.5}, 0.7)) == {"n2"}        # two: each against the other


# --- the request file ------------------------------------------------------------------------------

def env_of(d, launch=1):
    return {"SLURM_FT_CKPT_DIR": str(d), "SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "0", "SLURM_FT_LAUNCH": str(launch)}


@pytest.fixture(autouse=True)
def fresh_reader():
    ckptrequest._seen.update(t=0.0, key=None, answer=False)
    yield


def test_a_request_is_heard_by_the_launch_it_names_only(tmp_path):
    assert not ckptrequest.requested(env_of(tmp_path), now=1.0)
    ckptrequest.request(str(tmp_path), "7", 0, 1, "n3 degraded", 1)
    assert ckptrequest.requested(env_of(tmp_path), now=3.0)
    ckptrequest._seen.update(t=0.0, key=None)
    assert not ckptrequest.requested(env_of(tmp_path, launch=2), now=5.0)
    assert not ckptrequest.requested({}, now=7.0)                              # outside a slurm-ft job


def test_the_ranks_read_it_at_most_once_a_second_and_garbage_is_no_request(tmp_path):
    e = env_of(tmp_path)
    assert not ckptrequest.requested(e, now=10.0)
    ckptrequest.request(str(tmp_path), "7", 0, 1, "x", 1)
    assert not ckptrequest.requested(e, now=10.5)               # the answer of 10.0, not a new stat()
    assert ckptrequest.requested(e, now=11.1)
    ckptrequest.clear(str(tmp_path))
    os.makedirs(os.path.dirname(ckptrequest.path(str(tmp_path))), exist_ok=True)
    for junk in ("[1]", "{\"job\": 7}", "x" * 5000, '{"job": "7", "restart": "0", "launch": 1}'):
        with open(ckptrequest.path(str(tmp_path)), "w") as fh:
            fh.write(junk)
        assert ckptrequest.read(str(tmp_path)) is None, junk


def test_progress_carries_the_mean_busy_time_since_the_last_report(tmp_path, monkeypatch):
    monkeypatch.setattr(heartbeat, "_last", {"t": 0.0, "step": None})
    monkeypatch.setattr(heartbeat, "_first", {})
    monkeypatch.setattr(heartbeat, "_busy", {"s": 0.0, "n": 0})
    monkeypatch.setenv("SLURM_FT_CKPT_DIR", str(tmp_path))
    monkeypatch.setenv("SLURMD_NODENAME", "gpu017")
    monkeypatch.setenv("SLURM_PROCID", "3")
    heartbeat.progress(1, busy_s=0.25)
    heartbeat.progress(2, busy_s=0.75)          # within the second: folded into the next report
    heartbeat.progress(3, busy_s=1.25, force=True)
    rec = heartbeat.read_all(str(tmp_path))[3]
    assert (rec["step"], rec["node"], rec["busy_s"]) == (3, "gpu017", 1.0)
    p = tmp_path / heartbeat.DIR_NAME / "rank-3.json"
    p.write_text(json.dumps({**rec, "busy_s": "slow"}))
    assert "busy_s" not in heartbeat.read_all(str(tmp_path))[3]    # the report stands, the figure goes


# --- the supervisor's loop -----------------------------------------------------------------------

class Stepless(EventsStepless):
    def launch(self, nodes, reason):
        self.launch_t = time.time()             # the ranks' reports of this launch are newer
        return super().launch(nodes, reason)


def setup(tmp_path, **kw):
    slurm = FakeSlurm(train=ALLOC, spares=())
    jid = slurm.add_job(4)
    out = tmp_path / "slurm-7.out"
    out.write_bytes(b"")
    d = tmp_path / "ckpt"
    d.mkdir()
    ckpt.write_checkpoint(str(d), 40, {"w": b"x"})
    sup = Stepless(slurm, jid, 3, str(d), ["train"], env={}, say=lambda m: None,
                   notices=Follower(open(out, "rb")), **kw)
    return slurm, sup, out, d


def events(d):
    from slurm_ft.job import startlog, startprep
    return [r for r in startlog.read(os.path.join(d, startprep.STARTS_LOG))]


def test_a_degraded_notice_asks_for_a_checkpoint_and_the_step_moves_once_it_is_saved(tmp_path):
    slurm, sup, out, d = setup(tmp_path)
    t, result = go(sup)
    wait_for(lambda: sup.launched == [("n1", "n2", "n3")])
    slurm.fail("n3", DEG)
    say(out, event_line("degraded", "n3", DEG))
    time.sleep(0.5)
    # no fault: the step runs on; the ask waits for the controller to take n3 out (then it may leave the job)
    assert len(sup.launched) == 1 and sup.proc.rc is None and not os.path.exists(ckptrequest.path(str(d)))
    slurm.parts["train"].remove("n3")                           # the controller quarantined it ...
    say(out, event_line("quarantined", "n3"))                   # ... and said so
    wait_for(lambda: os.path.exists(ckptrequest.path(str(d))))
    req = ckptrequest.read(str(d))
    assert (req["job"], req["restart"], req["launch"]) == (str(sup.job_id), 0, 0) and "n3" in req["why"]
    ckpt.write_checkpoint(str(d), 41, {"w": b"y"})              # the trainer saved at the step it reached ...
    sup.proc.rc = 0                                             # ... and exited 0, as the contract says
    wait_for(lambda: len(sup.launched) == 2)
    assert sup.launched[1] == ("n1", "n2", "n4")
    assert ("shrink", sup.job_id, ("n1", "n2", "n4")) in slurm.calls
    assert not os.path.exists(ckptrequest.path(str(d)))         # asked of that launch only
    phases = [e.get("phase") for e in events(d) if e.get("event") == "planned"]
    assert phases == ["asked", "swap"]
    assert not [c for c in slurm.calls if c[0] in ("requeue", "cancel")]
    sup.proc.rc = 0
    t.join(5)
    assert result["rc"] == 0


def test_a_planned_drain_found_by_the_backstop_read_is_swapped_the_same_way(tmp_path, monkeypatch):
    from slurm_ft.job import planned_run
    monkeypatch.setattr(planned_run, "QUARANTINE_WAIT_S", 0.3)
    slurm, sup, out, d = setup(tmp_path, backstop_s=0.3, planned_wait_s=0.5)
    t, result = go(sup)
    wait_for(lambda: len(sup.launched) == 1)
    slurm.fail("n2", DEG)                                       # no notice reached the job, no controller runs
    wait_for(lambda: os.path.exists(ckptrequest.path(str(d))), timeout=5)
    assert ("partition", "train") in slurm.reads                # after the wait: one read, n2 still in it
    # the trainer ignores the ask and never checkpoints: after planned_wait_s the swap is from the latest
    wait_for(lambda: len(sup.launched) == 2, timeout=5)
    assert sup.launched[1] == ("n1", "n3", "n4")
    [swap] = [e for e in events(d) if e.get("phase") == "swap"]
    assert "no checkpoint within 0.5 s" in swap["reason"]
    assert not [c for c in slurm.calls if c[0] == "shrink"]     # not quarantined: it stays in the job, unused
    sup.proc.rc = 0
    t.join(5)


def test_a_fault_while_the_checkpoint_is_awaited_takes_the_fault_path_and_leaves_both_out(tmp_path):
    slurm, sup, out, d = setup(tmp_path)
    slurm.n["n5"] = slurm.n["n4"]
    t, result = go(sup)
    wait_for(lambda: len(sup.launched) == 1)
    say(out, event_line("degraded", "n3", DEG))
    say(out, event_line("quarantined", "n3"))
    wait_for(lambda: sup.planned.ask is not None)
    slurm.fail("n2", "slurm-ft: XID79 gpu1 GPU has fallen off the bus")
    say(out, event_line("failed", "n2", "slurm-ft: XID79 gpu1 GPU has fallen off the bus"))
    # N + K = 4 nodes: n2 failed, n3 degraded: the relaunch must keep one of them; the degraded one
    wait_for(lambda: len(sup.launched) == 2)
    assert sup.launched[1] == ("n1", "n3", "n4") and sup.planned.ask is None
    sup.proc.rc = 0
    t.join(5)


def test_where_slurm_refuses_to_shrink_the_job_the_ask_waits_for_no_quarantine(tmp_path):
    slurm, sup, out, d = setup(tmp_path)
    sup.may_shrink = False                   # 22.05 without accounting refused an earlier shrink of this job
    t, result = go(sup)
    wait_for(lambda: len(sup.launched) == 1)
    say(out, event_line("degraded", "n3", DEG))
    wait_for(lambda: os.path.exists(ckptrequest.path(str(d))), timeout=5)
    sup.proc.rc = 0
    t.join(5)
