"""A seeded, randomized fault campaign on the lab with slurm-ft deployed as at a site: `slurm-ft controller
run`, a `slurm-ft watch` on every node, the hooks, and fault-tolerant jobs of several users (requeue and
hot-spare jobs of the lab's trainer, with checkpoints). Faults are drawn from KINDS one after another;
after each settles (its job stepping again, its incident closed) the lab is read into an
invariants.World and checked, the fault's nodes are repaired and put back in the pool, and the next
fault waits out the rest of its gap. bench/chaos.py runs it and reports.

Each fault is injected the way it happens: a GPU fault at the fake driver (the rank on it fails or
stops), a partition as slurmd stopped (SIGSTOP), the controller killed (SIGKILL) and started again,
slurmctld restarted without -R, a watcher killed before its GPU fails.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set, Tuple

import yaml

from slurm_ft.slurm.client import SlurmClient
from slurm_ft_lab import invariants as inv
from slurm_ft_lab.inject import heal, heal_all, inject
from slurm_ft.slurm.hostlist import expand
from slurm_ft_lab.trainer import read_jsonl, read_log
from slurm_ft_lab.users import NAMES

PY = sys.executable

# kind -> (weight, settle seconds): how often it is drawn, and how long its job may take to step again
KINDS: Dict[str, Tuple[int, float]] = {
    "xid79": (4, 180.0),               # a GPU falls off the bus under a job
    "xid79_pair": (2, 240.0),          # the same on two nodes of one job, 2 s apart
    "user_xid": (2, 60.0),             # an application's Xid 13 beside the job: nothing may drain
    "partition_batch": (2, 300.0),     # the job's batch host unreachable until Slurm marks it DOWN
    "controller_kill": (2, 240.0),     # an Xid 79, and the controller SIGKILLed 1.5 s later (back in 5 s)
    "slurmctld_restart": (1, 300.0),   # an Xid 79, and slurmctld restarted 3 s later (without -R)
    "watcher_dead": (1, 420.0),        # the node's watcher dead when its GPU fails
}
GPU_KINDS = ("xid79", "xid79_pair", "controller_kill", "slurmctld_restart", "watcher_dead")   # a fatal Xid
BREAKER_SHARE = 0.5                    # of the lab's nodes out within the breaker's hour, before it opens
DRAIN_WAIT_S = 120.0                   # a GPU fault's nodes are drained by then (a watcher started again included)
PARTITION_S = 90.0                     # the longest partition: DOWN comes after SlurmdTimeout + MessageTimeout
                                       # (10 + 10 s in the lab) and a ping cycle


@dataclass
class Outcome:
    fault: inv.Fault
    stepping_again_s: Optional[float]       # fault -> the first step of the job's next start
    violations: List[inv.Violation]


class Campaign:
    def __init__(self, lab, work: Path, *, seed: int, jobs: int = 4, nodes_per_job: int = 3,
                 step_time: float = 0.5, ckpt_every: int = 5, say: Callable[[str], None] = print) -> None:
        self.lab, self.work, self.rng, self.say = lab, Path(work), random.Random(seed), say
        self.n_jobs, self.per_job, self.step_time, self.ckpt_every = jobs, nodes_per_job, step_time, ckpt_every
        self.client = SlurmClient(conf=str(lab.conf))
        self.config = self.work / "slurm-ft.yaml"
        self.ckpt: Dict[int, Path] = {}             # job -> its checkpoint directory (the trainer's log there)
        self.hot: Dict[int, bool] = {}
        self.faults: List[inv.Fault] = []
        self.controller: Optional[subprocess.Popen[bytes]] = None
        self.watchers: Dict[str, subprocess.Popen[bytes]] = {}

    # --- set-up --------------------------------------------------------------------------------------
    def prepare(self) -> None:
        """A clean lab, a journal of the campaign's own, the daemons up, the jobs running."""
        heal_all(self.lab.dir)
        self.client.set_partition_nodes("train", self.lab.spec.train_nodes)
        self.client.set_partition_nodes("spares", self.lab.spec.spare_nodes)
        bad = [n.name for n in self.client.nodes() if n.drained or n.down]
        if bad:
            self.client.resume(bad)
        if (self.work / "state").exists():      # a journal of its own: an earlier run's is not this lab's now
            shutil.rmtree(self.work / "state")
        self.work.mkdir(parents=True, exist_ok=True)
        os.chmod(self.work, 0o755)
        # The breaker is under test (breaker_count), not in the way: failed idle hot spares stay out in their
        # jobs, so more than the default tenth of the lab can be out within the hour, and the nodes' checks
        # (the lab's config: watchers, hooks) refused the drains of later faults (26.05's 30-min run).
        nodes_cfg = Path(self.lab.config_path)
        lab_cfg = yaml.safe_load(nodes_cfg.read_text()) or {}
        lab_cfg.setdefault("lifecycle", {})["breaker_max_share"] = BREAKER_SHARE
        nodes_cfg.write_text(yaml.safe_dump(lab_cfg))
        base = dict(lab_cfg, state_dir=str(self.work / "state"))
        base.setdefault("controller", {}).update({"poll_s": 0.05})
        base["lifecycle"] = dict(lab_cfg["lifecycle"], metrics_path=str(self.work / "m.prom"))
        self.config.write_text(yaml.safe_dump(base))
        os.chmod(self.config, 0o644)
        self.start_controller()
        for node in self.lab.spec.node_names:
            self.start_watcher(node)
        for i in range(self.n_jobs):
            self.submit(i, hot=bool(i % 2))
        for jid in self.ckpt:
            self._wait(lambda j=jid: self._last_step(j) is not None and self._last_step(j) >= self.ckpt_every + 2,
                       240, f"job {jid} past its first checkpoint")

    def start_controller(self) -> None:
        env = dict(self.lab.env(), SLURM_FT_CONFIG=str(self.config))
        log = open(self.work / "controller.log", "a")
        self.controller = subprocess.Popen([PY, "-m", "slurm_ft", "controller", "run"], env=env, stdout=log,
                                           stderr=subprocess.STDOUT)

    def start_watcher(self, node: str) -> None:
        """The node's `slurm-ft watch`, on the nodes' config (the lab's), as its systemd unit runs it."""
        env = dict(self.lab.env(), SLURMD_NODENAME=node, SLURM_FT_CONFIG=str(self.lab.config_path),
                   LD_LIBRARY_PATH=str(self.lab.dir / "lib"))
        log = open(self.work / f"watch-{node}.log", "a")
        self.watchers[node] = subprocess.Popen([PY, "-m", "slurm_ft", "watch", "--node", node, "--no-soft"],
                                               env=env, stdout=log, stderr=subprocess.STDOUT)

    def submit(self, i: int, hot: bool) -> int:
        user = NAMES[i % 3]
        d = self.lab.work_dir(f"chaos-job{i}", user)
        ck = d / "ck"
        trainer = [PY, "-m", "slurm_ft_lab.trainer", "--ckpt-dir", str(ck), "--resume", "{ckpt}", "--steps",
                   "100000000", "--step-time", str(self.step_time), "--ckpt-every", str(self.ckpt_every)]
        shape = ["--hot-spares", "1", "-N", str(self.per_job)] if hot else ["-N", str(self.per_job), "srun"]
        argv = [PY, "-m", "slurm_ft", "sbatch", "--parsable", "--ckpt-dir", str(ck), "--max-restarts", "1000",
                "--ntasks-per-node=1", "--gres=gpu:8", "--exclusive", "-o", str(d / "job.out"), "--open-mode=append",
                *shape, *trainer]     # whole nodes, as a training job holds them: a fault is one job's
        env = dict(self.lab.user_env(user), LD_LIBRARY_PATH=str(self.lab.dir / "lib"))
        res = subprocess.run(self.lab.user_argv(argv, user), env=env, cwd=str(d), capture_output=True, text=True,
                             timeout=120)
        if res.returncode != 0:
            raise RuntimeError(f"submit as {user}: {res.stderr.strip()[-300:]}")
        jid = int(res.stdout.strip().split(";")[0])
        self.ckpt[jid], self.hot[jid] = ck, hot
        self.say(f"job {jid} ({user}): {'hot-spare' if hot else 'requeue'} job on {self.per_job} nodes")
        return jid

    def stop(self) -> None:
        for p in [self.controller, *self.watchers.values()]:
            if p is not None and p.poll() is None:
                p.terminate()
        for p in [self.controller, *self.watchers.values()]:
            if p is not None:
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
        jobs = [str(j) for j in self.ckpt]
        if jobs:
            subprocess.run(["scancel", *jobs], env=self.lab.env(), timeout=30, check=False)

    # --- one fault -----------------------------------------------------------------------------------
    def _partition(self, node: str) -> bool:
        """Stop the node's slurmd until Slurm marks it DOWN (at most PARTITION_S: past SlurmdTimeout +
        MessageTimeout, though a loaded slurmctld has let that pass unseen), then continue it. True when
        Slurm saw the node DOWN: a fault its job must be recovered from; else nothing may be drained."""
        pid = self.lab.stop_slurmd(node, PARTITION_S + 30)      # the helper's SIGCONT: a bound, if we die
        deadline, down = time.monotonic() + PARTITION_S, False
        try:
            while not down and time.monotonic() < deadline:
                time.sleep(1.0)
                down = self.client.node(node).state == "DOWN"
        finally:
            os.kill(pid, signal.SIGCONT)
        return down

    def draw(self) -> str:
        kinds = list(KINDS)
        return self.rng.choices(kinds, weights=[KINDS[k][0] for k in kinds])[0]

    def fault(self, kind: str) -> Outcome:
        self._repair_left()
        job = self._running_job()
        ranks = self._rank_nodes(job)       # before the fault: a relaunch after it names the spare it took
        out = {n.name for n in self.client.nodes(list(job.nodes)) if n.drained or n.down}
        # not a node out already: a failed idle hot spare stays in its job, drained, until the job ends
        steps = [n for n in job.nodes if n != job.batch_host and n not in out] or list(job.nodes)
        node = self.rng.choice(steps)
        gpu = self.rng.randrange(self.lab.spec.gpus_per_node)
        t = time.time()
        fatal, nodes = True, (node,)
        if kind == "xid79":
            inject(self.lab.dir, node, "xid", gpu=gpu, value=79)
        elif kind == "xid79_pair":
            other = self.rng.choice([n for n in job.nodes if n != node])
            inject(self.lab.dir, node, "xid", gpu=gpu, value=79)
            time.sleep(2.0)
            inject(self.lab.dir, other, "xid", gpu=gpu, value=79)
            nodes = (node, other)
        elif kind == "user_xid":
            inject(self.lab.dir, node, "xid", gpu=gpu, value=13)
            fatal = False
        elif kind == "partition_batch":
            nodes = (job.batch_host,)
            fatal = self._partition(job.batch_host)
        elif kind == "controller_kill":
            inject(self.lab.dir, node, "xid", gpu=gpu, value=79)
            time.sleep(1.5)
            assert self.controller is not None
            self.controller.kill()
            self.controller.wait()
            time.sleep(5.0)
            self.start_controller()
        elif kind == "slurmctld_restart":
            inject(self.lab.dir, node, "xid", gpu=gpu, value=79)
            time.sleep(3.0)
            self.lab.restart_slurmctld()
        elif kind == "watcher_dead":
            w = self.watchers.pop(node)
            w.kill()
            w.wait()
            inject(self.lab.dir, node, "xid", gpu=gpu, value=79)
        f = inv.Fault(len(self.faults) + 1, kind, t, job.job_id, nodes, fatal, KINDS[kind][1],
                      slurm_recovers=kind == "partition_batch" and not self.hot[job.job_id],
                      restarts=kind == "partition_batch" or bool(set(nodes) & ranks))
        self.faults.append(f)
        self.say(f"fault {f.id} {kind}: job {job.job_id} on {','.join(nodes)}"
                 + (f" gpu{gpu}" if "xid" in kind or kind in ("controller_kill", "slurmctld_restart",
                                                            "watcher_dead") else ""))
        self._wait(lambda: self._settled(f), f.settle_s, "", quiet=True)
        world = self.world(now=max(time.time(), f.t + f.settle_s))
        violations = inv.check(world, self.faults)
        fresh = [v for v in violations if v.fault in (None, f.id)]
        if node not in self.watchers and kind == "watcher_dead":
            self.start_watcher(node)
        self._repair(f)
        return Outcome(f, self._stepping_again(f), fresh)

    def _rank_nodes(self, job) -> Set[str]:
        """The nodes the job's ranks run on: all of a requeue job's; a hot-spare job's latest launch (its
        supervisor's record, slurm-ft-starts.jsonl) leaves its spares idle."""
        if not self.hot[job.job_id]:
            return set(job.nodes)
        launches = [e for e in read_jsonl(str(self.ckpt[job.job_id] / "slurm-ft-starts.jsonl"))
                    if e.get("event") == "launch" and str(e.get("job")) == str(job.job_id)]
        return set(expand(str(launches[-1]["nodes"]))) if launches else set(job.nodes)

    def _running_job(self):
        deadline = time.monotonic() + 300
        while True:
            running = [j for j in self.client.jobs(list(self.ckpt)) if j.running and len(j.nodes) >= 2]
            if running:
                return self.rng.choice(sorted(running, key=lambda j: j.job_id))
            if time.monotonic() > deadline:
                raise RuntimeError("no job of the campaign running for 300 s")
            time.sleep(2.0)

    def _settled(self, f: inv.Fault) -> bool:
        if not f.fatal:
            return time.time() >= f.t + f.settle_s
        jid = f.job_id
        assert jid is not None
        events = read_log(str(self.ckpt[jid]))
        was = max((e["step"] for e in events if e.get("event") == "step" and e["t"] <= f.t), default=-1)
        start = next((e["t"] for e in events if e.get("event") == "start" and e["t"] > f.t), None)
        if not f.restarts and start is None:    # its idle spare: the job steps on (and the spare is replaced)
            start = f.t + inv.STEPPING_ON_S
        # the ranks of the run the fault hit may step on until Slurm kills them: only a new start counts
        stepped = start is not None and any(e.get("event") == "step" and e["t"] > start and e["step"] > was
                                            for e in events)
        incidents = self._incidents()
        if not stepped or [i for i in incidents if i.get("closed_at") is None]:
            return False
        # A GPU fault is handled once slurm-ft took its nodes out and closed an incident for it: a hot-spare
        # job relaunches on its spare before a dead watcher's node is drained (by the periodic health
        # check), and the incident follows. One that never comes is judged at the settle time.
        mine = [i for i in incidents if i.get("job_id") == jid and float(str(i.get("opened_at", 0))) >= f.t - 1
                and set(f.nodes) & {str(n) for n in i.get("nodes") or ()}]
        return f.kind not in GPU_KINDS or (bool(mine) and all(
            n.drained or n.down for n in self.client.nodes(list(f.nodes))))

    def _repair(self, f: inv.Fault) -> None:
        """What the lifecycle does to a faulted node (repair, validation, back to the pool), minus the
        waiting: healed, resumed, in the pool. Only once no incident is open (one may still hold it), and
        only once the node left every job: a failed idle hot spare stays in its job, unused, and is
        repaired when the job lets it go (_repair_left), as a site's validation job could only run then."""
        self._wait(lambda: not [i for i in self._incidents() if i.get("closed_at") is None], 120, "", quiet=True)
        if f.fatal and f.kind in GPU_KINDS:
            # slurm-ft must have taken the node out first: a watcher back from the dead drains its node for
            # the Xid it missed after the job already recovered (22.05's 30-min run: repaired before that,
            # the late drain counted as a healthy node drained)
            self._wait(lambda: all(n.drained or n.down for n in self.client.nodes(list(f.nodes))), DRAIN_WAIT_S,
                       "", quiet=True)
        if f.fatal:
            self._repair_nodes(f)

    def _repair_left(self) -> None:
        for f in self.faults:
            if f.fatal and not f.repaired:
                self._repair_nodes(f)

    def _repair_nodes(self, f: inv.Fault) -> None:
        held = {n for j in self.client.jobs(list(self.ckpt)) if j.running for n in j.nodes}
        out = {n.name for n in self.client.nodes() if n.drained or n.down}
        if not any(n in held for n in f.nodes):
            self.faults[f.id - 1] = replace(f, repaired=True)
        for node in f.nodes:
            if node not in held:
                heal(self.lab.dir, node)
        free = [n for n in f.nodes if n not in held and n in out]      # (one of a pair may be back already)
        if not free:
            return
        self.client.resume(free)
        parts = {p.name: p.nodes for p in self.client.partitions()}
        homeless = [n for n in free if not any(n in ns for ns in parts.values())]
        if homeless:
            self.client.set_partition_nodes("spares", sorted(set(parts.get("spares", ())) | set(homeless)))

    # --- reading the lab -----------------------------------------------------------------------------
    def world(self, now: float) -> inv.World:
        nodes = {n.name: n for n in self.client.nodes()}
        parts = {p.name: p.nodes for p in self.client.partitions()}
        jobs = {j.job_id: j for j in self.client.jobs(list(self.ckpt))}
        steps, ckpts, starts = {}, {}, {}
        for jid, ck in self.ckpt.items():
            events = read_log(str(ck))
            steps[jid] = [(e["t"], e["step"]) for e in events if e.get("event") == "step"]
            ckpts[jid] = [(e["t"], e["step"]) for e in events if e.get("event") == "ckpt"]
            starts[jid] = [(e["t"], e["step"] if e.get("resumed_from") else None) for e in events
                           if e.get("event") == "start" and e.get("rank", 0) == 0]
        breaker = self._slurm_ft_json("breaker", "status", "--json")
        return inv.World(now=now, nodes=nodes, partitions=parts, jobs=jobs, incidents=self._incidents(),
                         steps=steps, ckpts=ckpts, starts=starts, breaker=breaker if isinstance(breaker, dict) else {},
                         window_s=3600.0)

    def _incidents(self) -> List[dict]:
        got = self._slurm_ft_json("incidents", "--json")
        return got if isinstance(got, list) else []

    def _slurm_ft_json(self, *args: str) -> object:
        env = dict(self.lab.env(), SLURM_FT_CONFIG=str(self.config))
        p = subprocess.run([PY, "-m", "slurm_ft", *args], env=env, capture_output=True, text=True, timeout=60)
        try:
            return json.loads(p.stdout)
        except ValueError:
            return None

    def _steps(self, jid: int) -> List[Tuple[float, int]]:
        return [(e["t"], e["step"]) for e in read_log(str(self.ckpt[jid])) if e.get("event") == "step"]

    def _last_step(self, jid: int) -> Optional[int]:
        steps = self._steps(jid)
        return steps[-1][1] if steps else None

    def _stepping_again(self, f: inv.Fault) -> Optional[float]:
        """Fault -> the first step of the job's first start after the fault (None: it never started again,
        or the fault was not one it restarts for)."""
        if not f.fatal or f.job_id is None:
            return None
        events = read_log(str(self.ckpt[f.job_id]))
        start = next((e["t"] for e in events if e.get("event") == "start" and e["t"] > f.t), None)
        if start is None:
            return None
        first = next((e["t"] for e in events if e.get("event") == "step" and e["t"] > start), None)
        return None if first is None else round(first - f.t, 2)

    def _wait(self, pred: Callable[[], bool], timeout: float, what: str, quiet: bool = False) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(1.0)
        if not quiet:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        return False


__all__ = ["Campaign", "KINDS", "Outcome"]
