"""The scenario slurm-ft exists for, run on the lab: a gang-synchronous trainer on every node, a fatal
Xid on one GPU, and the recovery, with a timeline of what happened when (for `lab demo` and the bench).

Nothing here is faked: the job is submitted by the lab's job user (users.DEFAULT, as on a cluster: not
root) with `slurm-ft sbatch` (or, via="plugin", with plain
`sbatch --ft-ckpt-dir` through the lab's slurm-ft plugins: `lab up --plugin`), the fault is written by the lab's
fake NVML and kernel log (`lab inject`), `slurm-ft watch` on the faulty node sees the Xid and drains
the node, the controller (in this process, on its own journal) recovers the job, and the trainer's own
event log says which checkpoint it resumed from and when its first step after the fault completed.

Two paths: `requeue` (the job is requeued onto a spare from the pool) and `hot-spare` (the job holds K
idle nodes; its supervisor relaunches the training step on one of them: no requeue). A third, `planned`
(`fault(..., planned=True)`, with hot spares): no fault at all, corrected ECC errors climbing on one GPU
(`lab inject --ecc-sbe-rate`); the node's watcher sees the soft signal and drains the node gracefully, the
supervisor asks the trainer for a checkpoint and moves the step to a hot spare from it: no step redone.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import yaml

from slurm_ft.config import load_config
from slurm_ft.errors import EnvironmentProblem
from slurm_ft.fleet.recovery import daemon
from slurm_ft.fleet.recovery import journal as jn
from slurm_ft.fleet import db
from slurm_ft.fleet.recovery.controller import Controller, controller_lock
from slurm_ft.job.startprep import STARTS_LOG
from slurm_ft.runner import run
from slurm_ft.slurm.backend import client_from_config
from slurm_ft.slurm.client import SlurmClient
from slurm_ft.slurm.hostlist import expand
from slurm_ft_lab.inject import heal_all, inject
from slurm_ft_lab.trainer import LOG_NAME

log = logging.getLogger(__name__)

PY = sys.executable


@dataclass
class Phase:
    name: str
    t: float                        # epoch seconds
    detail: str = ""


# The planned path's soft signals in the lab (a scenario's own config): read every second, 100 corrected
# errors within 30 s; the breaker's share and the hourly budget sized for a few swaps on a small lab.
PLANNED_SOFT = {"window_s": 30.0, "ecc_corrected": 100}
PLANNED_RATE = "6000/min"          # 100 corrected errors a second on the victim GPU


@dataclass
class FaultResult:
    path: str                       # "requeue", "hot-spare" or "planned"
    job_id: int
    failed_node: str
    gpu: int
    fault_t: float
    spare_node: Optional[str] = None
    resumed_from_step: Optional[int] = None
    last_step_before: Optional[int] = None
    first_step_after: Optional[int] = None
    phases: List[Phase] = field(default_factory=list)
    incident: Optional[dict] = None

    def at(self, name: str) -> Optional[float]:
        for p in self.phases:
            if p.name == name:
                return p.t - self.fault_t
        return None

    @property
    def fault_to_resume_s(self) -> Optional[float]:
        """Fault to the first step after it; on the planned path from the soft signal (the node drained
        for it) to the first step on the spare."""
        after = self.at("first step after")
        if self.path == "planned" and after is not None:
            signal = self.at("signal")
            return None if signal is None else after - signal
        return after

    @property
    def steps_lost(self) -> Optional[int]:
        if self.last_step_before is None or self.resumed_from_step is None:
            return None
        return self.last_step_before - self.resumed_from_step

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "job_id": self.job_id,
            "fault_to_resume_s": _r(self.fault_to_resume_s),
            "resumed_from_step": self.resumed_from_step,
            "steps_lost": self.steps_lost,
            "failed_node": self.failed_node,
            "failed_gpu": self.gpu,
            "spare_node": self.spare_node,
            "phases": [{"name": p.name, "s": _r(p.t - self.fault_t), "detail": p.detail}
                       for p in sorted(self.phases, key=lambda p: p.t)],
        }


def _drained_no_later_than_its_reactions(res: FaultResult, name: str) -> None:
    """The drain's time is when this scenario's poll of Slurm saw it; the supervisor hears of it by a notice and
    may react before that poll (a negative "drained -> supervisor sees it"). The node was drained no later
    than the first thing that reacted to it, and not before the fault."""
    drain = next((p for p in res.phases if p.name == name), None)
    reactions = [p.t for p in res.phases if p.name not in ("fault", name)]
    if drain is not None and reactions:
        drain.t = max(res.fault_t, min(drain.t, min(reactions)))


def _r(x: Optional[float]) -> Optional[float]:
    return round(x, 3) if x is not None else None


class Scenario:
    """One lab, one trainer job, a controller thread; `fault()` breaks a GPU and times the recovery."""

    def __init__(self, lab, work: Path, *, step_time: float = 0.5, ckpt_every: int = 5,
                 collective_timeout: float = 600.0, on_phase: Optional[Callable[[Phase, float], None]] = None,
                 hot_spares: int = 0, planned: bool = False):
        self.lab = lab
        self.hot_spares = hot_spares
        self.planned = planned
        if planned and not hot_spares:
            raise ValueError("the planned path needs a hot spare in the job")
        self.path = "planned" if planned else "hot-spare" if hot_spares else "requeue"
        self.work = Path(work)
        self.step_time = step_time
        self.ckpt_every = ckpt_every
        self.collective_timeout = collective_timeout
        self.on_phase = on_phase
        # the work directory is root's (the controller's config and journal); the job's files are its user's
        self.job_dir = self.work / "job"
        self.ckpt_dir = self.job_dir / "ckpt"
        self.config_path = self.work / "slurm-ft.yaml"
        self.env = lab.env()
        self.job_id: Optional[int] = None
        self._stop = threading.Event()
        self._ctl_thread: Optional[threading.Thread] = None
        self._steps: List[tuple] = []       # (kind, outcome, detail, t) from the controller
        self._lock = threading.Lock()
        self._fault_t: Optional[float] = None
        self._log_pos = 0                   # events(): bytes of the trainer's log already read
        self._events: List[dict] = []
        self.client = SlurmClient(conf=str(lab.conf))

    # --- set-up ------------------------------------------------------------------------------------
    def prepare(self) -> None:
        """A clean lab (no jobs, healthy GPUs, partitions as configured) and a fresh journal."""
        jobs = [j.job_id for j in self.client.jobs() if j.state not in ("COMPLETED", "CANCELLED", "FAILED")]
        if jobs:
            run(["scancel", *map(str, jobs)], timeout=30, env=self.env, check=False)
        heal_all(self.lab.dir)             # also forgets each node's health state, as a reboot would
        self.client.set_partition_nodes("train", self.lab.spec.train_nodes)
        if self.lab.spec.spare_nodes:
            self.client.set_partition_nodes("spares", self.lab.spec.spare_nodes)
        deadline = time.monotonic() + 120
        while True:
            nodes = self.client.nodes()
            bad = [n.name for n in nodes if n.drained or n.down]
            if bad:
                self.client.resume(bad)
            busy = [j for j in self.client.jobs() if j.state in ("RUNNING", "COMPLETING", "PENDING", "CONFIGURING")]
            if not bad and not busy and all(n.state == "IDLE" for n in nodes):
                break
            if time.monotonic() > deadline:
                raise EnvironmentProblem(f"lab in {self.lab.dir} did not settle (jobs or nodes busy) within 120 s")
            time.sleep(0.3)
        self._log_pos, self._events = 0, []
        if self.work.exists():
            shutil.rmtree(self.work)
        self.work.mkdir(parents=True)
        os.chmod(self.work, 0o755)          # the job's user enters it to reach job/
        self.ckpt_dir.mkdir(parents=True)
        self.lab.give(self.job_dir)         # the job user's: output, checkpoints, the starts log
        base = yaml.safe_load(Path(self.lab.config_path).read_text()) or {}
        base["state_dir"] = str(self.work / "state")
        base.setdefault("controller", {}).update({"poll_s": 0.05, "cycle_budget_s": 300.0})
        if self.planned:     # the victim's watcher reads this config: its soft signals, budget and breaker
            health = base.setdefault("health", {})
            health["soft_period_s"] = 1.0
            health.setdefault("node_types", {}).setdefault("default", {})["soft"] = dict(PLANNED_SOFT)
            base.setdefault("lifecycle", {}).update({"planned_swaps_per_hour": 100, "breaker_max_share": 0.5})
        self.config_path.write_text(yaml.safe_dump(base))
        os.chmod(self.config_path, 0o644)

    def start_controller(self) -> None:
        config = load_config(str(self.config_path))
        lock = controller_lock(config.state_dir)
        lock.__enter__()

        def on_step(step, outcome, detail, t):
            with self._lock:
                self._steps.append((step.kind, outcome, detail, t, step.spares))
            if self.on_phase and self._fault_t is not None and outcome in ("ok", "skipped"):
                name = PHASE_OF_STEP.get(step.kind)
                if name:
                    self.on_phase(Phase(name, t, detail), self._fault_t)

        def loop():
            ctl = Controller(client_from_config(config), jn.connect(db.path_in(config.state_dir)), config,
                             on_step=on_step)
            # the daemon's own cadence: an idle read every controller.interval_s, at once on a node's wake
            daemon.serve(ctl, config.controller.interval_s, daemon.listen(ctl, config), self._stop.is_set,
                         budget_s=300.0)
            lock.__exit__(None, None, None)

        self._ctl_thread = threading.Thread(target=loop, name="controller", daemon=True)
        self._ctl_thread.start()

    def submit(self, nodes: int, via: str = "wrapper") -> int:
        """The trainer on `nodes` nodes, with `slurm-ft sbatch` (via="wrapper") or with plain sbatch and the
        SPANK plugin's --ft-* options (via="plugin", a batch script whose $1 is {ckpt}; with hot spares,
        `slurm-ft sbatch` through the plugins: the supervisor is in its starter)."""
        # Each rank runs `python -S` with the directories it needs on PYTHONPATH (the lab's, slurm-ft's
        # and pynvml's): site.py's .pth processing (the editable-install finders and whatever else is
        # installed) costs every one of the 64 ranks CPU that the restart's prologs need.
        path = [str(Path(__file__).resolve().parents[1])]
        for name in ("slurm_ft", "pynvml"):
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.origin:
                where = os.path.dirname(spec.origin)
                path.append(os.path.dirname(where) if spec.submodule_search_locations else where)
        env = dict(self.env, PYTHONPATH=os.pathsep.join(path + [p for p in [self.env.get("PYTHONPATH")] if p]),
                   LD_LIBRARY_PATH=str(self.lab.dir / "lib"))   # the nodes' "driver", as a real node's system path has it
        sbatch = ["-J", "slurm-ft-demo", "--ntasks-per-node=1", "--gres=gpu:8", "--open-mode=append",
                  "-o", str(self.job_out)]
        trainer = [PY, "-S", "-m", "slurm_ft_lab.trainer", "--ckpt-dir", str(self.ckpt_dir), "--resume", "{ckpt}",
                   "--steps", "1000000", "--step-time", str(self.step_time), "--ckpt-every", str(self.ckpt_every),
                   "--collective-timeout", str(self.collective_timeout)]
        if via == "plugin" and not self.hot_spares:
            script = self.job_dir / "train.sh"
            line = " ".join(shlex.quote(a) if a != "{ckpt}" else '"$1"' for a in ["srun", *trainer])
            script.write_text(f"#!/bin/sh\n# $1: the newest complete checkpoint, {{ckpt}} resolved by the slurm-ft "
                              f"SPANK plugin at every start\nexec {line}\n")
            argv = ["sbatch", "--parsable", f"--ft-ckpt-dir={self.ckpt_dir}", "--ft-max-restarts=100",
                    "-N", str(nodes), *sbatch, str(script), "{ckpt}"]
        elif via in ("wrapper", "plugin"):
            # with hot spares the supervisor launches the step itself (`srun` on N named nodes): N + K = nodes;
            # `slurm-ft sbatch` submits through the plugins where the lab runs them (the policy's tag)
            launch = (["--hot-spares", str(self.hot_spares), "-N", str(nodes - self.hot_spares)] if self.hot_spares
                      else ["-N", str(nodes)])
            argv = [PY, "-m", "slurm_ft", "sbatch", "--parsable", "--ckpt-dir", str(self.ckpt_dir),
                    "--max-restarts", "100", *launch, *sbatch, *([] if self.hot_spares else ["srun"]), *trainer]
        else:
            raise ValueError(f"via must be wrapper or plugin, not {via!r}")
        env = dict(self.lab.user_env(), **{k: env[k] for k in ("PYTHONPATH", "LD_LIBRARY_PATH")})
        res = run(self.lab.user_argv(argv), timeout=120, env=env, cwd=str(self.job_dir))
        self.job_id = int(res.stdout.strip().split(";")[0])
        return self.job_id

    @property
    def job_out(self) -> Path:
        return self.job_dir / "job.out"

    def stop(self, cancel: bool = True) -> None:
        self._stop.set()
        if self._ctl_thread:
            self._ctl_thread.join(timeout=30)
        if cancel and self.job_id is not None:
            run(["scancel", str(self.job_id)], timeout=30, env=self.env, check=False)

    # --- observing the trainer -----------------------------------------------------------------------
    def events(self) -> List[dict]:
        """The trainer's events so far. Read on from where the last call stopped: the fault loop polls
        every 50 ms while the restart's hooks and ranks need the CPUs, and the log only grows."""
        try:
            with open(self.ckpt_dir / LOG_NAME, "rb") as fh:
                if os.fstat(fh.fileno()).st_size < self._log_pos:     # a new log (prepare() again)
                    self._log_pos, self._events = 0, []
                fh.seek(self._log_pos)
                data = fh.read()
        except FileNotFoundError:
            self._log_pos, self._events = 0, []
            return []
        end = data.rfind(b"\n") + 1                # a torn last line waits for the next call
        for line in data[:end].splitlines():
            try:
                self._events.append(json.loads(line))
            except ValueError:
                pass
        self._log_pos += end
        return list(self._events)

    def wait_event(self, pred, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ev in self.events():
                if pred(ev):
                    return ev
            time.sleep(0.1)
        job = self.client.job(self.job_id) if self.job_id else None
        raise EnvironmentProblem(f"lab scenario: no {what} within {timeout:g} s"
                                 + (f" (job {job.job_id} {job.state}, {job.reason})" if job else ""))

    def current_run(self) -> tuple:
        """(restart, launch) of the latest start of the training step."""
        return max((run_key(e) for e in self.events() if e.get("event") == "start"), default=(0, 0))

    def supervisor_events(self) -> List[dict]:
        """The hot-spare supervisor's lines in the starts log (launch, fault, stopped, release, fallback)."""
        try:
            lines = (self.ckpt_dir / STARTS_LOG).read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    # --- the fault -----------------------------------------------------------------------------------
    def fault(self, *, victim_index: int, gpu: int = 3, xid: int = 79, warmup_steps: int = 7,
              timeout: float = 600.0) -> FaultResult:
        """Wait until the current run made progress past a checkpoint, break one GPU, time the recovery
        (planned: make its corrected ECC count climb, time the planned swap)."""
        run_no = self.current_run()
        start = self.wait_event(lambda e: e.get("event") == "start" and run_key(e) == run_no, timeout,
                                "trainer start")
        first = start["step"]
        job = self.client.job(self.job_id)
        step_nodes = list(job.nodes)
        if self.hot_spares:          # a node of the training step, not an idle hot spare nor the batch host
            launches = [e for e in self.supervisor_events() if e.get("event") == "launch"]
            step_nodes = [n for n in expand(launches[-1]["nodes"]) if n != job.batch_host]
        victim = step_nodes[victim_index % len(step_nodes)]
        watcher = self._start_watch(victim, timeout, self.config_path if self.planned else None)
        self.wait_event(lambda e: e.get("event") == "step" and run_key(e) == run_no
                        and e["step"] >= first + warmup_steps, timeout, f"step {first + warmup_steps}")
        if not watcher.ready.wait(timeout):
            raise EnvironmentProblem(f"lab scenario: slurm-ft watch on {victim} did not start within {timeout:g} s")
        with self._lock:
            self._steps.clear()
        t_fault = time.time()
        self._fault_t = t_fault
        if self.planned:
            inject(self.lab.dir, victim, "ecc_sbe_rate", gpu=gpu, value=PLANNED_RATE)
            what = f"corrected ECC errors at {PLANNED_RATE} on {victim} gpu{gpu}"
        else:
            inject(self.lab.dir, victim, "xid", gpu=gpu, value=xid)
            what = f"Xid {xid} on {victim} gpu{gpu}"
        res = FaultResult(self.path, self.job_id, victim, gpu, t_fault)
        sup_seen = len(self.supervisor_events())
        res.phases.append(Phase("fault", t_fault, what))
        if self.on_phase:
            self.on_phase(res.phases[-1], t_fault)

        # drain (seen from Slurm), the controller's steps, then the trainer's resume
        deadline = time.monotonic() + timeout
        drained = False
        seen_steps = 0
        saved_seen = len(self.events())
        while time.monotonic() < deadline:
            if not drained:
                node = self.client.node(victim)
                if node.drained or node.down:
                    drained = True
                    self._phase(res, Phase("signal" if self.planned else "drain", time.time(), node.reason))
            with self._lock:
                steps = list(self._steps)
            for kind, outcome, detail, t, spares in steps[seen_steps:]:
                if kind == "swap" and outcome == "ok" and spares and not self.hot_spares:  # hot: the pool refill
                    res.spare_node = ",".join(spares)
                name = PHASE_OF_STEP.get(kind)
                if name and outcome in ("ok", "skipped"):
                    res.phases.append(Phase(name, t, detail))
            seen_steps = len(steps)
            if self.planned:
                for e in self.events()[saved_seen:]:
                    if e.get("event") == "ckpt" and e.get("requested"):
                        self._phase(res, Phase("checkpoint saved", e["t"], f"step {e['step']}, as asked"))
                saved_seen = len(self.events())
            if self.hot_spares:
                sup = self.supervisor_events()
                for e in sup[sup_seen:]:
                    name = PHASE_OF_SUPERVISOR.get(e.get("event"))
                    if e.get("event") == "planned":
                        name = {"asked": "checkpoint asked", "swap": "planned swap"}.get(e.get("phase", ""))
                    elif e.get("event") == "notice" and e.get("kind") == "degraded":
                        name = "degraded notice"
                    if name:
                        self._phase(res, Phase(name, e["t"], e.get("reason") or e.get("nodes", "")))
                    if e.get("event") == "launch":
                        res.spare_node = ",".join(n for n in expand(e["nodes"]) if n not in step_nodes
                                                  and n != job.batch_host) or None
                sup_seen = len(sup)
            evs = self.events()
            after = [e for e in evs if run_key(e) > run_no]
            starts = [e for e in after if e.get("event") == "start"]
            firsts = [e for e in after if e.get("event") == "step"]
            if starts and firsts:
                s, f = starts[0], firsts[0]
                res.resumed_from_step = s["step"] if s.get("resumed_from") else 0
                before = [e["step"] for e in evs if e.get("event") == "step" and run_key(e) == run_no]
                res.last_step_before = max(before) if before else None
                res.first_step_after = f["step"]
                self._phase(res, Phase("resumed", s["t"], f"from step {res.resumed_from_step} "
                                                         f"({s.get('world')} ranks)"))
                self._phase(res, Phase("first step after", f["t"], f"step {f['step']}"))
                break
            time.sleep(0.05)
        else:
            raise EnvironmentProblem(f"lab scenario: job {self.job_id} did not resume within {timeout:g} s "
                                     f"after the fault on {victim}; {self._where_it_stands(victim)}")
        if not drained:
            node = self.client.node(victim)
            res.phases.append(Phase("signal" if self.planned else "drain", res.fault_t,
                                    node.reason + " (drain time not observed)"))
        _drained_no_later_than_its_reactions(res, "signal" if self.planned else "drain")
        if self.planned:                  # the errors stop (the node is out; the next swap is another's)
            inject(self.lab.dir, victim, "ecc_sbe_rate", gpu=gpu, value=0)
        watcher.join(timeout=1)
        self._fault_t = None
        return res

    def _where_it_stands(self, victim: str) -> str:
        """What a stalled recovery looks like from here: the job, the node, the last things each side logged."""
        def last(events: List[dict], n: int = 3) -> str:
            return " | ".join(", ".join(f"{k}={v}" for k, v in e.items() if k not in ("job", "t")) for e in events[-n:])
        try:
            job, node = self.client.job(self.job_id), self.client.node(victim)
            slurm = f"job {job.state} ({job.reason or '-'}, restarts {job.restart_count}); {victim} {node.state} {node.reason!r}"
        except Exception as exc:   # noqa: BLE001 - the message is for a person; say what failed instead
            slurm = f"Slurm unreadable: {exc}"
        with self._lock:
            steps = [f"{kind} {outcome}" for kind, outcome, *_ in self._steps[-3:]]
        return (f"{slurm}; controller: {', '.join(steps) or 'no step'}; supervisor: "
                f"{last(self.supervisor_events()) or 'nothing logged'}; trainer: {last(self.events()) or 'nothing logged'}; "
                f"job output in {self.job_out}")

    def _phase(self, res: FaultResult, p: Phase) -> None:
        res.phases.append(p)
        if self.on_phase:
            self.on_phase(p, res.fault_t)

    def _start_watch(self, node: str, timeout: float, config: Optional[Path] = None) -> "Watch":
        """`slurm-ft watch` for the node about to fail, as its systemd service would run on that node
        (`--once`: until its first fatal Xid, or its first planned-swap drain)."""
        env = dict(self.env)
        env.update({"SLURMD_NODENAME": node, "SLURM_FT_CONFIG": str(config or self.lab.config_path),
                    "LD_LIBRARY_PATH": str(self.lab.dir / "lib")})
        argv = [PY, "-m", "slurm_ft", "watch", "--node", node, "--once", "--timeout", str(int(timeout)),
                *([] if self.planned else ["--no-soft"])]
        return Watch(node, argv, env, timeout + 30)

class Watch(threading.Thread):
    """One `slurm-ft watch --once` in the background. `ready` is set once it says what it follows: it
    reads the kernel log from its end and NVML events from its start, so an Xid injected before then
    is missed (at load 60, python took longer to get there than any fixed wait the demo gave it)."""

    def __init__(self, node: str, argv: List[str], env: Dict[str, str], timeout: float):
        super().__init__(name=f"watch-{node}", daemon=True)
        self.node, self.argv, self.env, self.timeout = node, argv, env, timeout
        self.ready = threading.Event()
        self.start()

    def run(self) -> None:
        try:
            proc = subprocess.Popen(self.argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True, errors="replace")
        except OSError as exc:
            log.warning("slurm-ft watch on %s: %s", self.node, exc)
            self.ready.set()
            return
        killer = threading.Timer(self.timeout, proc.kill)    # --timeout ends it; this is the backstop
        killer.start()
        tail: List[str] = []
        rc: Optional[int] = None
        try:
            for line in proc.stderr:
                if line.startswith("slurm-ft watch on "):
                    self.ready.set()
                tail = (tail + [line.rstrip()])[-5:]
            rc = proc.wait()
        finally:
            killer.cancel()
            self.ready.set()
        if rc:
            log.warning("slurm-ft watch on %s exited %s: %s", self.node, rc, " | ".join(tail)[-300:])


def run_key(event: dict) -> tuple:
    """Which start of the training step an event belongs to: (the job's restart, the supervisor's launch)."""
    return int(event.get("restart", 0)), int(event.get("launch", 0))


# The hot-spare supervisor's events as the timeline names them.
PHASE_OF_SUPERVISOR: Dict[str, str] = {
    "fault": "step fault seen",      # the supervisor saw Slurm drain a node of its step
    "stopped": "step stopped",
    "launch": "relaunched",          # srun on N healthy nodes of the allocation
    "release": "node given back",
    "fallback": "no hot spare left",
}

# The controller's steps as the timeline names them.
PHASE_OF_STEP: Dict[str, str] = {
    "released": "incident closed",
    "planned": "incident closed",
    "open": "incident",
    "requeue": "requeue",
    "quarantine": "quarantine",
    "swap": "swap",
    "exclude": "pending, exclude",   # the job is PENDING again (killed, epilogs done): exclude the node
    "start": "start now",
    "confirm": "running",
}
