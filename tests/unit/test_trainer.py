"""The toy trainer without Slurm: ranks as local processes with the SLURM_* variables srun would set."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from slurm_ft_lab import trainer
from slurm_ft.job import ckpt


def start_ranks(ck, world, *args, job="41", restart=0, env=None):
    procs = []
    for rank in range(world):
        e = {**os.environ, "SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world), "SLURM_JOB_ID": job,
             "SLURM_RESTART_COUNT": str(restart), "SLURMD_NODENAME": f"gpu{rank + 1:03d}", **(env or {})}
        procs.append(subprocess.Popen([sys.executable, "-m", "slurm_ft_lab.trainer", "--ckpt-dir", str(ck), *args],
                                      env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs, timeout=60):
    return [p.wait(timeout=timeout) for p in procs]


def test_ranks_train_checkpoint_and_resume(tmp_path):
    ck = tmp_path / "ck"
    rcs = finish(start_ranks(ck, 3, "--steps", "12", "--step-time", "0.02", "--ckpt-every", "5",
                             "--gpu-check", "off"))
    assert rcs == [0, 0, 0]
    latest = ckpt.latest(str(ck), verify=True)
    assert latest.step == 10
    assert sorted(os.listdir(latest.path)) == ["COMPLETE", "rank_00000", "rank_00001", "rank_00002"]

    rcs = finish(start_ranks(ck, 3, "--steps", "16", "--step-time", "0.02", "--ckpt-every", "5",
                             "--gpu-check", "off", "--resume", latest.path, restart=1))
    assert rcs == [0, 0, 0]
    first, second = trainer.runs(trainer.read_log(str(ck)))
    assert (first["first_step"], first["last_step"], first["end"]) == (1, 12, "done")
    assert (second["resumed_from_step"], second["first_step"], second["last_step"]) == (10, 11, 16)
    assert second["steps_lost"] == 2
    start = [e for e in trainer.read_log(str(ck)) if e["event"] == "start"][1]
    assert start["state_ok"] and start["world"] == 3
    assert ckpt.latest(str(ck)).step == 15
    assert len([n for n in os.listdir(ck) if n.startswith("step_")]) <= 3     # --keep 3


def wait_step(ck, step, timeout=60):
    deadline = time.monotonic() + timeout
    while not any(e["event"] == "step" and e["step"] >= step for e in trainer.read_log(str(ck))):
        assert time.monotonic() < deadline, f"no step {step} in {timeout} s"
        time.sleep(0.05)


def test_a_dead_peer_is_a_collective_timeout(tmp_path):
    ck = tmp_path / "ck"
    procs = start_ranks(ck, 3, "--steps", "1000", "--step-time", "0.05", "--gpu-check", "off",
                        "--collective-timeout", "2")
    wait_step(ck, 3)
    procs[1].send_signal(signal.SIGKILL)
    t_kill = time.time()
    rcs = finish(procs)
    assert rcs[0] == trainer.EXIT_TIMEOUT and rcs[2] == trainer.EXIT_TIMEOUT
    timeout = [e for e in trainer.read_log(str(ck)) if e["event"] == "timeout"][0]
    # nobody noticed before the timeout, counted from rank 0's arrival at the barrier (which may
    # precede the kill by a step, more on a loaded machine)
    assert timeout["t"] - t_kill >= 1.0
    assert "ranks [1]" in timeout["reason"]


def test_on_peer_loss_exit_fails_at_once(tmp_path):
    ck = tmp_path / "ck"
    procs = start_ranks(ck, 2, "--steps", "1000", "--step-time", "0.05", "--gpu-check", "off",
                        "--collective-timeout", "600", "--on-peer-loss", "exit")
    wait_step(tmp_path / "ck", 3)
    procs[1].send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    assert procs[0].wait(timeout=30) == trainer.EXIT_TIMEOUT
    assert time.monotonic() - t0 < 10


@pytest.fixture
def fake_lab(tmp_path):
    """A lab directory with only the fake NVML library and node state: no daemons."""
    from slurm_ft_lab.fake_nvml import build
    build(tmp_path / "lab" / "lib")
    for node in ("gpu001", "gpu002"):
        (tmp_path / "lab" / "nodes" / node).mkdir(parents=True)
    return tmp_path / "lab"


def test_fatal_xid_kills_the_rank_like_a_cuda_error_app_xid_does_not(tmp_path, fake_lab):
    from slurm_ft_lab.inject import inject
    ck = tmp_path / "ck"
    procs = start_ranks(ck, 2, "--steps", "1000", "--step-time", "0.05", "--collective-timeout", "3",
                        "--gpu-check", "on", env={"SLURM_FT_LAB_DIR": str(fake_lab), "LD_LIBRARY_PATH": ""})
    wait_step(ck, 2)
    inject(fake_lab, "gpu002", "xid", gpu=1, value=31)      # the application's own fault
    time.sleep(0.5)
    assert procs[1].poll() is None
    inject(fake_lab, "gpu002", "xid", gpu=6, value=79)
    assert procs[1].wait(timeout=30) == trainer.EXIT_CUDA
    assert "CUDA error" in procs[1].stderr.read()
    assert procs[0].wait(timeout=30) == trainer.EXIT_TIMEOUT
    fault = [e for e in trainer.read_log(str(ck)) if e["event"] == "fault"]
    assert [(f["rank"], f["node"], f["reason"]) for f in fault] == [(1, "gpu002", "Xid 79 on GPU 6")]


def test_gpu_check_on_without_nvml_refuses_to_start(tmp_path):
    procs = start_ranks(tmp_path / "ck", 1, "--steps", "1", "--gpu-check", "on",
                        env={"LD_LIBRARY_PATH": str(tmp_path), "SLURM_FT_LAB_DIR": ""})
    p = procs[0]
    rc = p.wait(timeout=30)
    err = p.stderr.read()
    if rc == 0:
        pytest.fail("a real NVIDIA driver is present; this test expects none")
    assert rc == 4 and "cannot watch GPUs" in err


def test_resume_remaps_shards_when_the_job_shrank(tmp_path):
    d = str(tmp_path)
    files = {trainer.shard_name(r): trainer.shard_bytes(20, r, 4, trainer.expected_value(20, r), 64)
             for r in range(4)}
    path = ckpt.write_checkpoint(d, 20, files, meta={"world": 4})
    assert trainer.load_resume(path, 2) == (20, trainer.expected_value(20, 2), True)
    # a grown job's extra rank reads a peer's shard and derives its own value
    assert trainer.load_resume(path, 5) == (20, trainer.expected_value(20, 5), True)
    with open(os.path.join(path, trainer.shard_name(1)), "wb") as fh:
        fh.write(trainer.shard_bytes(20, 1, 4, 7, 64))
    assert trainer.load_resume(path, 1)[2] is False           # wrong state is detected


def test_bad_options_exit_2():
    p = subprocess.run([sys.executable, "-m", "slurm_ft_lab.trainer", "--ckpt-dir", "/tmp/x", "--keep", "0"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--keep" in p.stderr


def test_a_rank_starts_on_the_standard_library_and_pynvml_only():
    """64 ranks start at once on the lab's two cores: the trainer's import pulls in no other slurm_ft
    module (ckpt.py comes in when a checkpoint is written), and its resume marker is ckpt's."""
    import subprocess
    import sys

    from slurm_ft_lab import trainer
    from slurm_ft.job import ckpt
    assert trainer.CKPT_MARKER == ckpt.MARKER
    from pathlib import Path
    lab, repo = (str(Path(trainer.__file__).resolve().parents[i]) for i in (1, 2))
    code = (f"import sys; sys.path[:0] = [{lab!r}, {repo!r}]; import slurm_ft_lab.trainer; "
            "print(sorted(m for m in sys.modules if m.startswith('slurm_ft') or m in ('typing', 'dataclasses')))")
    # -S: what site.py imports on this machine (its .pth files) is not the trainer's doing
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['slurm_ft', 'slurm_ft_lab', 'slurm_ft_lab.trainer']"


def test_the_trainer_imports_no_slurm_ft_module_but_the_progress_call():
    """64 ranks start at once in the lab: the trainer loads slurm_ft/__init__ and, at its first
    report, slurm_ft.heartbeat, nothing else of slurm_ft."""
    import subprocess
    import sys
    code = ("import sys, os; os.environ['SLURM_FT_CKPT_DIR'] = sys.argv[1]; import slurm_ft, slurm_ft_lab.trainer; "
            "slurm_ft.progress(1); print(sorted(m for m in sys.modules if m.startswith('slurm_ft')))")
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([sys.executable, "-c", code, d], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == str(["slurm_ft", "slurm_ft.heartbeat", "slurm_ft_lab", "slurm_ft_lab.trainer"])


def test_stall_and_bad_checkpoint_options():
    from slurm_ft_lab.trainer import parse_args
    a = parse_args(["--ckpt-dir", "/x"])
    assert (a.stall_at, a.stall_rank, a.bad_ckpt) == (0, 0, -1)        # off by default
    a = parse_args(["--ckpt-dir", "/x", "--stall-at", "8", "--stall-rank", "1", "--bad-ckpt", "10"])
    assert (a.stall_at, a.stall_rank, a.bad_ckpt) == (8, 1, 10)


def test_a_checkpoint_asked_for_is_saved_by_every_rank_at_one_step_and_the_ranks_stop(tmp_path):
    from slurm_ft.job import ckptrequest
    ck = tmp_path / "ck"
    env = {"SLURM_FT_CKPT_DIR": str(ck), "SLURM_FT_LAUNCH": "0"}
    procs = start_ranks(ck, 3, "--steps", "100000", "--step-time", "0.02", "--ckpt-every", "1000",
                        "--gpu-check", "off", env=env)
    wait_step(ck, 20)
    ckptrequest.request(str(ck), "41", 0, 1, "another launch", 1)     # not this launch: nothing happens
    time.sleep(1.5)
    assert all(p.poll() is None for p in procs)
    ckptrequest.request(str(ck), "41", 0, 0, "gpu002 degraded", 2)
    assert finish(procs) == [0, 0, 0]
    log = trainer.read_log(str(ck))
    [saved] = [e for e in log if e["event"] == "ckpt"]
    [stop] = [e for e in log if e["event"] == "stop"]
    last = max(e["step"] for e in log if e["event"] == "step")
    assert saved["requested"] and saved["step"] == stop["step"] == last     # no step after the checkpoint
    assert ckpt.latest(str(ck), verify=True).step == last
    assert trainer.runs(log)[0]["end"] == "stop"


def test_the_busy_time_each_rank_reports_is_its_compute_a_slowed_gpu_doubles_it(tmp_path):
    from slurm_ft import heartbeat
    from slurm_ft_lab import fake_nvml, inject
    lib = fake_nvml.build(tmp_path / "lib")
    inject.init_node(tmp_path / "lab", "gpu002", gpus=8)
    inject.inject(tmp_path / "lab", "gpu002", "slow", gpu=0, value=0.5)
    ck = tmp_path / "ck"
    env = {"SLURM_FT_CKPT_DIR": str(ck), "LD_LIBRARY_PATH": str(lib.parent), "SLURM_FT_LAB_DIR": str(tmp_path / "lab"),
           "CUDA_VISIBLE_DEVICES": "0"}
    procs = start_ranks(ck, 2, "--steps", "12", "--step-time", "0.2", "--ckpt-every", "0", "--gpu-check", "on",
                        env=env)
    assert finish(procs) == [0, 0]
    busy = {r["node"]: r["busy_s"] for r in heartbeat.read_all(str(ck)).values()}
    assert busy["gpu001"] >= 0.2 and 1.6 <= busy["gpu002"] / busy["gpu001"] <= 2.5, busy
