"""The lab: a real Slurm cluster (22.05, 24.11, 26.05) on one machine (munged, slurmctld, one slurmd per node).

Everything lives in one directory (default /tmp/slurm-ft-lab): slurm.conf, gres.conf, the lab's own
munged (key, socket, pid, log), state, spool, logs, fake GPU device files, hook wrappers and a
slurm-ft.yaml for the lab. Several labs run side by side in different directories on different
port bases; `down` stops only the processes whose pid files are in its directory.

Layout of <dir>:
  lab.json                  the spec the lab was brought up with (nodes, spares, ports)
  etc/slurm.conf gres.conf  written on every `up` of a stopped lab (and cgroup.conf where the version
                            needs one: slurm_ft.slurm.versions says what differs by version)
  munge/                    munge.key, munge.socket, munged.pid, munged.log
  run/ log/ spool/ state/   pid files, daemon logs, slurmd spool dirs, slurmctld state
  dev/nvidia0..N            character devices (1,3 = /dev/null) that gres.conf lists as GPUs
  hooks/                    prolog, epilog, healthcheck: wrappers that run this repo's scripts
  lib/                      the fake libnvidia-ml.so.1, when slurm_ft_lab.fake_nvml exists
  nodes/<node>/             nvml.state (fake GPUs), kmsg (kernel log, root only), state.json (health
                            findings): reset to healthy on every fresh `up`; `lab inject` writes faults here
                            (a CPU node, LabSpec.cpu_nodes: kmsg and a `cpu-node` mark, no nvml.state)
  slurm-ft.yaml             slurm-ft's config for the lab (SLURM_FT_CONFIG in the hooks)
  home/<user>/              the job users' homes (HOME of a lab job user: users.py)
  work/<name>/              job directories a test or the bench gives a job user (work_dir)

Jobs run as an unprivileged user (users.DEFAULT), as on a cluster; the controller, the sweep, the
watcher and the hooks run as root. Where Slurm has an RPC rate limiter (23.02+), slurmctld runs with it
on (`rl_enable`, its defaults), so a user's jobs are limited as on a large site; root is exempt.
"""
from __future__ import annotations

import errno
import importlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from slurm_ft.errors import CommandError, EnvironmentProblem, UsageError
from slurm_ft.fsutil import atomic_write, write_unread
from slurm_ft.node.check_socket import PATH_ENV as CHECK_SOCKET_ENV
from slurm_ft.node.query_socket import PATH_ENV as QUERY_SOCKET_ENV
from slurm_ft.runner import Result, run
from slurm_ft.slurm import versions
from slurm_ft.slurm.hostlist import compress
from slurm_ft_lab import plugin, users, versionconf

log = logging.getLogger(__name__)

DEFAULT_DIR = "/tmp/slurm-ft-lab"
DIR_ENV = "SLURM_FT_LAB"
INSTALL_HINT = "apt-get install -y slurm-wlm munge"
REPO_ROOT = Path(__file__).resolve().parents[2]
HOOK_DIRS = {"prolog": "prolog.d", "epilog": "epilog.d", "healthcheck": "healthcheck"}
MAX_NODES = 4096   # ports, and memory: ~2.5 MB per slurmd
# The PATH of every program slurmd runs for the lab (hooks, RebootProgram): slurmd may give them none
_PATH_LINE = f"export PATH={Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REQUIRED_PROGRAMS = ("slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "scancel", "munged", "mungekey")
MARKER_ENV = "SLURM_FT_LAB_DIR"   # set on every daemon we start: finds our leftover slurmstepd at down
START_WORKERS = 32                # slurmds started at once by `up`
START_TRIES = 3                   # starts of one slurmd before `up` gives up


def ephemeral_port_range() -> Optional[Tuple[int, int]]:
    """The kernel's ephemeral (client) port range, (low, high); None where it cannot be read."""
    try:
        lo, hi = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return None
    return lo, hi


def reserved_ports() -> List[Tuple[int, int]]:
    """The ranges of net.ipv4.ip_local_reserved_ports: never handed out as ephemeral ports ([] if unreadable)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_reserved_ports").read_text().strip()
    except OSError:
        return []
    out = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.strip().partition("-")
        if lo.isdigit() and (hi or lo).isdigit():
            out.append((int(lo), int(hi or lo)))
    return out


@dataclass(frozen=True)
class LabSpec:
    nodes: int = 64                 # workers, partition `train` (Default=YES)
    spares: int = 4                 # the reserved pool, partition `spares`
    gpus_per_node: int = 8
    port_base: int = 17000          # slurmctld listens here, slurmd i on port_base + i
    cpus_per_node: int = 16
    health_interval_s: int = 300    # HealthCheckInterval, cycled over the nodes: 68 python checks per
                                    # interval per lab; 30 s with several labs saturated 2 cores
    slurmd_timeout_s: int = 10      # a dead slurmd is NOT_RESPONDING after about this long
    job_hooks: bool = True          # Prolog/Epilog (prolog.d/, epilog.d/); False only to measure what
                                    # they cost a restart (bench/recovery.py --no-job-hooks)
    reboot_delay_s: float = 3.0     # RebootProgram: the fake node is back (healed) this long after the request
    fast_hooks: bool = False        # LAB ONLY: hooks skip the python check on a node whose fake GPUs
                                    # are untouched (healthy state, empty kernel log): a 2,048-node job's
                                    # 2,048 prologs would take minutes of the lab's CPU otherwise
    plugin: bool = False            # load slurm-ft's SPANK plugin and job_submit policy (lab.plugin)
    cpu_nodes: int = 0              # nodes without GPUs (a mixed cluster's CPU nodes): cpu001.., partition
                                    # `cpu`, no gpu GRES and no fake NVML library in their hooks

    def validate(self) -> "LabSpec":
        if self.nodes < 1 or self.spares < 0 or self.cpu_nodes < 0:
            raise UsageError("the lab needs at least 1 node and 0 or more spares and CPU nodes")
        if self.cpu_nodes > 999:
            raise UsageError(f"the lab supports at most 999 CPU nodes (cpu001..cpu999), not {self.cpu_nodes}")
        if self.nodes + self.spares > MAX_NODES:
            raise UsageError(f"the lab supports at most {MAX_NODES} nodes (gpu0001..gpu{MAX_NODES})")
        if not 1 <= self.gpus_per_node <= 64:
            raise UsageError(f"--gpus-per-node must be 1..64, not {self.gpus_per_node}")
        if not 1024 <= self.port_base <= 65535 - len(self.node_names):
            raise UsageError(f"--port-base {self.port_base} leaves no room for {len(self.node_names)} slurmd ports")
        return self

    @property
    def slim(self) -> bool:
        """Each slurmd reads a slurm.conf naming only its own node (etc/nodes/): with the whole node
        table every slurmd holds every node, O(nodes^2): 4 MB a slurmd, 8.6 GB at 2,112 nodes."""
        return self.nodes + self.spares > 999

    @property
    def shape(self) -> tuple:
        """What a running lab must match for `up` to reuse it."""
        return (self.nodes, self.spares, self.gpus_per_node, self.port_base, self.job_hooks, self.fast_hooks,
                self.plugin, self.cpu_nodes)

    @property
    def wake_port(self) -> int:
        """The UDP port this lab's controller hears its nodes' wakes on (controller.wake_port): the first
        port past the slurmds'."""
        return self.port_base + len(self.node_names) + 1

    @property
    def node_names(self) -> List[str]:
        """Every node: the GPU nodes, then the CPU nodes (slurmd i listens on port_base + i)."""
        return self.gpu_names + self.cpu_names

    @property
    def gpu_names(self) -> List[str]:
        total = self.nodes + self.spares
        width = 3 if total <= 999 else 4     # names that sort; small labs keep gpu001
        return [f"gpu{i:0{width}d}" for i in range(1, total + 1)]

    @property
    def cpu_names(self) -> List[str]:
        return [f"cpu{i:03d}" for i in range(1, self.cpu_nodes + 1)]

    @property
    def train_nodes(self) -> List[str]:
        return self.node_names[: self.nodes]

    @property
    def spare_nodes(self) -> List[str]:
        return self.node_names[self.nodes: self.nodes + self.spares]


@dataclass(frozen=True)
class UpResult:
    already_running: bool
    elapsed_s: float
    nodes: int


class Lab:
    """One lab directory and the daemons started from it."""

    def __init__(self, directory: str | os.PathLike | None = None, spec: Optional[LabSpec] = None):
        self.dir = Path(directory or os.environ.get(DIR_ENV) or DEFAULT_DIR).resolve()
        saved = self._saved_spec()
        self.spec = (spec or saved or LabSpec()).validate()

    # --- paths ------------------------------------------------------------------------------------
    @property
    def conf(self) -> Path:
        return self.dir / "etc" / "slurm.conf"

    @property
    def config_path(self) -> Path:
        return self.dir / "slurm-ft.yaml"

    @property
    def munge_socket(self) -> Path:
        return self.dir / "munge" / "munge.socket"

    def env(self, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """Environment for Slurm commands talking to this lab."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        env["SLURM_FT_CONFIG"] = str(self.config_path)
        env[CHECK_SOCKET_ENV] = self.check_socket
        env[QUERY_SOCKET_ENV] = self.query_socket
        env[MARKER_ENV] = str(self.dir)
        return env

    @property
    def check_socket(self) -> str:
        """Where a node's `slurm-ft watch` serves its checks: one per node, as on a cluster."""
        return str(self.dir / "run" / "check-{node}.sock")

    @property
    def query_socket(self) -> str:
        """Where a node's `slurm-ft watch` answers its users' checks (node/query_server.py)."""
        return str(self.dir / "run" / "query-{node}.sock")

    # --- the job users -----------------------------------------------------------------------------
    @property
    def job_user(self) -> str:
        """The user the lab's fault-tolerant jobs run as (tests, `lab demo`, the bench)."""
        return users.DEFAULT

    def user_home(self, name: str) -> Path:
        return self.dir / "home" / name

    def user_env(self, name: Optional[str] = None, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """The lab's environment (env()) as a job user's: their USER, LOGNAME and HOME."""
        name = name or self.job_user
        return users.environ(users.get(name), self.env(base), self.user_home(name))

    def user_argv(self, argv: List[str], name: Optional[str] = None) -> List[str]:
        """`argv` run as a job user (setpriv; the environment is the caller's: see user_env)."""
        return users.as_user(users.get(name or self.job_user), argv)

    def run_as(self, argv: List[str], name: Optional[str] = None, *, timeout: float = 120,
               env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None, check: bool = True) -> Result:
        """Run `argv` as a job user with the lab's environment (plus `env`), in `cwd` (default: their home)."""
        name = name or self.job_user
        e = self.user_env(name)
        e.update(env or {})
        return run(self.user_argv(argv, name), timeout=timeout, env=e, cwd=cwd or str(self.user_home(name)),
                   check=check)

    def client_as(self, name: Optional[str] = None) -> users.UserClient:
        """A SlurmClient whose commands run as a job user, with the lab's environment."""
        name = name or self.job_user
        return users.UserClient(users.get(name), self.user_env(name))

    def work_dir(self, name: str, user: Optional[str] = None, fresh: bool = True) -> Path:
        """<dir>/work/<name>, owned by a job user (mode 0700, as a user's own directory): where their job
        writes its output and checkpoints. `fresh`: emptied first."""
        d = self.dir / "work" / name
        if fresh and d.exists():
            shutil.rmtree(d)
        (self.dir / "work").mkdir(mode=0o755, exist_ok=True)
        return users.give(d, users.get(user or self.job_user), 0o700)

    def give(self, path: Path, user: Optional[str] = None) -> Path:
        """`path` (made when missing) and everything below it owned by a job user: what root wrote into a
        user's directory for their job."""
        return users.give(Path(path), users.get(user or self.job_user))

    def _prepare_users(self) -> None:
        """The job users exist, each has a home in this lab, and the job user can run this Python and import
        slurm-ft and the lab from this source tree (a job of theirs runs the starter, the supervisor and
        the trainer with it)."""
        made = users.ensure()
        for u in made:
            users.give(self.user_home(u.name), u, 0o700)
        default = next(u for u in made if u.name == self.job_user)
        why = users.cannot_run(default, sys.executable, ("slurm_ft", "slurm_ft_lab"), self._daemon_env(),
                               str(self.user_home(default.name)))
        # A checkout in root's home (/root: 0700): these users alone may enter, by an ACL (users.py says why)
        closed = users.let_in(made, [sys.executable, sys.prefix, str(REPO_ROOT), *self._job_code()]) if why else []
        if closed:
            why = users.cannot_run(default, sys.executable, ("slurm_ft", "slurm_ft_lab"), self._daemon_env(),
                                   str(self.user_home(default.name)))
            why += f" (the lab's users were given search permission on {', '.join(map(str, closed))})" if why else ""
        if why:
            raise EnvironmentProblem(
                f"the lab's job user {default.name} cannot run {sys.executable} with slurm-ft: {why}. Install "
                f"slurm-ft where others may read it (./setup.sh builds .venv on a Python they can run)")

    @staticmethod
    def _job_code() -> List[str]:
        """Where this Python imports slurm-ft and the lab from (the checkout, for an editable install)."""
        import slurm_ft  # lazy: only when the job user cannot run this Python (a checkout in /root)
        import slurm_ft_lab  # lazy: as above
        return [str(Path(m.__file__).resolve().parent) for m in (slurm_ft, slurm_ft_lab) if m.__file__]

    def _pidfiles(self) -> Dict[str, Path]:
        files = {"munged": self.dir / "munge" / "munged.pid", "slurmctld": self.dir / "run" / "slurmctld.pid"}
        for n in self.spec.node_names:
            files[f"slurmd:{n}"] = self.dir / "run" / f"slurmd.{n}.pid"
        return files

    def _saved_spec(self) -> Optional[LabSpec]:
        try:
            data = json.loads((self.dir / "lab.json").read_text())
            return LabSpec(**data)
        except (OSError, ValueError, TypeError):
            return None

    # --- state ------------------------------------------------------------------------------------
    def daemons(self) -> List[dict]:
        """Every daemon of this lab with its pid (from its pid file) and whether it is alive."""
        out = []
        for key, pidfile in self._pidfiles().items():
            name, _, node = key.partition(":")
            pid = _read_pid(pidfile)
            alive = pid is not None and _is_our_process(pid, name, self)
            entry = {"name": name, "pid": pid if alive else None, "alive": alive}
            if node:
                entry["node"] = node
            out.append(entry)
        return out

    def running(self) -> bool:
        pid = _read_pid(self.dir / "run" / "slurmctld.pid")
        return pid is not None and _is_our_process(pid, "slurmctld", self)

    # --- up -----------------------------------------------------------------------------------------
    def up(self, timeout: float = 60.0) -> UpResult:
        """Bring the lab up and wait until every node is idle. A running lab is left as it is."""
        t0 = time.monotonic()
        check_environment()
        saved = self._saved_spec()
        if self.running():
            if saved and saved.shape != self.spec.shape:
                raise UsageError(f"a lab with {saved.nodes}+{saved.spares} nodes, gpu:{saved.gpus_per_node}, "
                                 f"on port {saved.port_base}{' (slurm-ft plugins loaded)' if saved.plugin else ''} "
                                 f"is up in {self.dir}; "
                                 f"run `slurm-ft lab down --dir {self.dir}` first")
            self.spec = saved or self.spec      # tunables (intervals) stay as the running lab has them
            self._prepare_users()               # a lab brought up before it had users has them now
            for n in self.spec.node_names:      # ... and kernel logs only root reads
                kmsg = self.dir / "nodes" / n / "kmsg"
                if kmsg.exists():
                    os.chmod(kmsg, 0o600)
            self._health_pause.touch()
            try:
                self._start_missing_slurmds()
                self.wait_idle(timeout, busy_ok=True)   # jobs may run: only every slurmd must answer
            except CommandError as exc:
                raise EnvironmentProblem(f"lab in {self.dir}: a slurmd did not start: {exc} "
                                         f"(logs in {self.dir}/log)") from None
            finally:
                self._health_pause.unlink(missing_ok=True)
            return UpResult(True, time.monotonic() - t0, len(self.spec.node_names))
        self.down(quiet=True)                 # half-started leftovers (a killed run of up)
        self._check_parents()
        self._check_ports()
        self._write_files()
        self._prepare_users()
        self._health_pause.touch()
        try:
            self._start_munged()
            self._start_slurmctld()
            self._start_missing_slurmds()
            self.wait_idle(timeout)
        except (CommandError, EnvironmentProblem) as exc:
            self.down(quiet=True)             # never leave half a lab running
            raise EnvironmentProblem(f"the lab did not start: {exc}") from None
        finally:
            self._health_pause.unlink(missing_ok=True)
        return UpResult(False, time.monotonic() - t0, len(self.spec.node_names))

    def _check_parents(self) -> None:
        """munged refuses a socket below a directory that not everybody may search."""
        for parent in self.dir.parents:
            try:
                mode = parent.stat().st_mode
            except FileNotFoundError:
                continue
            if not mode & 0o001:
                raise EnvironmentProblem(f"munged needs every directory above the lab searchable: "
                                         f"run `chmod o+x {parent}` or choose another --dir")

    def _check_ephemeral(self) -> None:
        """Refuse lab ports in the kernel's ephemeral range (net.ipv4.ip_local_port_range): every Slurm RPC
        on the host takes a client port from there, so a slurmd's port could be taken at any time. The lab
        never changes the host's settings (a clean room shares the host's network namespace)."""
        first, last = self.spec.port_base, self.spec.port_base + len(self.spec.node_names)
        rng = ephemeral_port_range()
        # ports the host reserves (net.ipv4.ip_local_reserved_ports) are never taken as client ports
        covered = any(lo <= first and last <= hi for lo, hi in reserved_ports())
        if rng is not None and first <= rng[1] and last >= rng[0] and not covered:
            raise UsageError(f"lab ports {first}-{last} overlap the ephemeral port range {rng[0]}-{rng[1]} "
                             f"(net.ipv4.ip_local_port_range): choose a --port-base with "
                             f"{len(self.spec.node_names) + 1} ports below {rng[0]} or above {rng[1]}")

    def _check_ports(self) -> None:
        self._check_ephemeral()
        ports = {self.spec.port_base: "slurmctld"}
        for i, n in enumerate(self.spec.node_names, start=1):
            ports[self.spec.port_base + i] = f"slurmd {n}"
        for port, who in ports.items():
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("0.0.0.0", port))
                except OSError as exc:
                    if exc.errno == errno.EADDRINUSE:
                        raise EnvironmentProblem(
                            f"port {port} (for {who}) is in use; choose another --port-base") from None
                    raise

    def _write_files(self) -> None:
        spec = self.spec
        subs = ("etc", "munge", "run", "log", "spool", "state", "state/ctld", "state/slurm-ft", "dev", "hooks",
                "lib", "nodes", "home", "work")
        for sub in subs:
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        for p in [self.dir, *(self.dir / sub for sub in subs)]:
            os.chmod(p, 0o755)                # munged and slurmd refuse group/world-writable dirs
        atomic_write(self.dir / "lab.json", json.dumps(asdict(spec), indent=2) + "\n")
        for i in range(spec.gpus_per_node):
            dev = self.dir / "dev" / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o644 | 0o020000, os.makedev(1, 3))   # char device, like /dev/null
        init_node = _fake_gpu_init()
        for n in spec.node_names:
            # a fresh start means healthy GPUs too: no fault injected into an earlier run survives
            if n in spec.cpu_names:     # no GPUs: only a kernel log, and the mark heal() knows it by
                (self.dir / "nodes" / n).mkdir(exist_ok=True)
                atomic_write(self.dir / "nodes" / n / "kmsg", "", mode=0o600)
                # inject.CPU_NODE_MARK (cluster loads inject only where it exists: _fake_gpu_init)
                write_unread(self.dir / "nodes" / n / "cpu-node", "no GPUs: a CPU node of the lab\n")
            elif init_node is not None:
                node_dir = init_node(self.dir, n, spec.gpus_per_node, durable=False)
                if spec.fast_hooks:     # what "untouched" means for the fast hooks' cmp
                    write_unread(node_dir / "nvml.healthy", (node_dir / "nvml.state").read_bytes())
            else:
                (self.dir / "nodes" / n).mkdir(exist_ok=True)
                atomic_write(self.dir / "nodes" / n / "kmsg", "", mode=0o600)    # root's, as /dev/kmsg
            for stale in (self.dir / "nodes" / n).glob("state.json*"):   # health findings of a past run
                stale.unlink()
            (self.dir / "spool" / f"slurmd.{n}").mkdir(exist_ok=True)
        feats = versions.features(versionconf.installed_version())
        version_lines = versionconf.conf_lines(feats)
        if spec.plugin:
            version_lines += self._write_plugin_files(feats.expedite)
        cgroup = versionconf.cgroup_conf(feats)
        if cgroup is not None:
            atomic_write(self.dir / "etc" / "cgroup.conf", cgroup)
        conf = self._slurm_conf(version_lines)
        atomic_write(self.conf, conf)
        gres = (f"# written by slurm-ft lab\nAutoDetect=off\nNodeName={compress(spec.gpu_names)} "
                f"Name=gpu File={self.dir}/dev/nvidia[0-{spec.gpus_per_node - 1}]\n")
        atomic_write(self.dir / "etc" / "gres.conf", gres)
        if spec.slim:
            nodes_etc = self.dir / "etc" / "nodes"
            nodes_etc.mkdir(mode=0o755, exist_ok=True)
            atomic_write(nodes_etc / "gres.conf", gres)     # slurmd reads gres.conf next to its slurm.conf
            if cgroup is not None:                           # ... and cgroup.conf
                atomic_write(nodes_etc / "cgroup.conf", cgroup)
            head = "\n".join(line for line in conf.splitlines()   # the version lines included
                             if not line.startswith(("NodeName=", "PartitionName=")))
            for i, n in enumerate(spec.node_names, start=1):   # before any daemon reads them: no fsync each
                write_unread(self.slurmd_conf(n),
                             f"{head}\n{self._node_line(n, spec.port_base + i, n not in spec.cpu_names)}\n")
        for hook, repo_dir in HOOK_DIRS.items():
            atomic_write(self.dir / "hooks" / hook, self._hook_wrapper(repo_dir), mode=0o755)
        atomic_write(self.dir / "hooks" / "reboot",
                     f"#!/bin/sh\n# Written by `slurm-ft lab up`: the lab's RebootProgram (lab/slurm_ft_lab/reboot.py)\n"
                     f"{_PATH_LINE}\n"      # slurmd 26.05 runs it with no PATH; the helper starts slurmd by name
                     f"exec {sys.executable} -m slurm_ft_lab.reboot --dir {self.dir} --delay {spec.reboot_delay_s:g}\n",
                     mode=0o755)
        atomic_write(self.config_path, self._slurm_ft_yaml(), mode=0o644)
        self._build_fake_nvml()

    def _write_plugin_files(self, expedite: bool) -> str:
        """plugstack.conf, slurm-ft's policy module and the site's job_submit.lua calling it (site rules: FT
        jobs in `train`, checkpoints under the temp dir or the lab's own; a rule of the site's own beside
        them); the slurm.conf lines that load them."""
        so = plugin.build(self.dir / "lib")
        etc = self.dir / "etc"
        atomic_write(etc / "plugstack.conf", plugin.plugstack_conf(so, sys.executable), mode=0o644)
        roots = sorted({tempfile.gettempdir(), str(self.dir)})
        atomic_write(etc / "slurm_ft_policy.lua", plugin.LUA_POLICY.read_text(), mode=0o644)
        atomic_write(etc / "job_submit.lua", plugin.job_submit_lua(("train",), roots, expedite, plugin.SITE_RULE),
                     mode=0o644)
        return plugin.slurm_conf_lines(etc / "plugstack.conf")

    def slurmd_conf(self, node: str) -> Path:
        return self.dir / "etc" / "nodes" / f"{node}.conf" if self.spec.slim else self.conf

    def _node_line(self, names: str, ports: object, gpus: bool = True) -> str:
        spec = self.spec
        gres = f"Gres=gpu:{spec.gpus_per_node} " if gpus else ""      # a CPU node: no GRES at all
        return (f"NodeName={names} NodeHostname=localhost Port={ports} CPUs={spec.cpus_per_node} RealMemory=64000 "
                f"{gres}State=UNKNOWN")

    def _slurm_conf(self, version_lines: str = "") -> str:
        spec, d = self.spec, self.dir
        names = compress(spec.gpu_names)
        first, last = spec.port_base + 1, spec.port_base + len(spec.gpu_names)
        # no spares: no Nodes= at all (an empty one takes the next word for its node list: "Invalid node names")
        spares = f"Nodes={compress(spec.spare_nodes)} " if spec.spares else ""
        cpu = ""
        if spec.cpu_nodes:      # a mixed cluster: CPU nodes (no gpu GRES) in a partition of their own
            cpu = (f"{self._node_line(compress(spec.cpu_names), f'[{last + 1}-{last + spec.cpu_nodes}]', False)}\n"
                   f"PartitionName=cpu Nodes={compress(spec.cpu_names)} Default=NO MaxTime=INFINITE State=UP\n")
        host = socket.gethostname().split(".")[0]
        # A slim lab's slurmds know only their own node: slurmctld talks to each one directly (no
        # forwarding through other slurmds), and the differing conf hashes are expected.
        slim = "TreeWidth=65533\nDebugFlags=NO_CONF_HASH\n" if spec.slim else ""
        hooks = (f"PrologFlags=Alloc\nProlog={d}/hooks/prolog\nEpilog={d}/hooks/epilog\n" if spec.job_hooks
                 else "# No Prolog/Epilog: a lab for measuring what they cost (LabSpec.job_hooks=False)\n")
        return f"""\
# Written by `slurm-ft lab up` for the lab in {d}. Rewritten on each start; edit the code, not this.
ClusterName=slurmftlab
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={spec.port_base}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={d}/state/ctld
SlurmdSpoolDir={d}/spool/slurmd.%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd.%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups on this machine: processes are tracked by /proc, tasks are not confined.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
# The nodes advertise the CPUs and GPUs configured here, not what this machine has.
SlurmdParameters=config_overrides
JobRequeue=1
ReturnToService=1
KillWait=2
MinJobAge=60
# Labs on one host share its network, and ports follow job ids (a hot-spare job's MASTER_PORT): each lab
# numbers its jobs from its own slurmctld port, so two labs running side by side never share a job id.
FirstJobId={spec.port_base + 1}
InactiveLimit=0
SlurmdTimeout={spec.slurmd_timeout_s}
SlurmctldTimeout=30
MessageTimeout=10
# No SchedulerParameters=nohold_on_prolog_fail here (22.05.8's slurmd does carry the option): a job
# whose prolog fails is requeued HELD, the path the controller must handle (it releases such jobs).
SchedulerType=sched/backfill
# Not SchedulerParameters=batch_sched_delay=0 (tried): it schedules a requeued job in the second of its
# kill, whose credential 22.05 has just revoked ("Killing non-startable batch job: Job credential
# revoked", the job FAILS). The default 3 s keeps a StartTime=now clear of that second.
{hooks}# `scontrol reboot`: a fake reboot of one node (lab/slurm_ft_lab/reboot.py); a reboot not done within
# ResumeTimeout is DOWN "reboot timed out"
RebootProgram={d}/hooks/reboot
ResumeTimeout=60
HealthCheckProgram={d}/hooks/healthcheck
HealthCheckInterval={spec.health_interval_s}
HealthCheckNodeState=ANY,CYCLE
{version_lines}JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
{slim}{self._node_line(names, f"[{first}-{last}]")}
PartitionName=train Nodes={compress(spec.train_nodes)} Default=YES MaxTime=INFINITE State=UP
PartitionName=spares {spares}Default=NO MaxTime=INFINITE State=UP
{cpu}"""

    def _hook_wrapper(self, repo_dir: str) -> str:
        d = self.dir
        # Every slurmd runs HealthCheckProgram as it starts: 68 python processes at once would make
        # `up` crawl, so `up` pauses the health check until all nodes are idle.
        pause = f"[ -e {self._health_pause} ] && exit 0\n" if repo_dir == "healthcheck" else ""
        if self.spec.fast_hooks:   # lab only: nothing injected on this node, so nothing to find
            n = f"{d}/nodes/$SLURMD_NODENAME"
            pause += (f'[ -n "$SLURMD_NODENAME" ] && [ ! -s {n}/kmsg ] && cmp -s {n}/nvml.state {n}/nvml.healthy '
                      f'&& exit 0\n')
        return f"""\
#!/bin/sh
# Written by `slurm-ft lab up`: runs {REPO_ROOT}/{repo_dir}/* in name order with the lab's
# environment; the first one that fails decides the exit status. No scripts there -> exit 0.
{pause}export SLURM_FT_CONFIG={d}/slurm-ft.yaml
export {CHECK_SOCKET_ENV}='{self.check_socket}'
export SLURM_FT_LAB_DIR={d}
export SLURM_CONF={self.conf}
{self._nvml_line()}
{_PATH_LINE}
for f in {REPO_ROOT}/{repo_dir}/*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    "$f" "$@" || exit $?
done
exit 0
"""

    def _nvml_line(self) -> str:
        """The hooks load the fake libnvidia-ml.so.1 from lib/: a CPU node has no driver, so not there."""
        line = f"export LD_LIBRARY_PATH={self.dir}/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
        if not self.spec.cpu_nodes:
            return line
        return f'case "$SLURMD_NODENAME" in cpu[0-9]*) ;; *) {line} ;; esac'

    @property
    def _health_pause(self) -> Path:
        return self.dir / "run" / "healthcheck.paused"

    def _slurm_ft_yaml(self) -> str:
        d = self.dir
        return f"""\
# slurm-ft config for the lab in {d} (written by `slurm-ft lab up`)
state_dir: {d}/state/slurm-ft
slurm:
  conf: {self.conf}
controller:
  # the nodes wake this lab's controller on its own port (every lab on the host has one)
  wake_host: 127.0.0.1
  wake_port: {self.spec.wake_port}
  # the metrics textfiles stay in the lab, never in the host's node_exporter directory
  metrics_path: {d}/run/slurm_ft_controller.prom
health:
  kmsg_path: {d}/nodes/{{node}}/kmsg
  state_file: {d}/nodes/{{node}}/state.json
  metrics_path: {d}/nodes/{{node}}/slurm_ft_node.prom
  # one host runs every node's checks: at CI's load (~50 on 2 cores) a quick gather of the fake NVML took
  # over its 5 s and reported NVML_HUNG, a check that could not look; a site's nodes each have their own cores
  deadline_s: {{quick: 30.0, prolog: 60.0, epilog: 60.0, full: 120.0, burnin: 900.0}}
lifecycle:
  metrics_path: {d}/run/slurm_ft.prom
  # validation jobs run `check --level full|burnin` on the node: against the lab's fake NVML
  validate_command: [env, LD_LIBRARY_PATH={d}/lib, SLURM_FT_LAB_DIR={d}, {sys.executable}, -m, slurm_ft]
  remediation:
    # the remediation's GPU reset: the fake GPU's (lab/slurm_ft_lab/fake_reset.py) instead of nvidia-smi -r -i
    reset_command: [{sys.executable}, -m, slurm_ft_lab.fake_reset, --dir, {d}]
"""

    def _build_fake_nvml(self) -> None:
        try:
            mod = importlib.import_module("slurm_ft_lab.fake_nvml")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("slurm_ft_lab.fake_nvml"):
                log.info("no slurm_ft_lab.fake_nvml yet: the lab runs without a fake NVML library")
                return
            raise
        build = getattr(mod, "build", None)
        if build is not None:
            build(self.dir / "lib")

    def _start_munged(self) -> None:
        mdir = self.dir / "munge"
        key = mdir / "munge.key"
        if not key.exists():
            run(["mungekey", "--create", "--keyfile", key], timeout=20)
        os.chmod(key, 0o600)
        if self.munge_socket.exists():
            self.munge_socket.unlink()
        run(["munged", f"--socket={self.munge_socket}", f"--key-file={key}",
             f"--pid-file={mdir / 'munged.pid'}", f"--log-file={mdir / 'munged.log'}",
             f"--seed-file={mdir / 'munged.seed'}", "--num-threads=4"],
            timeout=20, env=self._daemon_env())

    def _start_slurmctld(self, fresh: bool = True) -> None:
        if fresh:
            # A fresh cluster on every start: no jobs, node states or reservations from the last
            # run (-c alone keeps the reservations).
            state = self.dir / "state" / "ctld"
            shutil.rmtree(state, ignore_errors=True)
            state.mkdir(mode=0o755, parents=True)
            run(["slurmctld", "-c", "-f", self.conf], timeout=30, env=self._daemon_env())
        else:
            run(["slurmctld", "-f", self.conf], timeout=30, env=self._daemon_env())

    # --- faults for tests and demos: a node's slurmd dies, slurmctld restarts ------------------------
    def slurmd_pid(self, node: str) -> Optional[int]:
        for d in self.daemons():
            if d.get("node") == node:
                return d["pid"]
        raise UsageError(f"no node {node!r} in the lab in {self.dir}")

    def kill_slurmd(self, node: str, sig: int = signal.SIGKILL) -> int:
        """Kill one node's slurmd (the node goes NOT_RESPONDING after about SlurmdTimeout)."""
        pid = self.slurmd_pid(node)
        if pid is None:
            raise UsageError(f"slurmd of {node} is not running")
        os.kill(pid, sig)
        return pid

    def stop_slurmd(self, node: str, seconds: float) -> int:
        """Stop one node's slurmd (SIGSTOP) for `seconds`, then continue it: to slurmctld the node stops
        answering, as in a network partition or a hung host, while its job steps run on. A detached
        helper sends the SIGCONT, so the caller returns at once."""
        if not 0 < seconds <= 86400:
            raise UsageError(f"--unresponsive takes 0 < SECONDS <= 86400, not {seconds:g}")
        pid = self.kill_slurmd(node, signal.SIGSTOP)
        code = ("import os, sys, time\n"
                "time.sleep(float(sys.argv[2]))\n"
                "pid = int(sys.argv[1])\n"
                "try:\n    cmd = open(f'/proc/{pid}/cmdline', 'rb').read()\nexcept OSError:\n    sys.exit(0)\n"
                "if b'slurmd' in cmd:\n    os.kill(pid, 18)\n")
        subprocess.Popen([sys.executable, "-c", code, str(pid), str(seconds)], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return pid

    def start_slurmds(self, booted: bool = False) -> None:
        """Start every slurmd that is not running (killed ones come back; ReturnToService=1).
        `booted`: report the node as just booted (`slurmd -b`), as after the lab's RebootProgram."""
        self._start_missing_slurmds(booted)

    def restart_slurmctld(self, timeout: float = 30.0) -> None:
        """Stop slurmctld and start it again keeping its state (jobs, node states, reservations)."""
        pid = _read_pid(self.dir / "run" / "slurmctld.pid")
        if pid is not None and _is_our_process(pid, "slurmctld", self):
            _terminate([pid], timeout)
        self._start_slurmctld(fresh=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "UP" in run(["scontrol", "ping"], timeout=10, env=self.env(), check=False).stdout:
                return
            time.sleep(0.2)
        raise EnvironmentProblem(f"slurmctld of the lab in {self.dir} did not answer within {timeout:g} s")

    def _start_missing_slurmds(self, booted: bool = False) -> None:
        missing = [d["node"] for d in self.daemons() if d["name"] == "slurmd" and not d["alive"]]
        if not missing:
            return
        env = self._daemon_env()

        def start(node: str) -> None:
            # On a starved machine munged drops a client that did not send in time and slurmd dies of the
            # SIGPIPE (exit -13) before it daemonises: a second try is a fresh start, nothing half-done.
            for attempt in range(START_TRIES):
                try:
                    run(["slurmd", *(["-b"] if booted else []), "-f", self.slurmd_conf(node), "-N", node], timeout=30,
                        env=env)
                    return
                except CommandError:
                    if self._slurmd_alive(node):    # its daemon made it after all: running is what we want
                        return
                    if attempt == START_TRIES - 1:
                        raise
                    time.sleep(0.5)

        # A slurmd's start-up is ~10 ms of CPU but 30-300 ms of wall (munge round trips, and its share
        # of two busy cores): with 8 at a time 2,112 slurmds took 73 s, with 32 about a quarter of that.
        # Each waits for its own daemonising parent only; slurmctld takes their registrations as they come.
        with ThreadPoolExecutor(max_workers=min(START_WORKERS, len(missing))) as pool:
            list(pool.map(start, missing))
        # slurmd returns before its daemon child writes the pid file: wait for it, so that a
        # caller (and `down`) sees every pid. Only the nodes not yet seen are read again.
        pending = set(missing)
        deadline = time.monotonic() + 15
        while pending:
            pending = {n for n in pending if not self._slurmd_alive(n)}
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if pending:
            raise EnvironmentProblem(f"slurmd of {compress(sorted(pending))} did not start; "
                                     f"see {self.dir}/log/slurmd.*.log")

    def _slurmd_alive(self, node: str) -> bool:
        pid = _read_pid(self.dir / "run" / f"slurmd.{node}.pid")
        return pid is not None and _is_our_process(pid, "slurmd", self)

    def _daemon_env(self) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        env[MARKER_ENV] = str(self.dir)
        return env

    def node_states(self) -> Dict[str, str]:
        """node -> the state sinfo prints (idle, drained, alloc, idle*, ...)."""
        res = run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=15, env=self.env())
        out = {}
        for line in res.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = parts[1]
        return out

    def wait_idle(self, timeout: float = 60.0, busy_ok: bool = False) -> None:
        """Wait until every node in a partition is idle (with busy_ok: until its slurmd answers).
        A node in no partition (quarantined by the controller) is not waited for."""
        deadline = time.monotonic() + timeout
        want = set(self.spec.node_names)
        states: Dict[str, str] = {}
        while True:
            try:
                states = self.node_states()
            except CommandError:
                states = {}
            busy = nodes_not_ready(want, states, busy_ok)
            if not busy:
                return
            if time.monotonic() > deadline:
                sample = ", ".join(f"{n}={states.get(n, '?')}" for n in busy[:5])
                raise EnvironmentProblem(
                    f"lab in {self.dir}: {len(busy)} node(s) not {'up' if busy_ok else 'idle'} after "
                    f"{timeout:g} s ({sample}); see {self.dir}/log/")
            # each sinfo of a 2,000-node lab costs slurmctld and sinfo ~0.3 CPU-s: poll a big lab gently
            time.sleep(max(0.2, len(want) / 1000))

    # --- down ---------------------------------------------------------------------------------------
    def down(self, quiet: bool = False, timeout: float = 15.0) -> List[int]:
        """Stop every daemon of this lab (and leftover job steps and hooks), by pid. Returns the pids stopped."""
        if self.running():
            self._cancel_all_jobs(timeout)
        alive = [d for d in self.daemons() if d["alive"]]
        rank = {"slurmd": 0, "slurmctld": 1, "munged": 2}
        stopped = _terminate([d["pid"] for d in sorted(alive, key=lambda d: rank[d["name"]])], min(timeout, 5.0))
        left = _leftovers(self.dir)
        stopped += _terminate(left + _descendants(left), 1.0, sig=signal.SIGKILL)
        if not quiet:
            log.info("stopped %d processes of the lab in %s", len(stopped), self.dir)
        return stopped

    def _cancel_all_jobs(self, timeout: float) -> None:
        """scancel every job and wait until none runs: a slurmd with live steps is slow to stop."""
        try:
            jobs = run(["squeue", "-h", "-o", "%i"], timeout=15, env=self.env()).stdout.split()
            if not jobs:
                return
            run(["scancel", "--quiet", *jobs], timeout=15, env=self.env(), check=False)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                active = run(["squeue", "-h", "-t", "RUNNING,COMPLETING,CONFIGURING,SUSPENDED", "-o", "%i"],
                             timeout=15, env=self.env()).stdout.split()
                if not active:
                    return
                time.sleep(0.2)
        except CommandError as exc:            # a wedged slurmctld must not stop `down`
            log.warning("could not cancel the lab's jobs: %s", exc)

    # --- status ------------------------------------------------------------------------------------
    def status(self) -> dict:
        daemons = self.daemons()
        out = {
            "dir": str(self.dir),
            "running": self.running(),
            "conf": str(self.conf),
            "config": str(self.config_path),
            "spec": asdict(self.spec),
            "daemons": daemons,
            "alive": sum(1 for d in daemons if d["alive"]),
            "job_user": self.job_user,
            "users": [{"name": u.name, "uid": u.uid} for u in users.existing()],
            "rate_limiter": rate_limiter_status(),
            "sinfo": [],
        }
        if out["running"]:
            try:
                res = run(["sinfo", "-h", "-o", "%R|%a|%T|%D|%G|%N"], timeout=15, env=self.env())
                for line in res.stdout.splitlines():
                    part, avail, state, count, gres, nodes = line.split("|")
                    out["sinfo"].append({"partition": part, "avail": avail, "state": state,
                                         "nodes": int(count), "gres": gres, "nodelist": nodes})
            except CommandError as exc:
                out["sinfo_error"] = str(exc)
        return out


def rate_limiter_status() -> str:
    """What the lab's slurmctld does about a user's RPC rate: on where Slurm has the limiter, else why not."""
    try:
        version = versionconf.installed_version()
    except CommandError as exc:
        return f"unknown ({exc})"
    text = f"{version[0]}.{version[1]:02d}.{version[2]}"
    if versions.features(version).rate_limiter:
        return f"on: SlurmctldParameters=rl_enable, its defaults (Slurm {text}; root exempt)"
    return f"none: Slurm {text} has no RPC rate limiter (23.02+)"


def nodes_not_ready(want: Iterable[str], states: Dict[str, str], busy_ok: bool = False) -> List[str]:
    """The nodes of `want` still to wait for, given `sinfo -N` states (node -> state). sinfo lists
    every node of every partition as soon as slurmctld answers, so a node it leaves out is in no
    partition (quarantined) and nobody can use it: not waited for. No answer yet -> all of them."""
    if not states:
        return sorted(want)

    def ready(state: str) -> bool:
        if busy_ok:
            return not state.endswith("*") and not state.startswith("unk")
        return state == "idle"

    return sorted(n for n in want if n in states and not ready(states[n]))


def _fake_gpu_init():
    """slurm_ft_lab.inject.init_node (healthy fake GPUs, empty kernel log), if that module exists."""
    try:
        # lazy: optional: a lab tree without the fault injector still comes up
        from slurm_ft_lab.inject import init_node
    except ImportError:
        return None
    return init_node


def check_environment() -> None:
    """One-line reasons for what this machine lacks to run a lab."""
    if os.geteuid() != 0:
        raise EnvironmentProblem("the lab must run as root (slurmd and munged need it)")
    missing = [p for p in REQUIRED_PROGRAMS if shutil.which(p) is None]
    if missing:
        raise EnvironmentProblem(f"Slurm or munge missing ({', '.join(missing)}): run `{INSTALL_HINT}`")


def _read_pid(path: Path) -> Optional[int]:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _proc_cmdline(pid: int) -> List[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _proc_env(pid: int) -> Dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def _is_our_process(pid: int, name: str, lab: Lab) -> bool:
    """The pid runs `name` started for this lab (guards against a recycled pid)."""
    argv = _proc_cmdline(pid)
    if not argv or Path(argv[0]).name != name:
        return False
    if name == "munged":
        return any(str(lab.munge_socket) in a for a in argv)
    nodes_etc = str(lab.dir / "etc" / "nodes") + "/"
    return any(a == str(lab.conf) or a.startswith(nodes_etc) for a in argv)


def _mount_ns(pid: int) -> Optional[str]:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _leftovers(directory: Path) -> List[int]:
    """What our slurmds left behind: slurmstepd processes, and hooks (a HealthCheckProgram that
    slurmd started as it was stopped outlives it). Their children are found by _descendants. Only
    processes that see our files: a clean room's lab (ci/cleanroom) has the same path on its own /tmp,
    and its steps are visible from the host (a host lab's `down` killed a CI room's job steps)."""
    hooks = f"{directory}/hooks/"
    ours = _mount_ns(os.getpid())
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        argv = _proc_cmdline(pid)
        if not argv or not _alive(pid):
            continue
        step = argv[0].startswith("slurmstepd") and _proc_env(pid).get(MARKER_ENV) == str(directory)
        if (step or any(a.startswith(hooks) for a in argv[:2])) and _mount_ns(pid) == ours:
            pids.append(pid)
    return pids


def _descendants(pids: List[int]) -> List[int]:
    """Every process below `pids` (the job's own processes below a slurmstepd)."""
    children: Dict[int, List[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _terminate(pids: List[int], timeout: float, sig: int = signal.SIGTERM) -> List[int]:
    """Send `sig`, wait, then SIGKILL what is left. Returns the pids that were running."""
    sent = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    alive = list(sent)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        if alive:
            time.sleep(0.05)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return sent


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return False
