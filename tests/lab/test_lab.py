"""The lab itself: what `slurm-ft lab up` promises (issue 2's "done when"), and `lab down`."""
from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_ft.errors import EnvironmentProblem, UsageError
from slurm_ft_lab.cluster import Lab, LabSpec
from slurm_ft_lab.waits import wait_for, wait_job_state

pytestmark = pytest.mark.lab

CLI = [sys.executable, "-m", "slurm_ft"]


def _cli(*args, env=None, check=True):
    p = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"slurm-ft {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


def _lab_processes(directory: Path):
    """Every process whose command line or environment names this lab directory."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        if str(directory) in cmd or f"SLURM_FT_LAB_DIR={directory}\0".encode() in env + b"\0":
            found.append((int(entry.name), cmd.strip()))
    return found


@pytest.fixture
def idle_lab(lab):
    lab.reset()            # the jobs of an earlier test leave nodes COMPLETING for a moment
    return lab


def _tmp_lab_dir(tmp_path_factory, name: str) -> Path:
    """munged wants every directory above its socket searchable by all (pytest's tmp is 0700)."""
    import tempfile
    d = Path(tempfile.mkdtemp(prefix=f"slurm-ft-{name}-", dir="/tmp"))
    os.chmod(d, 0o755)
    return d


def test_sinfo_shows_64_idle_in_train_and_4_in_spares(idle_lab):
    lab = idle_lab
    out = subprocess.run(["sinfo", "-h", "-o", "%R %T %D %G"], capture_output=True, text=True,
                         env=lab.env, timeout=30, check=True).stdout.split("\n")
    assert "train idle 64 gpu:8" in out
    assert "spares idle 4 gpu:8" in out


def test_srun_across_all_512_gpus(lab, work):
    p = lab.run_as(["srun", "-N64", "--gres=gpu:8", "hostname"], cwd=work, timeout=120)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == 64


def test_each_node_sees_its_8_fake_gpus(lab, work):
    p = lab.run_as(["srun", "-N2", "--gres=gpu:8", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES"], cwd=work, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["0,1,2,3,4,5,6,7"] * 2


SEE = """import os, sys, pynvml
pynvml.nvmlInit()
print("gpus", pynvml.nvmlDeviceGetCount(), "uid", os.getuid())
try:
    open(sys.argv[1]).read()
    print("kernel log: read")
except PermissionError:
    print("kernel log: denied")
"""


def test_a_jobs_user_queries_the_gpus_but_not_the_kernel_log_and_cannot_drain(lab, work):
    """As on a node with kernel.dmesg_restrict=1 (Debian's and Ubuntu's default): a job's user may ask NVML
    (the lab's fake driver) but not read the kernel log, and cannot drain a node through Slurm."""
    node = lab.train_nodes[9]
    kmsg = lab.dir / "nodes" / node / "kmsg"
    assert kmsg.stat().st_uid == 0 and stat.S_IMODE(kmsg.stat().st_mode) == 0o600
    p = lab.run_as(["srun", "-N1", "-w", node, "--gres=gpu:8", sys.executable, "-c", SEE, str(kmsg)], cwd=work,
                   env={"LD_LIBRARY_PATH": str(lab.dir / "lib")}, timeout=120)
    uid = pwd.getpwnam(lab.user).pw_uid
    assert p.returncode == 0 and p.stdout.split("\n")[:2] == [f"gpus 8 uid {uid}", "kernel log: denied"], p
    d = lab.run_as(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=a user's"], timeout=30)
    assert d.returncode != 0 and not lab.client.node(node).drained, d.stderr


def test_the_lab_users_exist_with_homes_of_their_own(lab):
    from slurm_ft_lab import users
    assert lab.user == users.DEFAULT == "slurmft-u0"
    for name in users.NAMES:
        pw = pwd.getpwnam(name)
        home = lab.cluster.user_home(name)
        assert pw.pw_uid != 0 and pw.pw_shell.endswith("nologin")
        assert home.stat().st_uid == pw.pw_uid and stat.S_IMODE(home.stat().st_mode) == 0o700


def test_status_json_and_env(idle_lab):
    lab = idle_lab
    st = json.loads(_cli("lab", "status", "--json", "--dir", str(lab.dir)).stdout)
    assert st["running"] and st["alive"] == 2 + 68
    assert all(d["alive"] and d["pid"] > 0 for d in st["daemons"])
    assert {(r["partition"], r["state"], r["nodes"]) for r in st["sinfo"]} == {("train", "idle", 64), ("spares", "idle", 4)}
    env = _cli("lab", "env", "--dir", str(lab.dir)).stdout
    assert f"export SLURM_CONF={lab.conf}\n" in env
    assert f"export SLURM_FT_QUERY_SOCKET='{lab.dir}/run/query-{{node}}.sock'\n" in env
    assert st["job_user"] == "slurmft-u0" and [u["name"] for u in st["users"]] == [f"slurmft-u{i}" for i in range(10)]
    from slurm_ft.slurm import versions
    limited = versions.features(lab.client.version()).rate_limiter
    assert st["rate_limiter"].startswith("on: SlurmctldParameters=rl_enable" if limited else "none: Slurm 22.05"), st
    params = lab.client.running_config().get("SlurmctldParameters", "")
    assert ("rl_enable" in params) == limited, params
    text = _cli("lab", "status", "--dir", str(lab.dir)).stdout
    assert "jobs run as slurmft-u0; lab users: slurmft-u0 .. slurmft-u9 (10)" in text and "RPC rate limiter: " in text


def test_files_are_root_owned_and_not_world_writable(lab):
    for rel in ("etc/slurm.conf", "etc/gres.conf", "slurm-ft.yaml", "hooks/prolog", "hooks/epilog",
                "hooks/healthcheck", "munge/munge.key"):
        st = (lab.dir / rel).stat()
        assert st.st_uid == 0 and not st.st_mode & stat.S_IWOTH, rel
    assert stat.S_IMODE((lab.dir / "munge" / "munge.key").stat().st_mode) == 0o600
    assert stat.S_ISCHR((lab.dir / "dev" / "nvidia7").stat().st_mode)
    assert all((lab.dir / "nodes" / n).is_dir() for n in lab.train_nodes + lab.spare_nodes)


def test_lab_config_points_into_the_lab(lab):
    from slurm_ft.config import load_config
    cfg = load_config(str(lab.config_path))
    assert cfg.state_dir.startswith(str(lab.dir))
    assert cfg.health.kmsg_path == f"{lab.dir}/nodes/{{node}}/kmsg"
    assert cfg.slurm.conf == str(lab.conf)


def test_hook_wrapper_sets_the_lab_environment(lab, tmp_path):
    """The wrappers export what the repo's scripts need and run each executable in the repo dir."""
    text = (lab.dir / "hooks" / "prolog").read_text()
    assert f"export SLURM_FT_CONFIG={lab.config_path}" in text
    assert f"export LD_LIBRARY_PATH={lab.dir}/lib" in text
    assert f"export SLURM_CONF={lab.conf}" in text


def test_second_lab_up_idempotent_port_clash_and_down(lab, tmp_path_factory):
    """A small lab beside the session lab: up twice, a clash on its ports, then down leaves nothing."""
    import shutil
    port = lab.cluster.spec.port_base + 300
    tmp_path = _tmp_lab_dir(tmp_path_factory, "small")
    small = Lab(tmp_path / "small", LabSpec(nodes=2, spares=1, gpus_per_node=2, port_base=port))
    try:
        first = small.up(timeout=60)
        assert not first.already_running
        again = small.up(timeout=60)
        assert again.already_running
        pids_before = {d["pid"] for d in small.daemons()}
        assert pids_before == {d["pid"] for d in small.daemons()} and None not in pids_before
        with pytest.raises(UsageError, match="run `slurm-ft lab down"):
            Lab(small.dir, LabSpec(nodes=3, spares=1, port_base=port)).up()
        clash = Lab(tmp_path / "clash", LabSpec(nodes=2, spares=1, port_base=port))
        with pytest.raises(EnvironmentProblem, match=f"port {port} \\(for slurmctld\\) is in use"):
            clash.up()
        assert not _lab_processes(clash.dir)
        # a killed slurmd comes back with `up`
        victim = next(d["pid"] for d in small.daemons() if d.get("node") == "gpu002")
        os.kill(victim, 9)
        gone = time.monotonic() + 10    # SIGKILL returns before the process is gone
        while any(d["pid"] == victim for d in small.daemons()) and time.monotonic() < gone:
            time.sleep(0.05)
        assert small.up(timeout=60).already_running
        assert all(d["alive"] for d in small.daemons())
        # a node quarantined out of every partition (as the demo leaves one) does not make `up` hang
        from slurm_ft.slurm.client import SlurmClient
        c = SlurmClient(conf=str(small.conf))
        c.drain("gpu003", "lab test: quarantined")
        c.set_partition_nodes("spares", [])
        assert "gpu003" not in small.node_states()
        t0 = time.monotonic()
        assert small.up(timeout=20).already_running and time.monotonic() - t0 < 10
        p = _cli("lab", "down", "--dir", str(small.dir))
        assert "stopped" in p.stdout
        assert _lab_processes(small.dir) == []
        st = _cli("lab", "status", "--dir", str(small.dir), check=False)
        assert st.returncode == 1 and "not running" in st.stdout
        assert _cli("lab", "down", "--dir", str(small.dir)).stdout.endswith("nothing was running\n")
    finally:
        small.down(quiet=True)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_lab_below_a_private_directory_is_a_clear_error(tmp_path):
    with pytest.raises(EnvironmentProblem, match="chmod o\\+x"):
        Lab(tmp_path / "lab", LabSpec(nodes=1, spares=0, port_base=29000)).up()


def test_not_root_and_missing_slurm_are_one_line_errors(tmp_path):
    env = dict(os.environ, PATH=str(Path(sys.executable).parent))      # no Slurm, no munge on PATH
    p = _cli("lab", "up", "--dir", str(tmp_path / "x"), env=env, check=False)
    assert p.returncode == 4
    assert p.stderr.strip().splitlines() == [p.stderr.strip()]
    assert "apt-get install -y slurm-wlm munge" in p.stderr


def test_not_root_is_refused(monkeypatch, tmp_path):
    from slurm_ft_lab import cluster
    monkeypatch.setattr(cluster.os, "geteuid", lambda: 1000)
    with pytest.raises(EnvironmentProblem, match="must run as root"):
        Lab(tmp_path / "z").up()
    assert not (tmp_path / "z" / "etc").exists()


def test_dead_slurmd_is_not_responding_fast_and_comes_back(lab):
    """SlurmdTimeout is short in the lab: the controller's tests see a dead node within seconds."""
    import time
    lab.reset()
    t0 = time.monotonic()
    lab.cluster.kill_slurmd("gpu040")
    wait_for(lambda: "NOT_RESPONDING" in lab.client.node("gpu040").flags, 40, "gpu040 not responding")
    noticed = time.monotonic() - t0
    assert noticed < 40, noticed
    lab.cluster.start_slurmds()
    wait_for(lambda: "NOT_RESPONDING" not in lab.client.node("gpu040").flags, 40, "gpu040 back")
    print(f"slurmd killed -> NOT_RESPONDING after {noticed:.1f} s")
    lab.reset()


def test_restart_slurmctld_keeps_jobs(lab):
    lab.reset()
    jid = lab.as_user().submit(["-N1", "-o", "/dev/null", "--wrap", "sleep 600"])
    wait_job_state(lab.client, jid, "RUNNING", 30)
    lab.cluster.restart_slurmctld()
    assert lab.client.job(jid).state == "RUNNING"
    lab.reset()
