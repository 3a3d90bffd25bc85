"""A node shared by several jobs and users (issue 22, the node side; review 2026-12-01 R1, R4, R9, R10).

What a user of a shared node checks: a job's epilog judges only the GPUs Slurm gave that job and that
job's processes (a neighbour's live rank never fails the node); a process name is data (not UTF-8,
control bytes, a name picked to look like a driver daemon) and never blinds the check or breaks a
drain; `health.ignore_processes` names executables owned by root, not names a user picks.
"""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from slurm_ft.errors import UsageError
from slurm_ft.finding import Severity
from slurm_ft.gpu.sample import HostReadings, NodeSample
from slurm_ft.node.host import GpuProcesses
from slurm_ft.node import run
from slurm_ft.slurm.client import check_reason
from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path
from test_check_socket import node  # noqa: F401 - the fixture: node n1, fake GPUs, a watcher to start
from test_health_run import _kmsg_line, config, gpus

NAMED = ("import ctypes, sys, time\n"
         "ctypes.CDLL(None).prctl(15, bytes.fromhex(sys.argv[1]), 0, 0, 0)\n"   # PR_SET_NAME
         "time.sleep(120)\n")


def named_process(name: bytes, uid: int = -1) -> subprocess.Popen:
    """A live process whose /proc/PID/comm is `name` (any user can do this to their own process)."""
    def drop() -> None:
        os.setuid(uid)
    p = subprocess.Popen(["/usr/bin/python3", "-c", NAMED, name.hex()], preexec_fn=drop if uid >= 0 else None)
    comm = Path(f"/proc/{p.pid}/comm")
    deadline = time.monotonic() + 10
    while comm.read_bytes() != name[:15] + b"\n":
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.01)
    return p


@pytest.fixture
def procs():
    started = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def on_gpu(pids_by_gpu):
    """A reader whose GPUs hold these processes (NVML's nvmlDeviceGetComputeRunningProcesses)."""
    return lambda node, parts: NodeSample(node=node, gpus=gpus({i: {"processes": tuple(p)} for i, p in
                                                               pids_by_gpu.items()}))


def _scope(env):
    from slurm_ft.node.jobscope import JobScope   # new in issue 22: imported here so the old code's tests still run
    return JobScope.from_env(env)


def fails(report):
    return [(f.code, f.gpu) for f in report.findings if f.severity is Severity.FAIL]


# --- R1: the ending job's GPUs and processes only -------------------------------------------------

def _epilog(node, tmp_path, **env):
    """`slurm-ft check --level epilog` as the epilog runs it, with the job's environment."""
    cfg = tmp_path / "slurm-ft.yaml"
    if "process_grace_s" not in cfg.read_text():
        cfg.write_text(cfg.read_text() + "  process_grace_s: 0.3\n")
    return node.check("--level", "epilog", **env)


def test_a_neighbours_live_rank_does_not_fail_the_ending_jobs_epilog(node, tmp_path, procs):
    procs.append(named_process(b"python"))
    node.fault(f"gpu 5 proc {procs[0].pid} 1000000")          # job B's rank on GPU 5, alive
    code, out, err, _ = _epilog(node, tmp_path, SLURM_JOB_ID="7", SLURM_JOB_UID="0", SLURM_JOB_GPUS="0,1,2,3",
                                CUDA_VISIBLE_DEVICES="0,1,2,3")
    assert code == 0 and "epilog: healthy" in out and "slurm-ft-verdict" not in out, out + err
    code, out, _, _ = _epilog(node, tmp_path, SLURM_JOB_ID="8", SLURM_JOB_UID="0", SLURM_JOB_GPUS="4,5,6,7")
    assert code == 1 and "GPU_PROC_LEFT gpu5" in out and "slurm-ft-verdict: FAIL" in out


def test_the_watcher_judges_the_same_gpus_as_the_hooks_own_process(node, tmp_path, procs):
    procs.append(named_process(b"python"))
    node.fault(f"gpu 5 proc {procs[0].pid} 1000000")
    _epilog(node, tmp_path)                                   # the config's grace, before the watcher reads it
    node.start()
    for gpus_, want in (("0,1,2,3", 0), ("4,5,6,7", 1)):
        job = dict(SLURM_JOB_ID="9", SLURM_JOB_UID="0", SLURM_JOB_GPUS=gpus_)
        served = _epilog(node, tmp_path, **job)
        local = node.check("--level", "epilog", "--local", **job)
        assert served[3] and not local[3]
        assert served[0] == local[0] == want, served[1] + local[1]
    # a value that is not a GPU index list is not the watcher's to answer: the hook judges it itself
    code, out, _, served_ = _epilog(node, tmp_path, SLURM_JOB_ID="9", SLURM_JOB_UID="0",
                                    SLURM_JOB_GPUS="0,1;touch /tmp/x")
    assert not served_ and code == 1 and "not known" in out and "GPU_PROC_LEFT gpu5" in out


def test_a_job_without_gpus_here_judges_only_its_users_processes(tmp_path, procs):
    """A CPU-only job next to a GPU job (no SLURM_JOB_GPUS): every GPU, but only its user's processes."""
    procs.append(named_process(b"python"))                    # root's rank (another user than the job's)
    cfg = config(tmp_path, process_grace_s=0.3)
    job = _scope({"SLURM_JOB_ID": "7", "SLURM_JOB_UID": "65534"})
    rep = run.run_level("epilog", "gpu001", cfg, reader=on_gpu({5: [procs[0].pid]}), job=job)
    assert rep.healthy, rep.findings
    [note] = [f for f in rep.findings if f.check == "processes"]
    assert note.severity is Severity.OK and "not known" in note.reason and "uid 65534" in note.reason
    mine = _scope({"SLURM_JOB_ID": "7", "SLURM_JOB_UID": "0"})
    rep = run.run_level("epilog", "gpu001", cfg, reader=on_gpu({5: [procs[0].pid]}), job=mine)
    assert fails(rep) == [("GPU_PROC_LEFT", 5)]


def test_a_leftover_of_the_job_on_its_own_gpu_still_fails(tmp_path, procs):
    procs.append(named_process(b"stuck", uid=65534))
    job = _scope({"SLURM_JOB_ID": "7", "SLURM_JOB_UID": "65534", "SLURM_JOB_GPUS": "2,3"})
    rep = run.run_level("epilog", "gpu001", config(tmp_path, process_grace_s=0.3),
                        reader=on_gpu({3: [procs[0].pid]}), job=job)
    assert fails(rep) == [("GPU_PROC_LEFT", 3)] and f"{procs[0].pid} (stuck)" in rep.findings[-1].reason


def test_a_neighbours_process_is_not_waited_for(tmp_path, procs):
    """Only the job's processes are waited for (process_grace_s, re-reading NVML): a neighbour's live
    rank is not, so it costs the epilog no time."""
    procs.append(named_process(b"python"))
    reads = []
    read = on_gpu({5: [procs[0].pid]})
    job = _scope({"SLURM_JOB_ID": "7", "SLURM_JOB_UID": "0", "SLURM_JOB_GPUS": "0"})
    rep = run.run_level("epilog", "gpu001", config(tmp_path, process_grace_s=1.0),
                        reader=lambda n, p: reads.append(p) or read(n, p), job=job)
    assert rep.healthy and len(reads) == 1
    rep = run.run_level("epilog", "gpu001", config(tmp_path, process_grace_s=1.0),
                        reader=lambda n, p: reads.append(p) or read(n, p))       # no job: every process
    assert not rep.healthy and len(reads) > 2, "the same process, the job's, is waited for"


UUID = "GPU-{:08x}-1111-2222-3333-444455556666".format


@pytest.mark.parametrize("env, gpus_, why", [
    ({"SLURM_JOB_GPUS": "0,1,2,3"}, {0, 1, 2, 3}, "SLURM_JOB_GPUS"),
    ({"SLURM_JOB_GPUS": "4,5,6,7", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}, {4, 5, 6, 7}, "SLURM_JOB_GPUS"),  # 22.05 lab
    ({"SLURM_JOB_GPUS": "3", "CUDA_VISIBLE_DEVICES": "0"}, {3}, "SLURM_JOB_GPUS"),    # Slurm's own index wins
    ({"CUDA_VISIBLE_DEVICES": "4,5"}, {4, 5}, "CUDA_VISIBLE_DEVICES"),
    # 26.05 AutoDetect: every GPU's UUID, matched against NVML's (then not Slurm's index order)
    ({"SLURM_JOB_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": f"{UUID(6)},{UUID(7)}"}, {6, 7}, "CUDA_VISIBLE_DEVICES"),
    ({"CUDA_VISIBLE_DEVICES": UUID(9)}, None, "does not show"),
    # MIG: Slurm's indexes count MIG devices, not GPUs
    ({"SLURM_JOB_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "MIG-0a1b2c3d-aaaa-bbbb-cccc-000000000000"}, None, "MIG"),
    ({"CUDA_VISIBLE_DEVICES": f"0,{UUID(1)}"}, None, "mixes"),
    ({"SLURM_JOB_GPUS": "0-3"}, None, "not a GPU list"),
    ({"SLURM_JOB_GPUS": UUID(0)}, None, "not a GPU list"),
    ({"SLURM_JOB_GPUS": ""}, None, "not a GPU list"),
    ({"CUDA_VISIBLE_DEVICES": "0, 1"}, None, "not a GPU list"),
    ({}, None, "not set"),
])
def test_the_jobs_gpus_come_from_slurms_hook_environment(env, gpus_, why):
    node_gpus = {i: UUID(i) for i in range(8)}                  # what NVML shows: index -> UUID
    scope = _scope({"SLURM_JOB_ID": "7", **env}).on(node_gpus)
    assert scope.gpus == (frozenset(gpus_) if gpus_ is not None else None) and why in scope.source
    assert ("not known" in scope.note()) is (gpus_ is None)


def test_gpu_uuids_in_the_epilog_pick_the_gpus_nvml_shows_with_them(tmp_path, procs):
    """Slurm 26.05's AutoDetect puts UUIDs in CUDA_VISIBLE_DEVICES: the check goes by them."""
    procs.append(named_process(b"python"))
    uuids = {i: {"uuid": UUID(0x10 + i)} for i in range(8)}
    read = on_gpu({5: [procs[0].pid]})

    def reader(node, parts):
        s = read(node, parts)
        return replace(s, gpus=tuple(replace(g, **uuids[g.index]) for g in s.gpus))
    cfg = config(tmp_path, process_grace_s=0.3)
    for visible, failing in ((f"{UUID(0x15)},{UUID(0x16)}", [("GPU_PROC_LEFT", 5)]), (UUID(0x11), [])):
        job = _scope({"SLURM_JOB_ID": "7", "SLURM_JOB_UID": "0", "SLURM_JOB_GPUS": "0,1",
                      "CUDA_VISIBLE_DEVICES": visible})
        assert fails(run.run_level("epilog", "gpu001", cfg, reader=reader, job=job)) == failing


@given(st.dictionaries(st.sampled_from(["SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_JOB_UID", "SLURM_JOB_ID"]),
                       st.text(max_size=40) | st.lists(st.integers(-3, 99999), max_size=300).map(
                           lambda xs: ",".join(map(str, xs))) | st.lists(
                           st.sampled_from(["GPU-", "MIG-", ""]).flatmap(
                               lambda p: st.text("0123456789abcdef-/", max_size=50).map(lambda t: p + t)),
                           max_size=5).map(",".join)))
def test_any_hook_environment_gives_a_bounded_scope_or_none(env):
    scope = _scope(env).on({i: UUID(i) for i in range(8)})
    assert scope.gpus is None or (0 < len(scope.gpus) <= 256 and all(0 <= i < 10000 for i in scope.gpus))
    assert scope.uid is None or 0 <= scope.uid < 2 ** 32
    assert scope.source.isprintable() and len(scope.source) < 200 and not scope.uuids


def test_an_index_beyond_the_nodes_gpus_judges_every_gpu_and_says_so(tmp_path, procs):
    procs.append(named_process(b"python"))
    job = _scope({"SLURM_JOB_ID": "7", "SLURM_JOB_UID": "0", "SLURM_JOB_GPUS": "9"})
    rep = run.run_level("epilog", "gpu001", config(tmp_path, process_grace_s=0.3),
                        reader=on_gpu({5: [procs[0].pid]}), job=job)
    assert fails(rep) == [("GPU_PROC_LEFT", 5)]
    assert any("not known" in f.reason and "GPU 9" in f.reason for f in rep.findings if f.check == "processes")


# --- R4 / R10: a process name is data ---------------------------------------------------------------

def test_a_name_that_is_not_utf8_does_not_hide_an_xid(tmp_path, procs):
    procs.append(named_process(b"trainer\xff"))
    cfg = config(tmp_path, process_grace_s=0.3)
    (tmp_path / "gpu001.kmsg").write_text(_kmsg_line(time.time() - 5, 79))
    rep = run.run_level("epilog", "gpu001", cfg, reader=on_gpu({5: [procs[0].pid]}))
    assert ("XID79", 3) in fails(rep) and ("GPU_PROC_LEFT", 5) in fails(rep), rep.findings
    [left] = [f for f in rep.findings if f.code == "GPU_PROC_LEFT"]
    assert f"{procs[0].pid} (trainer\\xff)" in left.reason


def test_control_bytes_in_a_name_never_reach_a_drain_reason(tmp_path, procs):
    procs.append(named_process(b"x\x01\x1b[2Jy\x7f"))
    slurm = FakeSlurm(train=(), spares=(), others=["gpu001"])
    rep = run.check_node("epilog", "gpu001", config(tmp_path, process_grace_s=0.3), drain=True, client=slurm,
                         reader=on_gpu({2: [procs[0].pid]}))
    node_ = slurm.node("gpu001")
    assert rep.drain["action"] == "drained" and node_.drained, rep.drain
    assert check_reason(node_.reason) == node_.reason and node_.reason.isascii() and node_.reason.isprintable()
    # escaped, as far as the reason's length lets it show after a pid of up to 7 digits
    assert "(x\\x01\\x1b[2J" in node_.reason


def test_the_fake_slurm_refuses_the_reasons_slurm_would_print_split(tmp_path):
    slurm = FakeSlurm(train=(), spares=(), others=["gpu001"])
    for bad in ("slurm-ft: GPU_PROC_LEFT gpu0 1 (x\x01y)", "two\nlines", " edge"):
        with pytest.raises(UsageError):
            slurm.drain(["gpu001"], bad)
        with pytest.raises(UsageError):
            slurm.reboot(["gpu001"], bad)
        with pytest.raises(UsageError):
            slurm.update_node("gpu001", Reason=bad)
    assert not slurm.node("gpu001").drained


# --- R9: ignore_processes names root-owned executables ---------------------------------------------

def test_a_user_cannot_hide_a_leftover_behind_a_daemons_name(tmp_path, procs):
    procs.append(named_process(b"nvidia-smi"))                # comm a user picked; the program is python
    rep = run.run_level("epilog", "gpu001", config(tmp_path, process_grace_s=0.3),
                        reader=on_gpu({1: [procs[0].pid]}))
    assert fails(rep) == [("GPU_PROC_LEFT", 1)]


def test_a_root_owned_daemon_is_ignored_by_its_full_path_a_users_copy_is_not(tmp_path, procs):
    if os.geteuid() != 0:
        pytest.fail("needs root: the daemon's executable must be root's (CI and the clean rooms run as root)")
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    daemon = sbin / "nvidia-persistenced"                      # longer than comm's 15 bytes
    daemon.write_bytes(Path("/bin/sleep").read_bytes())
    daemon.chmod(0o755)
    procs.append(subprocess.Popen([str(daemon), "120"]))
    deadline = time.monotonic() + 10
    while Path(f"/proc/{procs[0].pid}/comm").read_bytes() != b"nvidia-persiste\n":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    cfg = config(tmp_path, process_grace_s=0.3, ignore_processes=(str(daemon),))
    assert run.run_level("epilog", "gpu001", cfg, reader=on_gpu({0: [procs[0].pid]})).healthy
    daemon.chmod(0o757)                                        # others may rewrite it: not root's program any more
    assert fails(run.run_level("epilog", "gpu001", cfg, reader=on_gpu({0: [procs[0].pid]}))) == [("GPU_PROC_LEFT", 0)]
    daemon.chmod(0o755)
    os.chown(daemon, 65534, 65534)                             # a user's copy at the listed path
    assert fails(run.run_level("epilog", "gpu001", cfg, reader=on_gpu({0: [procs[0].pid]}))) == [("GPU_PROC_LEFT", 0)]


def test_a_bare_name_from_an_old_config_matches_only_a_system_program():
    from slurm_ft.node.host import Process
    from slurm_ft.node.probes import ProbeContext, get
    probe = get("processes")
    ctx = ProbeContext(ignore_processes=("nvidia-persistenced", "/opt/dcgm/bin/nv-hostengine"))
    cases = {
        11: (Process("nvidia-persiste", 998, "/usr/bin/nvidia-persistenced", True), False),
        12: (Process("nvidia-persiste", 1000, "/home/bob/nvidia-persistenced", False), True),
        13: (Process("nvidia-persiste", 0, "/tmp/x/nvidia-persistenced", True), True),   # not a system dir
        14: (Process("nv-hostengine", 0, "/opt/dcgm/bin/nv-hostengine", True), False),
        15: (Process("nv-hostengine", 0, "/usr/bin/nv-hostengine", True), True),      # listed by another path
        16: (Process("?", None, "", False), True),                                    # gone, or unreadable
    }
    for pid, (proc, counted) in cases.items():
        s = NodeSample("n", gpus=gpus({0: {"processes": (pid,)}}),
                       host=HostReadings({"processes": GpuProcesses({0: (pid,)}, {pid: proc})}))
        assert bool(probe(s, ctx)) is counted, (pid, proc)
    assert probe(replace(s, host=HostReadings()), ctx), "a process with no facts read counts (the safe side)"


@pytest.mark.parametrize("entry", ["bin/nvidia-smi", "", "/usr/bin/", "nvidia\x01smi"])
def test_an_ignore_entry_that_names_no_program_is_a_config_error(tmp_path, entry):
    import json
    from slurm_ft.config import load_config
    from slurm_ft.errors import ConfigError
    path = tmp_path / "slurm-ft.yaml"
    path.write_text(f"health:\n  ignore_processes: [{json.dumps(entry)}]\n")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match=r"health.ignore_processes\[0\]"):
        load_config(str(path))


@given(st.binary(max_size=64))
def test_any_process_name_reads_as_one_line_of_printable_ascii(raw):
    from slurm_ft.node.host import escape
    shown = escape(raw)
    assert shown.isascii() and shown.isprintable() and len(shown) <= 4 * len(raw)
    assert bytes(shown, "ascii").decode("unicode_escape").encode("latin-1") == raw   # nothing lost
