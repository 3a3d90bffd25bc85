"""The controller's pure plan: from one snapshot and the journal's incidents to the next steps."""
from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_ft.fleet.recovery.records import Incident, Placement, StepRecord

from slurm_ft.slurm.types import Job, Node, Partition
from slurm_ft.fleet.recovery.plan import (ControllerSettings, failed_in_run, failure, plan, prolog_runs,
                                         restarts_without_progress)
from slurm_ft.fleet.recovery.snapshot import Snapshot
from slurm_ft.job.tag import FtSpec

P = ControllerSettings()
NOW = 1_000_000.0
TRAIN = [f"gpu{i:03d}" for i in range(1, 5)]
SPARES = ["gpu005", "gpu006"]


def node(name, state="ALLOCATED", flags=(), reason=""):
    return Node(name=name, state=state, flags=frozenset(flags), reason=reason)


def cluster(train_nodes=None, spare_nodes=None, jobs=(), specs=None, **kw):
    nodes = train_nodes or [node(n) for n in TRAIN]
    spares = spare_nodes if spare_nodes is not None else [node(n, "IDLE") for n in SPARES]
    parts = [Partition("train", tuple(n.name for n in nodes), default=True),
             Partition("spares", tuple(n.name for n in spares))]
    jobs = list(jobs) or [job()]
    if specs is None:
        specs = {j.job_id: FtSpec(ckpt_dir="/ck") for j in jobs}
    return Snapshot.of(nodes + spares, jobs, parts, specs=specs, **kw)


def job(state="RUNNING", nodes=tuple(TRAIN), restart=0, reason="None", job_id=7, held=False, excluded=()):
    return Job(job_id=job_id, name="train", state=state, reason=reason, partition="train", nodes=nodes,
               num_nodes=4, restart_count=restart, requeue=True, held=held, excluded_nodes=excluded)


def failed(name, reason="slurm-ft: XID79 gpu3 fell off the bus"):
    return node(name, "ALLOCATED", {"DRAIN"}, reason)


def incident(steps=(), **kw):
    base = dict(id=1, job_id=7, status="open", nodes=("gpu002",), partition="train", restart_count=0,
                job_nodes=4, opened_at=NOW - 5, ckpt_step=100)
    base.update(kw)
    recs = tuple(StepRecord(name, NOW - 4, NOW - 4, outcome) for name, outcome in steps)
    return Incident(**base, steps=(StepRecord("open", NOW - 5, NOW - 5, "ok"),) + recs)


def kinds(steps):
    return [s.kind for s in steps]


def ran(nodes=tuple(TRAIN), restart=0, job_id=7):
    """What the journal saw: run `restart` of the job on `nodes` (Snapshot.placements)."""
    return {job_id: {restart: Placement(job_id, restart, tuple(nodes), NOW - 60)}}


# --- what is a failed node ----------------------------------------------------------------------

def test_fail_drain_down_and_not_responding_are_failures_admin_drain_is_not():
    assert failure(failed("a"), P).startswith("slurm-ft: XID79")
    assert failure(node("a", "DOWN", reason="Not responding"), P)
    assert failure(node("a", "DOWN", reason="Node unexpectedly rebooted"), P)
    assert failure(node("a", "ALLOCATED", {"NOT_RESPONDING"}), P)
    assert failure(node("a", "ALLOCATED", {"DRAIN"}, "Prolog error"), P) == "Prolog error"
    assert failure(node("a", "ALLOCATED", {"DRAIN"}, "bios update friday"), P) is None
    assert failure(node("a"), P) is None


def test_a_node_an_admin_set_down_is_theirs_not_a_fault():
    """`scontrol update State=DOWN Reason="admin: ..."`: the admin's node, never one slurm-ft takes on."""
    assert failure(node("a", "DOWN", reason="admin: DIMM swap, ticket 4711"), P) is None
    assert failure(node("a", "DOWN", {"DRAIN", "NOT_RESPONDING"}, "rack 4 power work"), P) is None
    snap = cluster([node("gpu001"), node("gpu002", "DOWN", reason="admin: DIMM swap, ticket 4711"),
                    node("gpu003"), node("gpu004")])
    assert plan(snap, [], P, NOW) == []


# --- detection --------------------------------------------------------------------------------------

def test_failed_node_of_running_ft_job_opens_one_incident():
    snap = cluster([node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")])
    steps = plan(snap, [], P, NOW)
    assert kinds(steps) == ["open"]
    assert steps[0].job_id == 7 and steps[0].nodes == ("gpu002",) and steps[0].partition == "train"
    assert "XID79" in steps[0].reason


def test_two_failed_nodes_of_one_job_open_one_incident_with_both():
    snap = cluster([failed("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")])
    steps = plan(snap, [], P, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu001", "gpu002")


def test_job_without_ft_tag_or_admin_drain_opens_nothing():
    snap = cluster([node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")], specs={})
    assert plan(snap, [], P, NOW) == []
    snap = cluster([node("gpu001"), node("gpu002", "ALLOCATED", {"DRAIN"}, "admin: replace fan"),
                    node("gpu003"), node("gpu004")])
    assert plan(snap, [], P, NOW) == []


def test_fault_on_node_without_ft_job_is_left_drained():
    nodes = [node("gpu001"), node("gpu002"), node("gpu003", "IDLE"), node("gpu004", "IDLE", {"DRAIN"}, "slurm-ft: XID79 gpu0 x")]
    snap = cluster(nodes, jobs=[job(nodes=("gpu001", "gpu002"))])
    assert plan(snap, [], P, NOW) == []


def test_a_fault_drained_within_the_breakers_budget_is_recovered_even_when_it_used_the_last_unit():
    """Finding 9: the drain of gpu002 made the count reach the limit (1 of 1); quarantining it takes
    nothing new out of service, so its recovery goes on (the breaker is there to stop the next drains)."""
    snap = cluster([node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")],
                   out_counted=frozenset({"gpu002"}), out_limit=1)
    steps = plan(snap, [], P, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu002",)


def test_a_fault_drained_past_the_limit_waits_with_an_alert_saying_so():
    """gpu002's drain went past the limit (Slurm's drain after a failed prolog, racing checks): its
    recovery waits; a node that is not yet out (down) would cost a unit the breaker does not have."""
    snap = cluster([node("gpu001"), failed("gpu002", "Prolog error"), node("gpu003"), node("gpu004")],
                   out_counted=frozenset({"gpu002", "gpu006"}), out_past_limit=frozenset({"gpu002"}), out_limit=1)
    steps = plan(snap, [], P, NOW)
    assert kinds(steps) == ["alert"] and steps[0].job_id == 7 and "gpu002" in steps[0].reason
    assert "past the limit" in steps[0].reason and "waits" in steps[0].reason
    down = cluster([node("gpu001"), node("gpu002", "DOWN", reason="Not responding"), node("gpu003"),
                    node("gpu004")], out_counted=frozenset({"gpu006"}), out_limit=1)
    steps = plan(down, [], P, NOW)
    assert kinds(steps) == ["alert"] and "not quarantining" in steps[0].reason


def test_job_with_open_incident_is_not_opened_twice():
    snap = cluster([node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")])
    steps = plan(snap, [incident()], P, NOW)
    assert "open" not in kinds(steps)


def test_same_fault_already_requeued_is_not_requeued_again():
    """A closed incident for this run (same restart count) covers a stale read of the same node."""
    snap = cluster([node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")])
    done = incident(status="recovered", closed_at=NOW - 1)
    assert plan(snap, [done], P, NOW) == []


def test_launch_failed_held_job_opens_incident_on_prolog_drained_node():
    nodes = [node("gpu001", "IDLE"), node("gpu002", "IDLE", {"DRAIN"}, "Prolog error"),
             node("gpu003", "IDLE"), node("gpu004", "IDLE")]
    j = job("PENDING", nodes=(), restart=1, reason="launch failed requeued held", held=True)
    steps = plan(cluster(nodes, jobs=[j], placements=ran(("gpu001", "gpu002"))), [], P, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu002",)


def test_a_users_requeue_claims_only_its_last_runs_nodes_never_an_admins_down_node():
    """R2: bob's `scontrol requeue` leaves his job PENDING (BeginTime, restart 1, no nodes) while an
    admin's node is DOWN and another user's node is drained in the partition: no incident, nothing
    claimed (no spare moves, the admin's reason stays). A fault of its own last run is still one."""
    nodes = [node("gpu001", "IDLE"), node("gpu002", "IDLE"),
             node("gpu003", "DOWN", reason="admin: DIMM swap, ticket 4711"),
             node("gpu004", "IDLE", {"DRAIN"}, "Kill task failed")]
    j = job("PENDING", nodes=(), restart=1, reason="BeginTime")
    assert plan(cluster(nodes, jobs=[j], placements=ran(("gpu001", "gpu002"))), [], P, NOW) == []
    nodes[1] = node("gpu002", "IDLE", {"DRAIN"}, "slurm-ft: XID79 gpu3 fell off the bus")
    steps = plan(cluster(nodes, jobs=[j], placements=ran(("gpu001", "gpu002"))), [], P, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu002",)


def test_a_requeued_job_whose_last_run_the_controller_never_saw_claims_nothing_and_says_so():
    """The controller started after the requeue: the failed nodes of the partition may be anyone's. A job
    Slurm holds after its launch failed is released (else it waits for a person); one a user requeued
    is only talked about."""
    nodes = [node("gpu001", "IDLE"), node("gpu002", "IDLE", {"DRAIN"}, "Prolog error"),
             node("gpu003", "IDLE"), node("gpu004", "IDLE")]
    j = job("PENDING", nodes=(), restart=1, reason="launch failed requeued held", held=True)
    steps = plan(cluster(nodes, jobs=[j]), [], P, NOW)
    assert kinds(steps) == ["release"] and steps[0].job_id == 7 and steps[0].nodes == ("gpu002",)
    assert "never saw where its last run ran" in steps[0].reason and "claiming none" in steps[0].reason
    healthy = [node(n, "IDLE") for n in TRAIN]
    assert kinds(plan(cluster(healthy, jobs=[j]), [], P, NOW)) == ["release"]   # held all the same
    requeued = job("PENDING", nodes=(), restart=1, reason="BeginTime")
    steps = plan(cluster(nodes, jobs=[requeued]), [], P, NOW)
    assert kinds(steps) == ["alert"] and steps[0].nodes == ("gpu002",)
    assert plan(cluster(healthy, jobs=[requeued]), [], P, NOW) == []   # nothing failed: nothing to say


def test_a_job_past_its_restarts_is_not_released():
    nodes = [node(n, "IDLE") for n in TRAIN]
    j = job("PENDING", nodes=(), restart=6, reason="launch failed requeued held", held=True)
    spec = FtSpec(max_restarts=5)
    assert plan(cluster(nodes, jobs=[j], specs={7: spec}), [], P, NOW) == []


def test_a_failed_prologs_wake_tells_where_the_run_slurm_forgot_ran():
    """Slurm requeues the job held with no nodes before the controller reads it: the prolog's wake names
    the node, and the incident claims it (and only it)."""
    nodes = [node("gpu001", "IDLE"), node("gpu002", "IDLE", {"DRAIN"}, "Prolog error"),
             node("gpu003", "IDLE", {"DRAIN"}, "Prolog error"), node("gpu004", "IDLE")]
    j = job("PENDING", nodes=(), restart=1, reason="launch failed requeued held", held=True)
    runs = prolog_runs({7: j}, {}, {7: (frozenset({"gpu002"}), NOW - 1)})
    assert runs == [Placement(7, 0, ("gpu002",), NOW - 1)]
    steps = plan(cluster(nodes, jobs=[j], placements={7: {0: runs[0]}}), [], P, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu002",)
    # a run the journal saw is not overwritten; a running job or one never requeued learns nothing
    assert prolog_runs({7: j}, {7: {0: runs[0]}}, {7: (frozenset({"gpu003"}), NOW)}) == []
    assert prolog_runs({7: job()}, {}, {7: (frozenset({"gpu002"}), NOW)}) == []
    assert prolog_runs({7: job("PENDING", nodes=(), restart=0)}, {}, {7: (frozenset({"gpu002"}), NOW)}) == []
    assert prolog_runs({}, {}, {7: (frozenset({"gpu002"}), NOW)}) == []


def test_a_hold_by_a_user_or_requeuehold_is_not_slurms_requeue():
    """Only Slurm's own words ("launch failed requeued held") mean Slurm requeued it after a fault."""
    nodes = [node("gpu001", "IDLE"), node("gpu002", "IDLE", {"DRAIN"}, "Prolog error"),
             node("gpu003", "IDLE"), node("gpu004", "IDLE")]
    for reason in ("JobHeldUser", "JobHeldAdmin", "job requeued in held state"):
        j = job("PENDING", nodes=(), restart=1, reason=reason, held=True)
        assert plan(cluster(nodes, jobs=[j]), [], P, NOW) == [], reason


# --- carrying an incident on ----------------------------------------------------------------------

def test_quarantine_and_swap_come_first_then_the_requeue():
    """Partition edits while the job still runs; the requeue then starts the epilogs and the restart."""
    snap = cluster([node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")])
    assert kinds(plan(snap, [incident()], P, NOW)) == ["quarantine"]
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004")], jobs=[job()])
    steps = plan(snap, [incident([("quarantine", "ok")])], P, NOW)
    assert kinds(steps) == ["swap"] and steps[0].spares == ("gpu005",)
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004"), node("gpu005", "IDLE")],
                   spare_nodes=[node("gpu006", "IDLE")], jobs=[job()])
    steps = plan(snap, [incident([("quarantine", "ok"), ("swap", "ok")], spares=("gpu005",))], P, NOW)
    assert kinds(steps) == ["requeue"] and not steps[0].hold


def test_swap_takes_best_spare_fewest_past_faults_first():
    j = job("PENDING", restart=1, reason="BeginTime", nodes=())
    snap = replace(cluster([node("gpu001"), node("gpu003"), node("gpu004")], jobs=[j]))
    old = incident(id=0, nodes=("gpu005",), status="recovered", closed_at=NOW - 100, job_id=3)
    steps = plan(snap, [old, incident([("requeue", "ok")])], P, NOW)
    assert kinds(steps) == ["swap"] and steps[0].spares == ("gpu006",)


def test_a_fault_on_a_keep_off_node_opens_no_incident_another_nodes_does():
    keep = replace(P, keep_off=frozenset({"gpu002"}))
    snap = cluster([node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")])
    assert plan(snap, [], keep, NOW) == [] and failure(snap.nodes["gpu002"], keep) is None
    snap = cluster([node("gpu001"), failed("gpu002"), failed("gpu003"), node("gpu004")])
    steps = plan(snap, [], keep, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu003",)


def test_a_keep_off_spare_is_never_taken_even_the_best_one():
    j = job("PENDING", restart=1, reason="BeginTime", nodes=())
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004")], jobs=[j])
    old = incident(id=0, nodes=("gpu005",), status="recovered", closed_at=NOW - 100, job_id=3)
    steps = plan(snap, [old, incident([("requeue", "ok")])], replace(P, keep_off=frozenset({"gpu006"})), NOW)
    assert kinds(steps) == ["swap"] and steps[0].spares == ("gpu005",)
    steps = plan(snap, [old, incident([("requeue", "ok")])], replace(P, keep_off=frozenset(SPARES)), NOW)
    assert "swap" not in kinds(steps)


def test_after_swap_exclude_then_start_with_starttime_now():
    j = job("PENDING", restart=1, reason="BeginTime", nodes=())
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004"), node("gpu005", "IDLE")],
                   spare_nodes=[node("gpu006", "IDLE")], jobs=[j])
    inc = incident([("requeue", "ok"), ("quarantine", "ok"), ("swap", "ok")], spares=("gpu005",))
    steps = plan(snap, [inc], P, NOW)
    assert kinds(steps) == ["exclude"]
    inc = incident([("requeue", "ok"), ("quarantine", "ok"), ("swap", "ok"), ("exclude", "ok")], spares=("gpu005",))
    steps = plan(snap, [inc], P, NOW)
    assert kinds(steps) == ["start"] and not steps[0].hold


def test_job_still_running_old_run_after_requeue_polls():
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004"), node("gpu005", "IDLE")],
                   spare_nodes=[node("gpu006", "IDLE")],
                   jobs=[job("RUNNING", nodes=("gpu001", "gpu002", "gpu003", "gpu004"))])
    inc = incident([("requeue", "ok"), ("quarantine", "ok"), ("swap", "ok")], spares=("gpu005",))
    assert kinds(plan(snap, [inc], P, NOW)) == ["poll"]


def test_running_again_with_new_restart_count_confirms():
    run_nodes = ("gpu001", "gpu003", "gpu004", "gpu005")
    snap = cluster([node(n) for n in run_nodes], spare_nodes=[node("gpu006", "IDLE")],
                   jobs=[job("RUNNING", nodes=run_nodes, restart=1)])
    inc = incident([("requeue", "ok"), ("quarantine", "ok"), ("swap", "ok"), ("exclude", "ok"), ("start", "ok")],
                   spares=("gpu005",))
    assert kinds(plan(snap, [inc], P, NOW)) == ["confirm"]


def test_empty_pool_requeues_held_and_waits_once():
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004")], spare_nodes=[], jobs=[job()])
    steps = plan(snap, [incident([("quarantine", "ok")])], P, NOW)
    assert kinds(steps) == ["requeue"] and steps[0].hold
    j = job("PENDING", restart=1, reason="JobHeldAdmin", held=True, nodes=())
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004")], spare_nodes=[], jobs=[j])
    inc = incident([("quarantine", "ok"), ("requeue", "ok")])
    steps = plan(snap, [inc], P, NOW)
    assert kinds(steps) == ["wait"] and "waiting for a spare" in steps[0].reason
    assert plan(snap, [replace(inc, status="waiting")], P, NOW) == []
    # a spare comes back: swap, and the held job will be released after the exclude
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004")], spare_nodes=[node("gpu006", "IDLE")], jobs=[j])
    steps = plan(snap, [replace(inc, status="waiting")], P, NOW)
    assert kinds(steps) == ["swap"] and steps[0].spares == ("gpu006",)
    inc2 = incident([("quarantine", "ok"), ("requeue", "ok"), ("swap", "ok"), ("exclude", "ok")], spares=("gpu006",))
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004"), node("gpu006", "IDLE")], spare_nodes=[], jobs=[j])
    steps = plan(snap, [inc2], P, NOW)
    assert kinds(steps) == ["start"] and steps[0].hold


def test_empty_pool_elastic_job_shrinks_instead():
    spec = {7: FtSpec(ckpt_dir="/ck", min_nodes=3)}
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004")], spare_nodes=[], jobs=[job()], specs=spec)
    steps = plan(snap, [incident([("quarantine", "ok")])], P, NOW)
    assert kinds(steps) == ["swap"] and steps[0].spares == () and steps[0].num_nodes == 3
    steps = plan(snap, [incident([("quarantine", "ok"), ("swap", "ok")], shrink_to=3)], P, NOW)
    assert kinds(steps) == ["requeue"] and not steps[0].hold


def test_elastic_job_never_below_min_nodes():
    spec = {7: FtSpec(ckpt_dir="/ck", min_nodes=4)}
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004")], spare_nodes=[], jobs=[job()], specs=spec)
    steps = plan(snap, [incident([("quarantine", "ok")])], P, NOW)
    assert kinds(steps) == ["requeue"] and steps[0].hold


def test_gives_up_after_max_restarts_without_progress():
    spec = {7: FtSpec(ckpt_dir="/ck", max_restarts=2)}
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004")], specs=spec, jobs=[job(restart=2)])
    past = [incident(id=i, status="recovered", closed_at=NOW - 50, ckpt_step=100, restart_count=i - 1)
            for i in (1, 2)]
    cur = incident([("quarantine", "ok")], id=3, restart_count=2, ckpt_step=100)
    assert restarts_without_progress(cur, past + [cur]) == 2
    steps = plan(snap, past + [cur], P, NOW)
    assert kinds(steps) == ["requeue"] and steps[0].hold and "gives up" in steps[0].reason
    cur = incident([("quarantine", "ok"), ("requeue", "ok")], id=3, restart_count=2, ckpt_step=100)
    held = cluster([node("gpu001"), node("gpu003"), node("gpu004")], specs=spec,
                   jobs=[job("PENDING", nodes=(), restart=3, reason="JobHeldAdmin", held=True)])
    assert kinds(plan(held, past + [cur], P, NOW)) == ["give_up"]
    # progress since (a newer checkpoint) resets the count: a normal recovery
    cur = incident([("quarantine", "ok")], id=3, restart_count=2, ckpt_step=200)
    assert kinds(plan(snap, past + [cur], P, NOW)) == ["swap"]


def test_incident_of_ended_job_is_abandoned():
    snap = cluster([node("gpu001", "IDLE"), node("gpu003", "IDLE"), node("gpu004", "IDLE")],
                   jobs=[job("CANCELLED", nodes=())])
    inc = incident([("requeue", "ok"), ("quarantine", "ok")])
    assert kinds(plan(snap, [inc], P, NOW)) == ["abandon"]


def test_two_jobs_do_not_get_the_same_spare():
    a = job(job_id=1, nodes=("gpu001", "gpu002"), state="PENDING", reason="BeginTime", restart=1)
    b = job(job_id=2, nodes=("gpu003", "gpu004"), state="PENDING", reason="BeginTime", restart=1)
    snap = cluster([node("gpu001"), node("gpu003")], jobs=[a, b])
    i1 = incident([("requeue", "ok"), ("quarantine", "ok")], id=1, job_id=1, nodes=("gpu002",))
    i2 = incident([("requeue", "ok"), ("quarantine", "ok")], id=2, job_id=2, nodes=("gpu004",))
    steps = plan(snap, [i1, i2], P, NOW)
    assert kinds(steps) == ["swap", "swap"]
    assert steps[0].spares == ("gpu005",) and steps[1].spares == ("gpu006",)


def test_a_chosen_spare_is_reused_after_a_crash():
    """The swap's intent saved the spare on the incident: a restarted controller takes the same one."""
    j = job("PENDING", restart=1, reason="BeginTime", nodes=())
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004"), node("gpu006", "IDLE")],
                   spare_nodes=[node("gpu005", "IDLE")], jobs=[j])
    inc = incident([("quarantine", "ok")], spares=("gpu006",))
    inc = replace(inc, steps=inc.steps + (StepRecord("swap", NOW - 1),))
    steps = plan(snap, [inc], P, NOW)
    assert kinds(steps) == ["swap"] and steps[0].spares == ("gpu006",)


@pytest.mark.parametrize("state", ["RUNNING", "PENDING"])
def test_plan_is_pure_and_repeatable(state):
    snap = cluster([node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")])
    assert plan(snap, [], P, NOW) == plan(snap, [], P, NOW)


def test_released_job_with_future_eligible_time_gets_starttime_now():
    """After `scontrol release` Slurm shows Reason=None but keeps the requeue's +121 s EligibleTime."""
    from datetime import datetime
    later = datetime.fromtimestamp(NOW + 100).isoformat(timespec="seconds")
    j = replace(job("PENDING", restart=1, reason="None", nodes=()), eligible_time=later)
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004"), node("gpu005", "IDLE")], spare_nodes=[], jobs=[j])
    inc = incident([("requeue", "ok"), ("quarantine", "ok"), ("swap", "ok"), ("exclude", "ok"), ("start", "ok")],
                   spares=("gpu005",))
    assert kinds(plan(snap, [inc], P, NOW)) == ["start"]
    now_ok = replace(j, eligible_time=datetime.fromtimestamp(NOW).isoformat(timespec="seconds"))
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004"), node("gpu005", "IDLE")], spare_nodes=[],
                   jobs=[now_ok])
    assert kinds(plan(snap, [inc], P, NOW)) == ["poll"]


def test_job_we_gave_up_on_is_not_picked_up_again():
    nodes = [node("gpu001", "IDLE"), node("gpu003", "IDLE"), node("gpu004", "IDLE", {"DRAIN"}, "slurm-ft: XID79 gpu0 x")]
    j = job("PENDING", nodes=(), restart=3, reason="launch_failed_requeued_held", held=True)
    gave_up = incident(status="gave_up", closed_at=NOW - 10)
    last = ran(("gpu001", "gpu003", "gpu004"), restart=2)
    assert plan(cluster(nodes, jobs=[j], placements=last), [gave_up], P, NOW) == []
    assert kinds(plan(cluster(nodes, jobs=[j], placements=last), [], P, NOW)) == ["open"]   # Slurm's reason, underscores and all


def test_a_swap_undone_by_a_slurmctld_restart_is_done_again():
    """slurmctld restarted without -R rebuilds partitions from slurm.conf: the spare is back in the pool."""
    j = job("PENDING", restart=1, reason="BeginTime", nodes=())
    snap = cluster([node("gpu001"), node("gpu003"), node("gpu004")], jobs=[j])
    inc = incident([("requeue", "ok"), ("quarantine", "ok"), ("swap", "ok")], spares=("gpu005",))
    steps = plan(snap, [inc], P, NOW)
    assert kinds(steps) == ["swap"] and steps[0].spares == ("gpu005",)


def test_most_nodes_not_responding_is_an_outage_not_a_fault():
    """Right after a slurmctld restart nodes show NOT_RESPONDING until they register: do not swap them all."""
    nodes = [node(n, "ALLOCATED", {"NOT_RESPONDING"}) for n in TRAIN]
    snap = cluster(nodes, spare_nodes=[node("gpu005", "IDLE", {"NOT_RESPONDING"}), node("gpu006", "IDLE")])
    [said] = plan(snap, [], P, NOW)                                   # nothing done, and said so
    assert said.kind == "alert" and said.reason.startswith("Slurm outage: 5 of 6 nodes unresponsive")
    one = [node("gpu001", "ALLOCATED", {"NOT_RESPONDING"})] + [node(n) for n in TRAIN[1:]]
    assert kinds(plan(cluster(one), [], P, NOW)) == ["open"]


def test_start_waits_while_slurm_completes_the_old_run_and_says_what_for():
    """StartTime=now is sent once the old run's epilogs are done, not again and again while they run."""
    j = job("PENDING", restart=1, reason="BeginTime", nodes=())
    done = [("requeue", "ok"), ("quarantine", "ok"), ("swap", "ok"), ("exclude", "ok")]
    busy = [node("gpu001", "IDLE", {"COMPLETING"}), node("gpu003", "IDLE", {"COMPLETING"}), node("gpu004", "IDLE"),
            node("gpu005", "IDLE")]
    snap = cluster(busy, spare_nodes=[node("gpu006", "IDLE")], jobs=[j])
    steps = plan(snap, [incident(done, spares=("gpu005",))], P, NOW)
    assert kinds(steps) == ["note"] and "epilogs on 2 node(s)" in steps[0].reason and "COMPLETING" in steps[0].reason
    noted = incident(done, spares=("gpu005",), note=steps[0].reason)
    assert kinds(plan(snap, [noted], P, NOW)) == ["poll"]
    # epilogs done: start; or stuck past running_timeout_s: start anyway
    idle = cluster([node(n, "IDLE") for n in ("gpu001", "gpu003", "gpu004", "gpu005")],
                   spare_nodes=[node("gpu006", "IDLE")], jobs=[j])
    assert kinds(plan(idle, [noted], P, NOW)) == ["start"]
    assert kinds(plan(snap, [noted], P, NOW + P.running_timeout_s + 10)) == ["start"]


# --- hot spares: the job's supervisor relaunches in its allocation ------------------------------------

HOT = {7: FtSpec(ckpt_dir="/ck", hot_spares=1, train_nodes=3)}


def hot_job(nodes=tuple(TRAIN), batch_host="gpu001", **kw):
    return replace(job(nodes=nodes, **kw), batch_host=batch_host)


def hot_incident(steps=(), **kw):
    return incident(steps, path="in_allocation", note="hot-spare: 1 hot spare(s), 3 training nodes", **kw)


def test_hot_spare_fault_is_journaled_but_never_requeued_while_spares_last():
    snap = cluster([node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")], jobs=[hot_job()], specs=HOT)
    [opened] = plan(snap, [], P, NOW)
    assert opened.kind == "open" and opened.path == "in_allocation"
    # the incident: quarantine, refill the partition from the pool, then wait for the supervisor
    assert kinds(plan(snap, [hot_incident()], P, NOW)) == ["quarantine"]
    quarantined = cluster([node("gpu001"), node("gpu003"), node("gpu004")], jobs=[hot_job()], specs=HOT)
    steps = plan(quarantined, [hot_incident([("quarantine", "ok")])], P, NOW)
    assert kinds(steps) == ["swap"] and steps[0].spares == ("gpu005",)
    steps = plan(quarantined, [hot_incident([("quarantine", "ok"), ("swap", "ok")], spares=("gpu005",))], P, NOW)
    assert kinds(steps) == ["poll"]                # gpu002 still in the job: not given back yet
    released = cluster([node("gpu001"), node("gpu003"), node("gpu004")],
                       jobs=[hot_job(nodes=("gpu001", "gpu003", "gpu004"))], specs=HOT)
    steps = plan(released, [hot_incident([("quarantine", "ok"), ("swap", "ok")], spares=("gpu005",))], P, NOW)
    assert kinds(steps) == ["released"]
    assert "requeue" not in kinds(steps)


def test_hot_spare_job_without_spares_left_takes_the_requeue_path():
    # 3 nodes left after an earlier release, one fails: fewer than 3 healthy
    nodes = ("gpu001", "gpu002", "gpu003")
    snap = cluster([node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004", "IDLE")],
                   jobs=[hot_job(nodes=nodes)], specs=HOT)
    assert kinds(plan(snap, [], P, NOW)) == ["open"]
    # an incident opened on the hot path whose supervisor then ran out: the requeue path takes over
    steps = plan(snap, [hot_incident()], P, NOW)
    assert kinds(steps) == ["handover"] and "requeue path" in steps[0].reason
    steps = plan(snap, [incident(note="hot spares used up: the requeue path takes over")], P, NOW)
    assert kinds(steps) == ["quarantine"]


@pytest.mark.parametrize("shown", [
    {"state": "COMPLETING"},                                  # 22.05: a job ending (or, the lead's guess, resizing)
    {"state": "STOPPED"},                                     # its owner's `scancel --signal=STOP` (seen on 22.05)
    {"state": "SIGNALING"},                                   # while a STOP/CONT is delivered
    {"state": "COMPLETING", "base_state": "RUNNING"},         # >= 23.02 lists the base state apart
])
def test_a_passing_job_state_never_hands_a_hot_spare_incident_to_the_requeue_path(shown):
    """Issue 21 item 5: a momentary state at the same restart count made the hot path write "job is
    COMPLETING: the requeue path takes over", and the next cycle requeued a job that ran on its hot spare.
    The requeue path takes over only on a requeue or on a fault the supervisor cannot handle."""
    quarantined = cluster([node("gpu001"), node("gpu003"), node("gpu004")], specs=HOT,
                          jobs=[replace(hot_job(), **shown)])
    inc = hot_incident([("quarantine", "ok"), ("swap", "ok")], spares=("gpu005",))
    steps = plan(quarantined, [inc], P, NOW)
    assert kinds(steps) in (["poll"], ["released"]) and "requeue" not in steps[0].reason, steps
    # requeued by Slurm (a node failure, its restart count moved): that is the requeue path's
    requeued = cluster([node("gpu001"), node("gpu003"), node("gpu004")], specs=HOT,
                       jobs=[hot_job(state="COMPLETING", restart=1)])
    steps = plan(requeued, [inc], P, NOW)
    assert kinds(steps) == ["handover"] and "requeue path takes over" in steps[0].reason


def test_a_node_failed_earlier_in_the_run_counts_after_its_drain_was_resumed():
    """Slurm refused the shrink, so gpu002 (incident 1, recovered) stayed in the job; a health check then
    resumed its drain. A fault on gpu004 leaves 2 healthy nodes of the 3 needed: the supervisor falls
    back to the requeue, and so must the plan (it waited on the supervisor forever, CI 2026-11-30)."""
    nodes = ("gpu001", "gpu002", "gpu003", "gpu004")
    snap = cluster([node("gpu001"), node("gpu002"), node("gpu003"), failed("gpu004")],
                   jobs=[hot_job(nodes=nodes)], specs=HOT)
    first = hot_incident([("quarantine", "ok"), ("released", "ok")], status="recovered", closed_at=NOW - 60)
    now = hot_incident(id=2, nodes=("gpu004",))
    steps = plan(snap, [first, now], P, NOW)
    assert kinds(steps) == ["handover"] and "requeue path" in steps[0].reason
    assert failed_in_run(snap.jobs[7], snap.nodes, [first], P) == ["gpu002", "gpu004"]
    assert failed_in_run(replace(snap.jobs[7], restart_count=1), snap.nodes, [first], P) == ["gpu004"]  # next run


def test_hot_spare_batch_host_failure_is_requeued():
    from slurm_ft.fleet.recovery.policies import claim
    j = hot_job(batch_host="gpu002")
    assert claim(j, HOT[7], ["gpu002"]).path == "requeue"
    assert claim(j, HOT[7], ["gpu003"]).path == "in_allocation"
    assert claim(j, FtSpec(ckpt_dir="/ck"), ["gpu003"]).path == "requeue"
    snap = cluster([node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")], jobs=[j], specs=HOT)
    assert [(s.kind, s.path) for s in plan(snap, [], P, NOW)] == [("open", "requeue")]


def test_requeued_hot_spare_job_asks_for_n_plus_k_again():
    steps_done = [("quarantine", "ok"), ("swap", "ok"), ("requeue", "ok")]
    snap = cluster([node("gpu001", "IDLE"), node("gpu003", "IDLE"), node("gpu004", "IDLE"), node("gpu005", "IDLE")],
                   spare_nodes=[], jobs=[hot_job(state="PENDING", nodes=(), restart=1, reason="BeginTime")],
                   specs=HOT)
    steps = plan(snap, [incident(steps_done, spares=("gpu005",))], P, NOW)
    assert kinds(steps) == ["exclude"] and steps[0].num_nodes == 4


def test_hot_spare_incident_closes_when_slurm_refuses_to_take_the_node_back():
    from slurm_ft.fleet.recovery.plan import HOT_RELEASE_WAIT_S
    quarantined = cluster([node("gpu001"), node("gpu003"), node("gpu004")], jobs=[hot_job()], specs=HOT,
                          spare_nodes=[])
    inc = hot_incident([("quarantine", "ok"), ("end_steps", "skipped")], opened_at=NOW - HOT_RELEASE_WAIT_S)
    steps = plan(quarantined, [inc], P, NOW)
    assert kinds(steps) == ["released"] and "refused the shrink" in steps[0].reason
    assert kinds(plan(quarantined, [hot_incident([("quarantine", "ok")])], P, NOW)) == ["poll"]


def test_a_step_still_on_the_failed_node_past_the_supervisors_stop_is_ended_by_the_controller_once():
    """The job's user may be out of RPC tokens (their own squeue loop), and srun ends a step through
    slurmctld: past the supervisor's grace, the controller (root, not rate limited) ends it, once."""
    from slurm_ft.fleet.recovery.policies.in_allocation import OLD_STEP_GRACE_S
    quarantined = cluster([node("gpu001"), node("gpu003"), node("gpu004")], jobs=[hot_job()], specs=HOT,
                          spare_nodes=[])
    early = hot_incident([("quarantine", "ok")], opened_at=NOW - OLD_STEP_GRACE_S + 1)
    assert kinds(plan(quarantined, [early], P, NOW)) == ["poll"]          # the supervisor's own stop first
    late = hot_incident([("quarantine", "ok")], opened_at=NOW - OLD_STEP_GRACE_S)
    [end] = plan(quarantined, [late], P, NOW)
    assert end.kind == "end_steps" and end.job_id == 7
    for outcome in ("ok", "skipped", "failed"):                            # tried once, whatever came of it
        done = hot_incident([("quarantine", "ok"), ("end_steps", outcome)], opened_at=NOW - OLD_STEP_GRACE_S)
        assert kinds(plan(quarantined, [done], P, NOW)) == ["poll"]
    # whatever the quarantine waits on (the breaker), the job's old step is ended first
    unquarantined = cluster([node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")], jobs=[hot_job()],
                            specs=HOT, spare_nodes=[])
    stuck = hot_incident([("quarantine", "failed")], opened_at=NOW - OLD_STEP_GRACE_S)
    assert kinds(plan(unquarantined, [stuck], P, NOW)) == ["end_steps"]
    # the supervisor relaunched and gave the node back: nothing to end
    gone = cluster([node("gpu001"), node("gpu003"), node("gpu004")], jobs=[hot_job(nodes=("gpu001", "gpu003",
                   "gpu004"))], specs=HOT, spare_nodes=[])
    assert kinds(plan(gone, [late], P, NOW)) == ["released"]


def test_a_planned_swaps_step_is_never_ended_by_the_controller():
    """A planned swap leaves the node at the job's next checkpoint, however long that takes."""
    from slurm_ft.fleet.recovery.policies.in_allocation import OLD_STEP_GRACE_S
    quarantined = cluster([node("gpu001"), node("gpu003"), node("gpu004")], jobs=[hot_job()], specs=HOT,
                          spare_nodes=[])
    inc = incident([("quarantine", "ok")], opened_at=NOW - OLD_STEP_GRACE_S, path="planned",
                   note="planned, hot spare")
    assert kinds(plan(quarantined, [inc], P, NOW)) == ["poll"]


@pytest.mark.parametrize("exit_status", [78, 75])      # "do not restart me"; hung with the restart limit used up
@pytest.mark.parametrize("state", ["PENDING", "REQUEUE_HOLD"])   # REQUEUE_HOLD: 26.05's expedite on a non-zero exit
def test_a_job_that_ended_for_good_is_left_alone_after_slurm_requeued_it(exit_status, state):
    nodes = [node("gpu001", "IDLE"), node("gpu002", "IDLE", {"DRAIN"}, "slurm-ft: XID79 gpu3"),
             node("gpu003", "IDLE"), node("gpu004", "IDLE")]
    j = job(state, nodes=(), restart=1, reason="BeginTime")
    assert kinds(plan(cluster(nodes, jobs=[j], placements=ran()), [], P, NOW)) == ["open"]
    j = replace(j, exit_code=f"{exit_status}:0")
    assert plan(cluster(nodes, jobs=[j], placements=ran()), [], P, NOW) == []


# --- a job Slurm moved itself (expedited requeue, >= 25.11) -------------------------------------------

def moved_cluster(restart=1, seen_now_at=None, gpu003=None):
    """Run 0 was seen on gpu001-004; gpu003 went DOWN and Slurm started run `restart` on other nodes."""
    from slurm_ft.fleet.recovery.records import Placement
    train = [node("gpu001"), node("gpu002"), gpu003 or node("gpu003", "DOWN", {"NOT_RESPONDING"}, "Not responding"),
             node("gpu004"), node("gpu007"), node("gpu008", "IDLE")]
    runs = {0: Placement(7, 0, tuple(TRAIN), NOW - 60)}
    if seen_now_at is not None:
        runs[restart] = Placement(7, restart, ("gpu001", "gpu002", "gpu004", "gpu007"), seen_now_at)
    j = job("RUNNING", nodes=("gpu001", "gpu002", "gpu004", "gpu007"), restart=restart)
    return cluster(train, jobs=[j], placements={7: runs})


def test_node_a_job_left_when_slurm_restarted_it_opens_an_incident_for_the_run_it_hit():
    """26.05 requeues an expedite job on node failure and starts it at once elsewhere: the dead node
    it left is still quarantined and replaced; the incident names run 0 (no second requeue)."""
    for seen in (None, NOW - 5):
        steps = plan(moved_cluster(seen_now_at=seen), [], P, NOW)
        assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu003",) and steps[0].restart_count == 0, seen


def test_a_moved_jobs_incident_is_carried_on_without_a_second_requeue_and_not_opened_again():
    snap = moved_cluster(seen_now_at=NOW - 5,
                         gpu003=node("gpu003", "DOWN", {"DRAIN"}, "slurm-ft: quarantined, DOWN during job 7"))
    inc = incident([("quarantine", "ok"), ("swap", "ok"), ("requeue", "skipped")], nodes=("gpu003",),
                   spares=("gpu005",), restart_count=0)
    snap = replace(snap, partitions={**snap.partitions,
                                     "train": Partition("train", ("gpu001", "gpu002", "gpu004", "gpu005", "gpu007")),
                                     "spares": Partition("spares", ("gpu006",))})
    assert kinds(plan(snap, [inc], P, NOW)) == ["confirm"]
    closed = replace(inc, status="recovered", closed_at=NOW - 1)
    assert plan(snap, [closed], P, NOW) == []


def test_an_old_restart_or_no_recorded_run_opens_nothing_for_a_node_the_job_left():
    """A node that fails long after the job moved off it (user requeue) is not this job's fault."""
    assert plan(moved_cluster(seen_now_at=NOW - P.running_timeout_s - 1), [], P, NOW) == []
    snap = moved_cluster()
    assert plan(replace(snap, placements={}), [], P, NOW) == []


def test_pending_job_slurm_requeued_off_a_failed_node_opens_an_incident_whatever_its_reason():
    """An expedited requeue leaves the job PENDING on Resources/Priority (not BeginTime) when no nodes are free."""
    from slurm_ft.fleet.recovery.records import Placement
    train = [node("gpu001", "IDLE"), node("gpu002", "IDLE"), node("gpu003", "DOWN", (), "Not responding"),
             node("gpu004", "IDLE")]
    for reason in ("Resources", "Priority", "None"):
        j = job("PENDING", nodes=(), restart=1, reason=reason)
        snap = cluster(train, jobs=[j], placements={7: {0: Placement(7, 0, tuple(TRAIN), NOW - 60)}})
        steps = plan(snap, [], P, NOW)
        assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu003",), reason
        assert plan(replace(snap, placements={}), [], P, NOW) == [], reason
    for reason in ("JobHeldUser", "JobHeldAdmin", "job requeued in held state"):
        j = job("PENDING", nodes=(), restart=1, reason=reason, held=True)
        snap = cluster(train, jobs=[j], placements={7: {0: Placement(7, 0, tuple(TRAIN), NOW - 60)}})
        assert plan(snap, [], P, NOW) == [], reason


PLANNED_REASON = "slurm-ft: PLANNED CLOCK_SLOW gpu0 SM clock at 50%"


def test_a_users_requeue_claims_no_planned_node_its_job_never_ran_on():
    """Review 2026-12-07 #2: bob's job ran on gpu001-002 and he requeues it himself, nothing failed; gpu004
    idles in the partition drained PLANNED after another job's run there. No incident takes gpu004 (no
    spare moves for it, no StartTime=now for bob): neither on its own nor "along" with a fault of his run.
    A PLANNED node of his own last run is still swapped before he starts again."""
    nodes = [node("gpu001", "IDLE"), node("gpu002", "IDLE"), node("gpu003", "IDLE"),
             node("gpu004", "IDLE", {"DRAIN"}, PLANNED_REASON)]
    j = job("PENDING", nodes=(), restart=1, reason="BeginTime")
    assert plan(cluster(nodes, jobs=[j], placements=ran(("gpu001", "gpu002"))), [], P, NOW) == []
    nodes[1] = node("gpu002", "IDLE", {"DRAIN"}, "slurm-ft: XID79 gpu3 fell off the bus")
    steps = plan(cluster(nodes, jobs=[j], placements=ran(("gpu001", "gpu002"))), [], P, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu002",)
    nodes[1] = node("gpu002", "IDLE", {"DRAIN"}, PLANNED_REASON)
    steps = plan(cluster(nodes, jobs=[j], placements=ran(("gpu001", "gpu002"))), [], P, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu002",)
    assert plan(cluster(nodes, jobs=[j]), [], P, NOW) == []     # its last run unknown: nothing claimed


def test_an_older_job_with_the_same_id_hides_no_fault_of_the_new_one():
    """Issue 40: job ids start again (a slurmctld state loss, MaxJobId, the lab's reset) while the journal
    keeps the older job's incidents. The older job 7's recovered incident at restart 0 (gpu002) does not
    make the new job 7's fault on gpu002 look handled; the same job's own incident still does."""
    old = incident([("requeue", "ok"), ("confirm", "ok")], status="recovered", closed_at=NOW - 3000,
                   opened_at=NOW - 3600, job_submit="2026-12-07T09:00:00")
    new = replace(job(nodes=tuple(TRAIN)), submit_time="2026-12-07T11:00:00")
    nodes = [node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")]
    steps = plan(cluster(nodes, jobs=[new]), [old], P, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu002",)
    mine = replace(old, job_submit="2026-12-07T11:00:00", status="open", closed_at=None)
    assert "open" not in kinds(plan(cluster(nodes, jobs=[new]), [mine], P, NOW))


def test_an_open_incident_of_an_older_job_with_the_same_id_is_abandoned_not_carried_onto_the_new_one():
    """The older job's incident was still open when its id came back: its steps (quarantine, swap,
    requeue) are not done to the new job; it is abandoned and the new job's own faults open their own."""
    old = incident([("quarantine", "ok")], job_submit="2026-12-07T09:00:00")
    new = replace(job(nodes=tuple(TRAIN)), submit_time="2026-12-07T11:00:00")
    steps = plan(cluster(jobs=[new]), [old], P, NOW)
    assert kinds(steps) == ["abandon"] and "another job now" in steps[0].reason


def _lost_batch_host(reason="JobLaunchFailure", state="FAILED"):
    """Job 7 ran on gpu001-004 (the journal saw it) with gpu001 its batch host; Slurm lost gpu001, took it
    out of the job and ended the job (a --no-kill job: no requeue of Slurm's own). gpu001 answers again."""
    j = replace(job(state, nodes=("gpu002", "gpu003", "gpu004"), reason=reason), batch_host="gpu001",
                exit_code="0:9")
    nodes = [node("gpu001", "IDLE"), node("gpu002", "IDLE"), node("gpu003", "IDLE"), node("gpu004", "IDLE")]
    return cluster(nodes, jobs=[j], placements=ran()), j


def test_a_job_slurm_ended_for_a_lost_batch_host_is_brought_back_on_the_requeue_path():
    """Issue 40: the run was lost (Slurm ends a --no-kill job FAILED, JobLaunchFailure, when its batch host
    goes DOWN). The node Slurm removed from the run is the fault, though it answers again now."""
    snap, _ = _lost_batch_host()
    steps = plan(snap, [], P, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu001",) and steps[0].path == "requeue"
    assert "removed from the job by Slurm" in steps[0].reason and "JobLaunchFailure" in steps[0].reason
    snap, _ = _lost_batch_host(reason="NonZeroExitCode")          # its own failure: not ours to restart
    assert plan(snap, [], P, NOW) == []


def test_a_job_whose_batch_step_slurm_killed_after_taking_its_batch_host_out_is_brought_back():
    """Issue 40, found on 24.11: Slurm keeps the --no-kill job running without its DOWN
    batch host, then SIGKILLs the batch step (the supervisor) when the node answers again: FAILED,
    RaisedSignal:9, the batch host no longer among the job's nodes. The run is revived as on 22.05; a
    job killed so with its batch host still in the run (its owner's kill -9) is its own doing."""
    snap, _ = _lost_batch_host(reason="RaisedSignal:9(Killed)")
    steps = plan(snap, [], P, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu001",) and steps[0].path == "requeue"
    assert "RaisedSignal:9" in steps[0].reason
    own = replace(snap, jobs={7: replace(snap.jobs[7], nodes=("gpu001", "gpu002", "gpu003", "gpu004"))})
    assert plan(own, [], P, NOW) == []


def test_the_revived_jobs_incident_quarantines_swaps_and_requeues_the_ended_job():
    snap, _ = _lost_batch_host()
    inc = incident(nodes=("gpu001",))
    assert kinds(plan(snap, [inc], P, NOW)) == ["quarantine"]
    out = replace(snap, partitions={**snap.partitions, "train": Partition("train", ("gpu002", "gpu003", "gpu004"))})
    assert kinds(plan(out, [incident([("quarantine", "ok")], nodes=("gpu001",))], P, NOW)) == ["swap"]
    done = incident([("quarantine", "ok"), ("swap", "ok"), ("requeue", "ok")], nodes=("gpu001",), spares=("gpu005",))
    assert kinds(plan(out, [done], P, NOW)) == ["abandon"]      # requeued and still ended: gone for good


def test_a_running_job_slurm_took_the_batch_host_from_is_requeued_off_it():
    """Issue 40, found on 25.11 and 26.05: after its batch host stopped answering, Slurm keeps the --no-kill job
    RUNNING on the others, its batch step killed when the node answers again (nothing would ever requeue
    it). The batch host is the fault once it answers again, though IDLE and healthy: the requeue path, as
    for any failed batch host; once that run's incident names it, no second one."""
    j = replace(job("RUNNING", nodes=("gpu002", "gpu003", "gpu004")), batch_host="gpu001")
    nodes = [node("gpu001", "IDLE"), node("gpu002"), node("gpu003"), node("gpu004")]
    snap = cluster(nodes, jobs=[j], placements=ran())
    steps = plan(snap, [], P, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu001",) and steps[0].path == "requeue"
    assert "batch host, which Slurm took out of the job" in steps[0].reason
    assert kinds(plan(snap, [incident(nodes=("gpu001",))], P, NOW)) == ["quarantine"]
    whole = replace(j, nodes=("gpu001", "gpu002", "gpu003", "gpu004"))
    assert plan(cluster(nodes, jobs=[whole], placements=ran()), [], P, NOW) == []
    # still down: 22.05 and 24.11 end the job next (revived then); an incident opened now stalled on 22.05
    down = cluster([failed("gpu001")] + nodes[1:], jobs=[j], placements=ran())
    assert plan(down, [], P, NOW) == []


def test_partition_changes_a_slurmctld_restart_undid_are_done_again_after_the_incident_closed():
    """Issue 40: slurmctld restarted without -R rebuilds the partitions from slurm.conf: gpu002, quarantined
    by a recovered incident and still drained for its fault, is back in train, and gpu005, the spare it
    swapped in (the job runs on it), is back in the pool alone. Both are put back; a node since healed is
    left where it is, and so is a spare that failed since."""
    done = incident([("quarantine", "ok"), ("swap", "ok"), ("requeue", "ok"), ("confirm", "ok")],
                    status="recovered", closed_at=NOW - 60, spares=("gpu005",))
    j = job(nodes=("gpu001", "gpu003", "gpu004", "gpu005"), restart=1)
    nodes = [node("gpu001"), failed("gpu002"), node("gpu003"), node("gpu004")]
    snap = cluster(nodes, [node("gpu005"), node("gpu006", "IDLE")], jobs=[j])   # slurm.conf's lists again
    (step,) = plan(snap, [done], P, NOW)
    assert (step.kind, step.nodes, step.spares, step.partition) == ("restore", ("gpu002",), ("gpu005",), "train")
    healed = [node("gpu001"), node("gpu002", "IDLE"), node("gpu003"), node("gpu004")]
    (step,) = plan(cluster(healed, [node("gpu005"), node("gpu006", "IDLE")], jobs=[j]), [done], P, NOW)
    assert step.nodes == () and step.spares == ("gpu005",)
    kept = cluster([node("gpu001"), node("gpu003"), node("gpu004"), node("gpu005")], [node("gpu006", "IDLE")],
                   jobs=[j])
    assert plan(replace(kept, nodes={**kept.nodes, "gpu002": failed("gpu002")}), [done], P, NOW) == []
    lemon = cluster(nodes, [failed("gpu005"), node("gpu006", "IDLE")], jobs=[j])
    later = incident(id=2, nodes=("gpu005",), status="recovered", closed_at=NOW, restart_count=1)
    (step,) = plan(lemon, [done, later], P, NOW)
    assert step.nodes == ("gpu002",) and step.spares == ()


def test_a_node_of_the_run_that_fails_after_the_incident_opened_joins_it():
    """Issue 40: two Xid 79 on two nodes of one job 2 s apart opened one incident naming one of them; the
    other stayed in train, drained, with no incident and no spare until the sweep. A node of the run the
    open incident recovers that fails meanwhile joins it; a node of another job's, or of a later run, not."""
    inc = incident([("quarantine", "ok"), ("swap", "ok"), ("requeue", "ok")], spares=("gpu005",))
    pending = job("PENDING", nodes=(), restart=1, reason="BeginTime")
    nodes = [node("gpu001", "IDLE"), failed("gpu002"), failed("gpu003"), node("gpu004", "IDLE")]
    snap = cluster(nodes, jobs=[pending], placements=ran())
    (step,) = [s for s in plan(snap, [inc], P, NOW) if s.kind != "poll"]
    assert (step.kind, step.nodes, step.incident_id) == ("join", ("gpu003",), 1)
    joined = replace(inc, nodes=("gpu002", "gpu003"))
    assert kinds(plan(snap, [joined], P, NOW)) == ["quarantine"]
    out = replace(snap, partitions={**snap.partitions, "train": Partition("train", ("gpu001", "gpu004", "gpu005"))})
    (swap,) = plan(out, [joined], P, NOW)
    assert swap.kind == "swap" and swap.spares == ("gpu005", "gpu006")       # a spare of its own
    assert plan(cluster(nodes, jobs=[pending]), [inc], P, NOW)[0].kind != "join"   # its run unknown


def test_a_requeue_after_a_hot_spare_recovery_does_not_blame_the_node_that_recovery_took():
    """Issue 40: a hot-spare job's supervisor met gpu002's fault in its allocation (incident of run 0,
    the node drained and out of train); then the job was requeued by hand. The next plan does not
    open a second incident for gpu002 (a spare swapped for a node already replaced)."""
    hot = incident([("quarantine", "ok"), ("released", "ok")], status="recovered", closed_at=NOW - 30,
                   path="in_allocation")
    pending = job("PENDING", nodes=(), restart=1, reason="BeginTime")
    nodes = [node("gpu001", "IDLE"), node("gpu002", "IDLE", {"DRAIN"}, "slurm-ft: XID79 gpu3 fell off the bus"),
             node("gpu003", "IDLE"), node("gpu004", "IDLE")]

    def snap():
        s = cluster(nodes, jobs=[pending], placements=ran())
        return replace(s, partitions={**s.partitions, "train": Partition("train", ("gpu001", "gpu003", "gpu004"))})
    assert plan(snap(), [hot], P, NOW) == []
    nodes[2] = node("gpu003", "IDLE", {"DRAIN"}, "slurm-ft: XID79 gpu3 fell off the bus")   # one no incident took
    steps = plan(snap(), [hot], P, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu003",)


def test_an_open_incident_whose_job_is_gone_leaves_a_node_healthy_again_alone():
    """Found by bench/chaos.py: an old journal's open incident, its job long gone, its node healed and
    resumed since: the incident is abandoned; the node is neither taken out of train nor drained."""
    inc = incident([("quarantine", "ok")], nodes=("gpu002",))
    nodes = [node(n, "IDLE") for n in TRAIN]
    steps = plan(cluster(nodes, jobs=[job(job_id=8)]), [inc], P, NOW)
    assert [(s.kind, s.job_id) for s in steps] == [("abandon", 7)]
    nodes[1] = failed("gpu002")                      # still failed: it leaves the partition first
    assert kinds(plan(cluster(nodes, jobs=[job(job_id=8)]), [inc], P, NOW))[0] == "quarantine"


def test_a_spare_idle_in_the_pool_after_a_reset_is_not_taken_back_by_an_old_incident():
    """Found by bench/chaos.py: after the lab (a site) reset its partitions, old closed incidents moved
    healthy idle spares out of the pool. Only a spare the incident's own job runs on goes back."""
    done = incident([("quarantine", "ok"), ("swap", "ok"), ("requeue", "ok"), ("confirm", "ok")],
                    status="recovered", closed_at=NOW - 60, spares=("gpu005",))
    elsewhere = job(nodes=("gpu001", "gpu003", "gpu004"), restart=1)
    healed = [node("gpu001"), node("gpu002", "IDLE"), node("gpu003"), node("gpu004")]
    snap = cluster(healed, [node("gpu005", "IDLE"), node("gpu006", "IDLE")], jobs=[elsewhere])
    assert plan(snap, [done], P, NOW) == []


def test_the_nodes_a_hot_spare_recovery_took_do_not_join_the_requeue_that_follows():
    """CI, 26.05: a hot-spare job met two faults in its allocation (gpu002, gpu003: drained, given back);
    the third took the requeue path. Requeued, its run's placement still lists gpu002 and gpu003: they do
    not join the requeue's incident (which would swap a spare for each again)."""
    hot = [incident([("quarantine", "ok"), ("released", "ok")], id=i, nodes=(n,), status="recovered",
                    closed_at=NOW - 30, path="in_allocation") for i, n in ((1, "gpu002"), (2, "gpu003"))]
    third = incident([("quarantine", "ok"), ("swap", "ok"), ("requeue", "ok")], id=3, nodes=("gpu004",),
                     spares=("gpu005",))
    pending = job("PENDING", nodes=(), restart=1, reason="BeginTime")
    nodes = [node("gpu001", "IDLE")] + [node(n, "IDLE", {"DRAIN"}, "slurm-ft: XID79 gpu3 fell off the bus")
                                        for n in ("gpu002", "gpu003", "gpu004")]
    snap = cluster(nodes, jobs=[pending], placements=ran())
    snap = replace(snap, partitions={**snap.partitions, "train": Partition("train", ("gpu001", "gpu005"))})
    assert "join" not in kinds(plan(snap, hot + [third], P, NOW))
