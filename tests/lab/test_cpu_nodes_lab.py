"""Mixed clusters (issue 39 item 3), on a lab of its own: one GPU node beside one CPU node (partition `cpu`:
no gpu GRES in Slurm, no NVML library in its hooks), ports from $SLURM_FT_TEST_PORT_BASE + 800.

- The CPU node's HealthCheckProgram (run by its slurmd as it starts), and its prolog and epilog (a job
  in `cpu`) pass: its GPU checks are skipped in one line, nothing drains.
- The GPU node whose driver does not load still fails its health check and drains (NVML_INIT).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TEST_LAB_DIR, TEST_PORT_BASE, lab_session, work_dir
from slurm_ft_lab import inject as inj
from slurm_ft_lab.cluster import LabSpec
from slurm_ft_lab.waits import wait_for

pytestmark = pytest.mark.lab

SKIPPED = "no GPUs expected on cpu001 (Slurm gives it no gpu GRES): GPU checks skipped"


@pytest.fixture(scope="module")
def mlab():
    yield from lab_session(f"{TEST_LAB_DIR}-mixed", LabSpec(nodes=1, spares=0, cpu_nodes=1, gpus_per_node=8,
                                                            port_base=TEST_PORT_BASE + 800))


@pytest.fixture
def mixed(mlab):
    mlab.reset()
    for f in Path(mlab.dir, "nodes").glob("*/state.json"):    # an earlier test's node-local health state
        f.unlink(missing_ok=True)
    yield mlab
    inj.heal_all(mlab.dir)
    mlab.reset()


def _state(lab, node: str) -> dict:
    path = Path(lab.dir, "nodes", node, "state.json")
    return json.loads(path.read_text()) if path.exists() else {}


def _drained(lab) -> dict:
    return {n.name: n.reason for n in lab.client.nodes() if n.drained or n.state in ("DOWN", "FAIL")}


def test_a_cpu_nodes_health_check_and_job_hooks_pass_and_nothing_drains(mixed, request):
    lab = mixed
    node = lab.client.node("cpu001")
    assert "gpu" not in (node.gres or ""), node
    # what the check says there: the hook's environment, without the lab's fake libnvidia-ml.so.1
    env = {k: v for k, v in lab.env.items() if k != "LD_LIBRARY_PATH"}
    p = subprocess.run([sys.executable, "-m", "slurm_ft", "check", "--level", "quick", "--local", "--no-state",
                        "--node", "cpu001"], capture_output=True, text=True, timeout=120,
                       env=dict(env, SLURMD_NODENAME="cpu001"))
    assert p.returncode == 0 and SKIPPED in p.stdout, (p.stdout, p.stderr)
    assert "NVML_INIT" not in p.stdout and "ERR" not in p.stdout, p.stdout

    for n in ("cpu001", "gpu001"):             # the HealthCheckProgram of each, as slurmd runs it
        subprocess.run([str(lab.dir / "hooks" / "healthcheck")], env=dict(lab.env, SLURMD_NODENAME=n), timeout=120,
                       check=True)
    assert _drained(lab) == {}

    # slurmd runs HealthCheckProgram as it starts: the node's state file records that quick check
    t0 = time.time()
    lab.cluster.kill_slurmd("cpu001")
    wait_for(lambda: not any(d.get("node") == "cpu001" and d["alive"] for d in lab.cluster.daemons()), 30,
             "cpu001's slurmd gone")
    lab.cluster.start_slurmds()
    wait_for(lambda: (_state(lab, "cpu001").get("last", {}).get("quick") or {}).get("healthy") is True
             and (_state(lab, "cpu001").get("updated") or 0) >= t0 - 1, 90, "cpu001's health check at slurmd's start")
    lab.cluster.wait_idle(60)

    # a job in the cpu partition: Slurm runs its prolog and epilog there (PrologFlags=Alloc)
    out = work_dir(lab, request)
    sub = lab.run_as(["sbatch", "--parsable", "-p", "cpu", "-w", "cpu001", "-o", str(out / "job.out"),
                      "--wrap", "hostname"])
    assert sub.returncode == 0, sub.stderr
    job_id = int(sub.stdout.strip().split(";")[0])
    # done, or held after a failed prolog (Slurm drains the node then): either ends the wait
    wait_for(lambda: lab.client.job(job_id).state in ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL")
             or bool(_drained(lab)), 90, f"job {job_id} done")
    assert lab.client.job(job_id).state == "COMPLETED", lab.client.job(job_id)
    state = _state(lab, "cpu001")
    assert state["last"]["prolog"]["healthy"] and state["last"]["epilog"]["healthy"], state
    assert state["active"] == [], state
    assert _drained(lab) == {}


def test_a_gpu_node_whose_driver_did_not_load_still_drains(mixed):
    lab = mixed
    inj.inject(lab.dir, "gpu001", "driver_unloaded", log=False)
    for node in ("gpu001", "cpu001"):          # the HealthCheckProgram of each, as slurmd runs it
        e = dict(lab.env, SLURMD_NODENAME=node)
        subprocess.run([str(lab.dir / "hooks" / "healthcheck")], env=e, timeout=120, check=True)
    drained = _drained(lab)
    assert list(drained) == ["gpu001"] and drained["gpu001"].startswith("slurm-ft: NVML_INIT"), drained
