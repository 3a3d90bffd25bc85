"""Stopping the training step before a relaunch: the next launch never runs beside the old one.

srun stands in as a real process that ignores SIGTERM (as a loaded srun that cannot forward it in
time); the fake Slurm's `cancel_step` ends it, as slurmctld ending the step makes srun exit, or leaves it
running (an srun blocked on an RPC of its own), or is refused (the user's RPCs time out).
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path
from slurm_ft.errors import CommandTimeout
from slurm_ft.job import groupplan as gp, groups as gs, hotplan as hp
from slurm_ft.job import supervisor as sv

DEAF_SRUN = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "print('up', flush=True); time.sleep(600)"]


class Slurm(FakeSlurm):
    """Cancelling a step ends the process standing in for its srun, when `ends` says so; `refuses`: the
    cancel never reaches slurmctld."""
    def __init__(self, ends: bool, refuses: int = 0):
        super().__init__(train=("n1", "n2", "n3"), spares=())
        self.ends, self.refuses = ends, refuses        # refuses: this many cancels time out (True: all)
        self.srun = None

    def cancel_step(self, job_id, step):
        if self.refuses is True or self.refuses > 0:
            self.refuses = self.refuses if self.refuses is True else self.refuses - 1
            raise CommandTimeout("scancel: timed out after 30 s")
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

    def _fallback(self, act, at_once=False):
        self.handed.append((act, at_once))
        return 99


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(sv, "STOP_GRACE_S", 0.3)
    monkeypatch.setattr(sv, "STEP_END_S", 3.0)
    monkeypatch.setattr(sv, "CANCELLED_END_S", 0.5)


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


def test_an_srun_that_outlives_its_steps_cancel_is_killed_and_the_relaunch_goes_on(quick, monkeypatch):
    """srun answers SIGTERM with a step kill through slurmctld as the user; with their bucket empty it
    blocks there, while the supervisor's own cancel went through: the ranks are Slurm's to kill, srun is
    killed, and the job relaunches on its hot spare long before STEP_END_S."""
    monkeypatch.setattr(sv, "STEP_END_S", 600.0)
    slurm, said = Slurm(ends=False), []
    jid, sup, proc = supervised(slurm, said)
    act = hp.Action("relaunch", nodes=("n1", "n3"), failed=("n2",), reason="n2 failed")
    rc, _ = sup.relaunch(act, ("n1", "n2", "n3"), "train")
    assert rc is None and sup.launched == [("n1", "n3")] and not sup.handed
    assert ("cancel_step", jid, 0) in slurm.calls and proc.poll() is not None
    assert any("srun did not exit" in m for m in said)


def test_a_cancel_that_timed_out_is_sent_again_and_the_relaunch_goes_on(quick, monkeypatch):
    """The user's RPCs time out on their empty bucket: the supervisor sends the cancel again (every
    CANCEL_RETRY_S) until slurmctld takes it, rather than waiting out STEP_END_S for the requeue path."""
    monkeypatch.setattr(sv, "STEP_END_S", 600.0)
    monkeypatch.setattr(sv, "CANCEL_RETRY_S", 0.2)
    slurm, said = Slurm(ends=True, refuses=2), []
    jid, sup, proc = supervised(slurm, said)
    act = hp.Action("relaunch", nodes=("n1", "n3"), failed=("n2",), reason="n2 failed")
    rc, _ = sup.relaunch(act, ("n1", "n2", "n3"), "train")
    assert rc is None and sup.launched == [("n1", "n3")] and not sup.handed
    assert sum("could not cancel the step" in m for m in said) == 2 and proc.poll() is not None


def test_a_step_that_will_not_end_is_never_launched_beside_the_job_takes_the_requeue_path(quick):
    slurm, said = Slurm(ends=False, refuses=True), []
    jid, sup, proc = supervised(slurm, said)
    act = hp.Action("relaunch", nodes=("n1", "n3"), failed=("n2",), reason="n2 failed")
    rc, _ = sup.relaunch(act, ("n1", "n2", "n3"), "train")
    assert rc == 99 and sup.launched == []
    assert [(a.kind, a.failed, now) for a, now in sup.handed] == [("fallback", ("n2",), True)]
    assert "the old step would not end" in sup.handed[0][0].reason
    assert proc.poll() is not None                    # srun itself is not left behind


class Told:
    """The job's output as the supervisor follows it: the controller's notice arrives at the third poll,
    after the controller (root) cancelled step 0 in `slurm`; forged: a rank printed it, nothing cancelled."""
    def __init__(self, node, slurm=None, job_id=None):
        self.node, self.polls, self.slurm, self.job_id = node, 0, slurm, job_id

    def events(self):
        self.polls += 1
        if self.polls != 3:
            return []
        if self.slurm is not None:
            self.slurm.running_steps[self.job_id] = []
        return [("ended", self.node, "step(s) 0 cancelled by the slurm-ft controller")]


def test_a_step_the_controller_ended_lets_the_relaunch_go_on_though_srun_still_waits(quick, monkeypatch):
    """srun, waiting on its user's empty RPC bucket, outlives the step the controller (root) cancelled: the
    `ended` notice for a node of the step is enough, srun is killed (no rank is left) and the job relaunches
    on its hot spare, long before the supervisor would give up on the step."""
    monkeypatch.setattr(sv, "STEP_END_S", 600.0)
    slurm, said = Slurm(ends=False, refuses=True), []
    jid, sup, proc = supervised(slurm, said)
    sup.notices = Told("n2", slurm, jid)
    act = hp.Action("relaunch", nodes=("n1", "n3"), failed=("n2",), reason="n2 failed")
    rc, _ = sup.relaunch(act, ("n1", "n2", "n3"), "train")
    assert rc is None and sup.launched == [("n1", "n3")] and not sup.handed
    assert proc.poll() is not None and any("the controller ended the step on n2" in m for m in said)


def test_an_ended_notice_a_rank_printed_does_not_kill_srun_while_its_step_runs(quick):
    """Review 2026-12-07 #4: the same notice, printed by the job itself while its step still runs on n2
    (Slurm lists it there): srun is not killed on its word, so no rank is left running beside a
    relaunch; the step is waited for as any step that will not end (here: the requeue path)."""
    slurm, said = Slurm(ends=False, refuses=True), []
    jid, sup, proc = supervised(slurm, said)
    slurm.step_nodes[(jid, 0)] = ("n1", "n2")
    sup.notices = Told("n2")
    act = hp.Action("relaunch", nodes=("n1", "n3"), failed=("n2",), reason="n2 failed")
    rc, _ = sup.relaunch(act, ("n1", "n2", "n3"), "train")
    assert rc == 99 and sup.launched == [] and "the old step would not end" in sup.handed[0][0].reason
    assert not any("the controller ended the step" in m for m in said)
    assert ("steps", jid) in slurm.reads


def test_an_ended_notice_for_a_node_outside_the_step_changes_nothing(quick):
    slurm, said = Slurm(ends=False, refuses=True), []
    jid, sup, proc = supervised(slurm, said)
    sup.notices = Told("n3")                          # not a node of the running step
    act = hp.Action("relaunch", nodes=("n1", "n3"), failed=("n2",), reason="n2 failed")
    rc, _ = sup.relaunch(act, ("n1", "n2", "n3"), "train")
    assert rc == 99 and sup.launched == [] and "the old step would not end" in sup.handed[0][0].reason


def test_a_step_that_ends_on_sigterm_costs_no_slurm_call(quick):
    slurm, said = Slurm(ends=True), []
    jid = slurm.add_job(3)
    sup = Recorded(slurm, jid, 2, "", ["train"], env={}, say=said.append)
    sup.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    assert sup.stop() is True
    assert not [c for c in slurm.calls if c[0] == "cancel_step"] and ("steps", jid) not in slurm.reads


def test_a_planned_swap_whose_step_will_not_end_takes_the_requeue_path_too(quick):
    slurm, said = Slurm(ends=False, refuses=True), []
    jid, sup, proc = supervised(slurm, said)
    act = hp.Action("swap", nodes=("n1", "n3"), failed=("n2",), release=("n2",), reason="n2 degraded")
    rc, _ = sup.planned.swap(act, ("n1", "n2", "n3"), "train")
    assert rc == 99 and sup.launched == []
    assert [(a.kind, a.failed, now) for a, now in sup.handed] == [("fallback", ("n2",), True)]
    assert "the old step would not end" in sup.handed[0][0].reason
    assert proc.poll() is not None


# --- replica groups: one group's step stopped, the others' untouched ------------------------------

class Groups(gs.GroupSupervisor):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.launched, self.handed = [], []

    def launch_group(self, g, nodes, reason, first=False):
        self.launched.append((g, tuple(nodes)))
        return None

    def _fallback(self, act, at_once=False):
        self.handed.append((act, at_once))
        return 99


def grouped(slurm, said):
    """Two groups of one node, each its own named step; group 1's srun ignores SIGTERM."""
    jid = slurm.add_job(3)
    slurm.running_steps[jid] = [0, 1]
    slurm.step_names.update({(jid, 0): gs.step_name(0), (jid, 1): gs.step_name(1)})
    sup = Groups(slurm, jid, 2, 2, "", ["train"], env={}, notices=None)
    sup.say = said.append
    proc = subprocess.Popen(DEAF_SRUN, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "up\n"
    slurm.srun = proc
    sup.groups[0] = gs.Running(nodes=("n1",), proc=subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))
    sup.groups[1] = gs.Running(nodes=("n2",), proc=proc)
    return jid, sup, proc


def test_a_groups_step_that_outlives_sigterm_is_cancelled_by_its_name_and_the_other_group_steps_on(quick):
    slurm, said = Slurm(ends=True), []
    jid, sup, proc = grouped(slurm, said)
    try:
        assert sup.carry_out(gp.Action("relaunch", group=1, nodes=("n3",), failed=("n2",), reason="n2 failed")) is None
        assert [c for c in slurm.calls if c[0] == "cancel_step"] == [("cancel_step", jid, 1)]
        assert sup.launched == [(1, ("n3",))] and not sup.handed
        assert sup.groups[0].proc.poll() is None and slurm.running_steps[jid] == [0]
    finally:
        sup.groups[0].proc.kill()


def test_a_groups_step_that_will_not_end_is_never_launched_beside_the_job_takes_the_requeue_path(quick):
    slurm, said = Slurm(ends=False, refuses=True), []
    jid, sup, proc = grouped(slurm, said)
    try:
        assert sup.carry_out(gp.Action("relaunch", group=1, nodes=("n3",), failed=("n2",), reason="n2 failed")) == 99
        assert sup.launched == [] and [(a.kind, a.failed, now) for a, now in sup.handed] == [("fallback", ("n2",), True)]
        assert "group 1's step did not end" in sup.handed[0][0].reason and proc.poll() is not None
    finally:
        sup.groups[0].proc.kill()


def test_a_step_that_will_not_end_requeues_the_job_at_once_not_after_the_controllers_wait(quick, monkeypatch):
    """The controller still counts on the supervisor (its hot spare is there): only the supervisor knows the
    old step would not end, so it requeues its own job now; the controller then takes the requeue path."""
    import threading
    monkeypatch.setattr(sv, "FALLBACK_REQUEUE_S", 600.0)
    slurm, said = Slurm(ends=False, refuses=True), []
    jid, sup, proc = supervised(slurm, said)
    sup._fallback = lambda act, at_once=False: sv.Supervisor._fallback(sup, act, at_once)   # the real one
    act = hp.Action("relaunch", nodes=("n1", "n3"), failed=("n2",), reason="n2 failed")
    threading.Thread(target=sup.relaunch, args=(act, ("n1", "n2", "n3"), "train"), daemon=True).start()
    deadline = sv.time.monotonic() + 30
    while ("requeue", jid, False) not in slurm.calls:
        assert sv.time.monotonic() < deadline, slurm.calls
        sv.time.sleep(0.05)
    assert sup.launched == [] and any("requeuing the job myself" in m for m in said)


def noting_srun(mark):
    """An srun that notes its SIGTERM in the file `mark` and runs on."""
    return [sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: "
            "open(sys.argv[1], 'w').close()); print('up', flush=True); time.sleep(600)", str(mark)]


class EveryStep(FakeSlurm):
    """Each named step's srun notes SIGTERM and runs on; cancelling a step ends its srun. Each cancel
    records which sruns had been sent SIGTERM by then."""
    def __init__(self, marks):
        super().__init__(train=("n1", "n2", "n3"), spares=())
        self.sruns, self.marks, self.termed_at_cancel = {}, marks, []

    def cancel_step(self, job_id, step):
        super().cancel_step(job_id, step)
        self.termed_at_cancel.append([g for g, m in enumerate(self.marks) if m.exists()])
        self.sruns[step].kill()


def test_the_jobs_end_stops_every_group_at_once_one_grace_and_one_wait_for_all(quick, tmp_path):
    """Each group's step given its own grace and cancel one after the other would keep a requeue (or the
    job's end) waiting R times as long."""
    marks = [tmp_path / "term0", tmp_path / "term1"]
    slurm, said = EveryStep(marks), []
    jid = slurm.add_job(3)
    slurm.running_steps[jid] = [0, 1]
    slurm.step_names.update({(jid, 0): gs.step_name(0), (jid, 1): gs.step_name(1)})
    sup = Groups(slurm, jid, 2, 2, "", ["train"], env={}, notices=None)
    sup.say = said.append
    for g in (0, 1):
        proc = subprocess.Popen(noting_srun(marks[g]), stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "up\n"
        slurm.sruns[g] = proc
        sup.groups[g] = gs.Running(nodes=(f"n{g + 1}",), proc=proc)
    assert sup.stop() is True
    assert [c for c in slurm.calls if c[0] == "cancel_step"] == [("cancel_step", jid, 0), ("cancel_step", jid, 1)]
    assert slurm.termed_at_cancel == [[0, 1], [0, 1]]     # both sent SIGTERM, waited out together, then cancelled
    assert any("2 steps did not end" in m for m in said)
    assert all(p.poll() is not None for p in slurm.sruns.values())


def test_a_requeue_the_users_own_rpc_limit_refuses_is_tried_again_until_it_is_taken(monkeypatch):
    # the user's bucket kept empty by their own loops: `scontrol requeue` times out twice, then goes through
    class Limited(FakeSlurm):
        refusals = 2

        def requeue(self, job_id, hold=False):
            if self.refusals:
                self.refusals -= 1
                raise CommandTimeout(["scontrol", "requeue", str(job_id)], 30)
            super().requeue(job_id, hold)

    slurm, said, waits = Limited(train=("n1", "n2", "n3"), spares=()), [], []
    monkeypatch.setattr(sv.time, "sleep", waits.append)
    jid = slurm.add_job(3)
    sup = sv.Supervisor(slurm, jid, 2, "", ["train"], env={}, say=said.append)
    sup.requeue_until_done("the old step would not end")
    assert [c for c in slurm.calls if c[0] == "requeue"] == [("requeue", jid, False)]
    assert waits == [sv.REQUEUE_RETRY_S, 2 * sv.REQUEUE_RETRY_S]
    assert sum("could not requeue the job" in s for s in said) == 2
    assert slurm.job(jid).restart_count == 1
