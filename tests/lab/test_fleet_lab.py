"""Fleet scale (issue 14): a fault-tolerant job on 2,048 nodes of a 2,048 + 64 node lab (16,896 fake
GPUs), an XID 79 on one of its nodes, recovered onto a spare, and nothing else touched.

Its own lab (the session lab has 64 + 4 nodes): $SLURM_FT_TEST_LAB_DIR-fleet, ports from
$SLURM_FT_TEST_FLEET_PORT_BASE (default $SLURM_FT_TEST_PORT_BASE + 1000, or just below the kernel's
ephemeral port range when that would reach into it; 2,113 of them), brought up with the lab-only fast
hooks and taken down at the end. Marked slow: not in the default `pytest -q tests` (setup.cfg); run it
with `pytest -m slow tests/lab/test_fleet_lab.py`. Several minutes on two cores."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import TEST_LAB_DIR, TEST_PORT_BASE
from ctl_helpers import PY
from slurm_ft.errors import EnvironmentProblem
from slurm_ft_lab.cluster import INSTALL_HINT, Lab, LabSpec, check_environment, ephemeral_port_range
from slurm_ft.slurm.client import SlurmClient
from slurm_ft_lab.waits import wait_job_state

pytestmark = [pytest.mark.lab, pytest.mark.slow]

FLEET_PORTS = 2048 + 64 + 1          # slurmctld and one per slurmd


def _fleet_port_base() -> int:
    """$SLURM_FT_TEST_FLEET_PORT_BASE, else $SLURM_FT_TEST_PORT_BASE + 1000, moved down below the kernel's
    ephemeral range when it would reach into it (lab up refuses such a range; it never changes the host's
    net.ipv4 settings). E.g. session lab 28000, ephemeral from 32768: 29000..31112."""
    if "SLURM_FT_TEST_FLEET_PORT_BASE" in os.environ:
        return int(os.environ["SLURM_FT_TEST_FLEET_PORT_BASE"])
    base = TEST_PORT_BASE + 1000
    rng = ephemeral_port_range()
    if rng is not None and base <= rng[1] and base + FLEET_PORTS > rng[0]:
        base = rng[0] - FLEET_PORTS - 16
    return base


FLEET_PORT_BASE = _fleet_port_base()


@pytest.fixture(scope="module")
def fleet():
    try:
        check_environment()
    except EnvironmentProblem as exc:
        pytest.fail(f"the lab tests need Slurm and munge, as root: {exc} (install: {INSTALL_HINT})", pytrace=False)
    session = range(TEST_PORT_BASE, TEST_PORT_BASE + 70)      # the session lab's 64 + 4 nodes
    if FLEET_PORT_BASE < 1024 or (FLEET_PORT_BASE < session.stop and FLEET_PORT_BASE + FLEET_PORTS > session.start):
        pytest.fail(f"no room for {FLEET_PORTS} lab ports from {FLEET_PORT_BASE} below the ephemeral range next to "
                    f"the session lab's {session.start}..{session.stop - 1}: set SLURM_FT_TEST_FLEET_PORT_BASE",
                    pytrace=False)
    lab = Lab(TEST_LAB_DIR + "-fleet", LabSpec(nodes=2048, spares=64, port_base=FLEET_PORT_BASE, fast_hooks=True))
    lab.down(quiet=True)
    lab.up(timeout=900)
    try:
        yield lab
    finally:
        lab.down()


def _slurm_ft(lab, config, *args, node=None, timeout=600):
    env = lab.env()
    env["SLURM_FT_CONFIG"] = str(config)
    if node:
        env.update({"SLURMD_NODENAME": node, "SLURM_FT_LAB_DIR": str(lab.dir), "LD_LIBRARY_PATH": str(lab.dir / "lib")})
    return subprocess.run([PY, "-m", "slurm_ft", *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_xid79_on_one_node_of_a_2048_node_job_is_recovered_onto_a_spare_and_nothing_else(fleet, tmp_path):
    data = yaml.safe_load(Path(fleet.config_path).read_text()) or {}
    data["state_dir"] = str(tmp_path / "state")
    config = tmp_path / "slurm-ft.yaml"
    config.write_text(yaml.safe_dump(data))
    os.chmod(config, 0o644)
    client = SlurmClient(env={"SLURM_CONF": str(fleet.conf)})
    spec = fleet.spec
    work = fleet.work_dir("fleet-test")            # the job user's, as on a cluster; root's config in tmp_path
    p = subprocess.run(fleet.user_argv([PY, "-m", "slurm_ft", "sbatch", "--ckpt-dir", str(work / "ckpt"), "-N", "2048",
                                        "-o", str(work / "job-%j.out"), "/bin/sleep", "3600"]),
                       capture_output=True, text=True, timeout=600, env=fleet.user_env(), cwd=str(work))
    assert p.returncode == 0, p.stderr
    jid = int(p.stdout.split()[-1])
    job = wait_job_state(client, jid, "RUNNING", timeout=600)
    assert len(job.nodes) == 2048
    # RUNNING comes with the allocation (PrologFlags=Alloc); the batch script starts, and its output
    # file appears, once all 2,048 prologs passed: only then is the fault one of a running job
    out = work / f"job-{jid}.out"
    deadline = time.monotonic() + 600
    while not out.exists() or client.job(jid).reason == "Prolog":   # a slow node's prolog may still run
        assert time.monotonic() < deadline, f"job {jid} did not start: {client.job(jid)}"
        time.sleep(1)
    # the controller, running as deployed, has seen where the job runs (a run it never saw claims nothing)
    p = _slurm_ft(fleet, config, "controller", "once", "--json", "--budget", "120")
    assert p.returncode in (0, 3), p.stderr

    bad = job.nodes[1500]
    assert _slurm_ft(fleet, config, "lab", "inject", bad, "--gpu", "3", "--xid", "79", "--dir", str(fleet.dir)).returncode == 0
    p = _slurm_ft(fleet, config, "check", "--level", "quick", "--drain", "--json", node=bad)   # as `watch` would
    assert p.returncode == 1 and client.node(bad).reason.startswith("slurm-ft: XID79"), p.stdout + p.stderr

    deadline = time.monotonic() + 900
    incs: list = []
    cycles = []                     # what each controller cycle said: the failure message's evidence
    while time.monotonic() < deadline:
        p = _slurm_ft(fleet, config, "controller", "once", "--json", "--budget", "120")
        # 3: a Slurm read failed (a slurmctld busy with 2,048 epilogs times out); the next cycle goes on
        assert p.returncode in (0, 3), p.stderr
        cycles.append(f"rc {p.returncode}: {p.stdout.strip()[-400:]} {p.stderr.strip()[-400:]}")
        incs = json.loads(_slurm_ft(fleet, config, "incidents", "--json").stdout)
        if incs and incs[0]["status"] == "recovered":
            break
        time.sleep(1)
    assert [(i["status"], i["nodes"]) for i in incs] == [("recovered", [bad])], (incs, cycles[:3], cycles[-3:])
    spare = incs[0]["spares"]
    assert len(spare) == 1 and spare[0] in spec.spare_nodes

    job = client.job(jid)
    assert job.state == "RUNNING" and job.restart_count == 1 and len(job.nodes) == 2048
    assert bad not in job.nodes and spare[0] in job.nodes
    parts = {pt.name: set(pt.nodes) for pt in client.partitions()}
    assert parts["train"] == set(spec.train_nodes) - {bad} | set(spare)
    assert parts["spares"] == set(spec.spare_nodes) - set(spare)
    # no other node drained (by us or by Slurm); a slurmd slow to answer under 2,048 epilogs is not ours
    touched = [f"{n.name} {n.reason}" for n in client.nodes() if n.name != bad and n.drained]
    assert touched == [], f"other nodes drained: {touched[:10]}"
