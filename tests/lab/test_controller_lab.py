"""The requeue controller against the real lab (slurmctld + 68 slurmd): each edge case of issue 4."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ctl_helpers import (LAB_FAULT, controller_config, controller_running, crash_once, fail_node, incidents, once, parts,
                         slurm_ft, submit_ft, set_pool, submit_plain, wait_job)
from slurm_ft_lab.waits import wait_for

pytestmark = pytest.mark.lab


@pytest.fixture
def cfg(lab, tmp_path):
    lab.reset()
    yield controller_config(lab, tmp_path)
    lab.reset()


def test_failed_node_is_swapped_for_a_spare_and_the_job_runs_again(lab, cfg, work):
    jid = submit_ft(lab, work, 4)
    job = wait_job(lab, jid)
    bad = job.nodes[1]
    pool = set(lab.spare_nodes)
    fail_node(lab, bad)
    t0 = time.monotonic()
    once(lab, cfg)
    took = time.monotonic() - t0
    job = wait_job(lab, jid, restart_count=1)
    assert bad not in job.nodes
    p = parts(lab)
    assert bad not in p["train"]                                 # quarantined
    node = lab.client.node(bad)
    assert node.drained and node.reason == LAB_FAULT                # still drained with its reason
    [inc] = incidents(lab, cfg)
    assert inc["status"] == "recovered" and inc["job_id"] == jid and inc["nodes"] == [bad]
    [spare] = inc["spares"]
    assert spare in pool and spare in p["train"] and p["spares"] == pool - {spare}   # pool one smaller
    names = [s["name"] for s in inc["steps"]]
    if lab.client.expedited_requeue_available():   # >= 25.11: our requeue is eligible at once, no begin
        assert names[:4] == ["open", "quarantine", "swap", "requeue"] and names[-1] == "confirm", names
    else:                                          # time to clear (it may restart before `exclude`)
        assert names == ["open", "quarantine", "swap", "requeue", "exclude", "start", "confirm"]
    assert all(s["outcome"] == "ok" for s in inc["steps"])
    # generous: the lab shares two cores with other work; bench/recovery.py measures the real figure
    assert inc["total_s"] < 60 and took < 90, inc
    # a second cycle finds nothing to do: the job is not requeued twice for one fault
    out = once(lab, cfg)
    assert '"steps": []' in out.stdout
    assert lab.client.job(jid).restart_count == 1


def test_two_nodes_of_one_job_fail_at_once_one_incident_two_spares(lab, cfg, work):
    jid = submit_ft(lab, work, 4)
    job = wait_job(lab, jid)
    bad = [job.nodes[0], job.nodes[2]]
    for n in bad:
        fail_node(lab, n)
    once(lab, cfg)
    job = wait_job(lab, jid, restart_count=1)
    [inc] = incidents(lab, cfg)
    assert inc["status"] == "recovered" and sorted(inc["nodes"]) == sorted(bad) and len(inc["spares"]) == 2
    assert not set(bad) & set(job.nodes) and not set(bad) & parts(lab)["train"]
    assert len(parts(lab)["spares"]) == len(lab.spare_nodes) - 2


def test_empty_pool_job_waits_with_a_clear_reason_then_resumes_when_a_spare_returns(lab, cfg, work):
    set_pool(lab, [])
    # fill train so the job cannot simply run on other idle train nodes of the lab
    jid = submit_ft(lab, work, len(lab.train_nodes))
    job = wait_job(lab, jid)
    bad = job.nodes[5]
    fail_node(lab, bad)
    once(lab, cfg, budget=20)
    [inc] = incidents(lab, cfg)
    assert inc["status"] == "waiting" and "waiting for a spare" in inc["note"]
    # requeued: PENDING once its 64 epilogs are done (COMPLETING until then, long on a loaded host)
    wait_job(lab, jid, state="PENDING", restart_count=1)
    show = subprocess.run(["scontrol", "show", "job", str(jid)], capture_output=True, text=True, env=lab.env).stdout
    assert "AdminComment=slurm-ft: waiting for a spare" in show
    once(lab, cfg, budget=10)                                     # still nothing: no loop, no second requeue
    assert lab.client.job(jid).restart_count == 1 and incidents(lab, cfg)[0]["status"] == "waiting"
    spare = lab.spare_nodes[0]
    set_pool(lab, [spare])           # an admin returns a node to the pool
    once(lab, cfg)
    job = wait_job(lab, jid, restart_count=1)
    assert spare in job.nodes and bad not in job.nodes
    assert incidents(lab, cfg)[0]["status"] == "recovered"


def test_elastic_job_shrinks_instead_of_waiting(lab, cfg, work):
    set_pool(lab, [])
    n = len(lab.train_nodes)
    jid = submit_ft(lab, work, n, "--min-nodes", str(n - 2))
    job = wait_job(lab, jid)
    fail_node(lab, job.nodes[3])
    once(lab, cfg)
    job = wait_job(lab, jid, restart_count=1)
    assert job.num_nodes == n - 1 and len(job.nodes) == n - 1
    [inc] = incidents(lab, cfg)
    assert inc["status"] == "recovered" and inc["shrink_to"] == n - 1 and inc["spares"] == []


def test_fault_on_a_node_without_an_ft_job_is_drain_only(lab, cfg, work):
    plain = submit_plain(lab, work, 2)
    job = wait_job(lab, plain)
    ft = submit_ft(lab, work, 2)
    ft_job = wait_job(lab, ft)
    before = parts(lab)
    fail_node(lab, job.nodes[0])                                 # under a plain job
    busy = set(job.nodes) | set(ft_job.nodes)
    idle = [n for n in lab.train_nodes if n not in busy and lab.client.node(n).state == "IDLE"][0]
    fail_node(lab, idle)                                         # under no job at all
    out = once(lab, cfg, budget=10)
    assert '"steps": []' in out.stdout and incidents(lab, cfg) == []
    assert parts(lab) == before
    assert lab.client.job(plain).state == "RUNNING" and lab.client.job(ft).restart_count == 0
    assert lab.client.node(idle).drained


def test_admin_drain_is_not_a_fault(lab, cfg, work):
    jid = submit_ft(lab, work, 3)
    job = wait_job(lab, jid)
    lab.client.drain([job.nodes[0]], "admin: replace a fan after this job")
    out = once(lab, cfg, budget=10)
    assert '"steps": []' in out.stdout and incidents(lab, cfg) == []
    job = lab.client.job(jid)
    assert job.state == "RUNNING" and job.restart_count == 0      # the running job finishes where it is


def test_job_failing_again_and_again_stops_after_max_restarts(lab, cfg, work):
    jid = submit_ft(lab, work, 2, "--max-restarts", "1")
    job = wait_job(lab, jid)
    fail_node(lab, job.nodes[0])
    once(lab, cfg)
    job = wait_job(lab, jid, restart_count=1)
    fail_node(lab, job.nodes[0])                                 # fails again, no checkpoint progress
    once(lab, cfg, budget=20)
    statuses = [i["status"] for i in incidents(lab, cfg)]
    assert statuses == ["recovered", "gave_up"]
    assert "max_restarts=1" in incidents(lab, cfg)[1]["note"]
    job = wait_job(lab, jid, state="PENDING", timeout=60)          # its epilogs may still run (COMPLETING)
    assert job.restart_count == 2                                  # held, not restarted
    once(lab, cfg, budget=10)
    assert len(incidents(lab, cfg)) == 2 and lab.client.job(jid).restart_count == 2   # no loop


def test_prolog_failure_launch_failed_held_job_is_released_onto_a_spare(lab, cfg, work, tmp_path):
    """A real prolog failure: Slurm drains the node ("Prolog error") and requeues the job HELD; we finish.
    The controller runs beside it, as deployed: it saw the run the prolog ended (RUNNING, reason Prolog,
    for the prolog's seconds), so the job's incident takes that run's failed node and no other."""
    bad = [n for n in lab.train_nodes if lab.client.node(n).state == "IDLE"][0]   # Slurm allocates lowest first
    # its HealthCheckProgram (as slurmd runs it at start) saves the fleet view the prolog's breaker reads
    subprocess.run([str(lab.dir / "hooks" / "healthcheck")], env=dict(lab.env, SLURMD_NODENAME=bad),
                   timeout=120, check=True)
    slurm_ft(lab, None, "lab", "inject", bad, "--dir", str(lab.dir), "--gpu", "2", "--xid", "79")
    with controller_running(lab, cfg, tmp_path / "controller.log"):
        jid = submit_ft(lab, work, 2)
        job = wait_job(lab, jid, restart_count=1, timeout=180)
        inc = wait_for(lambda: [i for i in incidents(lab, cfg) if i["status"] == "recovered"], 60,
                       "the incident closed")[0]
    assert inc["nodes"] == [bad] and lab.client.node(bad).drained
    assert [s["outcome"] for s in inc["steps"] if s["name"] == "requeue"] == ["skipped"]   # Slurm had requeued it
    assert "start" in [s["name"] for s in inc["steps"]]              # released from Slurm's launch-failed hold
    assert job.restart_count == 1 and bad not in job.nodes and bad not in parts(lab)["train"]


def test_slurmctld_restarted_mid_recovery(lab, cfg, work):
    """slurmctld goes away right after the requeue and comes back without -R (partitions from slurm.conf)."""
    from slurm_ft_lab.cluster import Lab
    jid = submit_ft(lab, work, 3)
    job = wait_job(lab, jid)
    bad = job.nodes[0]
    fail_node(lab, bad)
    p = crash_once(lab, cfg, "swap:result")
    assert p.returncode == -signal.SIGKILL
    _restart_slurmctld(Lab(lab.dir))
    once(lab, cfg)
    job = wait_job(lab, jid, restart_count=1)
    [inc] = incidents(lab, cfg)
    assert inc["status"] == "recovered" and bad not in job.nodes
    p = parts(lab)
    assert bad not in p["train"] and not set(inc["spares"]) & p["spares"]
    assert lab.client.node(bad).drained


def test_a_slurmctld_restart_after_the_recovery_does_not_put_the_bad_node_back(lab, cfg, work):
    """Issue 40: the incident is closed; slurmctld restarts without -R and rebuilds the partitions from
    slurm.conf: the quarantined node is back in train (drained) and the spare is back in the pool alone.
    The controller's next cycle takes the node out again, and the spare back into train if the job runs on
    it (an idle spare stays in the pool: never a node lost)."""
    from slurm_ft_lab.cluster import Lab
    jid = submit_ft(lab, work, 3)
    job = wait_job(lab, jid)
    bad = job.nodes[0]
    fail_node(lab, bad)
    once(lab, cfg)
    job = wait_job(lab, jid, restart_count=1)
    [inc] = incidents(lab, cfg)
    assert inc["status"] == "recovered"
    [spare] = inc["spares"]
    _restart_slurmctld(Lab(lab.dir))
    p = parts(lab)
    assert bad in p["train"] and spare in p["spares"] and spare not in p["train"]    # what Slurm did
    once(lab, cfg)
    p = parts(lab)
    assert bad not in p["train"] and not (spare in p["train"] and spare in p["spares"])
    if spare in lab.client.job(jid).nodes:
        assert spare in p["train"]
    assert lab.client.node(bad).drained and lab.client.job(jid).restart_count == 1   # no second requeue


def test_a_job_id_slurm_gives_out_again_is_a_new_job_to_the_controller(lab, cfg, work):
    """Issue 40: slurmctld loses its state (started fresh here) and its job ids start again while the
    controller's journal keeps the incidents. The first job's fault was recovered; the new job with the
    same id fails on the same node: an incident of its own, the node quarantined, the job back on a spare."""
    _restart_slurmctld(lab.cluster, fresh=True)
    lab.reset()
    jid = submit_ft(lab, work, 3)
    job = wait_job(lab, jid)
    bad = job.nodes[0]
    fail_node(lab, bad)
    once(lab, cfg)
    wait_job(lab, jid, restart_count=1)
    _restart_slurmctld(lab.cluster, fresh=True)        # ids start again; the journal stays
    lab.reset()
    again = submit_ft(lab, work, 3)
    assert again == jid
    job = wait_job(lab, again)
    assert bad in job.nodes                            # the same node as the first job's fault
    fail_node(lab, bad)
    once(lab, cfg)
    job = wait_job(lab, again, restart_count=1)
    first, second = incidents(lab, cfg)
    assert second["job_id"] == jid and second["nodes"] == [bad] and second["status"] == "recovered"
    assert bad not in job.nodes and bad not in parts(lab)["train"]


def _restart_slurmctld(lab, fresh: bool = False) -> None:
    """slurmctld stopped and started again without -R (partitions from slurm.conf); fresh: without its
    state too (no jobs, ids from FirstJobId again), as after a state loss, and every slurmd with it."""
    pidfile = Path(lab.dir) / "run" / "slurmctld.pid"
    pid = int(pidfile.read_text().split()[0])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.1)
    from slurm_ft.runner import run
    if fresh:
        # slurmd remembers the ids of jobs it ran and refuses a launch under one again: they go too
        for d in lab.daemons():
            if d.get("node") and d["pid"]:
                os.kill(d["pid"], signal.SIGTERM)
        wait_for(lambda: not any(d["alive"] for d in lab.daemons() if d.get("node")), 60, "every slurmd stopped")
        lab._start_slurmctld(fresh=True)
        lab.start_slurmds()
    else:
        run(["slurmctld", "-f", str(lab.conf)], timeout=30, env=lab._daemon_env())   # no -c: keep jobs
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if run(["scontrol", "ping"], timeout=10, env=lab.env(), check=False).stdout.count("UP"):
            return
        time.sleep(0.2)
    raise AssertionError("slurmctld did not come back")


def test_node_that_stops_responding_is_replaced(lab, cfg, work):
    """A node whose slurmd dies: NOT_RESPONDING, then DOWN (NODE_FAIL); either way the job comes back."""
    jid = submit_ft(lab, work, 3)
    job = wait_job(lab, jid)
    bad = job.nodes[2]
    pid = int((Path(lab.dir) / "run" / f"slurmd.{bad}.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)                                  # the node is gone (reset() restarts it)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not incidents(lab, cfg):
        once(lab, cfg, budget=60)
        time.sleep(1)
    job = wait_job(lab, jid, restart_count=1)
    [inc] = incidents(lab, cfg)
    assert inc["status"] == "recovered" and inc["nodes"] == [bad] and bad not in job.nodes
    node = lab.client.node(bad)
    assert node.drained and node.reason.startswith("slurm-ft: quarantined")   # stays out when it answers again
    assert bad not in parts(lab)["train"]
