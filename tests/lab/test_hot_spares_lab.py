"""`slurm-ft sbatch --hot-spares K` on the real lab, with `slurm-ft controller run` beside it: a fault on a
node of the training step is met inside the job's own allocation (the step relaunched on a hot spare from
the latest complete checkpoint, the node given back to Slurm, no requeue); once the hot spares are used
up, and when the batch host fails, the job takes the requeue path."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from slurm_ft_lab.trainer import read_log
from slurm_ft.slurm.client import JobNotFound
from slurm_ft_lab.waits import WaitTimeout, wait_for
from tests.lab.ctl_helpers import PY, controller_config, fail_node, incidents, slurm_ft, wait_job

pytestmark = pytest.mark.lab


@pytest.fixture
def controller(lab, work, tmp_path):
    config = controller_config(lab, tmp_path)          # root's config and journal; the job's files in `work`
    env = dict(lab.env, SLURM_FT_CONFIG=str(config))
    proc = subprocess.Popen([PY, "-m", "slurm_ft", "controller", "run"], env=env,
                            stdout=open(tmp_path / "controller.log", "w"), stderr=subprocess.STDOUT)
    yield config
    proc.terminate()
    try:
        proc.wait(120)      # it ends its current cycle first: Slurm calls took 30 s and more at load 200
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    # shown by pytest only when the test failed: what the controller, the job and its supervisor said
    for name in ("controller.log", "job.out", "ck/slurm-ft-starts.jsonl", "ck/trainer-log.jsonl"):
        f = (tmp_path if name == "controller.log" else work) / name
        print(f"== {name}", *(f.read_text(errors="replace").splitlines()[-60:] if f.exists() else ["(none)"]), sep="\n")


def submit(lab, work: Path, n: int, k: int) -> tuple:
    ck = work / "ck"
    p = slurm_ft(lab, None, "sbatch", "--ckpt-dir", str(ck), "--hot-spares", str(k), "-N", str(n),
                 "--ntasks-per-node=1", "-o", str(work / "job.out"), "--open-mode=append",
                 PY, "-m", "slurm_ft_lab.trainer", "--ckpt-dir", str(ck), "--resume", "{ckpt}",
                 "--step-time", "0.3", "--ckpt-every", "5", "--gpu-check", "off")
    return int(p.stdout.split()[-1]), ck


def start_of(ck: Path, restart: int, launch: int):
    return next((e for e in read_log(str(ck)) if e["event"] == "start"
                 and e.get("restart", 0) == restart and e.get("launch", 0) == launch), None)


def stepped_past(ck: Path, restart: int, launch: int, step: int) -> bool:
    return any(e["event"] == "step" and e.get("restart", 0) == restart and e.get("launch", 0) == launch
               and e["step"] >= step for e in read_log(str(ck)))


def supervisor_events(ck: Path, event: str) -> list:
    path = ck / "slurm-ft-starts.jsonl"
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["event"] == event]


def test_two_faults_use_both_hot_spares_then_the_third_is_requeued(lab, work, controller):
    job_id, ck = submit(lab, work, n=2, k=2)
    job = wait_job(lab, job_id, "RUNNING", timeout=180)
    assert len(job.nodes) == 4                                  # N + K
    for launch in (0, 1):
        wait_for(lambda: stepped_past(ck, 0, launch, (start_of(ck, 0, launch) or {"step": 1e9})["step"] + 7),
            120, f"launch {launch} past a checkpoint")
        nodes = supervisor_events(ck, "launch")[launch]["nodes"]
        victim = next(x for x in _expand(nodes) if x != job.batch_host)
        fail_node(lab, victim)
        start = wait_for(lambda: start_of(ck, 0, launch + 1), 60, f"launch {launch + 1}")
        assert start["resumed_from"] and start["step"] >= 5      # from a complete checkpoint, not from scratch
        relaunched = supervisor_events(ck, "launch")[launch + 1]
        assert victim not in _expand(relaunched["nodes"]) and len(_expand(relaunched["nodes"])) == 2
        # quarantined and journaled by the controller, never requeued
        inc = wait_for(lambda: [i for i in incidents(lab, controller) if victim in i["nodes"]
                     and i["status"] == "recovered"], 90, "hot-spare incident recovered")[0]
        names = [s["name"] for s in inc["steps"]]
        assert "released" in names and "requeue" not in names, names
        assert victim not in {x for p in lab.client.partitions() if p.name == "train" for x in p.nodes}
        now = lab.client.job(job_id)
        assert now.state == "RUNNING" and now.restart_count == 0

    # Failed nodes the controller had quarantined by a relaunch went back to Slurm then (the job shrank);
    # 22.05 without accounting storage refuses every resize of a job after its first ("the DB index is
    # being set"): a node it refused stays in the job, unused by the step.
    releases = supervisor_events(ck, "release")
    now = lab.client.job(job_id)
    given_back = {x for r in releases if r["ok"] for x in _expand(r["nodes"])}
    assert all("DB index" in r["error"] for r in releases if not r["ok"]), releases
    assert not given_back & set(now.nodes) and len(now.nodes) == 4 - len(given_back)

    # no hot spare left: the third fault takes the requeue path and the job comes back at N + K
    wait_for(lambda: stepped_past(ck, 0, 2, start_of(ck, 0, 2)["step"] + 7), 120,
             "launch 2 past a checkpoint")
    victim = next(x for x in _expand(supervisor_events(ck, "launch")[-1]["nodes"]) if x != job.batch_host)
    fail_node(lab, victim)
    start = wait_for(lambda: start_of(ck, 1, 0), 180, "the requeued job's start")
    assert start["resumed_from"] and start["step"] >= 15
    back = wait_job(lab, job_id, "RUNNING", timeout=60)
    assert back.restart_count == 1 and len(back.nodes) == 4 and victim not in back.nodes
    assert supervisor_events(ck, "fallback")[0]["nodes"] == victim
    assert "hot spares used up" in supervisor_events(ck, "fallback")[0]["reason"]
    inc = wait_for(lambda: [i for i in incidents(lab, controller) if victim in i["nodes"]
                 and i["status"] == "recovered"], 60, "requeue incident recovered")[0]
    assert "requeue" in [s["name"] for s in inc["steps"]]


def test_a_fault_on_the_batch_host_is_requeued(lab, work, controller):
    job_id, ck = submit(lab, work, n=2, k=1)
    job = wait_job(lab, job_id, "RUNNING", timeout=180)
    wait_for(lambda: stepped_past(ck, 0, 0, 7), 120, "a checkpoint")
    fail_node(lab, job.batch_host)
    start = wait_for(lambda: start_of(ck, 1, 0), 180, "the requeued job's start")
    assert start["resumed_from"] and start["step"] >= 5
    back = wait_job(lab, job_id, "RUNNING", timeout=60)
    assert back.restart_count == 1 and len(back.nodes) == 3 and job.batch_host not in back.nodes
    inc = wait_for(lambda: [i for i in incidents(lab, controller) if job.batch_host in i["nodes"]
                 and i["status"] == "recovered"], 60, "incident recovered")[0]
    assert "requeue" in [s["name"] for s in inc["steps"]]


def test_a_partitioned_batch_host_does_not_lose_the_run(lab, work, controller):
    """Issue 40: the batch host of a hot-spare job stops answering (slurmd stopped: a network partition as
    slurmctld sees it) until Slurm marks it DOWN, then answers again. 22.05 kills the batch step (the
    supervisor) and ends the job FAILED, JobLaunchFailure: `--no-kill` skips its own requeue on node
    failure. 24.11 and later take the node out of the job and let the batch step run on (its supervisor
    goes to the requeue path); when the node answers, 24.11 SIGKILLs it (FAILED, RaisedSignal:9) and
    25.11 and 26.05 end it too but leave the job RUNNING without its batch host. The run was lost every way before
    the fix. The controller requeues it: it runs again from its newest checkpoint, off that node. Where
    the step runs on and nothing ends it, the supervisor requeues the job itself after FALLBACK_REQUEUE_S;
    where Slurm keeps the job whole, it must simply run on."""
    from slurm_ft.job.supervisor import FALLBACK_REQUEUE_S
    import os
    import signal
    job_id, ck = submit(lab, work, n=2, k=1)
    job = wait_job(lab, job_id, "RUNNING", timeout=180)
    wait_for(lambda: stepped_past(ck, 0, 0, 7), 120, "a checkpoint")
    host = job.batch_host
    pid = lab.cluster.kill_slurmd(host, signal.SIGSTOP)
    try:
        wait_for(lambda: lab.client.node(host).state == "DOWN", 180, f"Slurm marking {host} DOWN")
        down_t = time.time()
    finally:
        os.kill(pid, signal.SIGCONT)
    newest = max((e["step"] for e in read_log(str(ck)) if e["event"] == "ckpt" and e["t"] <= down_t), default=None)
    seen = []                                  # the job's last record: Slurm forgets it MinJobAge after it ends

    def going_on() -> bool:
        if start_of(ck, 1, 0):
            return True
        try:
            seen[:] = [lab.client.job(job_id)]
        except JobNotFound:
            return False
        return seen[0].restart_count == 0 and seen[0].running and stepped_since(ck, down_t + 30)
    try:
        wait_for(going_on, FALLBACK_REQUEUE_S + 240, "the run going on")
    except WaitTimeout:
        j = seen[0] if seen else None
        raise AssertionError("the run did not go on: " + (
            f"job {j.state} ({j.reason}) restart {j.restart_count} on {j.nodes} batch host {j.batch_host} "
            f"exit {j.exit_code}" if j else "no record") + f"; {host}: {lab.client.node(host)}") from None
    start = start_of(ck, 1, 0)
    if start is None:
        return                                                     # Slurm kept the job: it ran on
    assert start["resumed_from"] and start["step"] >= newest, (start, newest)   # never an older checkpoint
    back = wait_job(lab, job_id, "RUNNING", timeout=60)
    assert back.restart_count == 1
    mine = [i for i in incidents(lab, controller) if host in i["nodes"]]
    if mine:                                   # the controller's requeue (Slurm ended the job): the node stays out
        inc = wait_for(lambda: [i for i in incidents(lab, controller) if host in i["nodes"]
                     and i["status"] == "recovered"], 120, "incident recovered")[0]
        assert "requeue" in [s["name"] for s in inc["steps"]] and host not in back.nodes


def stepped_since(ck: Path, t: float) -> bool:
    return any(e["event"] == "step" and e["t"] >= t for e in read_log(str(ck)))


def _expand(expr: str) -> list:
    from slurm_ft.slurm.hostlist import expand
    return expand(expr)


def test_lab_demo_shows_the_hot_spare_path_without_a_requeue(lab, work):
    p = subprocess.run([PY, "-m", "slurm_ft", "lab", "demo", "--dir", str(lab.dir), "--hot-spares", "1",
                        "--step-time", "0.3", "--json", "--timeout", "300"],
                       capture_output=True, text=True, timeout=900, env=lab.env)
    if p.returncode != 0:
        job_out = lab.dir / "demo" / "job" / "job.out"
        print("== demo job.out", *(job_out.read_text(errors="replace").splitlines()[-60:] if job_out.exists() else []),
              sep="\n")
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert out["path"] == "hot-spare"
    assert out["failed_node"] != out["spare_node"] and out["spare_node"] in lab.train_nodes
    assert out["resumed_from_step"] >= 5 and out["fault_to_resume_s"] > 0
    names = [ph["name"] for ph in out["phases"]]
    assert {"fault", "drain", "step fault seen", "relaunched", "resumed", "first step after"} <= set(names)
    assert "requeue" not in names and "start now" not in names
    assert lab.client.node(out["failed_node"]).drained
