"""The session lab: one real Slurm cluster (68 slurmd) for every integration test.

Directory and port base from $SLURM_FT_TEST_LAB_DIR (default /tmp/slurm-ft-test-lab) and
$SLURM_FT_TEST_PORT_BASE (default 16000). A lab already up there is reused and left up; otherwise
the session brings one up and takes it down at the end. Without Slurm the lab tests FAIL with the
install command (CI installs it); they are never skipped.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

import pytest

from slurm_ft.errors import EnvironmentProblem
from slurm_ft_lab.cluster import INSTALL_HINT, Lab, LabSpec, check_environment
from slurm_ft.runner import run
from slurm_ft.slurm.client import SlurmClient

TEST_LAB_DIR = os.environ.get("SLURM_FT_TEST_LAB_DIR", "/tmp/slurm-ft-test-lab")
TEST_PORT_BASE = int(os.environ.get("SLURM_FT_TEST_PORT_BASE", "16000"))


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

    def reset(self, timeout: float = 60.0) -> None:
        """Back to a fresh lab: no jobs, no reservations, both partitions as configured, every node
        idle and undrained, every slurmd running, healthy fake GPUs."""
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
            busy = [j for j in c.jobs() if j.state in ("RUNNING", "COMPLETING", "CONFIGURING", "PENDING")]
            nodes = c.nodes()
            bad = [n.name for n in nodes if n.drained or n.state in ("DOWN", "FAIL")]
            if bad:
                c.resume(bad)
            for n in nodes:
                if n.comment:
                    c.update_node(n.name, Comment="")
            idle = all(n.state == "IDLE" and not n.flags for n in nodes)
            if not busy and not bad and idle:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"lab reset: still busy after {timeout:g} s: jobs {[j.job_id for j in busy]}, "
                                     f"nodes {[(n.name, n.state, sorted(n.flags)) for n in nodes if n.flags or n.state != 'IDLE'][:5]}")
            time.sleep(0.3)


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
    handle.reset()
    yield handle
    if not reused:
        cluster.down()


@pytest.fixture
def work(lab, tmp_path):
    """A clean lab and a job directory that the jobs (run as root by slurmd) can enter."""
    lab.reset()
    os.chmod(tmp_path, 0o755)
    yield tmp_path
    lab.reset()
