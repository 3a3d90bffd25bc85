"""The hot-spare supervisor's pure decisions: where the step runs, what a fault makes it do."""
from __future__ import annotations

from hypothesis import given, strategies as st

from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path
from slurm_ft.job import hotplan as hp
from slurm_ft.job.supervisor import srun_argv

ALLOC = ("n1", "n2", "n3", "n4")          # -N 3 --hot-spares 1
BAD = "slurm-ft: XID79 gpu3 GPU has fallen off the bus"


def view(**kw):
    base = dict(allocation=ALLOC, faults={}, batch_host="n1", train_nodes=3, step_nodes=("n1", "n2", "n3"))
    base.update(kw)
    return hp.View(**base)


def test_first_launch_takes_n_nodes_in_allocation_order_and_keeps_k_idle():
    act = hp.first_launch(ALLOC, {}, 3)
    assert act.kind == "launch" and act.nodes == ("n1", "n2", "n3")
    assert "1 hot spare" in act.reason


def test_first_launch_skips_a_node_already_failed():
    assert hp.first_launch(ALLOC, {"n2": BAD}, 3).nodes == ("n1", "n3", "n4")


def test_first_launch_without_enough_healthy_nodes_falls_back():
    act = hp.first_launch(ALLOC, {"n2": BAD, "n3": BAD}, 3)
    assert act.kind == "fallback" and act.failed == ("n2", "n3")


def test_nothing_failed_while_the_step_runs_is_a_wait():
    assert hp.decide(view()).kind == "wait"


def test_a_failed_step_node_relaunches_on_the_survivors_and_the_spare_and_is_given_back():
    act = hp.decide(view(faults={"n2": BAD}))
    assert act.kind == "relaunch"
    assert act.nodes == ("n1", "n3", "n4") and act.failed == ("n2",)
    assert act.release == ("n2",)         # shrunk away between the two steps, never under a running one
    assert "n2: slurm-ft: XID79" in act.reason


def test_a_failed_idle_hot_spare_waits_and_is_given_back_with_the_next_relaunch():
    assert hp.decide(view(faults={"n4": BAD})).kind == "wait"       # no shrink under a running step
    act = hp.decide(view(faults={"n4": BAD, "n3": BAD}, allocation=("n1", "n2", "n3", "n4", "n5")))
    assert act.kind == "relaunch" and act.nodes == ("n1", "n2", "n5") and act.release == ("n3", "n4")


def test_spares_used_up_fall_back_to_the_requeue_path():
    v = view(allocation=("n1", "n3", "n4"), faults={"n3": BAD}, step_nodes=("n1", "n3", "n4"))
    act = hp.decide(v)
    assert act.kind == "fallback" and act.failed == ("n3",)
    assert "hot spares used up" in act.reason


def test_a_failed_batch_host_falls_back_even_with_spares_left():
    act = hp.decide(view(faults={"n1": BAD}))
    assert act.kind == "fallback" and "batch host n1" in act.reason


def test_a_completed_step_ends_the_job_with_0():
    assert hp.decide(view(step_rc=0)) == hp.Action("exit", rc=0, reason="the training step completed")


def test_a_failed_step_waits_for_a_node_fault_then_ends_with_its_status():
    assert hp.decide(view(step_rc=1, since_exit_s=1.0)).kind == "wait"
    act = hp.decide(view(step_rc=1, since_exit_s=hp.EXIT_GRACE_S))
    assert act.kind == "exit" and act.rc == 1


def test_a_failed_step_with_a_faulty_node_relaunches():
    act = hp.decide(view(step_rc=1, since_exit_s=0.5, faults={"n3": BAD}))
    assert act.kind == "relaunch" and act.nodes == ("n1", "n2", "n4")


@given(st.lists(st.sampled_from(ALLOC), unique=True), st.lists(st.sampled_from(ALLOC), unique=True))
def test_pick_never_chooses_a_failed_node_and_prefers_the_step(bad, prefer):
    faults = {x: BAD for x in bad}
    got = hp.pick(ALLOC, faults, 2, prefer)
    if len(ALLOC) - len(bad) < 2:
        assert got is None
        return
    assert len(got) == 2 and not set(got) & set(bad)
    assert list(got) == [x for x in ALLOC if x in got]       # rank order follows the allocation
    alive = [x for x in ALLOC if x in prefer and x not in faults]
    assert set(alive[:2]) <= set(got)


def test_env_after_shrink_matches_what_scontrol_writes():
    env = {"SLURM_JOB_NODELIST": "gpu[001-003]", "SLURM_NODELIST": "gpu[001-003]", "SLURM_NNODES": "3",
           "SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_CPUS_PER_NODE": "8(x3)", "SLURM_NTASKS": "3",
           "SLURM_NPROCS": "3", "SLURM_TASKS_PER_NODE": "1(x3)", "HOME": "/root"}
    out = hp.env_after_shrink(env, "gpu[001-002]", 2)
    # 22.05.8's slurm_job_N_resize.sh after `scontrol update JobId=N NodeList=gpu[001-002]`
    assert out == {"SLURM_NODELIST": "gpu[001-002]", "SLURM_JOB_NODELIST": "gpu[001-002]", "SLURM_NNODES": "2",
                   "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_CPUS_PER_NODE": "8(x2)", "HOME": "/root"}
    assert hp.env_after_shrink({"SLURM_JOB_CPUS_PER_NODE": "8(x2),4"}, "a", 1)["SLURM_JOB_CPUS_PER_NODE"] == "8(x2),4"
    assert hp.env_after_shrink({"SLURM_JOB_CPUS_PER_NODE": "8(x2)"}, "a", 1)["SLURM_JOB_CPUS_PER_NODE"] == "8"


def test_srun_names_its_nodes_and_sizes_the_step():
    argv = srun_argv(("gpu001", "gpu003"), 2, ["python", "train.py", "--x"])
    assert argv == ["srun", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2", "--nodelist=gpu[001,003]",
                    "--kill-on-bad-exit=1", "python", "train.py", "--x"]


def test_the_do_not_restart_exit_ends_the_job_even_with_a_failed_node():
    act = hp.decide(view(step_rc=hp.EXIT_DO_NOT_RESTART, faults={"n2": BAD}))
    assert act.kind == "exit" and act.rc == 78 and "do not restart" in act.reason


def test_the_refusal_slurm_repeats_until_a_requeue_is_recognised():
    err = ("`scontrol update JobId=1 NodeList=gpu[001,004]` exited 1: Job update not available right now, "
           "the DB index is being set, try again in a bit for job 1")
    assert hp.refuses_resize(err)
    assert not hp.refuses_resize("`scontrol update` timed out after 30 s")


def test_a_node_seen_failed_stays_failed_for_the_supervisor_after_slurm_resumes_it():
    # Seen in CI: a health check resumed its own drain of a node Slurm would not take back from the job,
    # and the next relaunch put the step on that node again.
    from slurm_ft.job.supervisor import Supervisor

    slurm = FakeSlurm(train=ALLOC, spares=())
    sup = Supervisor(slurm, 7, 3, "", ["train"], env={}, say=lambda m: None)
    slurm.fail("n3", BAD)
    assert sup.faults(ALLOC) == {"n3": BAD}
    slurm.resume(["n3"])                                            # by a later healthy check
    assert sup.faults(ALLOC) == {"n3": BAD}
    assert sup.faults(("n1", "n2")) == {}                            # only the nodes asked about


def test_a_step_failed_with_no_fault_in_slurm_has_its_nodes_checked_at_once(tmp_path):
    # Seen in CI: the node's watcher started after the Xid and missed it; the rank on the GPU died, the
    # step failed, nothing drained the node for minutes, and the job would have ended after the grace.
    import json
    from slurm_ft.job.supervisor import Supervisor

    class Checked(Supervisor):   # the checks' srun, as its parsed answer
        culprits: dict = {}

        def check_nodes(self, nodes, drain=False):
            self.asked = getattr(self, "asked", []) + [(tuple(nodes), drain)]
            return {x: why for x, why in self.culprits.items() if x in nodes}

    sup = Checked(FakeSlurm(train=ALLOC, spares=()), 7, 3, str(tmp_path), ["train"], env={}, say=lambda m: None)
    sup.step_nodes = ("n1", "n2", "n3")
    sup.culprits = {"n3": "slurm-ft: hang check: GPU_LOST gpu0 GPU lost"}
    act = sup.failed_step_action(view(step_rc=1, since_exit_s=0.1), 1)
    assert sup.asked == [(("n1", "n2", "n3"), False), (("n3",), True)]     # look at all, then drain the culprit
    assert act.kind == "relaunch" and act.nodes == ("n1", "n2", "n4") and act.failed == ("n3",)
    [logged] = [json.loads(x) for x in (tmp_path / "slurm-ft-starts.jsonl").read_text().splitlines()]
    assert logged["event"] == "exit_check" and logged["culprits"] == "n3" and logged["rc"] == 1

    sup = Checked(FakeSlurm(train=ALLOC, spares=()), 7, 3, str(tmp_path), ["train"], env={}, say=lambda m: None)
    sup.step_nodes, sup.culprits = ("n1", "n2", "n3"), {}
    assert sup.failed_step_action(view(step_rc=1, since_exit_s=0.1), 1).kind == "wait"   # the grace, as before


def test_checks_failing_most_of_the_step_name_no_culprit_and_drain_nothing(tmp_path):
    # Seen in CI: the lab demo's job lacked the (fake) driver library on its path; the checks in the job
    # failed all 63 nodes on NVML_INIT, drained 6 before the breaker stopped them, the batch host among
    # the "culprits" sent the job to the requeue path, and the requeued job waited on the drained nodes.
    import json
    from slurm_ft.job.supervisor import Supervisor

    class Checked(Supervisor):
        def check_nodes(self, nodes, drain=False):
            self.asked = getattr(self, "asked", []) + [(tuple(nodes), drain)]
            return {x: "slurm-ft: hang check: NVML_INIT NVML unusable" for x in nodes}

    sup = Checked(FakeSlurm(train=ALLOC, spares=()), 7, 3, str(tmp_path), ["train"], env={}, say=lambda m: None)
    sup.step_nodes = ("n1", "n2", "n3")
    assert sup.failed_step_action(view(step_rc=1, since_exit_s=0.1), 1).kind == "wait"   # the grace, then exit
    assert sup.asked == [(("n1", "n2", "n3"), False)] and sup.failed == {}
    [logged] = [json.loads(x) for x in (tmp_path / "slurm-ft-starts.jsonl").read_text().splitlines()]
    assert logged["culprits"] == "" and logged["not_believed"].startswith("the checks failed 3 of 3 nodes")
