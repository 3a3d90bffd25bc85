"""The toy trainer as a real 4-node Slurm job: steps advance, checkpoints complete, a requeue resumes from
the latest complete checkpoint, and a fatal Xid on one node kills that rank while the others wait for the
collective timeout (as with NCCL)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from slurm_ft_lab.inject import inject
from slurm_ft_lab.trainer import read_log
from slurm_ft.job import ckpt
from slurm_ft_lab.waits import start_now, wait_for, wait_job_state
from tests.lab.ctl_helpers import wait_event

pytestmark = pytest.mark.lab

PY = sys.executable
NODES = 4


def submit_trainer(lab, work: Path, *trainer_args: str, ft_args=(), nodes: int = NODES) -> int:
    ck = work / "ck"
    # the task count is srun's (one per node), not fixed in sbatch: an elastic shrink can change it
    argv = [PY, "-m", "slurm_ft", "sbatch", "--parsable", "--ckpt-dir", str(ck), *ft_args, "-N", str(nodes),
            "--gres=gpu:8", "--open-mode=append", "-o", str(work / "job.out"),
            "srun", "--ntasks-per-node=1", PY, "-m", "slurm_ft_lab.trainer", "--ckpt-dir", str(ck),
            "--resume", "{ckpt}", *trainer_args]
    p = lab.run_as(argv, cwd=work, timeout=60)
    assert p.returncode == 0, p.stderr
    return int(p.stdout)


# Generous: the lab shares two cores with other labs, and every job start runs the prolog health checks.
START_S = 180


def test_trainer_checkpoints_and_resumes_after_requeue(lab, work):
    ck = work / "ck"
    job_id = submit_trainer(lab, work, "--steps", "1000", "--step-time", "0.2", "--ckpt-every", "5",
                            "--collective-timeout", "60")
    start = wait_event(ck, lambda e: e["event"] == "start", START_S, "start", lab, job_id)
    assert start["world"] == NODES and start["step"] == 0 and start["resumed_from"] is None
    wait_event(ck, lambda e: e["event"] == "ckpt" and e["step"] >= 10, 60, "checkpoint at step 10", lab, job_id)
    job = lab.client.job(job_id)
    assert job.state == "RUNNING" and len(job.nodes) == NODES

    # a checkpoint is only ever COMPLETE with every rank's shard in it
    latest = ckpt.latest(str(ck), verify=True)
    assert latest.layout == "slurm-ft" and latest.step % 5 == 0
    assert sorted(os.listdir(latest.path)) == ["COMPLETE"] + [f"rank_{r:05d}" for r in range(NODES)]

    t_requeue = time.time()
    lab.client.requeue(job_id)
    # Slurm 22.05: a batch launch whose credential is from the same second as the requeue's kill is
    # refused on the node ("Job N already killed, do not launch batch job") and the job FAILS. Start
    # it in the next second at the earliest.
    time.sleep(max(0.0, int(time.time()) + 1.05 - time.time()))
    start_now(lab.client, job_id)
    resumed = wait_event(ck, lambda e: e["event"] == "start" and e["restart"] == 1, START_S, "start after requeue",
                         lab, job_id)
    last_before = max(e["step"] for e in read_log(str(ck)) if e["event"] == "step" and e["restart"] == 0)
    newest_ckpt = max(e["step"] for e in read_log(str(ck)) if e["event"] == "ckpt" and e["restart"] == 0)
    assert resumed["step"] == newest_ckpt                      # the latest complete checkpoint, not older
    assert resumed["resumed_from"] == os.path.join(str(ck), ckpt.step_name(newest_ckpt))
    assert resumed["state_ok"]                                 # every rank's state came back intact
    assert last_before - resumed["step"] < 5 + 2               # lost at most the checkpoint interval (+ in flight)
    first = wait_event(ck, lambda e: e["event"] == "step" and e["restart"] == 1, 60, "first step after resume")
    assert first["step"] == resumed["step"] + 1
    assert first["t"] - t_requeue < START_S      # loose on a shared 2-core lab; the controller's bench times it
    assert lab.client.job(job_id).restart_count == 1


def test_fatal_xid_kills_one_rank_and_the_others_hit_the_collective_timeout(lab, work):
    ck = work / "ck"
    job_id = submit_trainer(lab, work, "--steps", "1000", "--step-time", "0.2", "--ckpt-every", "5",
                            "--collective-timeout", "8")
    wait_event(ck, lambda e: e["event"] == "step" and e["step"] >= 7, START_S, "step 7", lab, job_id)
    victim = lab.client.job(job_id).nodes[2]
    inject(lab.dir, victim, "xid", gpu=5, value=31)            # an application's Xid: not a GPU fault
    inject(lab.dir, victim, "xid", gpu=3, value=79)            # fallen off the bus
    fault = wait_event(ck, lambda e: e["event"] == "fault", 30, "fault")
    assert fault["node"] == victim and fault["rank"] == 2 and fault["reason"] == "Xid 79 on GPU 3"
    timeout = wait_event(ck, lambda e: e["event"] == "timeout", 60, "collective timeout")
    # nobody noticed before the timeout (rank 0 entered the barrier up to one step before the fault)
    assert 8 - 0.2 <= timeout["t"] - fault["t"] < 8 + 20
    if lab.client.requeue_option() == "--requeue=expedite":
        # Slurm >= 25.11 requeues an expedite job that fails by itself (slurm-ft's controller is not running)
        wait_for(lambda: lab.client.job(job_id).restart_count >= 1, 60, "Slurm's own requeue")
    else:
        job = wait_job_state(lab.client, job_id, ["FAILED", "COMPLETED"], timeout=60)
        assert job.state == "FAILED"                           # Slurm alone does not bring it back
    steps = [e["step"] for e in read_log(str(ck)) if e["event"] == "step" and e["restart"] == 0]
    assert max(steps) == fault["step"] - 1                     # no step completed after the fault
    assert ckpt.latest(str(ck)).step == max(s for s in steps if s % 5 == 0)


def test_hang_mode_keeps_the_faulty_rank_alive(lab, work):
    ck = work / "ck"
    job_id = submit_trainer(lab, work, "--steps", "1000", "--step-time", "0.2", "--on-fault", "hang",
                            "--collective-timeout", "600")
    wait_event(ck, lambda e: e["event"] == "step" and e["step"] >= 2, START_S, "step 2", lab, job_id)
    victim = lab.client.job(job_id).nodes[1]
    inject(lab.dir, victim, "gpu_lost", gpu=0)
    fault = wait_event(ck, lambda e: e["event"] == "fault", 30, "fault")
    assert fault["action"] == "hang" and fault["reason"] in ("Xid 79 on GPU 0", "GPU 0 is lost (fallen off the bus)")
    time.sleep(3)
    steps = [e["step"] for e in read_log(str(ck)) if e["event"] == "step"]
    assert lab.client.job(job_id).state == "RUNNING"           # hung, not failed: only a controller helps
    time.sleep(1)
    assert [e["step"] for e in read_log(str(ck)) if e["event"] == "step"] == steps   # and no progress


def test_elastic_job_resumes_on_fewer_nodes(lab, work):
    """What the controller does for a --min-nodes job when no spare is left: requeue at a smaller size."""
    ck = work / "ck"
    job_id = submit_trainer(lab, work, "--steps", "1000", "--step-time", "0.2", "--ckpt-every", "5",
                            "--collective-timeout", "60", ft_args=("--min-nodes", "2"))
    wait_event(ck, lambda e: e["event"] == "ckpt" and e["step"] >= 5, START_S, "checkpoint", lab, job_id)
    lab.client.requeue(job_id, hold=True)   # held: an expedited requeue (>= 25.11) would start it again at once
    wait_for(lambda: (lambda j: j.state == "PENDING" and j.held)(lab.client.job(job_id)),
             30, "requeued job held")
    lab.client.update_job(job_id, NumNodes=str(NODES - 1))
    lab.client.release(job_id)
    time.sleep(max(0.0, int(time.time()) + 1.05 - time.time()))   # see test_trainer_checkpoints_and_resumes...
    start_now(lab.client, job_id)
    resumed = wait_event(ck, lambda e: e["event"] == "start" and e["restart"] == 1, START_S, "start after shrink",
                         lab, job_id)
    assert resumed["world"] == NODES - 1 and resumed["step"] >= 5 and resumed["state_ok"]
    assert len(lab.client.job(job_id).nodes) == NODES - 1
    wait_event(ck, lambda e: e["event"] == "ckpt" and e["restart"] == 1, 60, "checkpoint after the shrink")
    latest = ckpt.latest(str(ck), verify=True)
    assert sorted(os.listdir(latest.path)) == ["COMPLETE"] + [f"rank_{r:05d}" for r in range(NODES - 1)]


def test_trainer_at_the_full_size_of_the_lab(lab, work):
    """One rank on every train node (64 in the default lab): all meet, every shard lands in the checkpoint."""
    ck = work / "ck"
    n = len(lab.train_nodes)
    job_id = submit_trainer(lab, work, "--steps", "12", "--step-time", "0.3", "--ckpt-every", "5",
                            "--collective-timeout", "120", nodes=n)
    start = wait_event(ck, lambda e: e["event"] == "start", START_S, "start", lab, job_id)
    assert start["world"] == n
    done = wait_event(ck, lambda e: e["event"] in ("done", "timeout"), 120, "end", lab, job_id)
    assert done["event"] == "done"
    latest = ckpt.latest(str(ck), verify=True)
    assert latest.step == 10 and len(os.listdir(latest.path)) == n + 1
    assert [e["step"] for e in read_log(str(ck)) if e["event"] == "step"] == list(range(1, 13))
    assert wait_job_state(lab.client, job_id, ["COMPLETED"], timeout=120).state == "COMPLETED"
