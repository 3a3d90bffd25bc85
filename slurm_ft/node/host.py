"""Host readers (a seam): disk space, InfiniBand ports from sysfs, processes holding GPUs, clock events
over a window, burn-in, boot time.

A check names the readers it judges (`Check.host` in node/probes); gather runs each one a level needs
once, through READERS, and hands its typed reading to the probes in `NodeSample.host`. A reader that
raises leaves its checks an `error` finding, never a drain. Everything is read from files under a root
(`health.sysfs_root`, "/" in production) so that tests and the lab can hand it a fake tree. No psutil
here: the quick level must start fast.
"""
from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Set, Tuple, Union

from slurm_ft.gpu.sample import NodeSample
from slurm_ft.node.jobscope import JobScope

if TYPE_CHECKING:
    from slurm_ft.config import HealthConfig, NodeType

# reader(node, parts) -> NodeSample: NVML again, for the readers that sample over time
NvmlReader = Callable[[str, FrozenSet[str]], NodeSample]
Progress = Optional[Callable[[int, int, str], None]]


@dataclass(frozen=True)
class ReadContext:
    """What a host reader may use: the node's settings, the level, the NVML sample read first."""
    node: str
    hc: "HealthConfig"
    node_type: "NodeType"
    level: str
    sample: NodeSample
    nvml: NvmlReader
    job: JobScope = field(default_factory=JobScope)
    progress: Progress = None


# --- disk space ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DiskSpace:
    path: str
    total_bytes: int = 0
    free_bytes: int = 0
    error: str = ""          # statvfs failed: a hung or missing mount


@dataclass(frozen=True)
class Disks:
    paths: Tuple[DiskSpace, ...] = ()


def disk(paths: Iterable[str]) -> Disks:
    out: List[DiskSpace] = []
    for p in paths:
        try:
            st = os.statvfs(p)
        except OSError as exc:
            out.append(DiskSpace(p, error=exc.strerror or str(exc)))
            continue
        out.append(DiskSpace(p, st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize))
    return Disks(tuple(out))


def read_disk(ctx: ReadContext) -> Disks:
    return disk([ctx.hc.on(ctx.node, p) for p in ctx.hc.disk_paths])


# --- InfiniBand ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class IbPort:
    device: str
    port: Union[int, str]
    state: str = ""          # "4: ACTIVE"
    phys_state: str = ""     # "5: LinkUp"
    rate_gbps: float = 0.0
    rate: str = ""           # as sysfs says it: "400 Gb/sec (4X NDR)"
    link_layer: str = "InfiniBand"


@dataclass(frozen=True)
class IbPorts:
    ports: Tuple[IbPort, ...] = ()
    error: str = ""          # the sysfs class directory could not be listed


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def infiniband(root: str = "/") -> IbPorts:
    """Every port of /sys/class/infiniband/<dev>/ports/<n> (none when there is no IB)."""
    base = Path(root) / "sys/class/infiniband"
    if not base.is_dir():
        return IbPorts()
    try:
        devices = sorted(base.iterdir())
    except OSError as exc:
        return IbPorts(error=f"{base}: {exc.strerror or exc}")
    out: List[IbPort] = []
    for dev in devices:
        ports = dev / "ports"
        if not ports.is_dir():
            continue
        for port in sorted(ports.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0):
            rate = _read(port / "rate")
            m = re.match(r"\s*(\d+(?:\.\d+)?)", rate)
            out.append(IbPort(dev.name, int(port.name) if port.name.isdigit() else port.name,
                              _read(port / "state"), _read(port / "phys_state"), float(m.group(1)) if m else 0.0,
                              rate, _read(port / "link_layer") or "InfiniBand"))
    return IbPorts(tuple(out))


def read_infiniband(ctx: ReadContext) -> Optional[IbPorts]:
    """None for a node type that expects no IB ports: nothing read, the probe says so."""
    return infiniband(ctx.hc.on(ctx.node, ctx.hc.sysfs_root)) if ctx.node_type.ib_ports else None


# --- processes holding GPUs ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Process:
    """What /proc says of a process holding a GPU, all the epilog judges it by (root reads it all)."""
    name: str               # comm (15 bytes its owner picks), escaped to printable ASCII; "?" unreadable
    uid: Optional[int]      # real uid (not /proc/PID's owner, which a process can make root's); None: gone
    exe: str                # its program, /proc/PID/exe as the kernel resolves it; "" unreadable
    exe_root: bool          # that file is root's and writable by root alone


def escape(raw: bytes) -> str:
    """Bytes a user chose, as printable ASCII: other bytes (and the backslash) as \\xNN."""
    return "".join(chr(b) if 0x20 <= b < 0x7f and b != 0x5c else f"\\x{b:02x}" for b in raw)


def _read_bytes(path: Path, limit: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError:
        return b""


def _real_uid(status: bytes) -> Optional[int]:
    m = re.search(rb"^Uid:\s+(\d+)", status, re.M)
    return int(m.group(1)) if m else None


def processes(pids: Iterable[int], root: str = "/") -> Dict[int, Process]:
    """pid -> Process, for the epilog's leftover-process check. Everything is read as bytes: a name or a
    path is whatever its owner made it, never text we trust."""
    out = {}
    for pid in pids:
        d = Path(root) / "proc" / str(pid)
        name = _read_bytes(d / "comm", 64).rstrip(b"\n")
        exe, exe_root = "", False
        try:
            exe = os.readlink(d / "exe").removesuffix(" (deleted)")   # still the daemon after an upgrade
            st = os.stat(d / "exe")                                   # the program's inode, deleted or not
            exe_root = st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        except OSError:
            pass
        out[pid] = Process(escape(name) or "?", _real_uid(_read_bytes(d / "status", 16384)), exe, exe_root)
    return out


@dataclass(frozen=True)
class GpuProcesses:
    held: Mapping[int, Tuple[int, ...]]     # GPU index -> pids on it once the ending job's had their grace
    facts: Mapping[int, Process]             # pid -> what /proc says of it


def read_processes(ctx: ReadContext) -> GpuProcesses:
    """The job's GPU processes that are still there after `process_grace_s` (a job's processes take a
    moment to release their GPU contexts after Slurm kills them, and that is not a leftover), and what
    /proc says of every GPU process. Other jobs' processes are not waited for: they stay as first seen,
    and the probe leaves them alone. Our own pid never counts."""
    me, sample = os.getpid(), ctx.sample
    facts = processes(sorted({p for g in sample.gpus for p in g.processes if p != me}))
    scope = ctx.job.on({g.index: g.uuid for g in sample.gpus})

    def held(s: NodeSample) -> Dict[int, Set[int]]:
        return {g.index: {p for p in g.processes if p != me and scope.owns(g.index, _uid(facts, p))}
                for g in s.gpus}

    now_held = held(sample)
    others = {g.index: set(g.processes) - now_held[g.index] - {me} for g in sample.gpus}
    deadline = time.monotonic() + ctx.hc.process_grace_s
    while any(now_held.values()) and time.monotonic() < deadline:
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
        again = held(ctx.nvml(ctx.node, frozenset({"identity", "processes"})))
        now_held = {i: pids & again.get(i, set()) for i, pids in now_held.items()}
    settled = {g.index: tuple(sorted(now_held.get(g.index, set()) | others[g.index])) for g in sample.gpus}
    return GpuProcesses(settled, {p: facts[p] for pids in settled.values() for p in pids if p in facts})


def _uid(facts: Mapping[int, Process], pid: int) -> Optional[int]:
    proc = facts.get(pid)
    return proc.uid if proc is not None else None


# --- clock events over a window -----------------------------------------------------------------------

@dataclass(frozen=True)
class ClockSeries:
    by_gpu: Mapping[int, Tuple[Optional[int], ...]]   # GPU index -> its clock event reasons, one per sample


def read_clocks(ctx: ReadContext) -> Optional[ClockSeries]:
    """Clock event reasons sampled over a window at the deep levels, so one blip is not a persistent
    slowdown; None at the others (the probe judges the one reading NVML gave)."""
    if ctx.level not in ("full", "burnin") or not ctx.sample.gpus:
        return None
    t = ctx.hc.thresholds
    n = max(t.clock_event_samples, 1)
    gap = t.clock_event_window_s / max(n - 1, 1)
    series: Dict[int, List[Optional[int]]] = {g.index: [g.clock_event_reasons] for g in ctx.sample.gpus}
    for _ in range(n - 1):
        time.sleep(gap)
        for g in ctx.nvml(ctx.node, frozenset({"identity", "clocks"})).gpus:
            series.setdefault(g.index, []).append(g.clock_event_reasons)
    return ClockSeries({i: tuple(v) for i, v in series.items()})


# --- burn-in ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BurninResult:
    backend: str = ""
    label: str = ""
    skipped: str = ""                    # why nothing was measured: the probe's warn, never a pass
    absolute: bool = True                # the figures compare with the node type's TFLOPS
    gpus: Mapping[int, float] = field(default_factory=dict)      # NVML index -> TFLOPS
    errors: Mapping[int, str] = field(default_factory=dict)      # NVML index -> why it failed

    @classmethod
    def of(cls, raw: Mapping[str, object]) -> "BurninResult":
        """A backend's result (a dict: the built-in backends' and the plugins' contract, node/burnin.py)."""
        def table(v: object) -> Mapping[object, object]:
            return v if isinstance(v, Mapping) else {}
        return cls(backend=str(raw.get("backend") or ""), label=str(raw.get("label") or ""),
                   skipped=str(raw.get("skipped") or ""), absolute=bool(raw.get("absolute", True)),
                   gpus={int(str(k)): float(str(v)) for k, v in table(raw.get("gpus")).items()},
                   errors={int(str(k)): str(v) for k, v in table(raw.get("errors")).items()})


def read_burnin(ctx: ReadContext) -> BurninResult:
    from slurm_ft.node import burnin   # lazy: burnin level only; it loads entry-point metadata (plugins)
    return BurninResult.of(burnin.run(ctx.sample, ctx.hc.burnin, ctx.node_type, progress=ctx.progress))


# A check names these in its `Check.host`; a new host read is a function above and a line here.
READERS: Dict[str, Callable[[ReadContext], object]] = {
    "disk": read_disk, "infiniband": read_infiniband, "processes": read_processes, "clocks": read_clocks,
    "burnin": read_burnin,
}


def boot_time(root: str = "/") -> float:
    """Wall-clock boot time from /proc/stat `btime` (what psutil.boot_time() reads, without the import)."""
    for line in _read(Path(root) / "proc/stat").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    import psutil  # lazy: only a /proc without btime needs psutil; every check reads /proc/stat instead
    return psutil.boot_time()
