"""The session lab: one real Slurm cluster (68 slurmd) for every integration test.

Directory and port base from $SLURM_FT_TEST_LAB_DIR (default /tmp/slurm-ft-test-lab) and
$SLURM_FT_TEST_PORT_BASE (default 16000). A lab already up there is reused and left up; otherwise
the session brings one up and takes it down at the end. Without Slurm the lab tests FAIL with the
install command (CI installs it); they are never skipped.

Jobs run as the lab's job user (`lab.user`, slurmft-u0), as on a cluster: `work` is a directory that
user owns, `lab.run_as(argv)` runs a command as them (sbatch, srun, `slurm-ft sbatch`; ctl_helpers'
`slurm_ft(lab, None, "sbatch", ...)` does so by itself), `lab.as_user()` is a SlurmClient that does.
`lab.client` is root's: the admin's and the controller's view. A test that submits as root says why.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest

from slurm_ft.errors import EnvironmentProblem
from slurm_ft_lab import users
from slurm_ft_lab.cluster import INSTALL_HINT, Lab, LabSpec, check_environment
from slurm_ft.runner import run
from slurm_ft.slurm.client import SlurmClient

TEST_LAB_DIR = os.environ.get("SLURM_FT_TEST_LAB_DIR", "/tmp/slurm-ft-test-lab")
TEST_PORT_BASE = int(os.environ.get("SLURM_FT_TEST_PORT_BASE", "16000"))


_terminal = None


def pytest_configure(config):
    global _terminal
    _terminal = config.pluginmanager.get_plugin("terminalreporter")


def pytest_runtest_logreport(report):
    """A failed lab test named at once, not only in the summary: a suite that CI stops at its time limit
    never prints the summary (.ci/run shows these lines then)."""
    if report.failed and _terminal is not None:
        _terminal.write_line(f"failed at once: {report.nodeid} ({report.when})")


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/lab/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.lab)


@dataclass
class LabHandle:
    """What a lab test gets: paths, a client, an environment for subprocesses, and reset()."""
    cluster: Lab
    dir: Path
    conf: Path
    client: SlurmClient
    env: Dict[str, str]
    train_nodes: List[str]
    spare_nodes: List[str]
    config_path: Path
    started_here: bool = field(default=False)
    user: str = users.DEFAULT           # the user the lab's jobs run as
    clean: bool = field(default=False)  # reset, and no test body has run since

    def user_env(self, user: Optional[str] = None) -> Dict[str, str]:
        """The lab's environment as the job user's (their USER, LOGNAME, HOME)."""
        return self.cluster.user_env(user or self.user)

    def run_as(self, argv: Sequence[str], user: Optional[str] = None, *, env: Optional[Dict[str, str]] = None,
               cwd: Optional[Path] = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """`argv` as the job user (or `user`), with the lab's environment plus `env`, in `cwd` (default:
        their home); output captured as text (bytes that are not UTF-8, e.g. a path Slurm echoes, replaced).
        The exit status is the caller's to check."""
        user = user or self.user
        e = self.user_env(user)
        e.update(env or {})
        return subprocess.run(self.cluster.user_argv([str(a) for a in argv], user), capture_output=True, text=True,
                              errors="replace", timeout=timeout, env=e, cwd=str(cwd or self.cluster.user_home(user)))

    def as_user(self, user: Optional[str] = None) -> SlurmClient:
        """A SlurmClient whose commands run as the job user (or `user`): what they may do and see."""
        return self.cluster.client_as(user or self.user)

    def give(self, path: Path, user: Optional[str] = None) -> Path:
        """`path` (made when missing) and all below it owned by the job user: what root put there for their job."""
        return self.cluster.give(path, user or self.user)

    def reset(self, timeout: float = 60.0) -> None:
        """Back to a fresh lab: no jobs, no reservations, both partitions as configured, every node
        idle and undrained, every slurmd running, healthy fake GPUs. A lab reset since the last test
        body ran (the fixtures of one test and the next each reset, before and after) is only looked
        at: no job, every node idle, no flag, no comment."""
        if self.clean and self._quiet(self.client.nodes()):
            return
        self.clean = False
        c = self.client
        jobs = [j.job_id for j in c.jobs() if j.state in ("PENDING", "RUNNING", "CONFIGURING", "SUSPENDED",
                                                          "COMPLETING", "REQUEUED", "REQUEUE_HOLD")]
        if jobs:
            run(["scancel", "--quiet", *map(str, jobs)], timeout=30, env=self.env, check=False)
        for r in c.reservations():
            c.delete_reservation(r.name)
        _heal(self.dir)
        self.cluster._start_missing_slurmds()          # a test may have killed one
        c.set_partition_nodes("train", self.train_nodes)
        c.set_partition_nodes("spares", self.spare_nodes)
        for p in c.partitions():
            if p.state != "UP":
                run(["scontrol", "update", f"PartitionName={p.name}", "State=UP"], timeout=30, env=self.env)
        deadline = time.monotonic() + timeout
        while True:
            nodes = c.nodes()
            bad = [n.name for n in nodes if n.drained or n.state in ("DOWN", "FAIL")]
            if bad:
                c.resume(bad)
            for n in nodes:
                if n.comment:
                    c.update_node(n.name, Comment="")
            if not bad and self._quiet(nodes):
                self.clean = True
                return
            if time.monotonic() > deadline:
                busy = [j.job_id for j in c.jobs() if j.state in _BUSY]
                raise AssertionError(f"lab reset: still busy after {timeout:g} s: jobs {busy}, "
                                     f"nodes {[(n.name, n.state, sorted(n.flags)) for n in nodes if n.flags or n.state != 'IDLE'][:5]}")
            time.sleep(0.3)

    def _quiet(self, nodes) -> bool:
        """No job busy, and `nodes` (the lab's, just read) idle with no flag and no comment."""
        return (all(n.state == "IDLE" and not n.flags and not n.comment for n in nodes)
                and not any(j.state in _BUSY for j in self.client.jobs()))


_BUSY = ("RUNNING", "COMPLETING", "CONFIGURING", "PENDING")
_handles: List[LabHandle] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    """A test body may change any lab: the next reset does all its work."""
    for h in _handles:
        h.clean = False


def _heal(labdir: Path) -> None:
    try:
        from slurm_ft_lab.inject import heal_all
    except ImportError:
        for d in (labdir / "nodes").iterdir():
            (d / "kmsg").write_text("")
        return
    heal_all(labdir)


@pytest.fixture(scope="session")
def lab():
    try:
        check_environment()
    except EnvironmentProblem as exc:
        pytest.fail(f"the lab tests need Slurm and munge, as root: {exc} (install: {INSTALL_HINT})", pytrace=False)
    yield from lab_session(TEST_LAB_DIR, LabSpec(nodes=64, spares=4, gpus_per_node=8, port_base=TEST_PORT_BASE))


def lab_session(directory: str, spec: LabSpec):
    """A fixture's lab: up (or reused when running), reset, yielded; down at the end if started here."""
    cluster = Lab(directory, spec)
    reused = cluster.running()
    cluster.up(timeout=120)
    handle = LabHandle(
        cluster=cluster, dir=cluster.dir, conf=cluster.conf,
        client=SlurmClient(env={"SLURM_CONF": str(cluster.conf)}),
        env=cluster.env(), train_nodes=cluster.spec.train_nodes, spare_nodes=cluster.spec.spare_nodes,
        config_path=cluster.config_path, started_here=not reused,
    )
    _handles.append(handle)
    handle.reset()
    yield handle
    _handles.remove(handle)
    if not reused:
        cluster.down()


def work_dir(lab: LabHandle, request, user: Optional[str] = None) -> Path:
    """A fresh directory of the job user's own below the lab directory (pytest's tmp_path is root's
    alone): <lab>/work/<test name>-<random>."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:80]
    return lab.cluster.work_dir(f"{name}-{uuid.uuid4().hex[:6]}", user or lab.user)


@pytest.fixture
def work(lab, request):
    """A clean lab and a directory the job user owns: their jobs' output and checkpoints go there (root's
    config and state stay in tmp_path). Removed after the test."""
    lab.reset()
    d = work_dir(lab, request)
    yield d
    lab.reset()
    shutil.rmtree(d, ignore_errors=True)
