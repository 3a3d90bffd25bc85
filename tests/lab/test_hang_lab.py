"""Hangs without an Xid and restart loops on a bad checkpoint, on the real lab (`slurm-ft sbatch
--hang-timeout S`): the supervisor in the batch step sees no progress report (slurm_ft.progress) for S
seconds, checks the step's nodes with one srun of `slurm-ft check --level prolog`, relaunches without a
culprit it finds, else restarts the step in place; a checkpoint the job keeps failing on is passed over.

The jobs are the lab job user's, as on a cluster: their checks cannot read the kernel log nor drain; where
a culprit is to be found and drained, the nodes of the job run `slurm-ft watch` (root), which answers them."""
from __future__ import annotations

import json
import pwd
from pathlib import Path

import pytest

from slurm_ft_lab.inject import inject
from slurm_ft_lab.trainer import read_log
from slurm_ft.slurm.hostlist import expand
from slurm_ft_lab.waits import wait_for
from tests.lab.ctl_helpers import PY, periodic_check_skips, slurm_ft, wait_job, watching

pytestmark = pytest.mark.lab

HANG_S = 10


def submit(lab, work: Path, n: int, k: int, *trainer: str, ft=()) -> tuple:
    ck = work / "ck"
    spares = ("--hot-spares", str(k)) if k else ()
    p = slurm_ft(lab, None, "sbatch", "--ckpt-dir", str(ck), *spares, "--hang-timeout", str(HANG_S), *ft,
                 "-N", str(n), "--ntasks-per-node=1", "-o", str(work / "job.out"), "--open-mode=append",
                 PY, "-m", "slurm_ft_lab.trainer", "--ckpt-dir", str(ck), "--resume", "{ckpt}",
                 "--step-time", "0.3", "--ckpt-every", "5", *trainer,
                 env={"LD_LIBRARY_PATH": str(lab.dir / "lib")})   # the nodes' "driver": the lab's fake NVML
    return int(p.stdout.split()[-1]), ck


def events(ck: Path, name: str) -> list:
    path = ck / "slurm-ft-starts.jsonl"
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["event"] == name]


def first_step(ck: Path, launch: int):
    return next((e for e in read_log(str(ck)) if e["event"] == "step" and e.get("launch", 0) == launch), None)


def start_of(ck: Path, launch: int):
    return next((e for e in read_log(str(ck)) if e["event"] == "start" and e.get("launch", 0) == launch), None)


def show(work: Path) -> None:
    """Printed by pytest only when the test failed."""
    for name in ("job.out", "ck/slurm-ft-starts.jsonl", "ck/trainer-log.jsonl"):
        f = work / name
        print(f"== {name}", *(f.read_text(errors="replace").splitlines()[-60:] if f.exists() else ["(none)"]), sep="\n")


def test_a_hang_without_a_culprit_restarts_in_place_without_hot_spares(lab, work):
    job_id, ck = submit(lab, work, 2, 0, "--stall-at", "8", "--stall-rank", "1", "--gpu-check", "off")
    try:
        job = wait_job(lab, job_id, "RUNNING", timeout=180)
        assert len(job.nodes) == 2
        resumed = wait_for(lambda: first_step(ck, 1), 120, "the first step after the restart")
        stall = next(e for e in read_log(str(ck)) if e["event"] == "stall")
        launches = events(ck, "launch")
        assert launches[1]["nodes"] == launches[0]["nodes"]               # in place: the same nodes
        assert "restart in place after a hang" in launches[1]["reason"]
        assert events(ck, "hang_check")[0]["culprits"] == ""
        assert events(ck, "hang_restart")[0]["restarts"] == 1
        assert start_of(ck, 1)["resumed_from"] and start_of(ck, 1)["step"] == 5   # the latest complete checkpoint
        [hang] = events(ck, "hang")
        print(f"stall to hang declared: {hang['t'] - stall['t']:.1f} s, to first resumed step: "
              f"{resumed['t'] - stall['t']:.1f} s (hang timeout {HANG_S} s)")
        # the hang timeout, not a slower timer, decides; progress is reported at most once a second
        assert HANG_S - 2 <= hang["t"] - stall["t"] <= HANG_S + 10
        assert resumed["t"] - stall["t"] < 60                   # not the 60 s grace, nor a health check's cycle
        assert lab.client.job(job_id).state == "RUNNING" and lab.client.job(job_id).restart_count == 0
        assert "hang: no progress for" in (work / "job.out").read_text()
    except BaseException:
        show(work)
        raise


def gpu_lost_silently(lab, work: Path, on_fault: str) -> tuple:
    """A 2 + 1 hot-spare job past its first checkpoint, then GPU 0 of a node of its step falls off the bus
    with no kernel-log line (no Xid for a watcher: the nodes' watchers follow the kernel log only; slurmd's
    periodic check kept off the node, as it once found it first in CI): (job id, checkpoint dir, the node,
    the first step after the relaunch). The user's check sees the lost GPU (NVML answers users); the drain
    of the culprit is its node's watcher's."""
    job_id, ck = submit(lab, work, 2, 1, "--gpu-check", "on", "--on-fault", on_fault)
    job = wait_job(lab, job_id, "RUNNING", timeout=180)
    wait_for(lambda: any(e["event"] == "ckpt" for e in read_log(str(ck))), 120, "a checkpoint")
    victim = next(x for x in expand(events(ck, "launch")[0]["nodes"]) if x != job.batch_host)
    with watching(lab, job.nodes, work, "--no-nvml"), periodic_check_skips(lab, victim):
        slurm_ft(lab, None, "lab", "inject", victim, "--gpu", "0", "--gpu-lost", "--no-log", "--dir", str(lab.dir))
        resumed = wait_for(lambda: first_step(ck, 1), 120, "the first step after the relaunch")
    return job_id, ck, victim, resumed


def test_a_hang_with_a_culprit_relaunches_on_the_hot_spare(lab, work):
    try:
        job_id, ck, victim, resumed = gpu_lost_silently(lab, work, "hang")     # the rank hangs on it
        check = events(ck, "hang_check")[0]
        assert check["culprits"] == victim
        relaunch = events(ck, "launch")[1]
        assert victim not in expand(relaunch["nodes"]) and len(expand(relaunch["nodes"])) == 2
        assert events(ck, "fault")[0]["nodes"] == victim and not events(ck, "hang_restart")
        assert lab.client.node(victim).drained                  # its watcher drained it (the user's `check --drain`)
        assert start_of(ck, 1)["resumed_from"] and resumed["step"] > start_of(ck, 1)["step"]
        assert lab.client.job(job_id).restart_count == 0
    except BaseException:
        show(work)
        raise


def test_a_hang_whose_culprit_shows_only_in_the_kernel_log_is_found_through_the_nodes_watcher(lab, work):
    """The job's user cannot read the kernel log (root's, as /dev/kmsg with kernel.dmesg_restrict=1): the
    hang check in the job asks each node's watcher, which reads it as root, names the culprit, and drains
    it at the user's request for an Xid in that log (one the watcher missed: logged before it started,
    with no saved place, as after a reboot). The driver shows nothing: the kernel log is the only evidence."""
    job_id, ck = submit(lab, work, 2, 1, "--stall-at", "40", "--stall-rank", "1", "--gpu-check", "off")
    try:
        job = wait_job(lab, job_id, "RUNNING", timeout=180)
        wait_for(lambda: events(ck, "launch"), 120, "launch 0")
        victim = next(x for x in expand(events(ck, "launch")[0]["nodes"]) if x != job.batch_host)
        with periodic_check_skips(lab, victim):
            inject(lab.dir, victim, "xid", gpu=3, value=79, driver=False)         # the kernel log alone
            with watching(lab, job.nodes, work) as logs:
                assert not events(ck, "hang"), "the step stalled before the watchers were up"
                resumed = wait_for(lambda: first_step(ck, 1), 180, "the first step after the relaunch")
        [check] = events(ck, "hang_check")
        assert check["culprits"] == victim
        relaunch = events(ck, "launch")[1]
        assert victim not in expand(relaunch["nodes"]) and len(expand(relaunch["nodes"])) == 2
        assert start_of(ck, 1)["resumed_from"] and resumed["step"] > start_of(ck, 1)["step"]
        node = lab.client.node(victim)
        assert node.drained and node.reason.startswith("slurm-ft: XID79 gpu3"), node
        uid = pwd.getpwnam(lab.user).pw_uid           # the supervisor's checks ran as the job's user
        text = logs[victim].read_text()
        assert f"answered uid {uid}: prolog --json" in text and f"answered uid {uid}: prolog --drain --json" in text
        assert lab.client.job(job_id).restart_count == 0
    except BaseException:
        show(work)
        raise


def test_a_step_that_dies_on_a_gpu_nothing_drained_relaunches_on_the_hot_spare_at_once(lab, work):
    try:
        # the rank on it dies, the step fails, Slurm shows no fault: the supervisor checks the step's nodes
        job_id, ck, victim, resumed = gpu_lost_silently(lab, work, "die")
        [check] = events(ck, "exit_check")
        assert check["culprits"] == victim and check["rc"] != 0
        relaunch = events(ck, "launch")[1]
        assert victim not in expand(relaunch["nodes"]) and len(expand(relaunch["nodes"])) == 2
        assert not events(ck, "hang") and lab.client.node(victim).drained
        died = next(e for e in read_log(str(ck)) if e["event"] == "fault")
        print(f"rank died to first resumed step: {resumed['t'] - died['t']:.1f} s")
        assert resumed["t"] - died["t"] < 60                    # not the 60 s grace, nor a health check's cycle
        assert lab.client.job(job_id).restart_count == 0
    except BaseException:
        show(work)
        raise


def test_a_checkpoint_that_keeps_failing_is_passed_over(lab, work):
    # the first run stalls after step 12 (checkpoint 10 complete); loading 10 then hangs every time
    job_id, ck = submit(lab, work, 2, 0, "--stall-at", "12", "--bad-ckpt", "10", "--on-fault", "hang",
                        "--gpu-check", "off", ft=("--ckpt-fails", "2", "--max-restarts", "5"))
    try:
        wait_job(lab, job_id, "RUNNING", timeout=180)
        wait_for(lambda: first_step(ck, 3), 240, "the first step from the previous checkpoint")
        launches = events(ck, "launch")
        assert [x["step"] for x in launches[:4]] == [None, 10, 10, 5]
        assert launches[3]["passed_over"] == {"10": 2} and launches[3]["newest"] == 10
        assert "failed 2 starts in a row" in (work / "job.out").read_text()
        assert start_of(ck, 3)["step"] == 5 and start_of(ck, 3)["state_ok"]
    except BaseException:
        show(work)
        raise


def test_on_the_requeue_path_a_checkpoint_that_keeps_failing_is_passed_over(lab, work):
    """No supervisor: each requeue (the controller's after a node fault, an admin's, a wrapper's) starts
    the batch script anew through the starter, which reads the same starts log. The first run ends at
    step 12 (checkpoint 10 complete); every start from checkpoint 10 fails at once; after 2 of them
    (--ckpt-fails 2) the next start passes 10 over and resumes from 5."""
    ck = work / "ck"
    p = slurm_ft(lab, None, "sbatch", "--ckpt-dir", str(ck), "--ckpt-fails", "2", "-N", "1", "-o",
                 str(work / "job.out"), "--open-mode=append", PY, "-m", "slurm_ft_lab.trainer", "--ckpt-dir",
                 str(ck), "--resume", "{ckpt}", "--step-time", "0.1", "--ckpt-every", "5", "--steps", "12",
                 "--bad-ckpt", "10", "--gpu-check", "off")
    job_id = int(p.stdout.split()[-1])
    try:
        for start in (1, 2, 3):
            wait_for(lambda: len(events(ck, "jobstart")) >= start and _ended(lab, job_id), 180,
                     f"start {start} of job {job_id} to end")
            _requeue(lab, job_id, ck, start)
        wait_for(lambda: start_of(ck, 0) and [e for e in read_log(str(ck))
                                              if e["event"] == "start" and e.get("step") == 5], 180,
                 "the start from the previous checkpoint")
        starts = events(ck, "jobstart")
        assert [x["step"] for x in starts[:4]] == [None, 10, 10, 5]
        assert [x["restart"] for x in starts[:4]] == [0, 1, 2, 3]           # three real Slurm requeues
        assert starts[3]["passed_over"] == {"10": 2} and starts[3]["newest"] == 10
        assert "failed 2 starts in a row" in (work / "job.out").read_text()
    except BaseException:
        show(work)
        raise
    finally:
        lab.client.cancel(job_id)


def _ended(lab, job_id: int) -> bool:
    job = lab.client.job(job_id)
    return job.state in ("COMPLETED", "FAILED") or job.held   # held: 26.05 requeued a failed start itself


def _requeue(lab, job_id: int, ck: Path, starts: int) -> None:
    """Queue the ended job again and start it at once, as the controller does after a fault; return
    once the starter logged the next start."""
    if lab.client.job(job_id).held:
        lab.client.release(job_id)
    else:
        lab.client.requeue(job_id)

    def started() -> bool:
        job = lab.client.job(job_id)
        if job.state == "PENDING" and job.reason == "BeginTime":
            lab.client.update_job(job_id, StartTime="now")
        return len(events(ck, "jobstart")) > starts
    wait_for(started, 180, f"start {starts + 1} of job {job_id}")


def test_a_hang_with_the_restart_limit_used_up_ends_the_job_with_exit_75(lab, work):
    job_id, ck = submit(lab, work, 2, 0, "--stall-at", "3", "--stall-rank", "1", "--gpu-check", "off",
                        ft=("--max-restarts", "0"))
    try:
        # >= 25.11 with expedite: Slurm requeues any non-zero exit held; the controller leaves a 75 alone
        ends = ("FAILED", "REQUEUE_HOLD") if lab.client.expedited_requeue_available() else ("FAILED",)
        job = wait_for(lambda: next((j for j in [lab.client.job(job_id)] if j.state in ends), None),
                       180, f"job {job_id} {' or '.join(ends)}")
        assert job.exit_code == "75:0", job
        end = events(ck, "exit")[-1]
        assert end["rc"] == 75 and "restart limit is used up" in end["reason"]
        assert not events(ck, "hang_restart") and len(events(ck, "launch")) == 1
        assert "hung with no culprit and the restart limit is used up" in (work / "job.out").read_text()
    except BaseException:
        show(work)
        raise
