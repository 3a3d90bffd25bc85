"""Health checks against the real lab: each injected fault is found at its level and drains only that
node with a reason naming GPU and fault; user-caused Xids, healthy nodes and admins' drains are left
alone; a failing prolog makes Slurm drain the node and requeue the job; `watch` drains within a second."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ctl_helpers import periodic_check_skips
from slurm_ft_lab import inject as inj

pytestmark = pytest.mark.lab

PY = sys.executable

# fault, inject kwargs, level that must find it, a cheaper level that must NOT fail on it, code, gpu
FAULTS = [
    ("xid", {"gpu": 2, "value": 79}, "quick", None, "XID79", 2),
    ("ecc_dbe", {"gpu": 1}, "quick", None, "ECC_DBE", 1),
    ("remap_pending", {"gpu": 3}, "quick", None, "REMAP_PENDING", 3),
    ("remap_failure", {"gpu": 0}, "quick", None, "REMAP_FAILURE", 0),
    ("pcie_width", {"gpu": 5, "value": 8, "log": False}, "quick", None, "PCIE_WIDTH", 5),
    ("gpu_lost", {"gpu": 6}, "quick", None, "GPU_LOST", 6),
    ("nvlink_down", {"gpu": 4, "value": 5, "log": False}, "prolog", "quick", "NVLINK_DOWN", 4),
    ("proc", {"gpu": 1, "value": 4_000_000, "log": False}, "epilog", "prolog", "GPU_PROC_LEFT", 1),
    ("clock_event", {"gpu": 7, "value": "hw_slowdown"}, "full", "epilog", "HW_SLOWDOWN", 7),
    ("slow", {"gpu": 2, "value": 0.5}, "burnin", "full", "BURNIN_SLOW", 2),
]


@pytest.fixture
def hl(lab, tmp_path):
    """The lab, a config of this test's own (breaker off: these tests drain on purpose) and a runner."""
    lab.reset()
    data = yaml.safe_load(Path(lab.config_path).read_text()) or {}
    data["state_dir"] = str(tmp_path / "state")
    data.setdefault("lifecycle", {}).update({"breaker_max_share": 0.0, "breaker_max_nodes": 0})
    cfg = tmp_path / "slurm-ft.yaml"
    cfg.write_text(yaml.safe_dump(data))
    os.chmod(cfg, 0o644)
    state_tpl = data.get("health", {}).get("state_file", "")
    for n in lab.train_nodes + lab.spare_nodes:     # no findings left over from earlier tests
        if state_tpl:
            Path(state_tpl.replace("{node}", n)).unlink(missing_ok=True)

    class H:
        config = cfg

        @staticmethod
        def env(node: str) -> dict:
            e = dict(lab.env)
            e.update({"SLURM_FT_CONFIG": str(cfg), "SLURMD_NODENAME": node, "SLURM_FT_LAB_DIR": str(lab.dir),
                      "LD_LIBRARY_PATH": str(lab.dir / "lib")})
            return e

        @staticmethod
        def check(node: str, level: str, *extra: str, timeout: float = 120) -> "tuple[int, dict]":
            p = subprocess.run([PY, "-m", "slurm_ft", "check", "--level", level, "--json", "--drain", *extra],
                               capture_output=True, text=True, timeout=timeout, env=H.env(node))
            assert p.returncode in (0, 1), f"rc={p.returncode}\n{p.stdout}\n{p.stderr}"
            return p.returncode, json.loads(p.stdout)

    yield H
    lab.reset()


def slurm_ft_drained(lab) -> dict:
    return {n.name: n.reason for n in lab.client.nodes() if n.drained}


@pytest.mark.parametrize("fault,kw,level,lower,code,gpu", FAULTS, ids=[f[0] for f in FAULTS])
def test_fault_found_at_its_level_drains_only_that_node(lab, hl, fault, kw, level, lower, code, gpu):
    index = [f[0] for f in FAULTS].index(fault)
    node = lab.train_nodes[(5 + index) % len(lab.train_nodes)]
    kw = dict(kw)
    inj.inject(lab.dir, node, fault, gpu=kw.pop("gpu"), value=kw.pop("value", None), log=kw.pop("log", True))
    if lower:
        rc, rep = hl.check(node, lower)
        assert rc == 0 and rep["healthy"], f"{lower} should not fail on {fault}: {rep['findings']}"
        assert node not in slurm_ft_drained(lab)
    rc, rep = hl.check(node, level)
    assert rc == 1 and not rep["healthy"]
    fails = [(f["code"], f["gpu"]) for f in rep["findings"] if f["severity"] == "fail"]
    assert (code, gpu) in fails, fails
    drained = slurm_ft_drained(lab)
    assert list(drained) == [node], drained
    assert drained[node].startswith("slurm-ft: ") and f" gpu{gpu} " in drained[node], drained[node]
    # repaired: the same level finds nothing and resumes the node slurm-ft drained
    inj.heal(lab.dir, node)
    rc, rep = hl.check(node, level)
    assert rc == 0 and rep["drain"]["action"] == "resumed", rep
    assert not slurm_ft_drained(lab)


def test_user_caused_xids_and_healthy_nodes_drain_nothing(lab, hl):
    node = lab.train_nodes[0]
    for code in (13, 31, 43, 45, 68):
        inj.inject(lab.dir, node, "xid", gpu=code % 8, value=code)
    rc, rep = hl.check(node, "quick")
    assert rc == 0 and rep["healthy"]
    xids = {f["code"]: f["severity"] for f in rep["findings"] if f["check"] == "xid"}
    assert set(xids) == {"XID13", "XID31", "XID43", "XID45", "XID68"} and set(xids.values()) == {"ok"}
    healthy = lab.train_nodes[1]
    for level in ("quick", "epilog", "full"):
        rc, rep = hl.check(healthy, level)
        assert rc == 0 and not [f for f in rep["findings"] if f["severity"] in ("fail", "error")], rep
    assert slurm_ft_drained(lab) == {}


def test_admin_drain_is_never_undone_or_rewritten(lab, hl):
    node = lab.train_nodes[2]
    lab.client.drain([node], "admin: fan replacement")
    rc, rep = hl.check(node, "full")
    assert rc == 0 and lab.client.node(node).reason == "admin: fan replacement"
    inj.inject(lab.dir, node, "xid", gpu=0, value=79)
    rc, rep = hl.check(node, "quick")
    assert rc == 1 and rep["drain"]["action"] == "left"
    assert lab.client.node(node).reason == "admin: fan replacement"


def test_failing_prolog_drains_node_requeues_job_and_healthcheck_names_the_fault(lab, hl, tmp_path):
    node = lab.train_nodes[3]
    # the node's HealthCheckProgram, run as slurmd runs it at start: it saves the fleet view the prolog
    # needs to know the breaker has room (without it a prolog reports and drains nothing)
    healthcheck(lab, hl, node)
    inj.inject(lab.dir, node, "nvlink_down", gpu=4, value=5, log=False)   # only prolog and deeper see it
    # a plain job of root's: what runs inside does not matter here, only the prolog's verdict on the node
    p = subprocess.run(["sbatch", "--parsable", "-w", node, "-o", str(tmp_path / "j.out"), "--wrap", "sleep 60"],
                       capture_output=True, text=True, timeout=30, env=lab.env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    job_id = int(p.stdout.strip().split(";")[0])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            n, j = lab.client.node(node), lab.client.job(job_id)
            if n.drained and j.state == "PENDING" and ("requeued" in j.reason.lower() or j.held):
                break
            time.sleep(0.2)
        assert n.drained, n
        assert j.state == "PENDING" and ("requeued" in j.reason.lower() or j.held), j
        # the HealthCheckProgram (run here as slurmd runs it) puts the prolog's exact finding on the node
        healthcheck(lab, hl, node)
        reason = lab.client.node(node).reason
        assert reason.startswith("slurm-ft: NVLINK_DOWN gpu4"), reason
    finally:
        lab.client.cancel(job_id)


def test_the_nodes_watcher_answers_its_health_check_and_prolog_through_slurm(lab, hl, tmp_path):
    """With `slurm-ft watch` on the node, slurmd's HealthCheckProgram and prolog are answered by it
    (issue 11: cheaper hooks): a fault only the prolog level sees still drains the node and requeues
    the job, and the health check still puts the exact finding on the node."""
    node = lab.train_nodes[5]
    env = dict(hl.env(node), SLURM_FT_CONFIG=str(lab.config_path))      # the config the hooks use
    log = tmp_path / "watch.log"
    watcher = subprocess.Popen([PY, "-m", "slurm_ft", "-v", "watch", "--no-nvml", "--timeout", "170"], env=env,
                               stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    job_id = None
    try:
        deadline = time.monotonic() + 60
        while "slurm-ft watch on" not in log.read_text():
            assert watcher.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert "serving checks on" in log.read_text(), log.read_text()
        inj.inject(lab.dir, node, "nvlink_down", gpu=4, value=5, log=False)   # only prolog and deeper see it
        healthcheck(lab, hl, node)            # healthy at the quick level; saves the breaker's fleet view
        # root's job, as in the test above: only the prolog's verdict matters
        p = subprocess.run(["sbatch", "--parsable", "-w", node, "-o", str(tmp_path / "j.out"), "--wrap", "sleep 60"],
                           capture_output=True, text=True, timeout=30, env=lab.env, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        job_id = int(p.stdout.strip().split(";")[0])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            n, j = lab.client.node(node), lab.client.job(job_id)
            if n.drained and j.state == "PENDING":
                break
            time.sleep(0.2)
        assert n.drained and j.state == "PENDING", (n, j, log.read_text())
        healthcheck(lab, hl, node)
        assert lab.client.node(node).reason.startswith("slurm-ft: NVLINK_DOWN gpu4")
        served = log.read_text()
        assert served.count("served check --level quick --drain") >= 2, served     # ours (and slurmd's own)
        assert f"served check --level prolog (job {job_id}): 1" in served, served
    finally:
        if job_id is not None:
            lab.client.cancel(job_id)
        watcher.terminate()
        watcher.wait(timeout=30)


def healthcheck(lab, hl, node: str, extra_env: "dict | None" = None) -> None:
    """The lab's HealthCheckProgram for one node, with the lab's own config, as slurmd runs it."""
    e = hl.env(node)
    e["SLURM_FT_CONFIG"] = str(lab.config_path)
    e.update(extra_env or {})
    subprocess.run([str(lab.dir / "hooks" / "healthcheck")], env=e, timeout=120, check=True)


def _readline(pipe, timeout: float) -> str:
    ready, _, _ = select.select([pipe], [], [], timeout)
    return pipe.readline() if ready else ""


def _banner(pipe, timeout: float) -> str:
    """The watcher's stderr up to its banner: config warnings come first (this lab's breaker is off)."""
    deadline, seen = time.monotonic() + timeout, ""
    while "slurm-ft watch on" not in seen and time.monotonic() < deadline:
        line = _readline(pipe, max(0.0, deadline - time.monotonic()))
        if not line:
            break
        seen += line
    return seen


def _next_xid(stream) -> dict:
    """The next handled Xid batch the watcher prints (`--json`: its soft-signal lines have their own kind)."""
    while True:
        line = json.loads(_readline(stream, 10))
        if line["kind"] == "xid":
            return line


def test_watch_drains_within_seconds_of_xid79_and_ignores_xid13(lab, hl):
    """Within seconds, not a HealthCheckInterval; the latency itself is a figure of bench/health.py
    (33 ms median), not a timed test: this machine is shared and its load reaches 100."""
    node = lab.train_nodes[4]
    proc = subprocess.Popen([PY, "-m", "slurm_ft", "watch", "--json", "--timeout", "60"], env=hl.env(node),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = _banner(proc.stderr, 20)
        assert "slurm-ft watch on" in banner, banner
        inj.inject(lab.dir, node, "xid", gpu=3, value=13)
        first = _next_xid(proc.stdout)
        assert first["fatal"] is False and node not in slurm_ft_drained(lab)
        t_inject = time.time()
        inj.inject(lab.dir, node, "xid", gpu=2, value=79)
        second = _next_xid(proc.stdout)
        while not second["fatal"]:                 # the log line and the NVML event may come apart
            second = _next_xid(proc.stdout)
        latency = second["time"] - t_inject
        assert second["check"]["drain"]["action"] in ("drained", "kept", "reason_updated")
        assert slurm_ft_drained(lab).get(node, "").startswith("slurm-ft: XID79 gpu2")
        assert latency < 10.0, f"Xid 79 to drain took {latency:.3f} s"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# a `slurm-ft` whose Slurm calls are slow: argv[1] s before each node read, argv[2] s after a drain
# (a loaded slurmctld; it widens the window in which two overlapping checks interleave)
_SLOW_SLURM = """
import sys, time
from slurm_ft.slurm import client as c
before_read, after_drain = float(sys.argv.pop(1)), float(sys.argv.pop(1))
read, drain = c.SlurmClient.node, c.SlurmClient.drain
def slow_read(self, name):
    time.sleep(before_read)
    return read(self, name)
def slow_drain(self, nodes, reason):
    drain(self, nodes, reason)
    time.sleep(after_drain)
c.SlurmClient.node, c.SlurmClient.drain = slow_read, slow_drain
from slurm_ft.cli import main
main(prog_name="slurm-ft")
"""


def test_overlapping_checks_leave_a_node_with_xid79_drained_and_unhealthy(lab, hl):
    """The node's HealthCheckProgram samples it just before an XID79; a manual check samples it just
    after and drains it. The older (healthy) run must not resume that drain, and the next check must
    not take such a resume for an admin's: it once reported the faulty node healthy."""
    node = lab.train_nodes[20]
    state = Path(yaml.safe_load(Path(hl.config).read_text())["health"]["state_file"].replace("{node}", node))

    def check(before_read: float, after_drain: float) -> subprocess.Popen:
        return subprocess.Popen([PY, "-c", _SLOW_SLURM, str(before_read), str(after_drain), "check", "--level",
                                 "quick", "--json", "--drain"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=hl.env(node))

    # slurmd's own periodic check would write the state file at any moment (CI saw it: the wait below
    # ended at once, the Xid came before the older run sampled) and would drain the node itself
    with periodic_check_skips(lab, node):
        state.unlink(missing_ok=True)
        older = check(3.0, 0.0)
        deadline = time.monotonic() + 60
        while not state.exists():                # the older run has sampled the node (and noted it)
            assert time.monotonic() < deadline and older.poll() is None, older.communicate()
            time.sleep(0.05)
        inj.inject(lab.dir, node, "xid", gpu=2, value=79)
        newer = check(0.0, 3.0)
        out_new, err_new = newer.communicate(timeout=120)
        out_old, err_old = older.communicate(timeout=120)
    assert json.loads(out_old)["healthy"] and not json.loads(out_new)["healthy"], (out_old, out_new)
    assert json.loads(out_old)["drain"]["action"] != "resumed", out_old
    assert slurm_ft_drained(lab).get(node, "").startswith("slurm-ft: XID79 gpu2"), (out_old, err_old, out_new)
    rc, rep = hl.check(node, "quick")
    assert rc == 1 and not rep["healthy"] and rep["drain"]["action"] == "kept", rep
