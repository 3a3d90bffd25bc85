"""Checkpoints in the real lab (issue 10 items 0, 3): a real torch DDP job saving with DCP into step_N/
survives a fatal Xid and resumes on a spare from its newest save; a user's FIFO in a checkpoint directory
holds that job only, while another job failing at the same time recovers as usual."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctl_helpers import (controller_config, fail_node, incidents, once, submit_ft, submit_plain, wait_job,
                         xid_drain)
from slurm_ft.job import ckpt
from slurm_ft_lab.waits import wait_for

pytestmark = pytest.mark.lab

PY = sys.executable
JOB = str(Path(__file__).resolve().parent / "jobs" / "ddp_dcp.py")
START_S = 240          # two ranks importing torch on a shared 2-core machine, after the prolog checks


@pytest.fixture
def cfg(lab, work, tmp_path):
    yield controller_config(lab, tmp_path)      # root's: the controller's config and journal


def out_lines(path: Path) -> list:
    try:
        return path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []


def wait_line(path: Path, pattern: str, timeout: float, lab=None, job_id=None, after: int = 0) -> re.Match:
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in out_lines(path)[after:]:
            m = rx.search(line)
            if m:
                return m
        time.sleep(0.3)
    job = lab.client.job(job_id) if lab is not None else None
    raise AssertionError(f"no line /{pattern}/ within {timeout} s; job {job}; output tail: {out_lines(path)[-8:]}")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_ddp_job_saving_dcp_resumes_on_a_spare_from_its_newest_save(lab, cfg, work):
    pytest.importorskip("torch", reason="no torch in this venv: setup.sh found no build of the torch extra for this Python")
    ck, out = work / "ck", work / "job.out"
    # every other train node busy (a cheap sleep job): after the fault, the spare is the only place to run
    filler = submit_plain(lab, work, len(lab.train_nodes) - 2)
    wait_job(lab, filler)
    argv = [PY, "-m", "slurm_ft", "sbatch", "--parsable", "--ckpt-dir", str(ck), "-N", "2", "--gres=gpu:8",
            "--open-mode=append", "-o", str(out), "srun", "--ntasks-per-node=1", PY, JOB, "--ckpt-dir", str(ck),
            "--resume", "{ckpt}", "--steps", "100000", "--step-time", "0.3", "--save-every", "5"]
    p = lab.run_as(argv, cwd=work, timeout=60)
    assert p.returncode == 0, p.stderr
    jid = int(p.stdout.split(";")[0])
    wait_line(out, r"^start restart=0 world=2 from=- step=0$", START_S, lab, jid)
    wait_line(out, r"^saved step=15 ", 120, lab, jid)
    before = {d.name: sha(d / ".metadata") for d in ck.iterdir() if d.name.startswith("step_")}
    assert {"step_5", "step_10", "step_15"} <= set(before)

    victim = lab.client.job(jid).nodes[1]
    chk = xid_drain(lab, victim)                                    # the GPU falls off the bus
    node = lab.client.node(victim)
    assert chk.returncode == 1 and node.drained and "XID79" in node.reason, (chk.stdout, chk.stderr, node)
    n_before = len(out_lines(out))
    once(lab, cfg)
    job = wait_job(lab, jid, restart_count=1, timeout=START_S)
    [inc] = incidents(lab, cfg)
    assert victim not in job.nodes and set(inc["spares"]) <= set(job.nodes) and len(inc["spares"]) == 1
    assert inc["status"] == "recovered" and inc["ckpt_step"] is not None and inc["ckpt_step"] % 5 == 0

    start = wait_line(out, r"^start restart=1 world=2 from=(\S+) step=(\d+)$", START_S, lab, jid, after=n_before)
    lines = out_lines(out)
    i = lines.index(start.group(0))
    saved = [int(m.group(1)) for m in (re.match(r"saved step=(\d+) ", x) for x in lines[:i]) if m]
    step = int(start.group(2))
    # the newest save: the last one the job reported, or one it finished as the requeue killed it
    assert step in (saved[-1], saved[-1] + 5) and start.group(1) == str(ck / f"step_{step}"), (saved, start.group(0))
    assert step >= 15
    wait_line(out, rf"^step={step + 1} ", 120, lab, jid, after=i)       # and it trains on from there
    for name, digest in before.items():                                  # older saves untouched
        assert sha(ck / name / ".metadata") == digest, name
    r = ckpt.latest(str(ck))
    assert r.layout == "dcp" and r.step >= step


def test_a_fifo_in_one_jobs_checkpoints_holds_that_job_only(lab, cfg, work):
    good, bad = work / "good", work / "bad"
    ckpt.write_checkpoint(str(good), 3, {"r0": b"x"})
    bad.mkdir()
    lab.give(good), lab.give(bad)                   # the job user's checkpoints
    j_bad = submit_ft(lab, work, 2, "--exclusive", "--ckpt-dir", str(bad))       # first in every listing
    j_good = submit_ft(lab, work, 2, "--exclusive", "--ckpt-dir", str(good))
    jb, jg = wait_job(lab, j_bad), wait_job(lab, j_good)
    for d in (bad, good):            # RUNNING comes before the batch script: wait for the job's own start
        wait_for(lambda d=d: (d / "slurm-ft-starts.jsonl").exists() or None, 60, f"start in {d}")
    os.mkfifo(bad / "latest")        # the user's job made it; nobody writes to it: a plain open() blocks
    lab.give(bad / "latest")
    fail_node(lab, jb.nodes[0])
    fail_node(lab, jg.nodes[1])
    t0 = time.monotonic()
    res = once(lab, cfg)
    took = time.monotonic() - t0
    incs = {i["job_id"]: i for i in incidents(lab, cfg)}
    assert set(incs) == {j_bad, j_good}, (jb.nodes, jg.nodes, res.stderr[-3000:], incs)
    g = incs[j_good]
    assert g["status"] == "recovered" and g["ckpt_step"] == 3
    names = [s["name"] for s in g["steps"]]
    if lab.client.expedited_requeue_available():   # >= 25.11: the requeue is eligible at once (it may run
        assert names[:4] == ["open", "quarantine", "swap", "requeue"] and names[-1] == "confirm", names
    else:                                          # before `exclude`/`start`), as in test_controller_lab
        assert names == ["open", "quarantine", "swap", "requeue", "exclude", "start", "confirm"], names
    assert g["total_s"] < 60 and took < 90, (g, took)          # as test_failed_node_is_swapped_for_a_spare...
    wait_job(lab, j_good, restart_count=1)
    b = incs[j_bad]
    assert b["status"] == "waiting" and b["note"].startswith("checkpoint hold: ")
    assert "not a regular file" in b["note"] and "not starting from scratch" in b["note"]
    job = lab.client.job(j_bad)
    assert job.state == "PENDING" and job.held
    show = subprocess.run(["scontrol", "show", "job", str(j_bad)], capture_output=True, text=True, env=lab.env).stdout
    assert "AdminComment=slurm-ft: held: " in show
