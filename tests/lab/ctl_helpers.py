"""Shared by the controller's lab tests: submit FT jobs, fail nodes, run `slurm-ft controller once`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import yaml

PY = sys.executable
JOBS = Path(__file__).resolve().parent / "jobs"


def controller_config(lab, tmp_path: Path) -> Path:
    """The lab's slurm-ft.yaml with a state dir of this test's own (a fresh journal per test)."""
    data = yaml.safe_load(Path(lab.config_path).read_text()) or {}
    state = tmp_path / "state"
    data["state_dir"] = str(state)
    data.setdefault("controller", {})["poll_s"] = 0.05
    path = tmp_path / "slurm-ft.yaml"
    path.write_text(yaml.safe_dump(data))
    os.chmod(path, 0o644)
    return path


def slurm_ft(lab, config: Optional[Path], *args, env=None, timeout=300, check=True) -> subprocess.CompletedProcess:
    e = dict(lab.env)
    if config is not None:
        e["SLURM_FT_CONFIG"] = str(config)
    e.update(env or {})
    p = subprocess.run([PY, "-m", "slurm_ft", *args], capture_output=True, text=True, timeout=timeout, env=e)
    if check:
        assert p.returncode == 0, f"slurm-ft {' '.join(args)}: rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def submit_ft(lab, tmp_path: Path, nodes: int, *extra: str) -> int:
    p = slurm_ft(lab, None, "sbatch", *extra, "-N", str(nodes), "-o", str(tmp_path / "job-%j.out"),
                 "/bin/sleep", "3600")
    return int(p.stdout.split()[-1])


def submit_plain(lab, tmp_path: Path, nodes: int) -> int:
    p = subprocess.run(["sbatch", "--parsable", "--exclusive", "-N", str(nodes), "-o", str(tmp_path / "plain-%j.out"),
                        "--wrap", "sleep 3600"], capture_output=True, text=True, timeout=30, env=lab.env)
    assert p.returncode == 0, p.stderr
    return int(p.stdout.strip().split(";")[0])


def wait_job(lab, job_id: int, state: str = "RUNNING", timeout: float = 120.0, **more):
    deadline = time.monotonic() + timeout
    job = None
    while time.monotonic() < deadline:
        job = lab.client.job(job_id)
        if job.state == state and all(getattr(job, k) == v for k, v in more.items()):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} not {state} {more} within {timeout} s; last seen {job}")


def wait_event(ck: Path, pred, timeout: float, what: str, lab=None, job_id=None) -> dict:
    """The first event of the trainer's log in `ck` that `pred` accepts (the job's state in the error)."""
    from slurm_ft_lab.trainer import read_log
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for ev in read_log(str(ck)):
            if pred(ev):
                return ev
        time.sleep(0.2)
    tail = read_log(str(ck))[-3:]
    job = lab.client.job(job_id) if lab is not None else None
    state = f"; job {job.state} ({job.reason})" if job else ""
    raise AssertionError(f"no {what} within {timeout} s; last events: {tail}{state}")


LAB_FAULT = "slurm-ft: LAB_FAULT gpu3 set by the test"


def fail_node(lab, node: str, reason: str = LAB_FAULT) -> None:
    """What the health check does on a fatal finding: drain with a slurm-ft reason. Its code is no check's:
    the fake driver holds no evidence of this fault, so the lab's periodic HealthCheckProgram would resume
    an XID79 drain mid-test (as it should a drain whose fault it cannot see: CI 2026-11-30, three rooms)."""
    lab.client.drain([node], reason)


def xid_drain(lab, node: str, value: int = 79, gpu: int = 3) -> subprocess.CompletedProcess:
    """A fatal Xid on one GPU of `node` (at the fake driver), then the node's real health check, which
    drains it: what the watcher or HealthCheckProgram does on a real node."""
    from slurm_ft_lab.inject import inject
    inject(lab.dir, node, "xid", gpu=gpu, value=value)
    env = dict(lab.env, SLURMD_NODENAME=node, SLURM_FT_CONFIG=str(lab.config_path),
               LD_LIBRARY_PATH=str(lab.dir / "lib"))
    return subprocess.run([PY, "-m", "slurm_ft", "check", "--node", node, "--drain"], capture_output=True,
                          text=True, timeout=120, env=env)


def once(lab, config: Path, budget: float = 120, env=None, check=True) -> subprocess.CompletedProcess:
    return slurm_ft(lab, config, "controller", "once", "--json", "--budget", str(budget), env=env, check=check)


@contextmanager
def controller_running(lab, config: Path, log: Path):
    """`slurm-ft controller run` beside the test, as deployed: it sees every run of a job (journal.placements),
    even one that only lasts its prolog."""
    env = dict(lab.env, SLURM_FT_CONFIG=str(config))
    with open(log, "w") as out:
        proc = subprocess.Popen([PY, "-m", "slurm_ft", "controller", "run"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(120)      # it ends its current cycle first
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def crash_once(lab, config: Path, point: str, budget: float = 120) -> subprocess.CompletedProcess:
    """One controller cycle killed (SIGKILL) right after the journal write `point` (STEP:intent|result)."""
    e = dict(lab.env, SLURM_FT_CONFIG=str(config))
    return subprocess.run([PY, str(JOBS / "crashing_controller.py"), point, str(budget)], capture_output=True,
                          text=True, timeout=300, env=e)


def incidents(lab, config: Path) -> List[dict]:
    return json.loads(slurm_ft(lab, config, "incidents", "--json").stdout)


def parts(lab) -> dict:
    return {p.name: set(p.nodes) for p in lab.client.partitions()}


def set_pool(lab, nodes: List[str]) -> None:
    """The spares partition's node list, empty included (SlurmClient refuses an empty list)."""
    subprocess.run(["scontrol", "update", "PartitionName=spares", "Nodes=" + ",".join(nodes)], check=True,
                   env=lab.env, timeout=30)


def with_lines(wrapper: str, lines: str) -> str:
    """A lab hook wrapper with shell `lines` run before its scripts."""
    head, sep, tail = wrapper.partition("for f in ")
    assert sep, "the lab's hook wrapper changed: no 'for f in' loop"
    return head + lines + sep + tail


@contextmanager
def periodic_check_skips(lab, node: str):
    """slurmd's periodic HealthCheckProgram leaves `node` alone meanwhile: it would drain it for a fault
    the test injects at any moment (every node is checked once per HealthCheckInterval, cycled)."""
    hook = lab.dir / "hooks" / "healthcheck"
    saved = hook.read_text()
    hook.write_text(with_lines(saved, f'[ "$SLURMD_NODENAME" = {node} ] && exit 0\n'))
    try:
        yield
    finally:
        hook.write_text(saved)
