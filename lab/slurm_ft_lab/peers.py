"""slurm-ft beside the systems a user would pick instead, on one lab, one job, one fault (bench/peers.py).

Every contender keeps the same real PyTorch job alive (slurm_ft_lab.torchjob: DDP over gloo on CPU, DCP
checkpoints, one rank per node) and meets the same fault: the GPU of one of its nodes falls off the bus
(`lab inject --gpu-lost`: Xid 79, and NVML reports the GPU lost from then on), so the rank on it dies at
its next step and any rank started there later dies at its first. Each contender is deployed as its own
documentation deploys it on Slurm, by the lab's job user:

* slurm-ft requeue / hot-spare: `slurm-ft sbatch` (hot spares: `--hot-spares K`), `slurm-ft watch` on the
  nodes, the controller on the lab's controller host (this process);
* NVRx: NVIDIA's `ft_launcher` (nvidia-resiliency-ext), one per node under `srun`, its c10d rendezvous on
  the first node, in-job restart (`--max-restarts`, its default `any-failed` policy), heartbeats from the
  ranks, its node health check (the fake driver reports R570: the check reads NVML, so it sees the lost
  GPU). NVRx 0.4.1 predates its hot spares (0.6): with `--nnodes=N:N` and N+K launchers the first N form
  the job and the others wait in its rendezvous' redundancy list, which a restart draws from;
* torchft: its own Lighthouse (`torchft_lighthouse --min_replicas 1 --quorum_tick_ms 100
  --join_timeout_ms 10000`, as its Slurm example), one Slurm job per replica group, and its runner's loop:
  every 10 s, submit a group whose job is gone;
* slurm-ft + torchft: `slurm-ft sbatch --replica-groups R`, where this build has it.

Per fault: a clean lab (no jobs, GPUs healed, partitions as configured), the contender started, its job
trained past a checkpoint, the fault on a node of the training step that is not its batch host (every
contender's single point: slurm-ft's supervisor, NVRx's rendezvous store), and the job's event log read
until it is back at full strength (slurm_ft_lab.peerstats) or the time runs out.
"""
from __future__ import annotations

import shlex
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from slurm_ft.errors import EnvironmentProblem
from slurm_ft.runner import run
from slurm_ft_lab import peerstats, torchjob
from slurm_ft_lab.inject import inject
from slurm_ft_lab.scenario import PY, Scenario
from slurm_ft_lab.torchjob import read_log

BIN = Path(PY).parent
GONE = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
        "DEADLINE")


@dataclass(frozen=True)
class Setup:
    nodes: int = 4                  # training nodes (one rank each, 8 fake GPUs)
    hot: int = 1                    # nodes held beside them (hot spares, NVRx's waiting launchers, torchft's room)
    groups: int = 2                 # torchft's replica groups (nodes / groups each)
    step_time: float = 0.5
    save_every: int = 5
    fault_after: int = 3            # the fault comes this many steps past a checkpoint, for every contender
    on_fault: str = "die"
    timeout: float = 300.0          # per phase: the job up, its recovery
    nvrx_restarts: int = 3          # ft_launcher --max-restarts
    runner_poll: float = 10.0       # torchft's runner.py: one look at the replica groups every 10 s

    @property
    def lab_nodes(self) -> int:
        return self.nodes + self.hot


@dataclass
class FaultRun:
    contender: str
    fault_t: float
    victim: str
    gpu: int
    failed_group: int
    events: List[dict]
    drained: List[str]              # nodes Slurm shows drained or down when the job was back (or given up)
    figures: Optional[peerstats.Figures] = None
    error: str = ""
    controller: List[Tuple[str, float]] = field(default_factory=list)   # slurm-ft's controller steps (kind, t)

    @property
    def healthy_drained(self) -> List[str]:
        return [n for n in self.drained if n != self.victim]


@dataclass
class Ctx:
    """One fault's run of one contender: the lab, its scenario (lab reset, controller, watcher), the files."""
    lab: object
    sc: Scenario
    setup: Setup
    log: Path
    out: Path
    jobs: List[int] = field(default_factory=list)
    procs: List[subprocess.Popen] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: List[threading.Thread] = field(default_factory=list)
    job_of_group: Dict[int, int] = field(default_factory=dict)

    def env(self, **more: str) -> Dict[str, str]:
        """The job user's environment for submitting: the lab's Slurm, the nodes' fake driver."""
        env = self.lab.user_env()
        env["LD_LIBRARY_PATH"] = str(self.lab.dir / "lib")
        env["TORCH_CPP_LOG_LEVEL"] = "ERROR"      # c10d's chatter when a peer's socket closes
        env.update(more)
        return env

    def job_argv(self, mode: str, resume: str, module: bool = True) -> List[str]:
        """The job's command after the interpreter: `-m slurm_ft_lab.torchjob ...`, or its file's path (a
        launcher that takes a script, not a module)."""
        s = self.setup
        head = ["-m", "slurm_ft_lab.torchjob"] if module else [str(Path(torchjob.__file__).resolve())]
        return [*head, "--mode", mode, "--ckpt-dir", str(self.sc.ckpt_dir),
                "--events", str(self.log), "--resume", resume, "--step-time", f"{s.step_time:g}",
                "--save-every", str(s.save_every), "--on-fault", s.on_fault]

    def submit(self, argv: List[str], env: Optional[Dict[str, str]] = None) -> int:
        res = run(self.lab.user_argv(argv), timeout=120, env=env or self.env(), cwd=str(self.sc.job_dir))
        jid = int(res.stdout.strip().split()[-1].split(";")[0])
        self.jobs.append(jid)
        return jid

    def sbatch_common(self, name: str) -> List[str]:
        return ["-J", name, "--ntasks-per-node=1", "--gres=gpu:8", "--open-mode=append", "-o", str(self.out)]

    def events(self) -> List[dict]:
        return read_log(str(self.log))


class Contender:
    key = ""
    label = ""
    watch = False            # slurm-ft's watcher runs on the nodes
    controller = False       # slurm-ft's controller runs on the controller host

    def groups(self, setup: Setup) -> int:
        return 1

    def missing(self) -> Optional[str]:
        """Why this contender cannot run on this build, or None."""
        return None

    def start(self, ctx: Ctx) -> None:
        raise NotImplementedError

    def stop(self, ctx: Ctx) -> None:
        ctx.stop.set()
        for t in ctx.threads:
            t.join(timeout=30)
        if ctx.jobs:
            run(["scancel", *map(str, ctx.jobs)], timeout=30, env=ctx.lab.env(), check=False)
        for p in ctx.procs:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()

    def victim(self, ctx: Ctx, i: int) -> Tuple[str, int]:
        """(node, replica group) to break for fault i: a node of the training step that is not its batch host."""
        starts = [e for e in ctx.events() if e.get("event") == "start"]
        nodes = list(starts[-1]["nodes"])
        job = ctx.sc.client.job(ctx.jobs[0])
        cands = [n for n in nodes if n != job.batch_host] or nodes
        return cands[i % len(cands)], 0

    def steady(self, events: List[dict], setup: Setup) -> Optional[dict]:
        """The step after which the fault comes: `fault_after` steps past a checkpoint of the current run."""
        saved = [e["step"] for e in events if e.get("event") == "saved"]
        if not saved:
            return None
        for e in events:
            if (e.get("event") == "step" and e["step"] > saved[0] and e["step"] % setup.save_every == setup.fault_after
                    and self._full(e, setup)):
                return e
        return None

    def _full(self, e: dict, setup: Setup) -> bool:
        return True


def _tool(name: str) -> Optional[str]:
    path = BIN / name
    return None if path.exists() else f"{name} is not installed here (pip install -e '.[peers]')"


def _torch() -> Optional[str]:
    try:
        import torch  # noqa: F401  # lazy: torch is a test extra: this says whether it is here
    except ImportError:
        return "no torch in this venv (pip install -e '.[torch]')"
    return None


class SlurmFtRequeue(Contender):
    key, label = "slurm-ft-requeue", "slurm-ft requeue"
    watch = controller = True

    def missing(self) -> Optional[str]:
        return _torch()

    def start(self, ctx: Ctx) -> None:
        s = ctx.setup
        ctx.submit([PY, "-m", "slurm_ft", "sbatch", "--parsable", "--ckpt-dir", str(ctx.sc.ckpt_dir),
                    "--max-restarts", "100", "-N", str(s.nodes), *ctx.sbatch_common("peers-slurm-ft"),
                    "srun", PY, *ctx.job_argv("plain", "{ckpt}")])


class SlurmFtHotSpare(SlurmFtRequeue):
    key, label = "slurm-ft-hot-spare", "slurm-ft hot spare"

    def start(self, ctx: Ctx) -> None:
        s = ctx.setup
        ctx.submit([PY, "-m", "slurm_ft", "sbatch", "--parsable", "--ckpt-dir", str(ctx.sc.ckpt_dir),
                    "--max-restarts", "100", "--hot-spares", str(s.hot), "-N", str(s.nodes),
                    *ctx.sbatch_common("peers-slurm-ft"), PY, *ctx.job_argv("plain", "{ckpt}")])


class Nvrx(Contender):
    key, label = "nvrx", "NVRx ft_launcher"

    def missing(self) -> Optional[str]:
        return _torch() or _tool("ft_launcher")

    def start(self, ctx: Ctx) -> None:
        s = ctx.setup
        # the launcher on the first node hosts the rendezvous store (all lab nodes are this host: the
        # others are told they are not, as NVRx's own one-machine example does with is_host)
        launcher = [str(BIN / "ft_launcher"), f"--nnodes={s.nodes}:{s.nodes}", "--nproc-per-node=1",
                    f"--max-restarts={s.nvrx_restarts}", "--rdzv-backend=c10d",
                    '--rdzv-endpoint=127.0.0.1:"$port"', '--rdzv-id="$SLURM_JOB_ID"',
                    '--rdzv-conf=is_host="$host"',
                    "--ft-initial-rank-heartbeat-timeout=300", "--ft-rank-heartbeat-timeout=60",
                    "--ft-enable-nic-monitor=false", *ctx.job_argv("nvrx", "latest", module=False)]
        line = " ".join(a if '"$' in a else shlex.quote(a) for a in launcher)
        node = ctx.sc.job_dir / "nvrx-node.sh"
        node.write_text("#!/bin/sh\n# one ft_launcher per node (srun --ntasks-per-node=1)\n"
                        'port=$((29000 + SLURM_JOB_ID % 1000))\n'
                        'host=0; [ "$SLURM_NODEID" = 0 ] && host=1\n'
                        f"exec {line}\n")
        script = ctx.sc.job_dir / "nvrx.sbatch"
        script.write_text(f"#!/bin/sh\nexec srun --ntasks-per-node=1 --kill-on-bad-exit=0 sh {shlex.quote(str(node))}\n")
        ctx.lab.give(ctx.sc.job_dir)
        ctx.submit(["sbatch", "--parsable", "-N", str(s.lab_nodes), *ctx.sbatch_common("peers-nvrx"), str(script)])


class Torchft(Contender):
    key, label = "torchft", "torchft"

    def groups(self, setup: Setup) -> int:
        return setup.groups

    def missing(self) -> Optional[str]:
        return _torch() or _tool("torchft_lighthouse")

    def _full(self, e: dict, setup: Setup) -> bool:
        return int(e.get("participants", 0)) == setup.groups

    def start(self, ctx: Ctx) -> None:
        s = ctx.setup
        if s.nodes % s.groups:
            raise EnvironmentProblem(f"{s.nodes} nodes do not split into {s.groups} replica groups")
        port = _free_port()
        lighthouse = [str(BIN / "torchft_lighthouse"), "--min_replicas", "1", "--quorum_tick_ms", "100",
                      "--join_timeout_ms", "10000", "--bind", f"[::]:{port}"]
        with open(ctx.sc.job_dir / "lighthouse.log", "ab") as fh:
            ctx.procs.append(subprocess.Popen(ctx.lab.user_argv(lighthouse), env=ctx.env(), stdout=fh,
                                              stderr=subprocess.STDOUT, cwd=str(ctx.sc.job_dir)))
        script = ctx.sc.job_dir / "torchft-group.sbatch"
        script.write_text("#!/bin/sh\n# one replica group: its ranks under srun; one rank gone ends the group\n"
                          "exec srun --kill-on-bad-exit=1 " + " ".join(map(shlex.quote, [PY, *ctx.job_argv("torchft", "")]))
                          + "\n")
        ctx.lab.give(ctx.sc.job_dir)
        jobs: Dict[int, int] = {}

        def submit(g: int) -> None:
            env = ctx.env(REPLICA_GROUP_ID=str(g), NUM_REPLICA_GROUPS=str(s.groups),
                          TORCHFT_LIGHTHOUSE=f"http://127.0.0.1:{port}")
            jobs[g] = ctx.submit(["sbatch", "--parsable", "-N", str(s.nodes // s.groups),
                                  *ctx.sbatch_common(f"ft_{g}"), str(script)], env)

        def runner() -> None:      # torchft/examples/slurm/runner.py's monitor loop
            while not ctx.stop.wait(s.runner_poll):
                for g in range(s.groups):
                    try:
                        job = ctx.sc.client.job(jobs[g])
                    except Exception:   # noqa: BLE001 - gone from Slurm's memory: the same as ended
                        job = None
                    if job is None or job.state in GONE or job.held:
                        if job is not None and job.held:
                            run(["scancel", str(job.job_id)], timeout=30, env=ctx.lab.env(), check=False)
                        submit(g)

        for g in range(s.groups):
            submit(g)
        ctx.job_of_group = jobs
        t = threading.Thread(target=runner, name="torchft-runner", daemon=True)
        t.start()
        ctx.threads.append(t)

    def victim(self, ctx: Ctx, i: int) -> Tuple[str, int]:
        g = ctx.setup.groups - 1             # the Lighthouse's host is not a node of the job
        starts = [e for e in ctx.events() if e.get("event") == "start" and e.get("group") == g]
        nodes = list(starts[-1]["nodes"])
        job = ctx.sc.client.job(ctx.job_of_group[g])
        cands = [n for n in nodes if n != job.batch_host] or nodes
        return cands[i % len(cands)], g


class SlurmFtTorchft(Torchft):
    key, label = "slurm-ft-torchft", "slurm-ft + torchft"
    watch = controller = True

    def missing(self) -> Optional[str]:
        why = _torch() or _tool("torchft_lighthouse")
        if why:
            return why
        res = run([PY, "-m", "slurm_ft", "sbatch", "--help"], timeout=60, check=False)
        if "--replica-groups" not in res.stdout:
            return "not available on this build (`slurm-ft sbatch` has no --replica-groups)"
        return None

    def start(self, ctx: Ctx) -> None:
        s = ctx.setup
        jid = ctx.submit([PY, "-m", "slurm_ft", "sbatch", "--parsable", "--ckpt-dir", str(ctx.sc.ckpt_dir),
                          "--max-restarts", "100", "--replica-groups", str(s.groups), "--hot-spares", str(s.hot),
                          "-N", str(s.nodes), *ctx.sbatch_common("peers-slurm-ft-torchft"), PY,
                          *ctx.job_argv("torchft", "")])
        ctx.job_of_group = {g: jid for g in range(s.groups)}


def _gone(ctx: Ctx, jid: int) -> bool:
    try:
        return ctx.sc.client.job(jid).state in GONE
    except Exception:   # noqa: BLE001 - unknown to Slurm by now: ended
        return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MEASURED: List[Contender] = [SlurmFtHotSpare(), SlurmFtRequeue(), SlurmFtTorchft(), Nvrx(), Torchft()]


def run_fault(lab, work: Path, contender: Contender, setup: Setup, i: int,
              say: Callable[[str], None] = lambda s: None) -> FaultRun:
    """One fault of one contender on a clean lab: start its job, break a GPU, read the job back to full strength."""
    sc = Scenario(lab, work / contender.key, step_time=setup.step_time, ckpt_every=setup.save_every)
    sc.prepare()
    ctx = Ctx(lab, sc, setup, log=sc.job_dir / "events.jsonl", out=sc.job_dir / "job.out")
    gpu = i % lab.spec.gpus_per_node
    res = FaultRun(contender.key, 0.0, "", gpu, 0, [], [])
    try:
        if contender.controller:
            sc.start_controller()
        contender.start(ctx)
        _wait(lambda: any(e.get("event") == "start" for e in ctx.events()), setup.timeout, "the job's first start", ctx)
        _wait(lambda: len({e.get("group") for e in ctx.events() if e.get("event") == "start"})
              >= contender.groups(setup), setup.timeout, "every group started", ctx)
        res.victim, res.failed_group = contender.victim(ctx, i)
        watcher = sc._start_watch(res.victim, setup.timeout) if contender.watch else None
        at = _wait(lambda: contender.steady(ctx.events(), setup), setup.timeout, "a step past a checkpoint", ctx)
        if watcher is not None and not watcher.ready.wait(setup.timeout):
            raise EnvironmentProblem(f"slurm-ft watch on {res.victim} did not start")
        res.fault_t = time.time()
        inject(lab.dir, res.victim, "gpu_lost", gpu=gpu)
        say(f"  {contender.label}: fault {i + 1}: {res.victim} gpu{gpu} lost after step {at['step']}")
        shape = peerstats.Shape(contender.groups(setup), setup.nodes // contender.groups(setup),
                                lab.spec.gpus_per_node)
        deadline = time.monotonic() + setup.timeout
        why = ""
        while time.monotonic() < deadline:
            try:
                res.figures = peerstats.analyze(ctx.events(), res.fault_t, res.victim, shape,
                                                failed_group=res.failed_group)
                break
            except peerstats.NotRecovered as exc:
                why = str(exc)
            time.sleep(0.5)
        else:
            res.error = f"not back within {setup.timeout:g} s of the fault: {why}"
        res.drained = sorted(n.name for n in sc.client.nodes() if n.drained or n.down)
    except EnvironmentProblem as exc:
        res.error = str(exc)
    finally:
        res.events = ctx.events()
        with sc._lock:
            res.controller = [(kind, t) for kind, outcome, _, t, _ in sc._steps if outcome in ("ok", "skipped")]
        contender.stop(ctx)
        sc.stop(cancel=False)
    return res


def _wait(pred, timeout: float, what: str, ctx: Ctx):
    deadline = time.monotonic() + timeout
    gone_since = None
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        if ctx.jobs and all(_gone(ctx, j) for j in ctx.jobs[-2:]):      # nothing left to wait for (torchft's
            gone_since = gone_since or time.monotonic()                 # runner submits within its poll)
            if time.monotonic() - gone_since > 2 * ctx.setup.runner_poll:
                break
        else:
            gone_since = None
        time.sleep(0.2)
    jobs = []
    for jid in ctx.jobs[-3:]:
        try:
            j = ctx.sc.client.job(jid)
            jobs.append(f"job {jid} {j.state} ({j.reason or '-'})")
        except Exception as exc:   # noqa: BLE001 - for the message only
            jobs.append(f"job {jid}: {exc}")
    raise EnvironmentProblem(f"no {what} ({'; '.join(jobs) or 'no job'}; output in {ctx.out})")
