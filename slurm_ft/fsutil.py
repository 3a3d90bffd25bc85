"""File helpers shared by every seam that writes state: atomic writes and the root-safety check."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from slurm_ft.errors import ConfigError


def refuse_unsafe(path: str | os.PathLike[str], what: str = "file") -> None:
    """Refuse a file (or directory) that others may write: these programs run as root.

    A world-writable path (sticky or not), one writable by a group other than root's, or one owned by
    somebody else than root or the current user lets a local user change what root executes or decides.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return
    if st.st_mode & stat.S_IWOTH:
        raise ConfigError(f"{p}: {what} is writable by others; run `chmod o-w {p}`")
    if st.st_mode & stat.S_IWGRP and st.st_gid != 0:
        raise ConfigError(f"{p}: {what} is writable by group {st.st_gid}; run `chmod g-w {p}`")
    if st.st_uid not in (0, os.geteuid()):
        raise ConfigError(f"{p}: {what} is owned by uid {st.st_uid}, not root or the current user")


def atomic_write(path: str | os.PathLike[str], data: str | bytes, mode: int = 0o644) -> None:
    """Write through a temporary file in the same directory and rename: readers never see half a file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_unread(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write a file no process reads yet, without fsync; a file that already holds `data` is left alone.
    A changed file is unlinked first: ext4 (auto_da_alloc) flushes a file truncated over old data at
    close, and freeing its blocks costs as much: ~1.5 ms a file on a busy disk, 10,000 files at `lab up`."""
    p = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    try:
        if p.read_bytes() == raw:
            return
        p.unlink()
    except FileNotFoundError:
        pass
    with open(p, "wb") as fh:
        fh.write(raw)
