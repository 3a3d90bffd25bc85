"""Host reader (a seam): disk space, InfiniBand ports from sysfs, processes holding GPUs, boot time.

Everything is read from files under a root (`health.sysfs_root`, "/" in production) so that tests and
the lab can hand it a fake tree. No psutil here: the quick level must start fast.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional


def disk(paths: Iterable[str]) -> List[Dict[str, object]]:
    out: List[Dict[str, object]] = []
    for p in paths:
        try:
            st = os.statvfs(p)
        except OSError as exc:
            out.append({"path": p, "error": exc.strerror or str(exc)})
            continue
        out.append({"path": p, "total_bytes": st.f_blocks * st.f_frsize, "free_bytes": st.f_bavail * st.f_frsize})
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def infiniband(root: str = "/") -> List[Dict[str, object]]:
    """One dict per port of /sys/class/infiniband/<dev>/ports/<n> (an empty list when there is no IB)."""
    base = Path(root) / "sys/class/infiniband"
    out: List[Dict[str, object]] = []
    if not base.is_dir():
        return out
    try:
        devices = sorted(base.iterdir())
    except OSError as exc:
        return [{"error": f"{base}: {exc.strerror or exc}"}]
    for dev in devices:
        ports = dev / "ports"
        if not ports.is_dir():
            continue
        for port in sorted(ports.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0):
            rate = _read(port / "rate")
            m = re.match(r"\s*(\d+(?:\.\d+)?)", rate)
            out.append({"device": dev.name, "port": int(port.name) if port.name.isdigit() else port.name,
                        "state": _read(port / "state"), "phys_state": _read(port / "phys_state"),
                        "rate_gbps": float(m.group(1)) if m else 0.0, "rate": rate,
                        "link_layer": _read(port / "link_layer") or "InfiniBand"})
    return out


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


def boot_time(root: str = "/") -> float:
    """Wall-clock boot time from /proc/stat `btime` (what psutil.boot_time() reads, without the import)."""
    for line in _read(Path(root) / "proc/stat").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    import psutil  # lazy: only a /proc without btime needs psutil; every check reads /proc/stat instead
    return psutil.boot_time()
