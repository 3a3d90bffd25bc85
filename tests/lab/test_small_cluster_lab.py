"""A small cluster with slurm-ft's default configuration (issue 22 items 2 and 5), on a lab of its own:
8 nodes + 2 spares, ports from $SLURM_FT_TEST_PORT_BASE + 500.

- The drain-rate breaker at its defaults (10 % of 10 nodes: a limit of 1 per hour): the fault whose drain
  used that one unit is recovered onto the spare (the controller held it for the breaker's hour), and
  the breaker still refuses the next drain.
- A user requeues their own fault-tolerant job while an admin's node is DOWN in the partition: the
  controller claims nothing (it drained the admin's node over their reason and moved spares), and the
  sweep, remediation on, neither rewrites nor reboots the admin's node.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import TEST_LAB_DIR, TEST_PORT_BASE, lab_session, work_dir
from ctl_helpers import PY, incidents, once, parts, slurm_ft, submit_ft, wait_job, xid_drain
from slurm_ft_lab.cluster import LabSpec
from slurm_ft_lab.waits import wait_for

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def slab():
    yield from lab_session(f"{TEST_LAB_DIR}-small", LabSpec(nodes=8, spares=2, gpus_per_node=8,
                                                            port_base=TEST_PORT_BASE + 500))


@pytest.fixture
def swork(slab, tmp_path):
    from slurm_ft_lab.inject import heal_all
    slab.reset()
    for f in Path(slab.dir, "nodes").glob("*/state.json"):    # an earlier test's node-local health state
        f.unlink(missing_ok=True)
    os.chmod(tmp_path, 0o755)
    yield tmp_path
    heal_all(slab.dir)
    slab.reset()


@pytest.fixture
def sjob(slab, request):
    """The job user's directory for their job's output (pytest's tmp_path is root's alone)."""
    d = work_dir(slab, request)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def default_config(lab, tmp_path: Path, **lifecycle) -> Path:
    """The lab's slurm-ft.yaml, untouched but for this test's state dir and metrics file (and `lifecycle`)."""
    data = yaml.safe_load(Path(lab.config_path).read_text()) or {}
    data["state_dir"] = str(tmp_path / "state")
    lc = data.setdefault("lifecycle", {})
    lc["metrics_path"] = str(tmp_path / "slurm_ft.prom")
    for key, value in lifecycle.items():
        lc[key] = {**lc.get(key, {}), **value} if isinstance(value, dict) else value
    assert "breaker_max_share" not in lc and "breaker_max_nodes" not in lc
    path = tmp_path / "slurm-ft.yaml"
    path.write_text(yaml.safe_dump(data))
    os.chmod(path, 0o644)
    return path


def test_the_fault_that_used_the_default_breakers_one_unit_is_recovered_onto_the_spare(slab, swork, sjob):
    cfg = default_config(slab, swork)
    jid = submit_ft(slab, sjob, len(slab.train_nodes))               # the whole partition: it needs the spare
    job = wait_job(slab, jid, timeout=180)                           # every prolog done
    wait_for(lambda: (sjob / f"job-{jid}.out").exists(), 120, "the batch script's start")
    bad = job.nodes[1]
    chk = xid_drain(slab, bad)                 # the node's own check finds the Xid 79 and drains the node
    node = slab.client.node(bad)
    assert chk.returncode == 1 and node.drained and "XID79" in node.reason, (chk.stdout, chk.stderr, node)
    breaker = json.loads(slurm_ft(slab, cfg, "breaker", "status", "--json", check=False).stdout)
    assert breaker["open"] and breaker["limit"] == 1, breaker          # that drain used the whole budget

    out = once(slab, cfg)
    incs = incidents(slab, cfg)
    assert len(incs) == 1, (incs, out.stdout, out.stderr[-3000:])
    [inc] = incs
    assert inc["status"] == "recovered" and inc["nodes"] == [bad], (inc, out.stdout, out.stderr)
    [spare] = inc["spares"]
    job = wait_job(slab, jid, restart_count=1)
    assert bad not in job.nodes and spare in job.nodes
    p = parts(slab)
    assert bad not in p["train"] and spare in p["train"] and spare not in p["spares"]

    # the breaker still stops the next drain: a second Xid is reported, its node stays in service
    other = next(n for n in job.nodes if n not in (job.batch_host, spare))
    chk = xid_drain(slab, other, gpu=5)
    assert not slab.client.node(other).drained, (chk.stdout, chk.stderr)
    assert "breaker" in chk.stdout + chk.stderr
    once(slab, cfg, budget=10)
    assert len(incidents(slab, cfg)) == 1 and slab.client.job(jid).restart_count == 1


def test_with_the_breaker_open_a_prolog_that_finds_an_xid79_lets_the_job_start(slab, swork, sjob):
    """Issue 40, decided: a prolog's fail is a drain (Slurm drains the node "Prolog error"), so it obeys the
    drain-rate breaker as every drain does. With the breaker open slurm-ft may be what misfires, fleet-wide;
    a job started on a bad GPU costs that job a restart, a misfiring check that drains at every job start
    costs the fleet. The prolog reports the fault and exits 0: the job starts, the node stays in service,
    the breaker still counts one."""
    from slurm_ft_lab.inject import inject
    cfg = default_config(slab, swork)
    first, other = slab.train_nodes[0], slab.train_nodes[1]
    chk = xid_drain(slab, first)
    assert slab.client.node(first).drained, (chk.stdout, chk.stderr)
    breaker = json.loads(slurm_ft(slab, cfg, "breaker", "status", "--json", check=False).stdout)
    assert breaker["open"] and breaker["limit"] == 1, breaker
    inject(slab.dir, other, "xid", gpu=2, value=79)               # a fresh fault no check has seen yet
    jid = submit_ft(slab, sjob, 1, "-w", other)
    job = wait_job(slab, jid, timeout=180)                        # its prolog ran, and let it start
    node = slab.client.node(other)
    assert job.nodes == (other,) and not node.drained and node.reason != "Prolog error", node
    breaker = json.loads(slurm_ft(slab, cfg, "breaker", "status", "--json", check=False).stdout)
    assert breaker["open"] and breaker["drains_in_window"] == 1, breaker
    # what the prolog's check said (the shim sends it to syslog): the fault seen, no verdict, and why
    env = dict(slab.env, SLURMD_NODENAME=other, SLURM_FT_CONFIG=str(slab.config_path),
               LD_LIBRARY_PATH=str(slab.dir / "lib"), SLURM_JOB_ID=str(jid))
    p = subprocess.run([PY, "-m", "slurm_ft", "check", "--level", "prolog", "--no-state"], capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode == 1 and "XID79" in p.stdout and "slurm-ft-verdict: FAIL" not in p.stdout, p
    assert "node not failed: drain-rate breaker open" in p.stderr, p.stderr


@pytest.mark.parametrize("reason", ["admin: DIMM swap, ticket 4711",
                                    "admin: XID79 twice this week, RMA ticket 4711"])   # a code remediation knows
def test_a_users_requeue_beside_an_admins_down_node_claims_moves_and_reboots_nothing(slab, swork, sjob, reason):
    cfg = default_config(slab, swork, spare_recheck_s=0, remediation={"mode": "on"})
    jid = submit_ft(slab, sjob, 2)
    job = wait_job(slab, jid, timeout=180)
    assert '"steps": []' in once(slab, cfg, budget=10).stdout        # the controller sees where it runs
    admins = next(n for n in slab.train_nodes if n not in job.nodes)
    subprocess.run(["scontrol", "update", f"NodeName={admins}", "State=DOWN", f"Reason={reason}"], check=True,
                   env=slab.env, timeout=30)                          # the admin's work, as root
    before = parts(slab)
    # the job's owner requeues it (no fault): `scontrol requeue` as that user
    owner = ["runuser", "-u", job.user, "--"] if job.user not in ("", "root") else []
    subprocess.run([*owner, "env", f"SLURM_CONF={slab.conf}", "scontrol", "requeue", str(jid)], check=True,
                   env=slab.env, timeout=30)
    # requeued: PENDING, or (>= 25.11, --requeue=expedite) running again at once
    wait_for(lambda: slab.client.job(jid).restart_count == 1, 60, "the owner's requeue")

    out = once(slab, cfg, budget=20)
    assert incidents(slab, cfg) == [], (out.stdout, out.stderr)
    assert parts(slab) == before                                       # no spare moved, nothing quarantined
    sweep = slurm_ft(slab, cfg, "sweep")
    node = slab.client.node(admins)
    assert node.reason == reason and node.state == "DOWN" and not node.drained, node   # untouched, not rebooted
    assert admins not in sweep.stdout, sweep.stdout
    reboots = Path(slab.dir, "log", "reboot.log")
    assert not reboots.exists() or admins not in reboots.read_text()
    breaker = json.loads(slurm_ft(slab, cfg, "breaker", "status", "--json", check=False).stdout)
    assert breaker["drains_in_window"] == 0, breaker                   # an admin's DOWN is not ours to count
