"""Host reader (a seam): disk space, InfiniBand ports from sysfs, names of processes, boot time.

Everything is read from files under a root (`health.sysfs_root`, "/" in production) so that tests and
the lab can hand it a fake tree. No psutil here: the quick level must start fast.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, Iterable, List


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


def process_names(pids: Iterable[int], root: str = "/") -> Dict[int, str]:
    out = {}
    for pid in pids:
        name = _read(Path(root) / "proc" / str(pid) / "comm")
        out[pid] = name or "?"
    return out


def boot_time(root: str = "/") -> float:
    """Wall-clock boot time from /proc/stat `btime` (what psutil.boot_time() reads, without the import)."""
    for line in _read(Path(root) / "proc/stat").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    import psutil  # lazy: only a /proc without btime needs psutil; every check reads /proc/stat instead
    return psutil.boot_time()
