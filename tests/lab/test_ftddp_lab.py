"""The lab's torchft job (slurm_ft_lab.ftddp) at the two moments of a group's relaunch that Slurm's timing
makes rare in the replica-group lab test, forced here without Slurm: a real torchft Lighthouse, started
with the supervisor's own arguments (groups.lighthouse_argv), and two 1-rank groups as local processes,
their environment as the supervisor gives it.

- A peer killed during the cross-group all-reduce (steps with no sleep, so most kills land in one):
  the healthy group skips that step and trains on (torchft 0.2.0's DDP hook would exit it).
- A group relaunched while the other is stuck past the Lighthouse's join timeout forms a quorum alone:
  it trains on from {ckpt}, not from step 0, and the stuck group heals from it when it comes back.

No root, no Slurm: processes of the user running pytest."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_ft.job import ckpt as ckpts
from slurm_ft.job.groups import find_lighthouse, lighthouse_argv
from slurm_ft_lab.trainer import read_log
from slurm_ft_lab.waits import wait_for

pytestmark = pytest.mark.lab
PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]
START_S = 180          # torch + torchft's import and the first quorum on 2 loaded cores


@pytest.fixture(autouse=True)
def needs_torchft():
    pytest.importorskip("torch", reason="no torch in this venv: setup.sh found no build of the torch extra")
    pytest.importorskip("torchft", reason="no torchft in this venv: setup.sh found no build of the torchft extra")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """A Lighthouse and the groups' processes; everything killed at the end."""

    def __init__(self, d: Path):
        self.d, self.ck, self.procs = d, d / "ck", []
        self.ck.mkdir()
        self.port = free_port()
        binary = find_lighthouse(dict(os.environ))
        assert binary, "no torchft_lighthouse beside this Python"
        self.spawn(lighthouse_argv(binary, self.port), self.d / "lighthouse.log", os.environ)

    def spawn(self, argv, log: Path, env) -> subprocess.Popen:
        with open(log, "ab") as out:
            p = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def group(self, g: int, launch: int, rejoin: bool, resume: str = "", step_time: float = 0.0) -> subprocess.Popen:
        env = dict(os.environ, SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_JOB_ID="1", REPLICA_GROUP_ID=str(g),
                   NUM_REPLICA_GROUPS="2", SLURM_FT_GROUP_REJOIN="1" if rejoin else "0", SLURM_FT_LAUNCH=str(launch),
                   MASTER_ADDR="localhost", MASTER_PORT=str(free_port()),
                   TORCHFT_LIGHTHOUSE=f"http://localhost:{self.port}",
                   PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "lab")]))
        return self.spawn([PY, "-m", "slurm_ft_lab.ftddp", "--ckpt-dir", str(self.ck), "--resume", resume,
                           "--step-time", str(step_time), "--save-every", "10", "--gpu-check", "off"],
                          self.d / f"g{g}-{launch}.log", env)

    def steps(self, g: int, launch=None) -> list:
        return [e for e in read_log(str(self.ck)) if e["event"] == "step" and e["group"] == g and e["committed"]
                and (launch is None or e["launch"] == launch)]

    def in_quorum(self, n: int) -> bool:
        return all(len([e for e in self.steps(g) if e["participants"] == 2]) >= n for g in (0, 1))

    def newest_ckpt(self) -> str:
        """What the supervisor passes as {ckpt}: the newest complete checkpoint, '' before the first."""
        return ckpts.latest(str(self.ck)).path or ""

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def output(self) -> str:
        return "\n".join(f"== {f.name}\n" + f.read_text(errors="replace")[-3000:] for f in sorted(self.d.glob("*.log")))


@pytest.fixture
def job(tmp_path):
    j = Job(tmp_path)
    yield j
    j.close()


def alive(p: subprocess.Popen, job: Job) -> bool:
    assert p.poll() is None, f"exit {p.returncode}\n" + job.output()
    return True


def assert_stepping(steps: list, t_from: float) -> None:
    """Committed step numbers one apart, in order, with no pause of 10 s or more, from before t_from on."""
    window = [e for e in steps if e["t"] >= t_from - 2]
    assert window and window[0]["t"] < t_from, window[:2]
    nums = [e["step"] for e in window]
    assert nums == list(range(nums[0], nums[0] + len(nums))), nums
    gaps = [b["t"] - a["t"] for a, b in zip(window, window[1:])]
    assert max(gaps) < 10.0, sorted(gaps)[-3:]


def test_a_peer_killed_during_the_all_reduce_leaves_the_healthy_group_stepping(job):
    g0 = job.group(0, 0, False)
    g1 = job.group(1, 1, False)
    wait_for(lambda: job.in_quorum(20), START_S, "both groups stepping in the quorum")
    kills = []
    for launch in (2, 3, 4):                         # three kills: most land in an all-reduce, one is enough
        kills.append(time.time())
        os.killpg(g1.pid, signal.SIGKILL)
        g1.wait()
        g1 = job.group(1, launch, True, job.newest_ckpt())
        wait_for(lambda: alive(g0, job) and len([e for e in job.steps(1, launch) if e["participants"] == 2]) >= 5,
                 START_S, f"group 1's launch {launch} back in the quorum")
    out = (job.d / "g0-0.log").read_text(errors="replace")
    assert "AssertionError" not in out, out[-3000:]
    assert_stepping(job.steps(0), kills[0])
    assert {e["launch"] for e in job.steps(0)} == {0}
    # each relaunch healed from group 0: it went on from group 0's step, not its checkpoint's
    for launch in (2, 3, 4):
        first = job.steps(1, launch)[0]
        at = [e["step"] for e in job.steps(0) if e["t"] <= first["t"]][-1]
        assert first["step"] >= at, (first, at)


def test_a_group_relaunched_alone_trains_on_from_its_checkpoint_and_the_other_heals_from_it(job):
    g0 = job.group(0, 0, False, step_time=0.05)
    g1 = job.group(1, 1, False, step_time=0.05)
    wait_for(lambda: job.in_quorum(25) and job.newest_ckpt(), START_S, "both groups stepping, a checkpoint")
    os.killpg(g1.pid, signal.SIGKILL)
    g1.wait()
    os.killpg(g0.pid, signal.SIGSTOP)                # group 0 stuck: no quorum request, no heartbeat
    newest = ckpts.latest(str(job.ck))
    ckpt, at_ckpt = newest.path, newest.step
    job.group(1, 2, True, ckpt, step_time=0.05)
    # past any step group 0 reached (a checkpoint every 10): group 0 is the one behind when it comes back
    wait_for(lambda: job.steps(1, 2)[15:], START_S, "group 1 stepping alone")
    os.killpg(g0.pid, signal.SIGCONT)
    alone = job.steps(1, 2)
    start = [e for e in read_log(str(job.ck)) if e["event"] == "start" and e["launch"] == 2][0]
    assert alone[0]["step"] == at_ckpt + 1 and alone[0]["participants"] == 1     # from the checkpoint, not 0
    assert start["rejoin"] and start["resumed_from"] == ckpt and start["step"] == at_ckpt
    healed = wait_for(lambda: alive(g0, job) and [e for e in job.steps(0) if e.get("healed") and e["t"] > alone[0]["t"]], 120,
                      "group 0 healed from group 1")
    assert healed[0]["step"] > at_ckpt + 15
    wait_for(lambda: [e for e in job.steps(0) if e["t"] > healed[0]["t"] and e["participants"] == 2][5:], 60,
             "both groups in the quorum again")
    assert alive(g0, job)
