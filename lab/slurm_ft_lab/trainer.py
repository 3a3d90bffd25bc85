"""A toy gang-synchronous trainer: the workload slurm-ft keeps alive in the lab.

    srun python -m slurm_ft_lab.trainer --ckpt-dir DIR --resume {ckpt} [--steps N] [--step-time S]
                                        [--ckpt-every K] [--collective-timeout 600] [--on-fault die|hang]
                                        [--stall-at STEP [--stall-rank R]] [--bad-ckpt STEP]

One rank per task (SLURM_PROCID of SLURM_NTASKS). Like data-parallel training with NCCL:

* every step each rank "computes" (sleeps --step-time), checks its node's GPUs through the real pynvml
  (the lab's fake libnvidia-ml.so.1 via LD_LIBRARY_PATH), then all ranks meet at a barrier (TCP to
  rank 0, which publishes its port in DIR/.rendezvous/);
* a rank whose GPU is lost or reports a fatal Xid since the rank started dies like a CUDA error (exit 1)
  or hangs (--on-fault hang); the other ranks block at the next barrier until --collective-timeout
  (600 s, NCCL's default) and then exit non-zero -- unless something (slurm-ft) requeues the job first;
* every K steps each rank writes its shard, a second barrier makes sure all did, and rank 0 seals the
  checkpoint (COMPLETE marker last, see slurm_ft.job.ckpt);
* rank 0 prints ``step=S t=... restart=R nodes=N`` per step and appends JSON lines to
  DIR/trainer-log.jsonl (events start, step, ckpt, fault, timeout, done) for benchmarks;
* every rank reports each step through ``slurm_ft.progress(step, busy_s=...)`` (what a real job adds to its
  loop): busy_s is its compute time, before the barrier; a GPU the lab slowed (`lab inject --slow F`: its
  SM clock at F x max) computes 1/F as long, so its node is the straggler the others wait for;
* rank 0 asks ``slurm_ft.checkpoint_requested()`` before it releases each step's barrier and tells every
  rank with it ("go c"): all save a checkpoint at that step and stop (exit 0, event ``stop``), the contract
  of a planned swap (docs/jobs.md);
* faults without an Xid, for hang detection: --stall-at STEP makes rank --stall-rank stop stepping
  after STEP in the job's first run only (restart 0, launch 0: the restart does not stall again);
  --bad-ckpt STEP makes loading the checkpoint of STEP fail as --on-fault says (die or hang), every time.

Kept cheap: 64 ranks start at once on two CPU cores in the lab, so a rank imports the standard library
and pynvml only (no typing, no slurm_ft module: ckpt.py is imported where a checkpoint is written);
`python -X importtime -m slurm_ft_lab.trainer --help` shows what it costs.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import sys
import time

import slurm_ft

LOG_NAME = "trainer-log.jsonl"
RDV_DIR = ".rendezvous"
PORT_BASE, PORT_SPAN = 30000, 20000
# Xids after which the job's CUDA context is gone (the process sees a CUDA error): hardware and driver
# faults. Not the application's own (13, 31, 43, 45), nor the warnings that leave running work alone
# (63 row-remap pending, 92 high SBE rate, 61, 109, ...).
FATAL_XIDS = frozenset({46, 48, 62, 64, 74, 79, 94, 95, 119, 120, 140})
EXIT_CUDA = 1          # a CUDA error surfaces as a Python exception: exit status 1
EXIT_TIMEOUT = 3       # a collective timed out (NCCL watchdog abort)
CKPT_MARKER = "COMPLETE"   # = slurm_ft.job.ckpt.MARKER (a test holds them equal): read at every resume


def _ckpt():
    """slurm_ft.job.ckpt, imported when first needed (writing a checkpoint), not at every rank's start."""
    from slurm_ft.job import ckpt  # lazy: writing a checkpoint, not every rank's start
    return ckpt


class CollectiveTimeout(Exception):
    pass


# --- logging ------------------------------------------------------------------------------------

class EventLog:
    def __init__(self, ckpt_dir: str, base: dict):
        self.path = os.path.join(ckpt_dir, LOG_NAME)
        self.base = base

    def write(self, event: str, **fields) -> None:
        rec = {"event": event, "t": round(time.time(), 6), **self.base, **fields}
        line = (json.dumps(rec, sort_keys=True) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)          # one write of one line with O_APPEND: ranks never interleave
        finally:
            os.close(fd)


def read_log(ckpt_dir: str) -> list[dict]:
    """The trainer's events (for tests and benchmarks); a torn last line is ignored."""
    return read_jsonl(os.path.join(ckpt_dir, LOG_NAME))


def read_jsonl(path: str) -> list[dict]:
    """One JSON object a line, as the lab's jobs append them; a torn last line is ignored."""
    out = []
    try:
        with open(path) as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except FileNotFoundError:
        pass
    return out


def runs(events: list[dict]) -> list[dict]:
    """One summary per start of the training step, in order, from the event log: per restart of the job
    (Slurm's restart count) and, under a hot-spare supervisor, per launch within it (SLURM_FT_LAUNCH).

    Each: restart, launch, start_t, resumed_from_step (None = from scratch), first_step, first_step_t,
    last_step, last_step_t, last_ckpt, faults (the fault events), end ('done', 'timeout', 'stop' or None), and
    steps_lost: the steps of the previous run redone by this one (previous last_step - resumed step).
    """
    by: dict[tuple, dict] = {}
    for e in events:
        key = (int(e.get("restart", 0)), int(e.get("launch", 0)))
        r = by.setdefault(key, {
            "restart": key[0], "launch": key[1], "start_t": None, "resumed_from_step": None, "first_step": None,
            "first_step_t": None, "last_step": None, "last_step_t": None, "last_ckpt": None, "faults": [],
            "end": None, "steps_lost": None})
        kind = e.get("event")
        if kind == "start":
            r["start_t"] = e["t"]
            r["resumed_from_step"] = e["step"] if e.get("resumed_from") else None
        elif kind == "step":
            if r["first_step"] is None:
                r["first_step"], r["first_step_t"] = e["step"], e["t"]
            r["last_step"], r["last_step_t"] = e["step"], e["t"]
        elif kind == "ckpt":
            r["last_ckpt"] = e["step"]
        elif kind == "fault":
            r["faults"].append(e)
        elif kind in ("done", "timeout", "stop"):
            r["end"] = kind
    out = [by[k] for k in sorted(by)]
    for prev, cur in zip(out, out[1:]):
        if prev["last_step"] is not None:
            cur["steps_lost"] = prev["last_step"] - (cur["resumed_from_step"] or 0)
    return out


# --- the GPU watch (real pynvml) ----------------------------------------------------------------

class GpuWatch:
    """Watches this node's GPUs for the faults that would kill a CUDA job: a lost GPU or a fatal Xid."""

    def __init__(self, indices: list[int] | None, fatal_xids=FATAL_XIDS):
        import pynvml  # lazy: only with the GPU check on (a toy run has no pynvml)
        self.nv = pynvml
        self.fatal = fatal_xids
        _nvml_init(pynvml)
        count = pynvml.nvmlDeviceGetCount()
        self.indices = [i for i in (indices if indices is not None else range(count)) if i < count]
        self.lost_at_start: str | None = None
        self.events = None
        try:
            evset = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:      # no event support: liveness checks only
            print(f"trainer: NVML Xid events unavailable ({exc}); checking GPU liveness only", file=sys.stderr)
            return
        self.by_handle: dict[int, int] = {}  # handle address -> index (a lost GPU cannot tell its index)
        for i in self.indices:
            try:                             # Xids logged from now on (a rank's own history)
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                self.by_handle[_addr(h)] = i
                pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, evset)
            except pynvml.NVMLError as exc:
                if _is_lost(pynvml, exc):
                    self.lost_at_start = f"GPU {i} is lost (fallen off the bus)"
                elif not isinstance(exc, (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)):
                    raise
        self.events = evset

    def speed(self) -> float:
        """The slowest watched GPU's SM clock as a share of its max (1.0 when NVML cannot say)."""
        nv = self.nv
        out = 1.0
        for i in self.indices:
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
                cur, top = nv.nvmlDeviceGetClockInfo(h, 1), nv.nvmlDeviceGetMaxClockInfo(h, 1)
            except nv.NVMLError:
                continue
            if top:
                out = min(out, max(cur / top, 0.05))
        return out

    def check(self) -> str | None:
        """A description of the first fatal fault seen since the last call, or None."""
        nv = self.nv
        if self.lost_at_start:
            return self.lost_at_start
        if self.events is not None:
            while True:
                try:
                    ev = nv.nvmlEventSetWait_v2(self.events, 0)
                except nv.NVMLError_Timeout:
                    break
                except nv.NVMLError as exc:
                    return f"NVML event wait failed: {exc}"
                xid = int(ev.eventData)
                if xid in self.fatal:
                    return f"Xid {xid} on GPU {self.by_handle.get(_addr(ev.device), '?')}"
        for i in self.indices:
            try:
                nv.nvmlDeviceGetPciInfo(nv.nvmlDeviceGetHandleByIndex(i))
            except nv.NVMLError as exc:
                if _is_lost(nv, exc):
                    return f"GPU {i} is lost (fallen off the bus)"
                if isinstance(exc, (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound)):
                    continue
                return f"GPU {i}: {exc}"
        return None


def _addr(handle) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


def _is_lost(nv, exc) -> bool:
    return getattr(exc, "value", None) == nv.NVML_ERROR_GPU_IS_LOST


def _nvml_init(nv) -> None:
    """nvmlInit; in the lab, fall back to the lab's fake library when LD_LIBRARY_PATH does not name it."""
    try:
        nv.nvmlInit()
    except nv.NVMLError_LibraryNotFound:
        lab = os.environ.get("SLURM_FT_LAB_DIR")
        lib = os.path.join(lab, "lib", "libnvidia-ml.so.1") if lab else ""
        if not lib or not os.path.exists(lib):
            raise
        nv.nvmlLib = ctypes.CDLL(lib)
        nv.nvmlInit()


def visible_gpus() -> list[int] | None:
    raw = os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("SLURM_JOB_GPUS") or ""
    try:
        return [int(x) for x in raw.split(",")] if raw else None
    except ValueError:             # GPU UUIDs: check every GPU of the node
        return None


# --- the barrier over TCP -----------------------------------------------------------------------

def _send(sock: socket.socket, text: str) -> None:
    sock.sendall(text.encode() + b"\n")


class Rank0:
    """Rank 0 is the hub: accepts every other rank once, then runs each barrier."""

    def __init__(self, world: int, rdv_file: str, port: int, host: str):
        self.world = world
        self.srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.srv.bind((host, port))
        except OSError:             # taken (another job, a leftover): any free port, published below
            self.srv.bind((host, 0))
        self.srv.listen(max(world, 8))
        self.port = self.srv.getsockname()[1]
        ckpt_tmp = rdv_file + ".tmp"
        with open(ckpt_tmp, "w") as fh:
            json.dump({"host": host, "port": self.port, "pid": os.getpid(), "t": time.time()}, fh)
        os.replace(ckpt_tmp, rdv_file)
        self.peers: dict[int, socket.socket] = {}
        self.bufs: dict[int, bytes] = {}

    def accept_all(self, deadline: float) -> None:
        pending: dict[socket.socket, bytes] = {}
        while len(self.peers) < self.world - 1:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CollectiveTimeout(f"only {len(self.peers) + 1} of {self.world} ranks joined")
            r, _, _ = select.select([self.srv, *pending], [], [], min(left, 1.0))
            for s in r:
                if s is self.srv:
                    conn, _ = self.srv.accept()
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    pending[conn] = b""
                    continue
                data = s.recv(4096)
                if not data:
                    pending.pop(s).close()
                    continue
                pending[s] += data
                if b"\n" in pending[s]:
                    line, rest = pending.pop(s).split(b"\n", 1)
                    words = line.split()                 # "hello R"
                    if (len(words) != 2 or words[0] != b"hello" or not words[1].isdigit()
                            or not 0 < int(words[1]) < self.world or int(words[1]) in self.peers):
                        s.close()                        # a stranger, or a rank twice: not one of ours
                        continue
                    rank = int(words[1])
                    self.peers[rank] = s
                    self.bufs[rank] = rest

    def barrier(self, tag: str, timeout: float, wait_on_loss: bool = True, reply: str = "go") -> str:
        deadline = time.monotonic() + timeout
        waiting = set(self.peers)
        lost = set()
        want = tag.encode()
        while waiting - lost:
            for rank in list(waiting):
                if b"\n" in self.bufs[rank]:
                    line, self.bufs[rank] = self.bufs[rank].split(b"\n", 1)
                    if line != want:
                        raise CollectiveTimeout(f"rank {rank} is at {line.decode()!r}, expected {tag!r}")
                    waiting.discard(rank)
            if not waiting - lost:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise CollectiveTimeout(f"{tag}: no answer from ranks {sorted(waiting)[:8]} in {timeout:g} s")
            socks = {self.peers[r]: r for r in waiting - lost}
            r, _, _ = select.select(list(socks), [], [], min(left, 1.0))
            for s in r:
                rank = socks[s]
                try:
                    data = s.recv(65536)
                except OSError:             # reset by a dying peer: the same as its end of file
                    data = b""
                if not data:                # the peer died: like NCCL, nobody notices until the timeout
                    lost.add(rank)
                    if not wait_on_loss:
                        raise CollectiveTimeout(f"{tag}: rank {rank} is gone")
                    continue
                self.bufs[rank] += data
        if lost:
            left = deadline - time.monotonic()
            if left > 0:
                time.sleep(left)
            raise CollectiveTimeout(f"{tag}: ranks {sorted(lost)[:8]} never arrived in {timeout:g} s")
        for rank, s in self.peers.items():
            try:
                _send(s, reply)
            except OSError:                 # gone since it arrived: the next barrier times out on it
                pass
        return reply


class Peer:
    def __init__(self, rank: int, rdv_file: str, deadline: float):
        info = None
        while info is None:
            try:
                with open(rdv_file) as fh:
                    info = json.load(fh)
            except (FileNotFoundError, ValueError):
                if time.monotonic() > deadline:
                    raise CollectiveTimeout("rank 0 never published its address")
                time.sleep(0.05)
        while True:
            try:
                self.sock = socket.create_connection((info["host"], int(info["port"])), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise CollectiveTimeout(f"cannot reach rank 0 at {info['host']}:{info['port']}")
                time.sleep(0.1)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(None)
        _send(self.sock, f"hello {rank}")
        self.buf = b""

    def barrier(self, tag: str, timeout: float, wait_on_loss: bool = True, reply: str = "go") -> str:
        deadline = time.monotonic() + timeout
        try:
            _send(self.sock, tag)
        except OSError:
            self._lost(tag, deadline, wait_on_loss)
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CollectiveTimeout(f"{tag}: no go from rank 0 in {timeout:g} s")
            r, _, _ = select.select([self.sock], [], [], min(left, 1.0))
            if r:
                try:
                    data = self.sock.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    self._lost(tag, deadline, wait_on_loss)
                self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode(errors="replace")

    @staticmethod
    def _lost(tag: str, deadline: float, wait_on_loss: bool) -> None:
        if wait_on_loss:                    # like NCCL: the loss shows only as the collective's timeout
            time.sleep(max(0.0, deadline - time.monotonic()))
        raise CollectiveTimeout(f"{tag}: rank 0 is gone")


# --- state and checkpoints ----------------------------------------------------------------------

def shard_name(rank: int) -> str:
    return f"rank_{rank:05d}"


def expected_value(step: int, rank: int) -> int:
    """The toy model's parameter after ``step`` steps: lets a resumed run prove it got the right state."""
    return step * (rank + 1)


def load_resume(path: str, rank: int) -> tuple[int, int, bool]:
    """(step, value, state_ok) from a checkpoint directory written by this trainer."""
    with open(os.path.join(path, CKPT_MARKER)) as fh:
        manifest = json.load(fh)
    step = int(manifest["step"])
    old_world = int(manifest.get("meta", {}).get("world", 1)) or 1
    name = shard_name(rank if rank < old_world else rank % old_world)   # a shrunk or grown job: toy remap
    with open(os.path.join(path, name)) as fh:
        state = json.loads(fh.readline())
    value = int(state["value"])
    src_rank = int(state["rank"])
    ok = value == expected_value(step, src_rank)
    # another rank's shard (the job changed size): this rank's own value follows from the step
    return step, (value if src_rank == rank else expected_value(step, rank)), ok


def shard_bytes(step: int, rank: int, world: int, value: int, pad: int) -> bytes:
    head = json.dumps({"step": step, "rank": rank, "world": world, "value": value}).encode() + b"\n"
    return head + b"\0" * max(0, pad - len(head))


def _clean_stale(ckpt_dir: str, keep_run: str) -> None:
    """Staging directories and rendezvous files of earlier runs (dead by now: Slurm started this one)."""
    staging = _ckpt().STAGING
    for name in os.listdir(ckpt_dir):
        if staging.match(name) and not name.endswith(keep_run):
            shutil.rmtree(os.path.join(ckpt_dir, name), ignore_errors=True)
    rdv = os.path.join(ckpt_dir, RDV_DIR)
    for name in os.listdir(rdv):
        if name != f"{keep_run}.json":
            try:
                os.unlink(os.path.join(rdv, name))
            except OSError:
                pass


# --- main ---------------------------------------------------------------------------------------

def parse_args(argv: list[str] | tuple[str, ...]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m slurm_ft_lab.trainer", description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt-dir", required=True, help="checkpoints, the event log and the rendezvous file")
    p.add_argument("--resume", default="", help="checkpoint to resume from ('' = from scratch); pass {ckpt}")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--step-time", type=float, default=1.0, help="seconds of 'compute' per step")
    p.add_argument("--ckpt-every", type=int, default=10, help="checkpoint every K steps (0 = never)")
    p.add_argument("--keep", type=int, default=3, help="complete checkpoints to keep")
    p.add_argument("--shard-bytes", type=int, default=4096)
    p.add_argument("--collective-timeout", type=float, default=600.0, help="seconds (NCCL's default: 600)")
    p.add_argument("--on-fault", choices=("die", "hang"), default="die")
    p.add_argument("--on-peer-loss", choices=("wait", "exit"), default="wait",
                   help="wait: a dead peer is noticed only at the collective timeout (NCCL); exit: at once")
    p.add_argument("--gpu-check", choices=("auto", "on", "off"), default="auto",
                   help="auto: check GPUs when NVML loads; on: fail if it does not")
    p.add_argument("--fatal-xids", default="", help="comma-separated Xids that kill the rank (default: built in)")
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--stall-at", type=int, default=0, help="stop stepping after this step, first run only (0 = never)")
    p.add_argument("--stall-rank", type=int, default=0, help="the rank that stalls (--stall-at)")
    p.add_argument("--bad-ckpt", type=int, default=-1, help="loading the checkpoint of this step fails (--on-fault)")
    a = p.parse_args(list(argv))
    try:
        a.fatal_set = frozenset(int(x) for x in a.fatal_xids.split(",") if x.strip()) or FATAL_XIDS
    except ValueError:
        p.error(f"--fatal-xids wants comma-separated numbers, not {a.fatal_xids!r}")
    if a.steps < 0 or a.step_time < 0 or a.ckpt_every < 0 or a.collective_timeout <= 0 or a.keep < 1:
        p.error("--steps, --step-time, --ckpt-every must be >= 0, --collective-timeout > 0, --keep >= 1")
    return a


def _fault(args, log: EventLog, rank: int, node: str, what: str, step: int) -> None:
    msg = f"RuntimeError: CUDA error: unspecified launch failure ({what} on {node}, rank {rank})"
    print(msg, file=sys.stderr, flush=True)
    log.write("fault", rank=rank, node=node, reason=what, action=args.on_fault, step=step)
    if args.on_fault == "hang":
        while True:                  # a hung kernel: holds its sockets, never reaches the barrier
            signal.pause()
    os._exit(EXIT_CUDA)


def main(argv: list[str] | tuple[str, ...] = ()) -> int:
    args = parse_args(argv)
    env = os.environ
    rank = int(env.get("SLURM_PROCID", "0"))
    world = int(env.get("SLURM_NTASKS", env.get("SLURM_NPROCS", "1")))
    job = env.get("SLURM_JOB_ID", "0")
    restart = int(env.get("SLURM_RESTART_COUNT", "0") or 0)
    step_id = env.get("SLURM_STEP_ID", "0")
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    run_id = f"{job}.{restart}.{step_id}"
    os.makedirs(os.path.join(args.ckpt_dir, RDV_DIR), exist_ok=True)
    launch = int(env.get("SLURM_FT_LAUNCH", "0") or 0)    # the hot-spare supervisor's relaunches
    log = EventLog(args.ckpt_dir, {"job": job, "restart": restart, "launch": launch})
    t_start = time.time()

    watch = None
    if args.gpu_check != "off":
        try:
            watch = GpuWatch(visible_gpus(), args.fatal_set)
        except Exception as exc:     # pynvml missing, or no libnvidia-ml: a toy can still train
            if args.gpu_check == "on":
                print(f"trainer: rank {rank}: cannot watch GPUs: {exc}", file=sys.stderr)
                return 4
            if rank == 0:
                print(f"trainer: GPU checks off ({type(exc).__name__}: {exc})", file=sys.stderr)

    start_step, value, state_ok = 0, 0, True
    if args.resume:
        try:
            start_step, value, state_ok = load_resume(args.resume, rank)
        except (OSError, ValueError, KeyError) as exc:
            print(f"trainer: rank {rank}: cannot resume from {args.resume}: {exc}", file=sys.stderr)
            return 2
        if start_step == args.bad_ckpt:
            _fault(args, log, rank, node, f"checkpoint step {start_step} cannot be loaded", start_step)

    rdv = os.path.join(args.ckpt_dir, RDV_DIR, f"{run_id}.json")
    deadline = time.monotonic() + args.collective_timeout
    wait_on_loss = args.on_peer_loss == "wait"
    try:
        if rank == 0:
            _clean_stale(args.ckpt_dir, run_id)     # staging of dead runs: never complete, never resumed
            port = PORT_BASE + (int(job) * 31 + restart * 7 + int(step_id)) % PORT_SPAN if job.isdigit() else 0
            hub = Rank0(world, rdv, port, args.master_addr)
            hub.accept_all(deadline)
            comm = hub
            log.write("start", step=start_step, resumed_from=args.resume or None, state_ok=state_ok, world=world,
                      nodes=env.get("SLURM_JOB_NODELIST", node), port=hub.port, startup_s=round(time.time() - t_start, 3))
            print(f"start: resume={args.resume or '-'} step={start_step} world={world} "
                  f"restart={restart} state_ok={state_ok}", flush=True)
        else:
            comm = Peer(rank, rdv, deadline)
        comm.barrier("ready", args.collective_timeout, wait_on_loss)

        stopped = False
        for step in range(start_step + 1, args.steps + 1):
            t_step = time.monotonic()
            if args.step_time:       # a slowed GPU (lab inject --slow F) computes 1/F as long
                time.sleep(args.step_time / (watch.speed() if watch is not None else 1.0))
            value += rank + 1
            if watch is not None:
                fault = watch.check()
                if fault:
                    _fault(args, log, rank, node, fault, step)
            busy = time.monotonic() - t_step
            if args.stall_at and step == args.stall_at + 1 and rank == args.stall_rank and restart == 0 and launch == 0:
                log.write("stall", rank=rank, node=node, step=step - 1)
                while True:          # a rank that stops stepping, no Xid: the gang waits at the barrier
                    signal.pause()
            # rank 0 hears a checkpoint asked for (a planned swap) and tells every rank in the step's "go"
            ask = rank == 0 and slurm_ft.checkpoint_requested()
            asked = comm.barrier(f"s {step}", args.collective_timeout, wait_on_loss,
                                 reply="go c" if ask else "go") == "go c"
            slurm_ft.progress(step, busy_s=busy)
            if rank == 0:
                now = time.time()
                print(f"step={step} t={now:.3f} restart={restart} nodes={world}", flush=True)
                log.write("step", step=step, nodes=world)
            if (args.ckpt_every and step % args.ckpt_every == 0) or asked:
                _ckpt().write_shard(args.ckpt_dir, step, run_id, shard_name(rank),
                                   shard_bytes(step, rank, world, value, args.shard_bytes))
                comm.barrier(f"c {step}", args.collective_timeout, wait_on_loss)
                if rank == 0:
                    ckpt = _ckpt()
                    path = ckpt.commit(args.ckpt_dir, step, run_id, expect=[shard_name(r) for r in range(world)],
                                       meta={"world": world, "job": job, "restart": restart})
                    ckpt.prune(args.ckpt_dir, args.keep)
                    log.write("ckpt", step=step, path=path, **({"requested": True} if asked else {}))
            if asked:                # the contract: the asked-for checkpoint is saved, stop here
                stopped = True
                break
        comm.barrier("done", args.collective_timeout, wait_on_loss)
    except CollectiveTimeout as exc:
        print(f"trainer: rank {rank}: collective timeout: {exc}", file=sys.stderr, flush=True)
        if rank == 0:
            log.write("timeout", rank=rank, reason=str(exc))
        return EXIT_TIMEOUT
    if rank == 0:
        if stopped:
            log.write("stop", step=step, reason="checkpoint requested (planned swap)")
            print(f"stop: checkpoint of step {step} saved as asked", flush=True)
        else:
            log.write("done", step=args.steps)
        try:
            os.unlink(rdv)
        except FileNotFoundError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
