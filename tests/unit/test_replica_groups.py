"""Replica groups (`slurm-ft sbatch --replica-groups R`): the supervisor's pure decisions (groupplan), the
one rule both rooms read (job/paths.py), the controller's policy for the path, the tag and the command line."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from slurm_ft.errors import UsageError
from slurm_ft.fleet.recovery.plan import plan
from slurm_ft.fleet.recovery.policies import claim
from slurm_ft.job import groupplan as gp
from slurm_ft.job import submit
from slurm_ft.job.paths import supervisor_path
from slurm_ft.job.tag import FtSpec, decode, encode
from tests.unit.test_plan import NOW, P, cluster, failed, incident, job, kinds, node

# 2 groups of 2 nodes + 1 hot spare: gpu001-002 | gpu003-004 | gpu005
ALLOC = ("gpu001", "gpu002", "gpu003", "gpu004", "gpu005")
SPEC = FtSpec(ckpt_dir="/ck", hot_spares=1, train_nodes=4, replica_groups=2)
FAULT = "slurm-ft: XID79 gpu3 fell off the bus"


def view(groups, faults=(), alloc=ALLOC, batch="gpu001"):
    return gp.View(allocation=alloc, faults={n: FAULT for n in faults}, batch_host=batch, group_nodes=2,
                   groups=tuple(gp.Group(nodes=tuple(g)) if not isinstance(g, gp.Group) else g for g in groups))


RUNNING = [("gpu001", "gpu002"), ("gpu003", "gpu004")]


def test_first_launch_forms_the_groups_in_allocation_order_with_the_spare_left_idle():
    assert gp.form(ALLOC, {}, "gpu001", 2, 2) == RUNNING
    assert gp.form(ALLOC, {"gpu002": FAULT}, "gpu001", 2, 2) == [("gpu001", "gpu003"), ("gpu004", "gpu005")]
    assert gp.form(ALLOC, {"gpu002": FAULT, "gpu004": FAULT}, "gpu001", 2, 2) == [("gpu001", "gpu003"), ()]


def test_nothing_to_do_while_every_group_steps():
    assert gp.decide(view(RUNNING)) == []


def test_a_fault_in_group_1_relaunches_group_1_alone_on_the_hot_spare():
    [act] = gp.decide(view(RUNNING, faults=["gpu004"]))
    assert (act.kind, act.group, act.nodes, act.failed) == ("relaunch", 1, ("gpu003", "gpu005"), ("gpu004",))


def test_a_second_fault_with_no_spare_left_parks_that_group_and_the_job_trains_on():
    after = [("gpu001", "gpu002"), ("gpu003", "gpu005")]
    [act] = gp.decide(view(after, faults=["gpu004", "gpu005"]))
    assert (act.kind, act.group) == ("park", 1)
    # parked: the job waits on group 0 alone; nothing else to do
    assert gp.decide(view([("gpu001", "gpu002"), ()], faults=["gpu004", "gpu005"])) == []


def test_a_parked_group_comes_back_once_enough_idle_nodes_are_healthy():
    [act] = gp.decide(view([("gpu001", "gpu002"), ()], faults=["gpu004"]))
    assert (act.kind, act.group, act.nodes) == ("relaunch", 1, ("gpu003", "gpu005"))


def test_faults_in_both_groups_at_once_share_the_one_spare_in_group_order():
    acts = gp.decide(view(RUNNING, faults=["gpu002", "gpu004"]))
    assert [(a.kind, a.group) for a in acts] == [("relaunch", 0), ("park", 1)]
    assert acts[0].nodes == ("gpu001", "gpu005")


def test_the_batch_host_failing_takes_the_requeue_path():
    [act] = gp.decide(view(RUNNING, faults=["gpu001"]))
    assert act.kind == "fallback" and "Lighthouse" in act.reason


def test_no_whole_group_left_takes_the_requeue_path():
    [act] = gp.decide(view([("gpu001", "gpu002"), ()], faults=["gpu002", "gpu003", "gpu004", "gpu005"]))
    assert act.kind == "fallback"
    # one healthy node of each broken group still make a whole group: it runs on
    [act] = gp.decide(view([("gpu001", "gpu002"), ()], faults=["gpu002", "gpu004", "gpu005"]))
    assert (act.kind, act.group, act.nodes) == ("relaunch", 0, ("gpu001", "gpu003"))


def test_a_group_that_fails_with_no_node_to_blame_restarts_alone_after_the_grace():
    failed_g = gp.Group(nodes=("gpu003", "gpu004"), rc=1, since_exit_s=gp.EXIT_GRACE_S - 1)
    assert gp.decide(view([RUNNING[0], failed_g])) == []
    [act] = gp.decide(view([RUNNING[0], replace(failed_g, since_exit_s=gp.EXIT_GRACE_S)]))
    assert (act.kind, act.group, act.nodes) == ("restart", 1, ("gpu003", "gpu004"))


def test_the_job_ends_when_every_group_completed_or_one_says_do_not_restart():
    done = [gp.Group(nodes=g, rc=0) for g in RUNNING]
    assert [a.kind for a in gp.decide(view(done))] == ["exit"]
    stop = [gp.Group(nodes=RUNNING[0]), gp.Group(nodes=RUNNING[1], rc=78)]
    [act] = gp.decide(view(stop))
    assert (act.kind, act.rc) == ("exit", 78)


@given(st.sets(st.sampled_from(ALLOC[1:])), st.lists(st.booleans(), min_size=2, max_size=2))
def test_decisions_never_put_a_failed_node_in_a_group_nor_a_node_in_two(faults, parked):
    groups = [() if p else g for g, p in zip(RUNNING, parked)]
    v = view(groups, faults=sorted(faults))
    acts = gp.decide(v)
    used = [x for a in acts if a.kind in ("relaunch", "restart") for x in a.nodes]
    moved = {a.group for a in acts}
    kept = [x for i, g in enumerate(v.groups) if i not in moved for x in g.nodes]
    assert not set(used) & set(faults)
    if all(a.kind != "fallback" for a in acts):
        assert len(used + kept) == len(set(used + kept))


# --- the one rule, in both rooms ---------------------------------------------------------------------

def test_the_supervisor_path_is_the_replica_groups_while_a_whole_group_can_run():
    assert supervisor_path(SPEC, ALLOC, "gpu001", ["gpu004"]) == "replica_group"
    assert supervisor_path(SPEC, ALLOC, "gpu001", ["gpu004", "gpu005"]) == "replica_group"   # R - 1 groups
    assert supervisor_path(SPEC, ALLOC, "gpu001", ["gpu002", "gpu003", "gpu004", "gpu005"]) is None   # < 1 group
    assert supervisor_path(SPEC, ALLOC, "gpu001", ["gpu001"]) is None                      # the Lighthouse's host


def rg_job(nodes=ALLOC, **kw):
    return replace(job(nodes=nodes, **kw), batch_host="gpu001", num_nodes=len(nodes))


def rg_cluster(faults, jobs=None, **kw):
    nodes = [failed(n) if n in faults else node(n) for n in ALLOC]
    return cluster(nodes, spare_nodes=[node("gpu006", "IDLE")], jobs=jobs or [rg_job()], specs={7: SPEC}, **kw)


def test_the_controller_journals_a_replica_group_fault_and_never_requeues_it():
    snap = rg_cluster({"gpu004"})
    assert claim(rg_job(), SPEC, ["gpu004"]).path == "replica_group"
    [opened] = plan(snap, [], P, NOW)
    assert (opened.kind, opened.path) == ("open", "replica_group")
    inc = incident(nodes=("gpu004",), path="replica_group", job_nodes=5)
    assert kinds(plan(snap, [inc], P, NOW)) == ["quarantine"]
    out = cluster([node(n) for n in ALLOC if n != "gpu004"] + [failed("gpu004")], spare_nodes=[node("gpu006", "IDLE")],
                  jobs=[rg_job()], specs={7: SPEC})
    out = replace(out, partitions={**out.partitions, "train": replace(out.partitions["train"], nodes=tuple(
        n for n in ALLOC if n != "gpu004"))})
    inc = incident([("quarantine", "ok")], nodes=("gpu004",), path="replica_group", job_nodes=5)
    [swap] = plan(out, [inc], P, NOW)
    assert swap.kind == "swap" and swap.spares == ("gpu006",)
    # the node stays in the job (no shrink while other groups run): closed at once, not after a wait
    inc = incident([("quarantine", "ok"), ("swap", "ok")], nodes=("gpu004",), spares=("gpu006",),
                   path="replica_group", job_nodes=5)
    out = replace(out, partitions={**out.partitions, "train": replace(out.partitions["train"], nodes=tuple(
        n for n in ALLOC if n != "gpu004") + ("gpu006",)), "spares": replace(out.partitions["spares"], nodes=())})
    [done] = plan(out, [inc], P, NOW)
    assert done.kind == "released" and "stays in the job" in done.reason


def test_a_lighthouse_host_fault_opens_on_the_requeue_path():
    [opened] = plan(rg_cluster({"gpu001"}), [], P, NOW)
    assert (opened.kind, opened.path) == ("open", "requeue")


def test_a_replica_group_incident_hands_over_when_no_whole_group_is_left():
    snap = rg_cluster({"gpu002", "gpu003", "gpu004", "gpu005"})
    inc = incident(nodes=("gpu004",), path="replica_group", job_nodes=5)
    [step] = plan(snap, [inc], P, NOW)
    assert step.kind == "handover" and "requeue path takes over" in step.reason


# --- the tag and the command line ------------------------------------------------------------------

def test_the_tag_carries_the_replica_groups_and_round_trips():
    text = encode(SPEC)
    assert text == "slurm-ft:v1 ckpt=/ck hot_spares=1 train_nodes=4 replica_groups=2 max_restarts=5"
    assert decode(text) == SPEC
    no_spare = replace(SPEC, hot_spares=0)
    assert decode(encode(no_spare)) == no_spare
    assert decode("slurm-ft:v1 hot_spares=0 train_nodes=5 replica_groups=2") is None     # not whole groups
    assert decode("slurm-ft:v1 replica_groups=2") is None                                  # no training size
    assert decode("slurm-ft:v1 hot_spares=0 train_nodes=4 replica_groups=1") is None


def test_sbatch_replica_groups_asks_for_n_plus_k_and_starts_the_group_supervisor():
    req = submit.parse(["--ckpt-dir", "/ck", "--replica-groups", "2", "--hot-spares", "1", "-N", "4", "train.py"],
                       file_exists=lambda p: True)
    assert req.spec == SPEC and "5" in req.sbatch_options
    assert submit.starter_argv(req)[:8] == ["--ckpt-dir", "/ck", "--hot-spares", "1", "--train-nodes", "4",
                                            "--replica-groups", "2"]
    assert "--ft-replica-groups=2" in submit.plugin_options(req.spec)
    with pytest.raises(UsageError, match="not a whole number of groups"):
        submit.parse(["--replica-groups", "3", "-N", "4", "train.py"], file_exists=lambda p: True)
    with pytest.raises(UsageError, match="-N N"):
        submit.parse(["--replica-groups", "2", "train.py"], file_exists=lambda p: True)
    with pytest.raises(UsageError, match=">= 2"):
        submit.parse(["--replica-groups", "1", "-N", "4", "train.py"], file_exists=lambda p: True)


def test_status_reads_the_groups_of_the_latest_start_and_no_group_rejoin_counts_as_a_restart():
    import json as _json
    from slurm_ft.fleet.report.job_progress import groups_of, parse_starts
    lines = [
        {"event": "lighthouse", "job": "7", "restart": 0, "t": 1.0},
        {"event": "launch", "job": "7", "restart": 0, "launch": 0, "group": 0, "nodes": "gpu[001-002]", "t": 2.0,
         "rejoin": False},
        {"event": "launch", "job": "7", "restart": 0, "launch": 1, "group": 1, "nodes": "gpu[003-004]", "t": 2.0,
         "rejoin": False},
        {"event": "fault", "job": "7", "restart": 0, "group": 1, "nodes": "gpu004", "reason": "gpu004: XID79", "t": 9.0},
        {"event": "launch", "job": "7", "restart": 0, "launch": 2, "group": 1, "nodes": "gpu[003,005]", "t": 9.5,
         "rejoin": True},
        {"event": "launch", "job": "8", "restart": 0, "launch": 0, "group": 5, "nodes": "x", "t": 1.0},
        "not json", {"event": "launch", "job": "7", "restart": 0, "group": "1; rm -rf /", "nodes": "gpu009", "t": 3.0},
    ]
    text = "\n".join(x if isinstance(x, str) else _json.dumps(x) for x in lines)
    got = groups_of(text, "7")
    assert [(g["group"], g["state"], g["nodes"], g["launches"], g["faults"]) for g in got] == [
        (0, "running", "gpu[001-002]", 1, 0), (1, "running", "gpu[003,005]", 2, 1)]
    assert got[1]["last_fault"] == "gpu004: XID79"
    assert [s.launch for s in parse_starts(text, "7")] == [0]          # group 0's start is the job's, no other
    restarted = text + "\n" + _json.dumps({"event": "lighthouse", "job": "7", "restart": 1, "t": 20.0})
    assert groups_of(restarted, "7") == []


@given(st.text(max_size=400))
def test_the_groups_reader_takes_any_text(text):
    from slurm_ft.fleet.report.job_progress import groups_of
    for g in groups_of(text, "7"):
        assert g["state"] in ("running", "parked")
