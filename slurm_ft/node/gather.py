"""Gather: read everything a level's checks need into one NodeSample: the NVML groups and host readers
each check names (node/probes CHECKS), and the kernel log's Xids.

This is the only part of a health run that touches the machine; probes then judge the sample. A source
that cannot be read does not stop the others: its error lands in `unread[check]` and becomes an `error`
finding for that check (reported, never a drain).
"""
from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import Callable, Dict, FrozenSet, Optional, Sequence

from slurm_ft.config import HealthConfig, NodeType
from slurm_ft.node import host, levels
from slurm_ft.node.jobscope import JobScope
from slurm_ft.gpu import kmsg
from slurm_ft.gpu.sample import HostReadings, NodeSample, XidEvent
from slurm_ft.node.probes import BY_NAME

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
    xids = list(sample.xids)

    if "xid" in checks:
        path = hc.on(node, hc.kmsg_path)
        try:
            if path == kmsg.JOURNAL:
                from slurm_ft.gpu import journal   # lazy: only a node set to read the journal runs journalctl
                xids += kmsg.map_to_gpus(journal.read(lookback_s=hc.xid_lookback_s, now=now), sample.gpus)
            elif not os.path.exists(path):     # a typo in the path must not read as "xid ok" for good
                errors["xid"] = f"kernel log {path} (health.kmsg_path) does not exist: Xids not seen"
            else:
                xids += kmsg.read_xids(path, lookback_s=hc.xid_lookback_s, now=now, boot_time=host.boot_time(),
                                       gpus=sample.gpus)
        except Exception as exc:  # noqa: BLE001 - any failure to read the log is reported, not fatal
            errors["xid"] = _kmsg_error(path, exc)
        if extra_xids:
            given = kmsg.map_to_gpus(list(extra_xids), sample.gpus)
            # the driver's own NVML event vouches for a syslog line of the same fault: one finding, that counts
            xids = [replace(k, trusted=True) if not k.trusted and any(e.source == "nvml" and _same_fault(e, k)
                                                                      for e in given) else k for k in xids]
            logged = list(xids)
            xids += [e for e in given if not any(_same_fault(e, k) for k in logged)]

    ctx = host.ReadContext(node, hc, node_type, level, sample, reader, job or JobScope(), progress)
    readings: Dict[str, object] = {}
    for name in dict.fromkeys(r for c in checks for r in BY_NAME[c].host):
        try:
            got = host.READERS[name](ctx)
        except Exception as exc:  # noqa: BLE001 - a reader that breaks is its checks' error, never a drain
            log.debug("host reader %s failed", name, exc_info=True)
            errors.update({c: f"cannot read {name}: {type(exc).__name__}: {exc}" for c in checks
                           if name in BY_NAME[c].host})
            continue
        if got is not None:
            readings[name] = got

    return replace(sample, xids=tuple(xids), host=HostReadings(readings), unread={**sample.unread, **errors})


def _kmsg_error(path: str, exc: BaseException) -> str:
    """Why the kernel log could not be read, in one line; a user's check says who it ran as."""
    if isinstance(exc, PermissionError) or isinstance(exc.__cause__, PermissionError):
        return (f"kernel log {path} not readable as uid {os.geteuid()} (root only: kernel.dmesg_restrict=1, "
                f"or the file's mode): Xids not seen")
    return f"cannot read the kernel log: {exc}"


def _same_fault(event: XidEvent, logged: XidEvent, window_s: float = 5.0) -> bool:
    """An NVML Xid event and the kernel-log line the driver printed for it are one fault, not two."""
    if (event.xid, event.gpu) != (logged.xid, logged.gpu):
        return False
    if event.timestamp is None or logged.timestamp is None:
        return True
    return abs(event.timestamp - logged.timestamp) <= window_s
