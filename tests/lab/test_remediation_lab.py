"""Remediation against the real lab: a fault's node is rebooted by the sweep, validated and back in the
spare pool with no person involved; the same fault again within the window sends it to the RMA list.

The reboot is Slurm's own (`scontrol reboot ASAP nextstate=DOWN`): slurmd runs the lab's RebootProgram,
which stops that slurmd, heals the fake node and starts it again as freshly booted (lab/slurm_ft_lab/reboot.py).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from slurm_ft_lab import inject as inj

from test_lifecycle_lab import HOLD, clean, detect, ft, history, make_config, partitions, wait_running  # noqa: F401

pytestmark = pytest.mark.lab

def remediation(lab, **over) -> dict:
    """The lab's remediation section (its fake GPU reset) with this test's settings."""
    data = yaml.safe_load(Path(lab.config_path).read_text()) or {}
    rc = dict(data.get("lifecycle", {}).get("remediation", {}))
    assert "fake_reset" in " ".join(rc.get("reset_command", [])), "the lab config names its fake reset"
    rc.update({"mode": "on", "max_attempts": {"reboot": 1, "reset_gpu": 2}}, **over)
    return rc


def sweep_until(lab, cfg, done, timeout: float = 120.0) -> str:
    """Run the sweep as its timer would until `done(all output so far)`; returns that output."""
    out = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out += ft(lab, cfg, "sweep").stdout
        if done(out):
            return out
        time.sleep(2)
    raise AssertionError(f"sweeps did not get there within {timeout:g} s:\n{out}")


def test_xid79_node_is_rebooted_validated_and_back_in_spares_then_rma_on_a_second_fault(clean, tmp_path, work):
    lab = clean
    cfg = make_config(lab, tmp_path, remediation=remediation(lab))
    spare, *others = lab.spare_nodes
    lab.client.drain(others, HOLD)                # only `spare` is a healthy spare: the swap is predictable
    lab.client.set_partition_nodes("train", lab.train_nodes[:4])
    assert ft(lab, cfg, "sweep").stdout == ""
    started = work / "started"
    job_id = int(ft(lab, None, "sbatch", "-N", "4", "-o", str(work / "job-%j.out"),
                    "/bin/sh", "-c", f"touch {started} && exec sleep 3600").stdout.split()[-1])
    job = wait_running(lab, job_id, marker=started)
    bad = job.nodes[2]

    # the fault: found by the node's health check, recovered by the controller as without remediation
    inj.inject(lab.dir, bad, "xid", gpu=2, value=79)
    assert detect(lab, cfg, bad).returncode == 1
    started.unlink()
    ft(lab, cfg, "controller", "once", "--budget", "60")
    wait_running(lab, job_id, without=bad, with_=spare, marker=started)
    plan = json.loads(ft(lab, cfg, "remediate", "--dry-run", "--json").stdout)
    assert plan["steps"] == []                    # not quarantined yet: the sweep records that first

    # no person from here: sweeps quarantine it, reboot it (Slurm's RebootProgram), validate it, pool it
    t0 = time.monotonic()
    out = sweep_until(lab, cfg, lambda o: f"{bad}: validating -> spare" in o)
    took = time.monotonic() - t0
    assert f"{bad}: failed -> quarantined" in out
    assert f"{bad}: quarantined -> remediating (XID79 gpu2: reboot (attempt 1 of 1))" in out, out
    assert f"{bad}: remediating -> repaired (back from its reboot" in out, out
    node = lab.client.node(bad)
    assert node.partitions == ("spares",) and not node.drained and node.state == "IDLE", node
    assert history(lab, cfg, bad) == ["fault", "quarantine", "remediate", "remediated", "validate", "pass"]
    assert "rebooted" in (lab.dir / "log" / "reboot.log").read_text()
    inc = next(i for i in json.loads(ft(lab, cfg, "incidents", "--json").stdout) if i["job_id"] == job_id)
    assert inc["nodes"] == [bad] and inc["spares"] == [spare]
    assert [e["event"] for e in inc["failed_nodes_after"]] == ["remediate", "remediated", "validate", "pass"]
    assert f"{bad} remediate -> remediating: reboot: XID79 gpu2" in ft(lab, cfg, "incidents").stdout
    print(f"\nfault -> back in spares: {took:.1f} s of sweeps")

    # the same fault again within the window: a reboot did not fix it for long -> the RMA list
    inj.inject(lab.dir, bad, "xid", gpu=2, value=79)
    assert detect(lab, cfg, bad).returncode == 1
    out = sweep_until(lab, cfg, lambda o: f"{bad}: quarantined -> rma" in o, timeout=60)
    assert "again after 1 reboot within 30 days (at most 1)" in out, out
    assert f"ALERT: {bad}: on the RMA list" in out
    node = lab.client.node(bad)
    assert node.drained and node.reason.startswith("slurm-ft: RMA") and node.partitions == ()
    assert [r["node"] for r in json.loads(ft(lab, cfg, "node", "list", "--state", "rma", "--json").stdout)] == [bad]
    assert history(lab, cfg, bad)[-3:] == ["fault", "quarantine", "send_rma"]
    assert bad not in set().union(*partitions(lab).values())
    # both drains were real: the reboot was needed, the second ended on the RMA list
    rep = json.loads(ft(lab, cfg, "report", "--json").stdout)
    x79 = rep["by_xid"]["79"]
    assert (x79["drains"], x79["confirmed"], x79["probable_false_positives"]) == (2, 2, 0)
    assert x79["spare_node_hours"] > 0                      # the first one's recovery took the spare
    assert rep["by_check"]["xid"]["drains"] == 2


def test_dry_run_says_what_it_would_do_and_changes_nothing(clean, tmp_path):
    lab = clean
    cfg = make_config(lab, tmp_path, remediation={"mode": "dry_run"})
    bad = lab.train_nodes[-1]
    inj.inject(lab.dir, bad, "xid", gpu=1, value=79)
    assert detect(lab, cfg, bad).returncode == 1
    out = ft(lab, cfg, "sweep").stdout
    assert f"would {bad}: reboot (scontrol reboot ASAP nextstate=DOWN): XID79 gpu1: reboot (attempt 1 of 1)" in out, out
    assert ft(lab, cfg, "sweep").stdout == ""      # said once
    plan = json.loads(ft(lab, cfg, "remediate", "--dry-run", "--json").stdout)
    assert plan["steps"] == [{"node": bad, "action": "reboot", "why": "XID79 gpu1: reboot (attempt 1 of 1)",
                              "finding": "XID79 gpu1", "attempt": 1, "max_attempts": 1, "pool": "(no domain)",
                              "held_by": None, "until": None}]
    assert plan["budget"]["in_remediation"] == [bad] and plan["budget"]["waiting"] == []
    node = lab.client.node(bad)
    assert "REBOOT" not in "+".join(node.flags) and node.reason.startswith("slurm-ft: QUARANTINED XID79")
    assert history(lab, cfg, bad) == ["fault", "quarantine"]
    refused = ft(lab, cfg, "remediate", ok=False)
    assert refused.returncode == 2 and "mode is 'dry_run'" in refused.stderr


def test_xid48_gpu_is_reset_by_the_validation_job_and_the_node_back_in_spares(clean, tmp_path):
    lab = clean
    cfg = make_config(lab, tmp_path, remediation=remediation(lab))
    bad = lab.train_nodes[-2]
    inj.inject(lab.dir, bad, "ecc_dbe", gpu=5)          # Xid 48: the catalog says reset_gpu
    assert detect(lab, cfg, bad).returncode == 1
    out = sweep_until(lab, cfg, lambda o: f"{bad}: validating -> spare" in o, timeout=90)
    assert f"{bad}: quarantined -> repaired (XID48 gpu5: reset_gpu (attempt 1 of 2))" in out, out
    assert history(lab, cfg, bad) == ["fault", "quarantine", "remediate", "remediated", "validate", "pass"]
    validation = json.loads(ft(lab, cfg, "node", "history", bad, "--json").stdout)["validation_output"]
    text = Path(validation).read_text()
    assert "slurm-ft-validate: reset gpu5" in text and "successfully reset" in text and "PASS" in text, text
    gpu5 = inj.load_state(lab.dir, bad).gpus[5]
    assert gpu5.ecc_dbe_volatile == 0 and gpu5.ecc_dbe_aggregate == 1   # the reset cleared only what it clears
    assert "Xid" in (lab.dir / "nodes" / bad / "kmsg").read_text()      # the driver's line stays until a reboot
    assert lab.client.node(bad).partitions == ("spares",)


def test_a_reset_that_does_not_help_twice_sends_the_node_to_rma(clean, tmp_path):
    """A GPU off the bus, with a policy that says reset: the reset fails, twice, then the RMA list
    (the lemon rule is set out of the way: the attempt bound decides)."""
    lab = clean
    cfg = make_config(lab, tmp_path, lemon_incidents=10,
                      remediation=remediation(lab, actions={"GPU_LOST": "reset_gpu"}))
    bad = lab.train_nodes[-3]
    inj.inject(lab.dir, bad, "gpu_lost", gpu=3)          # Xid 79 and the GPU gone from NVML
    assert detect(lab, cfg, bad).returncode == 1
    out = sweep_until(lab, cfg, lambda o: f"{bad}: quarantined -> rma" in o, timeout=120)
    assert out.count(f"{bad}: validating -> quarantined (") == 2, out
    assert "again after 2 reset_gpu within 30 days (at most 2)" in out, out
    events = history(lab, cfg, bad)
    assert events.count("remediate") == 2 and events[-1] == "send_rma", events
    assert lab.client.node(bad).reason.startswith("slurm-ft: RMA")
