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

from slurm_ft_lab import users
from slurm_ft_lab.waits import wait_for

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


def slurm_ft(lab, config: Optional[Path], *args, env=None, timeout=300, check=True, user: Optional[str] = None,
             cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """`slurm-ft ARGS`. `slurm-ft sbatch` runs as the lab's job user (a user submits their job; `user`
    names another, "root" submits as root); every other command as root (the admin, the controller)."""
    user = user or (lab.user if args[:1] == ("sbatch",) else "root")
    e = dict(lab.env) if user == "root" else lab.user_env(user)
    if config is not None:
        e["SLURM_FT_CONFIG"] = str(config)
    e.update(env or {})
    argv = [PY, "-m", "slurm_ft", *args]
    if user != "root":
        argv = lab.cluster.user_argv(argv, user)
        cwd = cwd or lab.cluster.user_home(user)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=e, cwd=cwd)
    if check:
        assert p.returncode == 0, f"slurm-ft {' '.join(args)}: rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def submit_ft(lab, work: Path, nodes: int, *extra: str) -> int:
    """A fault-tolerant sleeper of the job user's, output in `work` (a directory they own: the `work` fixture)."""
    p = slurm_ft(lab, None, "sbatch", *extra, "-N", str(nodes), "-o", str(work / "job-%j.out"),
                 "/bin/sleep", "3600")
    return int(p.stdout.split()[-1])


def submit_plain(lab, work: Path, nodes: int) -> int:
    """An ordinary job beside the fault-tolerant ones (a filler, a neighbour), of another lab user: what it
    does inside does not matter, whose it is does (it is not the FT job's user's)."""
    p = lab.run_as(["sbatch", "--parsable", "--exclusive", "-N", str(nodes), "-o", "/dev/null",
                    "--wrap", "sleep 3600"], user=users.NAMES[1], timeout=30)
    assert p.returncode == 0, p.stderr
    return int(p.stdout.strip().split(";")[0])


def wait_job(lab, job_id: int, state: str = "RUNNING", timeout: float = 120.0, **more):
    """The job once in `state`; RUNNING: once its prologs ended too. RUNNING comes with the allocation
    (PrologFlags=Alloc): a fault injected while a prolog still runs fails that prolog instead (Slurm
    requeues the job held), a path of its own (CI 2026-12-02, 22.05 at load ~90: prologs past 2 s)."""
    deadline = time.monotonic() + timeout
    job = None
    while time.monotonic() < deadline:
        job = lab.client.job(job_id)
        if job.state == state and all(getattr(job, k) == v for k, v in more.items()) \
                and not (state == "RUNNING" and job.reason == "Prolog"):
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
    """What the health check does on a fatal finding: drain with a slurm-ft reason, then tell the node's
    jobs and wake the controller (node/tell.py). Its code is no check's: the fake driver holds no evidence
    of this fault, so the lab's periodic HealthCheckProgram would resume an XID79 drain mid-test (as it
    should a drain whose fault it cannot see: CI 2026-11-30, three rooms)."""
    from slurm_ft.config import load_config
    from slurm_ft.node import state, tell
    lab.client.drain([node], reason)
    config = load_config(str(lab.config_path))
    running = state.running_jobs(state.load(state.path_for(config.health, node), node))
    tell.after_drain(lab.client, config, node, reason, running)


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


def write_hook(path: Path, text: str) -> None:
    """Replace a lab hook wrapper at once (a slurmd may exec it at any moment: never a half-written one)."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.chmod(tmp, path.stat().st_mode & 0o7777)
    os.replace(tmp, path)


def hook_runs_on(node: str) -> List[int]:
    """Pids of the hooks' processes now running for `node`: root's, below a slurmd or slurmstepd (the
    job's tasks are its user's; a test's watcher has no slurmd above it)."""
    import psutil
    daemons = ("slurmd", "slurmstepd")
    pids = []
    for p in psutil.process_iter(["uids", "name"]):
        try:
            if p.info["uids"] is None or p.info["uids"].real != 0 or p.info["name"] in daemons:
                continue
            if p.environ().get("SLURMD_NODENAME") == node and any(a.name() in daemons for a in p.parents()):
                pids.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return pids


def skip_periodic_check(lab, node: str) -> str:
    """slurmd's periodic HealthCheckProgram leaves `node` alone from now on: it would drain it for a fault
    the test injects at any moment (every node is checked once per HealthCheckInterval, cycled). A run
    that began before is waited out: under load one lasts seconds, and it would read the fault too.
    Returns the wrapper as it was, for the caller to put back."""
    hook = lab.dir / "hooks" / "healthcheck"
    saved = hook.read_text()
    write_hook(hook, with_lines(saved, f'[ "$SLURMD_NODENAME" = {node} ] && exit 0\n'))
    wait_for(lambda: not hook_runs_on(node), 120, f"the hooks running on {node} to end", 0.5)
    return saved


@contextmanager
def periodic_check_skips(lab, node: str):
    """skip_periodic_check meanwhile."""
    saved = skip_periodic_check(lab, node)
    try:
        yield
    finally:
        write_hook(lab.dir / "hooks" / "healthcheck", saved)


@contextmanager
def watching(lab, nodes, log_dir: Path, *options: str):
    """`slurm-ft watch` on each of `nodes` (root, as its systemd service on a cluster's node): it follows
    the node's kernel log (and NVML Xid events; `--no-nvml`: not those), answers the node's hooks and
    its users' checks (the supervisor's, over the query socket). Yields node -> its log file. A watcher
    starts at the end of its node's kernel log: a line written before it started is one it missed."""
    procs = []
    try:
        for n in nodes:
            (lab.dir / "nodes" / n / "state.json.watch").unlink(missing_ok=True)   # no saved place: a fresh boot's
            log = log_dir / f"watch-{n}.log"
            env = dict(lab.env, SLURMD_NODENAME=n, LD_LIBRARY_PATH=str(lab.dir / "lib"))
            procs.append((n, log, subprocess.Popen([PY, "-m", "slurm_ft", "-v", "watch", "--node", n, *options],
                                                   env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)))
        deadline = time.monotonic() + 120
        for n, log, p in procs:
            while "slurm-ft watch on" not in log.read_text():
                assert p.poll() is None and time.monotonic() < deadline, f"watch on {n}: {log.read_text()[-2000:]}"
                time.sleep(0.1)
            assert "answering users on" in log.read_text(), log.read_text()
        yield {n: log for n, log, _ in procs}
    finally:
        for _, _, p in procs:
            p.terminate()
        for _, _, p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
