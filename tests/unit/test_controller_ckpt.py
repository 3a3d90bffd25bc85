"""The controller and users' checkpoint directories (issue 10 items 0, 3): a job whose checkpoints cannot
be read as complete is held with the reason, never restarted from scratch; a scan that hangs holds only
its own job and delays no other job's recovery. Over the unit tests' in-memory Slurm (fakeslurm.py)."""
from __future__ import annotations

import threading
import time

from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path

from slurm_ft.config import Config, ControllerConfig, LifecycleConfig
from slurm_ft.job import ckpt, ckptscan
from slurm_ft.fleet.recovery import journal as jn
from slurm_ft.fleet import db
from slurm_ft.fleet.recovery.controller import Controller
from slurm_ft.job.tag import FtSpec


def two_jobs(dir_a: str, dir_b: str) -> FakeSlurm:
    """Jobs 100 (gpu001-002, checkpoints in dir_a) and 101 (gpu003-004, dir_b); spares gpu005-006."""
    s = FakeSlurm(train=("gpu001", "gpu002", "gpu003", "gpu004"), spares=("gpu005", "gpu006"))
    s.add_job(2, FtSpec(ckpt_dir=dir_a, max_restarts=5), nodes=("gpu001", "gpu002"))
    s.add_job(2, FtSpec(ckpt_dir=dir_b, max_restarts=5), nodes=("gpu003", "gpu004"))
    return s


def controller(tmp_path, slurm, scan_s=5.0, sleep=lambda s: None):
    # breaker off: two of six nodes failing at once is past any share (the breaker has its own tests)
    cfg = Config(state_dir=str(tmp_path / "state"),
                 controller=ControllerConfig(poll_s=0.0, cycle_budget_s=5.0, ckpt_scan_s=scan_s),
                 lifecycle=LifecycleConfig(breaker_max_share=0.0, breaker_max_nodes=0))
    return Controller(slurm, jn.connect(db.path_in(cfg.state_dir)), cfg, sleep=sleep)


def test_unfinished_checkpoints_hold_the_job_with_the_reason_and_take_no_spare(tmp_path):
    bad, good = tmp_path / "a", tmp_path / "b"
    (bad / "step_7").mkdir(parents=True)
    (bad / "step_7" / "__0_0.distcp").write_bytes(b"shard")     # a save killed before its .metadata
    ckpt.write_checkpoint(str(good), 3, {"r0": b"x"})
    s = two_jobs(str(bad), str(good))
    s.fail("gpu002")
    s.fail("gpu004")
    c = controller(tmp_path, s)
    c.cycle()
    incs = {i.job_id: i for i in jn.incidents(c.conn)}
    held = incs[100]
    assert held.status == "waiting" and held.note.startswith(ckptscan.HOLD_PREFIX)
    assert "step_7" in held.note and "not starting from scratch" in held.note
    assert ("requeue", 100, True) in s.calls and s.j[100].held
    assert any(c_[0] == "update" and c_[1] == 100 and "AdminComment" in dict(c_[2]) for c_ in s.calls)
    assert [st.name for st in held.steps] == ["open", "quarantine", "hold"]
    assert incs[101].status == "recovered" and incs[101].ckpt_step == 3    # the other job: as usual
    assert len(s.parts["spares"]) == 1                                          # only job 101 took one
    c.cycle()
    assert s.j[100].held and jn.incidents(c.conn, job_id=100)[0].status == "waiting"   # stays held


def test_a_hung_scan_holds_only_its_own_job_and_delays_no_other(tmp_path, monkeypatch):
    hung, good = str(tmp_path / "hung"), str(tmp_path / "good")
    ckpt.write_checkpoint(good, 3, {"r0": b"x"})
    release = threading.Event()
    real = ckpt.latest

    def latest(d, *a, **k):                 # a dead NFS server: the read blocks in the kernel
        if d == hung:
            release.wait(30)
        return real(d, *a, **k)

    monkeypatch.setattr(ckptscan.ckpt, "latest", latest)
    s = two_jobs(hung, good)                # the hung job comes first in every listing
    s.fail("gpu001")
    s.fail("gpu003")
    opened = {}
    c = controller(tmp_path, s, scan_s=2.0, sleep=time.sleep)
    c.on_step = lambda step, outcome, detail, now: opened.setdefault(step.job_id, time.monotonic())
    t0 = time.monotonic()
    c.cycle()
    release.set()
    incs = {i.job_id: i for i in jn.incidents(c.conn)}
    assert incs[101].status == "recovered" and incs[101].ckpt_step == 3
    assert opened[101] - t0 < 1.5, opened                   # not behind the hung job's 2 s
    assert incs[101].id < incs[100].id                      # opened first, though listed second
    assert incs[100].status == "waiting" and "did not finish within 2 s" in incs[100].note
    assert s.j[100].held
