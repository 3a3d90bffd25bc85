"""What `lab up` writes, checked without starting daemons: slurm.conf, gres.conf, hook wrappers."""
from __future__ import annotations

import subprocess
import time

import pytest

from slurm_ft.errors import UsageError
from slurm_ft_lab import cluster
from slurm_ft_lab.cluster import Lab, LabSpec


@pytest.fixture
def lab(tmp_path):
    return Lab(tmp_path / "lab", LabSpec(nodes=4, spares=2, gpus_per_node=8, port_base=18000))


def test_slurm_conf(lab):
    conf = lab._slurm_conf()
    lines = conf.splitlines()
    assert "NodeName=gpu[001-006] NodeHostname=localhost Port=[18001-18006] CPUs=16 RealMemory=64000 " \
           "Gres=gpu:8 State=UNKNOWN" in lines
    assert "PartitionName=train Nodes=gpu[001-004] Default=YES MaxTime=INFINITE State=UP" in lines
    assert "PartitionName=spares Nodes=gpu[005-006] Default=NO MaxTime=INFINITE State=UP" in lines
    for line in ("SlurmctldPort=18000", f"AuthInfo=socket={lab.dir}/munge/munge.socket",
                 "SelectType=select/cons_tres", "ProctrackType=proctrack/linuxproc", "JobRequeue=1",
                 f"Prolog={lab.dir}/hooks/prolog", f"Epilog={lab.dir}/hooks/epilog",
                 f"HealthCheckProgram={lab.dir}/hooks/healthcheck", "HealthCheckInterval=300",
                 "SlurmdTimeout=10", "KillWait=2", f"SlurmdSpoolDir={lab.dir}/spool/slurmd.%n"):
        assert line in lines, line
    assert not [ln for ln in lines if ln.startswith("SchedulerParameters=")]   # see the comment in slurm.conf
    # the held path after a prolog failure is the one the controller must handle: the lab keeps it
    assert not [ln for ln in lines if "nohold_on_prolog_fail" in ln and not ln.lstrip().startswith("#")]


def test_two_labs_side_by_side_never_number_a_job_alike(tmp_path):
    """CI's rooms share the host's network and ran one test with one job id at once: the hot-spare job's
    MASTER_PORT (from the job id) was taken by the other room's."""
    from slurm_ft.job.rendezvous import master_port
    a, b = (Lab(tmp_path / str(p), LabSpec(nodes=4, spares=2, port_base=p)) for p in (25000, 27000))
    [first_a], [first_b] = ([int(x.split("=")[1]) for x in lab._slurm_conf().splitlines()
                             if x.startswith("FirstJobId=")] for lab in (a, b))
    assert (first_a, first_b) == (25001, 27001)
    assert all(master_port(first_a + k, 0, 0) != master_port(first_b + k, 0, 0) for k in range(300))


def test_node_names_and_partitions():
    spec = LabSpec(nodes=64, spares=4)
    assert spec.train_nodes[0] == "gpu001" and spec.train_nodes[-1] == "gpu064"
    assert spec.spare_nodes == ["gpu065", "gpu066", "gpu067", "gpu068"]


def test_fleet_size_names_sort_and_small_labs_keep_theirs():
    spec = LabSpec(nodes=2048, spares=64, port_base=40000).validate()
    names = spec.node_names
    assert names[0] == "gpu0001" and spec.spare_nodes[0] == "gpu2049" and names[-1] == "gpu2112"
    assert sorted(names) == names and len(set(names)) == 2112
    assert LabSpec(nodes=995, spares=4).validate().node_names[-1] == "gpu999"


@pytest.mark.parametrize("kwargs, why", [
    ({"nodes": 0}, "at least 1 node"),
    ({"spares": -1}, "at least 1 node"),
    ({"nodes": 4096, "spares": 1}, "at most 4096"),
    ({"gpus_per_node": 0}, "gpus-per-node"),
    ({"port_base": 65500}, "leaves no room"),
    ({"port_base": 80}, "leaves no room"),
])
def test_bad_spec(kwargs, why):
    with pytest.raises(UsageError, match=why):
        LabSpec(**kwargs).validate()


def _wrapper(lab, tmp_path, monkeypatch, hook="prolog"):
    repo = tmp_path / "repo"
    monkeypatch.setattr(cluster, "REPO_ROOT", repo)
    path = tmp_path / hook
    path.write_text(lab._hook_wrapper(cluster.HOOK_DIRS[hook]))
    path.chmod(0o755)
    return repo, path


def test_wrapper_without_scripts_exits_0(lab, tmp_path, monkeypatch):
    repo, wrapper = _wrapper(lab, tmp_path, monkeypatch)
    assert subprocess.run([str(wrapper)], timeout=10).returncode == 0          # no prolog.d at all
    (repo / "prolog.d").mkdir(parents=True)
    assert subprocess.run([str(wrapper)], timeout=10).returncode == 0          # an empty one


def test_wrapper_runs_scripts_in_order_with_the_lab_env(lab, tmp_path, monkeypatch):
    repo, wrapper = _wrapper(lab, tmp_path, monkeypatch)
    d = repo / "prolog.d"
    d.mkdir(parents=True)
    out = tmp_path / "seen"
    (d / "10-env").write_text(f'#!/bin/sh\necho "10 $SLURM_FT_CONFIG $SLURM_FT_LAB_DIR $LD_LIBRARY_PATH $SLURM_CONF" >> {out}\n')
    (d / "20-fail").write_text(f"#!/bin/sh\necho 20 >> {out}\nexit 3\n")
    (d / "30-never").write_text(f"#!/bin/sh\necho 30 >> {out}\n")
    (d / "README").write_text("not executable: skipped\n")
    for f in ("10-env", "20-fail", "30-never"):
        (d / f).chmod(0o755)
    p = subprocess.run([str(wrapper)], timeout=10, env={"PATH": "/usr/bin:/bin"})
    assert p.returncode == 3
    assert out.read_text().splitlines() == [
        f"10 {lab.config_path} {lab.dir} {lab.dir}/lib {lab.conf}", "20"]


def test_healthcheck_wrapper_pauses_during_up(lab, tmp_path, monkeypatch):
    repo, wrapper = _wrapper(lab, tmp_path, monkeypatch, "healthcheck")
    d = repo / "healthcheck"
    d.mkdir(parents=True)
    (d / "check").write_text("#!/bin/sh\nexit 1\n")
    (d / "check").chmod(0o755)
    assert subprocess.run([str(wrapper)], timeout=10).returncode == 1
    lab._health_pause.parent.mkdir(parents=True)
    lab._health_pause.touch()
    assert subprocess.run([str(wrapper)], timeout=10).returncode == 0


def test_lab_config_yaml_loads(lab, tmp_path):
    from slurm_ft.config import load_config
    p = tmp_path / "slurm-ft.yaml"
    p.write_text(lab._slurm_ft_yaml())
    cfg = load_config(str(p))
    assert cfg.state_dir == f"{lab.dir}/state/slurm-ft"
    assert cfg.health.kmsg_path == f"{lab.dir}/nodes/{{node}}/kmsg"
    assert cfg.health.state_file == f"{lab.dir}/nodes/{{node}}/state.json"
    assert cfg.slurm.conf == str(lab.conf)


def test_wait_idle_skips_nodes_in_no_partition():
    """A node the controller quarantined (out of every partition) is not listed by `sinfo -N`: `lab up`
    must not wait for it (it used to hang there)."""
    want = ["gpu001", "gpu002", "gpu003"]
    states = {"gpu001": "idle", "gpu002": "idle"}                        # gpu003: in no partition
    assert cluster.nodes_not_ready(want, states) == []
    assert cluster.nodes_not_ready(want, {**states, "gpu002": "idle*"}) == ["gpu002"]
    assert cluster.nodes_not_ready(want, {}) == want                     # slurmctld not answering yet
    busy = {"gpu001": "allocated", "gpu002": "drained", "gpu003": "unknown*"}
    assert cluster.nodes_not_ready(want, busy, busy_ok=True) == ["gpu003"]
    assert cluster.nodes_not_ready(want, busy) == want


def test_fast_hooks_skip_only_untouched_nodes(tmp_path, monkeypatch):
    """LAB ONLY fast hooks: no python check on a node whose fake GPUs nobody touched; any injected
    change (kernel log line, NVML state) runs the real hook."""
    fast = cluster.Lab(tmp_path / "lab", cluster.LabSpec(fast_hooks=True))
    repo, wrapper = _wrapper(fast, tmp_path, monkeypatch)
    (repo / "prolog.d").mkdir(parents=True)
    (repo / "prolog.d" / "check").write_text("#!/bin/sh\nexit 1\n")
    (repo / "prolog.d" / "check").chmod(0o755)
    node = fast.dir / "nodes" / "gpu0007"
    node.mkdir(parents=True)
    (node / "kmsg").write_text("")
    (node / "nvml.state").write_text("healthy\n")
    (node / "nvml.healthy").write_text("healthy\n")
    env = {"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "gpu0007"}
    assert subprocess.run([str(wrapper)], timeout=10, env=env).returncode == 0
    (node / "kmsg").write_text("6,1,1,-;NVRM: Xid (PCI:0000:18:00): 79\n")
    assert subprocess.run([str(wrapper)], timeout=10, env=env).returncode == 1
    (node / "kmsg").write_text("")
    (node / "nvml.state").write_text("lost\n")
    assert subprocess.run([str(wrapper)], timeout=10, env=env).returncode == 1
    assert "nvml.healthy" not in cluster.Lab(tmp_path / "lab2", cluster.LabSpec())._hook_wrapper("prolog.d")


def test_ports_in_the_ephemeral_range_are_refused_and_the_host_left_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "ephemeral_port_range", lambda: (32768, 60999))
    monkeypatch.setattr(cluster, "reserved_ports", lambda: [])
    Lab(tmp_path / "a", LabSpec(nodes=2048, spares=64, port_base=29000))._check_ephemeral()   # 29000..31112
    for base in (31000, 40000, 60990):
        with pytest.raises(UsageError, match="ephemeral port range 32768-60999"):
            Lab(tmp_path / "b", LabSpec(nodes=2048, spares=64, port_base=base))._check_ephemeral()
    Lab(tmp_path / "c", LabSpec(nodes=4, spares=0, port_base=61000))._check_ephemeral()      # above it
    monkeypatch.setattr(cluster, "reserved_ports", lambda: [(40000, 42112)])                   # the host's reservation
    Lab(tmp_path / "r", LabSpec(nodes=64, spares=4, port_base=42000))._check_ephemeral()
    with pytest.raises(UsageError, match="ephemeral port range"):                              # ... ends at 42112
        Lab(tmp_path / "s", LabSpec(nodes=64, spares=4, port_base=42100))._check_ephemeral()
    monkeypatch.setattr(cluster, "ephemeral_port_range", lambda: None)                         # unreadable
    Lab(tmp_path / "d", LabSpec(nodes=4, spares=0, port_base=40000))._check_ephemeral()
    src = open(cluster.__file__).read()                                # no sysctl write in the lab: read only
    assert "ip_local_reserved_ports\").read_text()" in src and "sysctl" not in src and ".write_text(" not in \
        src[src.index("def reserved_ports"):src.index("class LabSpec")]


def test_slim_per_node_confs_carry_the_version_lines_and_cgroup_conf(tmp_path, monkeypatch):
    from slurm_ft.slurm import versions
    from slurm_ft_lab import versionconf
    monkeypatch.setattr(versionconf, "installed_version", lambda env=None: (26, 5, 0))
    monkeypatch.setattr(cluster, "_fake_gpu_init", lambda: None)
    monkeypatch.setattr(Lab, "_build_fake_nvml", lambda self: None)
    monkeypatch.setattr(cluster.os, "mknod", lambda *a, **k: None)
    lab = Lab(tmp_path / "lab", LabSpec(nodes=1000, spares=2, gpus_per_node=1, port_base=20000))
    assert lab.spec.slim
    lab._write_files()
    feats = versions.features((26, 5, 0))
    want = [ln for ln in versionconf.conf_lines(feats).splitlines() if ln and not ln.startswith("#")]
    assert want, "26.05 adds version lines"
    main = lab.conf.read_text().splitlines()
    one = lab.slurmd_conf("gpu0007").read_text().splitlines()
    for line in want:
        assert line in main and line in one, line
    assert [ln for ln in one if ln.startswith("NodeName=")] == [
        "NodeName=gpu0007 NodeHostname=localhost Port=20007 CPUs=16 RealMemory=64000 Gres=gpu:1 State=UNKNOWN"]
    assert not [ln for ln in one if ln.startswith("PartitionName=")]
    nodes_etc = lab.dir / "etc" / "nodes"
    assert (nodes_etc / "gres.conf").exists()
    cg = versionconf.cgroup_conf(feats)
    if cg is not None:
        assert (nodes_etc / "cgroup.conf").read_text() == cg


def test_write_unread_leaves_an_equal_file_alone_and_replaces_a_changed_one(tmp_path):
    """`lab up` of a lab brought up before rewrites ~10,000 node files: an equal file keeps its inode
    (no write at all), a changed one is a new file (no truncation over old data), a missing one is made."""
    from slurm_ft.fsutil import write_unread
    f = tmp_path / "nvml.state"
    write_unread(f, "healthy\n")
    assert f.read_text() == "healthy\n"
    before = f.stat()
    write_unread(f, b"healthy\n")
    after = f.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    write_unread(f, "lost\n")
    assert f.read_text() == "lost\n"


def test_a_slurmd_that_dies_before_daemonising_is_started_again(tmp_path, monkeypatch):
    """A starved munged drops a slow client: its slurmd dies of SIGPIPE (exit -13) before it runs.
    `up` starts it again; a slurmd that keeps failing still fails `up` with its command."""
    from slurm_ft.errors import CommandError
    lab = Lab(tmp_path / "lab", LabSpec(nodes=3, spares=0, port_base=18000))
    calls = []
    alive = set()

    def fake_run(argv, **kw):
        argv = [str(a) for a in argv]
        node = argv[-1]
        calls.append(node)
        if node == "gpu001" and calls.count(node) == 1:
            raise CommandError(argv, -13, "")
        if node == "gpu002":
            raise CommandError(argv, 1, "fatal: bad conf")
        alive.add(node)
        if node == "gpu003":        # the parent failed, but its daemon runs: not started twice
            raise CommandError(argv, 1, "late")

    monkeypatch.setattr(cluster, "run", fake_run)
    monkeypatch.setattr(cluster.time, "sleep", lambda s: None)
    monkeypatch.setattr(Lab, "daemons", lambda self: [{"name": "slurmd", "node": n, "alive": n in alive}
                                                      for n in self.spec.node_names])
    monkeypatch.setattr(Lab, "_slurmd_alive", lambda self, n: n in alive)
    with pytest.raises(CommandError, match="bad conf"):
        lab._start_missing_slurmds()
    assert calls.count("gpu001") == 2 and "gpu001" in alive
    assert calls.count("gpu002") == cluster.START_TRIES
    assert calls.count("gpu003") == 1


def test_down_stops_a_hook_its_slurmd_left_behind(lab):
    """Slurm 26.05's slurmd, stopped while its HealthCheckProgram ran, left the hook and the check it had
    started (a `scontrol show node` below it) running after `lab down` (CI, sid room)."""
    hook = lab.dir / "hooks" / "healthcheck"
    hook.parent.mkdir(parents=True)
    hook.write_text("#!/bin/sh\nsleep 60 &\nwait\n")
    hook.chmod(0o755)
    orphan = subprocess.Popen([str(hook)], start_new_session=True)
    other = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while not cluster._descendants([orphan.pid]) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = cluster._descendants([orphan.pid])
        assert child, "the hook did not start its child"
        stopped = lab.down(quiet=True)
        assert orphan.pid in stopped and set(child) <= set(stopped)
        assert orphan.wait(timeout=5) == -9
        assert not any(cluster._alive(p) for p in child)
        assert other.poll() is None        # a process that is not the lab's is left alone
    finally:
        for p in (orphan, other):
            p.kill()
            p.wait()


def test_a_mixed_lab_has_cpu_nodes_without_gres_or_fake_nvml(tmp_path):
    lab = Lab(tmp_path / "lab", LabSpec(nodes=2, spares=1, cpu_nodes=2, gpus_per_node=2, port_base=18000))
    spec = lab.spec.validate()
    assert spec.node_names == ["gpu001", "gpu002", "gpu003", "cpu001", "cpu002"]
    assert (spec.train_nodes, spec.spare_nodes) == (["gpu001", "gpu002"], ["gpu003"])
    assert spec.wake_port == 18006
    lines = lab._slurm_conf().splitlines()
    assert "NodeName=gpu[001-003] NodeHostname=localhost Port=[18001-18003] CPUs=16 RealMemory=64000 " \
           "Gres=gpu:2 State=UNKNOWN" in lines
    assert "NodeName=cpu[001-002] NodeHostname=localhost Port=[18004-18005] CPUs=16 RealMemory=64000 " \
           "State=UNKNOWN" in lines
    assert "PartitionName=cpu Nodes=cpu[001-002] Default=NO MaxTime=INFINITE State=UP" in lines
    wrapper = lab._hook_wrapper("healthcheck")
    assert f'case "$SLURMD_NODENAME" in cpu[0-9]*) ;; *) export LD_LIBRARY_PATH={lab.dir}/lib' in wrapper
    plain = Lab(tmp_path / "plain", LabSpec(nodes=2, spares=1, port_base=18000))
    assert "PartitionName=cpu" not in plain._slurm_conf() and "case" not in plain._hook_wrapper("healthcheck")
    none = Lab(tmp_path / "none", LabSpec(nodes=1, spares=0, cpu_nodes=1, port_base=18000))
    assert "PartitionName=spares Default=NO MaxTime=INFINITE State=UP" in none._slurm_conf().splitlines()
