"""Node lifecycle against the real lab: the lap, the lemon, the breaker, two sweeps at once.

Faults are injected into the fake NVML and found by the real `slurm-ft check --drain` (what the
HealthCheckProgram runs); recoveries are the real controller's; validations are real batch jobs in
maintenance reservations. Run with SLURM_FT_TEST_LAB_DIR / SLURM_FT_TEST_PORT_BASE for a lab of your own.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from ctl_helpers import slurm_ft
from slurm_ft_lab import inject as inj

pytestmark = pytest.mark.lab

PY = sys.executable
HOLD = "lab test: held back"        # an admin's drain: the controller must not take these spares


def make_config(lab, tmp_path: Path, *, own_state: bool = True, **lifecycle) -> Path:
    """The lab's slurm-ft.yaml with this test's state dir, metrics file and lifecycle settings."""
    data = yaml.safe_load(Path(lab.config_path).read_text()) or {}
    if own_state:
        data["state_dir"] = str(tmp_path / "state")
    lc = {
        # the validation job runs `check` with the lab's fake libnvidia-ml.so.1
        "validate_command": ["env", f"LD_LIBRARY_PATH={lab.dir}/lib", PY, "-m", "slurm_ft"],
        "quarantine_grace_s": 0, "spare_recheck_s": 0, "validate_wait_s": 120,
        "metrics_path": str(tmp_path / "metrics" / "slurm_ft.prom"), "breaker_max_share": 0.5,
    }
    lc.update(lifecycle)
    data.setdefault("lifecycle", {}).update(lc)
    data.setdefault("controller", {})["poll_s"] = 0.05
    path = tmp_path / "slurm-ft.yaml"
    path.write_text(yaml.safe_dump(data))
    os.chmod(path, 0o644)
    return path


def ft(lab, cfg, *args, env=None, timeout=180, ok=True) -> subprocess.CompletedProcess:
    """`slurm-ft ARGS` as ctl_helpers.slurm_ft runs it: `sbatch` as the lab's job user, the rest as root."""
    return slurm_ft(lab, cfg, *args, env=env, timeout=timeout, check=ok)


def detect(lab, cfg, node: str) -> subprocess.CompletedProcess:
    """The node's health check, as its HealthCheckProgram runs it (exit 1 = a fail finding)."""
    return ft(lab, cfg, "check", "--level", "quick", "--drain", "--node", node, ok=False,
              env={"LD_LIBRARY_PATH": f"{lab.dir}/lib", "SLURMD_NODENAME": node})


def wait_running(lab, job_id: int, timeout: float = 60.0, without=None, with_=None, marker=None):
    deadline = time.monotonic() + timeout
    job = None
    while time.monotonic() < deadline:
        job = lab.client.job(job_id)
        if job.state == "RUNNING" and (without is None or without not in job.nodes) \
                and (with_ is None or with_ in job.nodes) and (marker is None or marker.exists()):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not running as expected within {timeout} s: {job}")


def partitions(lab) -> dict:
    return {p.name: set(p.nodes) for p in lab.client.partitions()}


def history(lab, cfg, node: str) -> list:
    return [h["event"] for h in json.loads(ft(lab, cfg, "node", "history", node, "--json").stdout)["history"]]


def _forget_health_state(lab) -> None:
    """Node-local health state of earlier tests (a drain it believes is its own, acknowledged Xids)
    must not decide this test's checks: the first check after a reset would acknowledge new Xids."""
    for f in Path(lab.dir, "nodes").glob("*/state.json"):
        f.unlink(missing_ok=True)


@pytest.fixture
def clean(lab):
    lab.reset()
    inj.heal_all(lab.dir)
    _forget_health_state(lab)
    yield lab
    for job in lab.client.jobs():
        if job.state in ("PENDING", "RUNNING", "CONFIGURING"):
            lab.client.cancel(job.job_id)
    for r in lab.client.reservations():
        if r.name.startswith("slurm-ft-maint-"):
            lab.client.delete_reservation(r.name)
    inj.heal_all(lab.dir)
    lab.reset()
    _forget_health_state(lab)


def test_full_lap_fault_recovery_quarantine_repair_validate_and_reuse(clean, tmp_path, work):
    lab = clean
    cfg = make_config(lab, tmp_path, pool_target=1)
    spare, *others = lab.spare_nodes
    lab.client.drain(others, HOLD)                # only `spare` is a healthy spare: the swaps are predictable
    lab.client.set_partition_nodes("train", lab.train_nodes[:4])   # a full partition: a restart needs the spare
    assert ft(lab, cfg, "sweep").stdout == ""     # first sweep: records the spares, says nothing
    started = work / "started"                   # written by the batch script: prologs are done
    job_id = int(ft(lab, None, "sbatch", "-N", "4", "-o", str(work / "job-%j.out"),
                    "/bin/sh", "-c", f"touch {started} && exec sleep 3600").stdout.split()[-1])
    job = wait_running(lab, job_id, marker=started)
    bad = job.nodes[1]

    # fault -> recovery on the spare
    inj.inject(lab.dir, bad, "xid", gpu=2, value=79)
    assert detect(lab, cfg, bad).returncode == 1
    assert lab.client.node(bad).reason.startswith("slurm-ft: XID79 gpu2")
    started.unlink()
    ft(lab, cfg, "controller", "once", "--budget", "60")
    job = wait_running(lab, job_id, without=bad, with_=spare, marker=started)

    # the sweep records it: the failed node quarantined, the spare in service, the pool short
    out = ft(lab, cfg, "sweep").stdout
    assert f"{bad}: in_service -> failed (slurm-ft: XID79 gpu2" in out
    assert f"{bad}: failed -> quarantined" in out
    assert f"{spare}: spare -> in_service" in out
    assert "ALERT: spare pool short" in out
    assert bad not in set().union(*partitions(lab).values())
    assert lab.client.node(bad).drained
    assert ft(lab, cfg, "sweep").stdout == ""     # nothing changed: silent

    # repair -> the sweep validates it in a maintenance reservation -> back in spares
    inj.heal(lab.dir, bad)                        # heal also empties the node's health state, as a reboot
    ft(lab, cfg, "node", "repaired", bad, "--note", "reseated GPU 2")
    out = ft(lab, cfg, "sweep").stdout
    assert f"{bad}: repaired -> validating" in out and f"{bad}: validating -> spare" in out, out
    node = lab.client.node(bad)
    assert node.partitions == ("spares",) and not node.drained
    assert not [r for r in lab.client.reservations() if r.name.startswith("slurm-ft-maint-")]

    # a second fault: its recovery takes the node we returned
    second = next(n for n in job.nodes if n != spare)
    inj.inject(lab.dir, second, "xid", gpu=0, value=79)
    assert detect(lab, cfg, second).returncode == 1
    ft(lab, cfg, "controller", "once", "--budget", "60")
    wait_running(lab, job_id, without=second, with_=bad)
    out = ft(lab, cfg, "sweep").stdout
    assert f"{bad}: spare -> in_service" in out
    assert history(lab, cfg, bad) == ["fault", "quarantine", "repaired", "validate", "pass", "swap_in"]
    metrics = (tmp_path / "metrics" / "slurm_ft.prom").read_text()
    assert 'slurm_ft_nodes{state="quarantined"} 1' in metrics     # `second`, waiting for its repair
    assert "slurm_ft_recovery_phase_seconds_count" in metrics


def test_lemon_ends_on_the_rma_list(clean, tmp_path):
    lab = clean
    cfg = make_config(lab, tmp_path)
    lemon = lab.train_nodes[-1]
    inj.inject(lab.dir, lemon, "ecc_dbe", gpu=5)                   # stays until healed: every check fails
    assert detect(lab, cfg, lemon).returncode == 1
    out = ft(lab, cfg, "sweep").stdout
    assert f"{lemon}: failed -> quarantined" in out                 # incident 1
    ft(lab, cfg, "node", "repaired", lemon)
    out = ft(lab, cfg, "sweep").stdout
    # incident 2: the validation job fails (or our prolog fails it first: Slurm cancels the job)
    assert f"{lemon}: validating -> quarantined (" in out, out
    ft(lab, cfg, "node", "repaired", lemon)
    out = ft(lab, cfg, "sweep").stdout
    assert f"{lemon}: validating -> rma" in out, out                                      # incident 3
    # the sweep's line is cut at 100 characters (the verdict names the findings): the history has it all
    last = json.loads(ft(lab, cfg, "node", "history", lemon, "--json").stdout)["history"][-1]
    assert last["to"] == "rma" and "lemon: 3 incidents" in last["cause"], last
    assert f"ALERT: {lemon}: on the RMA list" in out
    rma = json.loads(ft(lab, cfg, "node", "list", "--state", "rma", "--json").stdout)
    assert [r["node"] for r in rma] == [lemon]
    node = lab.client.node(lemon)
    assert node.drained and node.reason.startswith("slurm-ft: RMA") and node.partitions == ()
    refused = ft(lab, cfg, "node", "repaired", lemon, ok=False)
    assert refused.returncode == 2 and "node release" in refused.stderr
    assert lemon in [r["node"] for r in json.loads(ft(lab, cfg, "status", "--json").stdout)["rma"]]


def test_a_fault_on_every_node_drains_no_more_than_the_breaker_allows(clean, tmp_path, work):
    """The lab's own config and state dir: the background HealthCheckProgram shares this breaker."""
    lab = clean
    cfg = make_config(lab, tmp_path, own_state=False, breaker_max_share=0.1, breaker_max_nodes=0)
    ft(lab, None, "breaker", "reset")
    try:
        nodes = lab.train_nodes + lab.spare_nodes
        limit = max(1, math.floor(0.1 * len(nodes)))
        started = work / "started"
        job_id = int(ft(lab, None, "sbatch", "-N", "2", "-o", str(work / "job-%j.out"),
                        "/bin/sh", "-c", f"touch {started} && exec sleep 3600").stdout.split()[-1])
        job = wait_running(lab, job_id, marker=started)
        for n in nodes:
            inj.inject(lab.dir, n, "xid", gpu=1, value=79)
        first = detect(lab, cfg, job.nodes[0])                         # one node of the FT job goes first
        with ThreadPoolExecutor(8) as pool:
            results = [first] + list(pool.map(lambda n: detect(lab, cfg, n), [n for n in nodes if n != job.nodes[0]]))
        # every check reports the fault (a check racing the node's own HealthCheckProgram may miss it)
        odd = [(r.args[-1], r.returncode, r.stdout[-300:], r.stderr[-300:]) for r in results if r.returncode != 1]
        assert len(odd) <= 2, odd
        assert lab.client.node(job.nodes[0]).drained
        drained = [n.name for n in lab.client.nodes() if n.drained and n.reason.startswith("slurm-ft:")]
        assert len(drained) == limit, drained
        refused = [r for r in results if "drain-rate breaker" in r.stdout + r.stderr]
        assert len(refused) >= len(nodes) - limit - 2                  # background checks may answer for a few
        st = ft(lab, cfg, "breaker", "status", "--json", ok=False)
        assert st.returncode == 1
        b = json.loads(st.stdout)
        assert b["open"] and b["limit"] == limit and b["drains_in_window"] == limit
        assert set(b["nodes_in_window"]) == set(drained)
        text = ft(lab, cfg, "status", "--write-metrics").stdout
        assert "breaker OPEN since" in text
        assert "slurm_ft_breaker_open 1" in (tmp_path / "metrics" / "slurm_ft.prom").read_text()
        # the controller recovers what the breaker let through (the job's nodes drained within the limit:
        # quarantining them takes nothing new out) and takes no further node out of service. The nodes
        # it refused are repaired first, so that the job's restart does not meet their Xid in its prolog.
        for n in set(nodes) - set(drained):
            inj.heal(lab.dir, n)
        (tmp_path / "ctl").mkdir()               # a journal of its own: job ids start again with each lab
        ctl = make_config(lab, tmp_path / "ctl", breaker_max_share=0.1, breaker_max_nodes=0)
        ft(lab, ctl, "controller", "once", "--budget", "60")
        [inc] = json.loads(ft(lab, ctl, "incidents", "--json").stdout)
        assert inc["job_id"] == job_id and set(inc["nodes"]) == set(job.nodes) & set(drained), (inc, drained)
        assert inc["status"] == "recovered" and len(inc["spares"]) == len(inc["nodes"])
        assert lab.client.job(job_id).restart_count == 1
        assert {n.name for n in lab.client.nodes() if n.drained and n.reason.startswith("slurm-ft:")} == set(drained)
        assert set(partitions(lab)["spares"]) == set(lab.spare_nodes) - set(inc["spares"])
    finally:
        inj.heal_all(lab.dir)
        ft(lab, None, "breaker", "reset")


def test_two_sweeps_at_once_one_runs_one_exits_busy(clean, tmp_path):
    lab = clean
    cfg = make_config(lab, tmp_path)
    node = lab.train_nodes[-2]
    ft(lab, cfg, "node", "quarantine", node, "--reason", "lab test")
    ft(lab, cfg, "node", "repaired", node)       # gives the sweep a validation job to wait for
    e = dict(lab.env, SLURM_FT_CONFIG=str(cfg))
    procs = [subprocess.Popen([PY, "-m", "slurm_ft", "sweep"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=e) for _ in range(2)]
    outs = [(p.wait(timeout=180), *p.communicate()) for p in procs]
    codes = sorted(o[0] for o in outs)
    assert codes == [0, 5], outs
    busy = next(o for o in outs if o[0] == 5)
    assert "another sweep is running (pid" in busy[2] and "sweep.lock" in busy[2]
    ran = next(o for o in outs if o[0] == 0)
    assert f"{node}: validating -> spare" in ran[1]
