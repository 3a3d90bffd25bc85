"""Expedited requeue against the lab's real Slurm, whichever version it is (22.05, 24.11, 26.05).

On >= 25.11 the lab runs slurmctld with SlurmctldParameters=enable_expedited_requeue, so `slurm-ft sbatch`
submits with --requeue=expedite; before, with plain --requeue. The controller recovers the job either way.
"""
from __future__ import annotations

import subprocess

import pytest

from ctl_helpers import controller_config, fail_node, incidents, once, parts, slurm_ft, submit_ft, wait_job

pytestmark = pytest.mark.lab


@pytest.fixture
def cfg(lab, tmp_path):
    lab.reset()
    yield controller_config(lab, tmp_path)
    lab.reset()


def _show(lab, jid: int) -> str:
    p = subprocess.run(["scontrol", "show", "job", "-o", str(jid)], capture_output=True, text=True, timeout=30,
                       env=lab.env)
    assert p.returncode == 0, p.stderr
    return p.stdout


def _expedite_expected(lab) -> bool:
    return lab.client.version()[:2] >= (25, 11)


def test_submit_uses_the_requeue_mode_of_the_cluster_and_the_controller_recovers(lab, cfg, work):
    expedite = _expedite_expected(lab)
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30,
                            env=lab.env).stdout
    assert ("enable_expedited_requeue" in config) == expedite          # the lab enables it on >= 25.11
    jid = submit_ft(lab, work, 4)
    job = wait_job(lab, jid)
    line = _show(lab, jid)
    assert " Requeue=1 " in line
    assert ("ExpeditedRequeue=Yes" in line) == expedite, line        # --requeue=expedite, or plain --requeue
    bad = job.nodes[2]
    fail_node(lab, bad)
    once(lab, cfg)
    job = wait_job(lab, jid, restart_count=1)
    assert bad not in job.nodes
    [inc] = incidents(lab, cfg)
    assert inc["status"] == "recovered" and inc["nodes"] == [bad]
    assert inc["spares"][0] in parts(lab)["train"] and bad not in parts(lab)["train"]


def test_non_zero_exit_with_clean_epilogs(lab, cfg, work):
    """A fault found by the health check while the job's run dies on its own, the epilogs clean.
    >= 25.11 (expedite): Slurm requeues the job HELD (REQUEUE_HOLD); the controller releases it onto a
    spare. Before: plain --requeue does not requeue a non-zero exit; the job FAILED and stays so."""
    expedite = _expedite_expected(lab)
    go = work / "exit-now"
    script = work / "train.sh"          # runs until told, then exits 3 (a crash that no epilog notices)
    script.write_text(f"#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.2; done\nrm -f {go}\nexit 3\n")
    script.chmod(0o755)
    p = slurm_ft(lab, None, "sbatch", "-N", "4", "-o", str(work / "job-%j.out"), str(script))
    jid = int(p.stdout.split()[-1])
    job = wait_job(lab, jid)
    bad = job.nodes[1]
    once(lab, cfg)              # the controller, running as deployed, saw where the run ran (nothing to do yet)
    fail_node(lab, bad)
    go.touch()
    if not expedite:
        job = wait_job(lab, jid, state="FAILED", timeout=60)
        once(lab, cfg)
        assert incidents(lab, cfg) == [] and lab.client.job(jid).state == "FAILED"
        return
    job = wait_job(lab, jid, state="REQUEUE_HOLD", timeout=60)
    assert job.held and job.restart_count == 1
    once(lab, cfg)
    job = wait_job(lab, jid, restart_count=1)
    assert bad not in job.nodes
    [inc] = incidents(lab, cfg)
    assert inc["status"] == "recovered" and inc["nodes"] == [bad]
    names = [s["name"] for s in inc["steps"]]
    assert names[:3] == ["open", "quarantine", "swap"] and "start" in names and names[-1] == "confirm"
