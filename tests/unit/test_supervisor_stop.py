"""Stopping the training step before a relaunch: the next launch never runs beside the old one.

srun stands in as a real process that ignores SIGTERM (as a loaded srun that cannot forward it in
time); the fake Slurm's `cancel_step` ends it, as slurmctld ending the step makes srun exit.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path
from slurm_ft.job import hotplan as hp
from slurm_ft.job import supervisor as sv

DEAF_SRUN = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "print('up', flush=True); time.sleep(600)"]


class Slurm(FakeSlurm):
    """Cancelling a step ends the process standing in for its srun, when `ends` says so."""
    def __init__(self, ends: bool):
        super().__init__(train=("n1", "n2", "n3"), spares=())
        self.ends = ends
        self.srun = None

    def cancel_step(self, job_id, step):
        super().cancel_step(job_id, step)
        if self.ends:
            self.srun.kill()


class Recorded(sv.Supervisor):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.launched, self.handed = [], []

    def launch(self, nodes, reason):
        self.launched.append(tuple(nodes))
        return None

    def _fallback(self, act):
        self.handed.append(act)
        return 99


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(sv, "STOP_GRACE_S", 0.3)
    monkeypatch.setattr(sv, "STEP_END_S", 3.0)


def supervised(slurm, said):
    jid = slurm.add_job(3)
    slurm.running_steps[jid] = [0]
    sup = Recorded(slurm, jid, 2, "", ["train"], env={}, say=said.append)
    proc = subprocess.Popen(DEAF_SRUN, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "up\n"          # its SIGTERM handler is set
    slurm.srun = sup.proc = proc
    sup.step_nodes = ("n1", "n2")
    return jid, sup, proc


def test_a_step_that_outlives_sigterm_is_cancelled_through_slurm_before_the_relaunch(quick):
    slurm, said = Slurm(ends=True), []
    jid, sup, proc = supervised(slurm, said)
    act = hp.Action("relaunch", nodes=("n1", "n3"), failed=("n2",), reason="n2 failed")
    rc, allocation = sup.relaunch(act, ("n1", "n2", "n3"), "train")
    assert rc is None and sup.launched == [("n1", "n3")] and not sup.handed
    assert ("cancel_step", jid, 0) in slurm.calls and proc.poll() is not None
    assert slurm.running_steps[jid] == []
    assert any("cancelling it through Slurm" in m for m in said)


def test_a_step_that_will_not_end_is_never_launched_beside_the_job_takes_the_requeue_path(quick):
    slurm, said = Slurm(ends=False), []
    jid, sup, proc = supervised(slurm, said)
    act = hp.Action("relaunch", nodes=("n1", "n3"), failed=("n2",), reason="n2 failed")
    rc, _ = sup.relaunch(act, ("n1", "n2", "n3"), "train")
    assert rc == 99 and sup.launched == []
    assert [(a.kind, a.failed) for a in sup.handed] == [("fallback", ("n2",))]
    assert "the old step would not end" in sup.handed[0].reason
    assert proc.poll() is not None                    # srun itself is not left behind


def test_a_step_that_ends_on_sigterm_costs_no_slurm_call(quick):
    slurm, said = Slurm(ends=True), []
    jid = slurm.add_job(3)
    sup = Recorded(slurm, jid, 2, "", ["train"], env={}, say=said.append)
    sup.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    assert sup.stop() is True
    assert not [c for c in slurm.calls if c[0] == "cancel_step"] and ("steps", jid) not in slurm.reads


def test_a_planned_swap_whose_step_will_not_end_takes_the_requeue_path_too(quick):
    slurm, said = Slurm(ends=False), []
    jid, sup, proc = supervised(slurm, said)
    act = hp.Action("swap", nodes=("n1", "n3"), failed=("n2",), release=("n2",), reason="n2 degraded")
    rc, _ = sup.planned.swap(act, ("n1", "n2", "n3"), "train")
    assert rc == 99 and sup.launched == []
    assert [(a.kind, a.failed) for a in sup.handed] == [("fallback", ("n2",))]
    assert "the old step would not end" in sup.handed[0].reason
    assert proc.poll() is not None
