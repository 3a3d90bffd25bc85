"""A node shared by two jobs, on the real lab (issue 22 acceptance: shared node).

A fault-tolerant job holds 4 of a node's 8 GPUs with a live process on each (the fake driver lists it,
as NVML lists a rank); another job on the other 4 GPUs of that node ends. What a user checks: its
epilog (slurmd's, with Slurm's own SLURM_JOB_GPUS) fails nothing, the node stays in service, the
controller opens no incident and the fault-tolerant job runs on undisturbed. Then an Xid 79 on one of
the fault-tolerant job's GPUs: the node drains and the controller recovers the job onto a spare.

The fault-tolerant job is the lab user's, the neighbour root's (the node's slurmd runs every epilog as
root in any case): the neighbour's epilog leaves the other job's processes alone because they sit on
GPUs Slurm did not give the neighbour.
"""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from ctl_helpers import PY, controller_config, incidents, once, parts, slurm_ft, wait_job, xid_drain

pytestmark = pytest.mark.lab


@pytest.fixture
def cfg(lab, tmp_path):
    lab.reset()
    os.chmod(tmp_path, 0o755)
    yield controller_config(lab, tmp_path)
    lab.reset()


def _wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s: {what}")


def _epilog_every_gpu(lab, node: str) -> dict:
    """The epilog check as it judged before issue 22 (no job GPUs given): what the node shows."""
    env = dict(lab.env, SLURMD_NODENAME=node, SLURM_FT_CONFIG=str(lab.config_path), SLURM_JOB_ID="1",
               LD_LIBRARY_PATH=str(lab.dir / "lib"))
    p = subprocess.run([PY, "-m", "slurm_ft", "check", "--level", "epilog", "--local", "--no-state", "--json"],
                       capture_output=True, text=True, timeout=120, env=env)
    return json.loads(p.stdout)


def test_a_neighbour_ending_leaves_the_ft_job_alone_and_an_xid_on_its_gpu_recovers_it(lab, cfg, work, tmp_path):
    from slurm_ft_lab.inject import inject
    ck, info = lab.give(work / "ckpt"), work / "ft.info"       # the job user's, as their job writes there
    p = slurm_ft(lab, None, "sbatch", "--ckpt-dir", str(ck), "-N", "1", "-n", "1", "--gres=gpu:4",
                 "-o", str(work / "ft-%j.out"), "/bin/sh", "-c", f'echo "$$ $SLURM_JOB_GPUS" > {info}; exec sleep 3600')
    ft = int(p.stdout.split()[-1])
    node = wait_job(lab, ft).nodes[0]
    pid, gpus = _wait(lambda: info.exists() and info.read_text().split(), 60, "the FT job's pid and GPUs")
    ft_gpus = [int(g) for g in gpus.split(",")]
    assert len(ft_gpus) == 4
    for g in ft_gpus:                                   # the job's rank holds each of its GPUs
        inject(lab.dir, node, "proc", gpu=g, value=int(pid), log=False)
    seen = [f for f in _epilog_every_gpu(lab, node)["findings"] if f["code"] == "GPU_PROC_LEFT"]
    assert sorted(f["gpu"] for f in seen) == ft_gpus, "the node shows the FT job's processes to any epilog"
    # the node's HealthCheckProgram, as slurmd runs it every interval: it saves the fleet view with which
    # an epilog knows the breaker has room (without one an epilog fails no node, whatever it finds)
    subprocess.run([str(lab.dir / "hooks" / "healthcheck")], timeout=120, check=True,
                   env=dict(lab.env, SLURMD_NODENAME=node, SLURM_FT_LAB_DIR=str(lab.dir)))

    nb = subprocess.run(["sbatch", "--parsable", "-w", node, "-n", "1", "--gres=gpu:4", "-o",
                         str(tmp_path / "nb-%j.out"), "--wrap", "sleep 3"], capture_output=True, text=True,
                        timeout=30, env=lab.env)
    assert nb.returncode == 0, nb.stderr
    neighbour = int(nb.stdout.strip().split(";")[0])
    wait_job(lab, neighbour, "COMPLETED", timeout=120)
    _wait(lambda: "COMPLETING" not in lab.client.node(node).flags and lab.client.node(node).state != "COMPLETING",
          60, f"{node} done with job {neighbour} (its epilog ran)")
    n = lab.client.node(node)
    assert not n.drained and n.reason == "", (n.state, n.flags, n.reason)
    out = once(lab, cfg)
    assert '"steps": []' in out.stdout and incidents(lab, cfg) == []
    job = lab.client.job(ft)
    assert job.state == "RUNNING" and job.restart_count == 0 and job.nodes == (node,)

    r = xid_drain(lab, node, gpu=ft_gpus[1])           # Xid 79 on one of the FT job's GPUs, the node's check
    assert lab.client.node(node).drained and "XID79" in lab.client.node(node).reason, r.stdout + r.stderr
    pool = set(lab.spare_nodes)
    once(lab, cfg)
    job = wait_job(lab, ft, restart_count=1)
    assert node not in job.nodes
    [inc] = incidents(lab, cfg)
    assert inc["status"] == "recovered" and inc["job_id"] == ft and inc["nodes"] == [node]
    [spare] = inc["spares"]
    assert spare in pool and node not in parts(lab)["train"]
