"""Gather: read everything a level's checks need into one NodeSample (NVML, kernel log, host, burn-in).

This is the only part of a health run that touches the machine; probes then judge the sample. A source
that cannot be read does not stop the others: its error lands in `extra["errors"][check]` and becomes an
`error` finding for that check (reported, never a drain).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from typing import Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple

from slurm_ft.config import HealthConfig, NodeType
from slurm_ft.node import host, levels
from slurm_ft.node.jobscope import JobScope
from slurm_ft.gpu import kmsg
from slurm_ft.gpu.sample import NodeSample, XidEvent

log = logging.getLogger(__name__)

# reader(node, parts) -> NodeSample; parts name what to fetch (see levels.NVML_PARTS)
Reader = Callable[[str, FrozenSet[str]], NodeSample]


def nvml_reader(node: str, parts: FrozenSet[str]) -> NodeSample:
    from slurm_ft.gpu import nvml  # lazy: pynvml costs import time, and only GPU levels need it
    return nvml.read_node(node, include=parts)


def gather(node: str, checks: Sequence[str], hc: HealthConfig, node_type: NodeType, *, level: str, now: float,
           reader: Optional[Reader] = None, extra_xids: Sequence[XidEvent] = (),
           progress: Optional[Callable[[int, int, str], None]] = None, job: Optional[JobScope] = None) -> NodeSample:
    reader = reader or nvml_reader
    errors: Dict[str, str] = {}
    parts = levels.nvml_parts(checks, level)
    sample = reader(node, parts) if parts else NodeSample(node=node)
    extra = dict(sample.extra)
    xids = list(sample.xids)

    if "xid" in checks:
        path = hc.on(node, hc.kmsg_path)
        try:
            if path == kmsg.JOURNAL:
                from slurm_ft.gpu import journal   # lazy: only a node set to read the journal runs journalctl
                xids += kmsg.map_to_gpus(journal.read(lookback_s=hc.xid_lookback_s, now=now), sample.gpus)
            else:
                xids += kmsg.read_xids(path, lookback_s=hc.xid_lookback_s, now=now, boot_time=host.boot_time(),
                                       gpus=sample.gpus, missing_ok=path != kmsg.DEV_KMSG)
        except Exception as exc:  # noqa: BLE001 - any failure to read the log is reported, not fatal
            errors["xid"] = _kmsg_error(path, exc)
        if extra_xids:
            given = kmsg.map_to_gpus(list(extra_xids), sample.gpus)
            # the driver's own NVML event vouches for a syslog line of the same fault: one finding, that counts
            xids = [replace(k, trusted=True) if not k.trusted and any(e.source == "nvml" and _same_fault(e, k)
                                                                      for e in given) else k for k in xids]
            logged = list(xids)
            xids += [e for e in given if not any(_same_fault(e, k) for k in logged)]

    if "disk" in checks:
        extra["disk"] = host.disk([hc.on(node, p) for p in hc.disk_paths])
    if "infiniband" in checks and node_type.ib_ports:
        extra["infiniband"] = host.infiniband(hc.on(node, hc.sysfs_root))
    if "processes" in checks:
        sample, extra["processes"] = _settled_processes(node, sample, hc, reader, job or JobScope())
    if "clocks" in checks and level in ("full", "burnin") and sample.gpus:
        extra["clocks"] = _sample_clocks(node, sample, hc, reader)
    if "burnin" in checks:
        from slurm_ft.node import burnin   # lazy: burnin level only; it loads entry-point metadata (plugins)
        extra["burnin"] = burnin.run(sample, hc.burnin, node_type, progress=progress)

    if errors:
        extra["errors"] = {**extra.get("errors", {}), **errors}
    return replace(sample, xids=tuple(xids), extra=extra)


def _kmsg_error(path: str, exc: BaseException) -> str:
    """Why the kernel log could not be read, in one line; a user's check says who it ran as."""
    if isinstance(exc, PermissionError) or isinstance(exc.__cause__, PermissionError):
        return (f"kernel log {path} not readable as uid {os.geteuid()} (root only: kernel.dmesg_restrict=1, "
                f"or the file's mode): Xids not seen")
    return f"cannot read the kernel log: {exc}"


def _sample_clocks(node: str, first: NodeSample, hc: HealthConfig, reader: Reader) -> Dict[int, List[Optional[int]]]:
    """Clock event reasons sampled over a window, so one blip is not a persistent slowdown."""
    n = max(hc.thresholds.clock_event_samples, 1)
    gap = hc.thresholds.clock_event_window_s / max(n - 1, 1)
    series: Dict[int, List[Optional[int]]] = {g.index: [g.clock_event_reasons] for g in first.gpus}
    for _ in range(n - 1):
        time.sleep(gap)
        for g in reader(node, frozenset({"identity", "clocks"})).gpus:
            series.setdefault(g.index, []).append(g.clock_event_reasons)
    return series


def _settled_processes(node: str, sample: NodeSample, hc: HealthConfig, reader: Reader,
                       job: JobScope) -> Tuple[NodeSample, Dict[int, host.Process]]:
    """The job's GPU processes that are still there after `process_grace_s` (a job's processes take a
    moment to release their GPU contexts after Slurm kills them, and that is not a leftover), and what
    /proc says of every GPU process. Other jobs' processes are not waited for: they stay as first seen,
    and the probe leaves them alone. Our own pid never counts."""
    me = os.getpid()
    facts = host.processes(sorted({p for g in sample.gpus for p in g.processes if p != me}))
    scope = job.on({g.index: g.uuid for g in sample.gpus})

    def held(s: NodeSample) -> Dict[int, Set[int]]:
        return {g.index: {p for p in g.processes if p != me and scope.owns(g.index, _uid(facts, p))}
                for g in s.gpus}

    now_held = held(sample)
    others = {g.index: set(g.processes) - now_held[g.index] - {me} for g in sample.gpus}
    deadline = time.monotonic() + hc.process_grace_s
    while any(now_held.values()) and time.monotonic() < deadline:
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
        again = held(reader(node, frozenset({"identity", "processes"})))
        now_held = {i: pids & again.get(i, set()) for i, pids in now_held.items()}
    gpus = tuple(replace(g, processes=tuple(sorted(now_held.get(g.index, set()) | others[g.index])))
                 for g in sample.gpus)
    return replace(sample, gpus=gpus), {p: facts[p] for g in gpus for p in g.processes if p in facts}


def _uid(facts: Mapping[int, host.Process], pid: int) -> Optional[int]:
    proc = facts.get(pid)
    return proc.uid if proc is not None else None


def _same_fault(event: XidEvent, logged: XidEvent, window_s: float = 5.0) -> bool:
    """An NVML Xid event and the kernel-log line the driver printed for it are one fault, not two."""
    if (event.xid, event.gpu) != (logged.xid, logged.gpu):
        return False
    if event.timestamp is None or logged.timestamp is None:
        return True
    return abs(event.timestamp - logged.timestamp) <= window_s
