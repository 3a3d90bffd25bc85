"""How the checkpoint scanner reads a user's checkpoint directory: bounded, regular files only.

The controller runs as root over directories users control. A ``latest`` that is a FIFO, a symlink to
/dev/zero, a 100 GB tracker or a directory of a million entries must cost a bounded time and memory and
never block: every file is opened O_NOFOLLOW|O_NONBLOCK and fstat'ed (regular files only), every read
has a byte cap, every listing an entry cap, and the whole scan a deadline (``ScanTimeout``). A single
syscall hung on a dead network filesystem is not bounded here: callers that must not wait (the
controller) run the scan in a worker thread with their own deadline.
"""
from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

MAX_ENTRIES = 100_000          # per directory listed
DEFAULT_DEADLINE_S = 30.0      # for a whole scan


class ScanTimeout(TimeoutError):
    """The scan's deadline passed: the directory is too slow (or too large) to judge."""


class NotRegular(OSError):
    """A path the scanner reads is a FIFO, device, socket or symlink: never read as checkpoint data."""


@dataclass(frozen=True)
class Entry:
    name: str
    is_dir: bool
    size: int = 0
    link: Optional[str] = None      # symlink target, as written (the entry itself is the link)


class FS:
    """What the scanner needs from a filesystem. LocalFS is the real one; tests may use a tree in memory."""

    def list(self, path: str) -> Optional[List[Entry]]:      # None: no such directory
        raise NotImplementedError

    def read(self, path: str, limit: int = 1 << 20) -> Optional[bytes]:
        raise NotImplementedError

    def read_tail(self, path: str, n: int) -> Optional[bytes]:
        raise NotImplementedError

    def sha256(self, path: str) -> Optional[str]:
        raise NotImplementedError


_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class LocalFS(FS):
    """The real disk, bounded. ``root`` (the directory the job was tagged with) may itself be a symlink
    (/ckpt -> /lustre/...); nothing below it is followed."""

    def __init__(self, deadline_s: float = DEFAULT_DEADLINE_S, root: str = ""):
        self.deadline = time.monotonic() + deadline_s
        self.root = root.rstrip("/") or "/"

    def _tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise ScanTimeout("checkpoint scan took too long")

    def _open_file(self, path: str) -> Optional[int]:
        self._tick()
        try:
            fd = os.open(path, _OPEN_FILE)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == 40:                              # ELOOP: the last component is a symlink
                raise NotRegular(exc.errno, "a symlink, not read") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            if stat.S_ISDIR(st.st_mode):
                return None
            raise NotRegular(0, "not a regular file (FIFO, device or socket)")
        return fd

    def list(self, path: str) -> Optional[List[Entry]]:
        self._tick()
        flags = _OPEN_DIR if path.rstrip("/") == self.root or not self.root else _OPEN_DIR | os.O_NOFOLLOW
        try:
            fd = os.open(path, flags)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == 40:
                return None                                  # a symlink below the root: not followed
            raise
        out: List[Entry] = []
        try:
            with os.scandir(fd) as it:
                for e in it:
                    if len(out) >= MAX_ENTRIES:
                        raise OSError(0, f"more than {MAX_ENTRIES} entries")
                    if len(out) % 1024 == 0:
                        self._tick()
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue                             # vanished meanwhile
                    link = None
                    if stat.S_ISLNK(st.st_mode):
                        try:
                            link = os.readlink(e.name, dir_fd=fd)
                        except OSError:
                            link = ""
                    out.append(Entry(e.name, stat.S_ISDIR(st.st_mode),
                                     st.st_size if stat.S_ISREG(st.st_mode) else 0, link))
        finally:
            os.close(fd)
        return out

    def read(self, path: str, limit: int = 1 << 20) -> Optional[bytes]:
        fd = self._open_file(path)
        if fd is None:
            return None
        try:
            return os.read(fd, limit) if limit <= (1 << 24) else _read_all(fd, limit, self._tick)
        finally:
            os.close(fd)

    def read_tail(self, path: str, n: int) -> Optional[bytes]:
        fd = self._open_file(path)
        if fd is None:
            return None
        try:
            size = os.fstat(fd).st_size
            return os.pread(fd, n, max(0, size - n))
        finally:
            os.close(fd)

    def sha256(self, path: str) -> Optional[str]:
        fd = self._open_file(path)
        if fd is None:
            return None
        h = hashlib.sha256()
        try:
            while True:
                self._tick()
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return h.hexdigest()
                h.update(chunk)
        finally:
            os.close(fd)


def _read_all(fd: int, limit: int, tick: Callable[[], None]) -> bytes:
    parts, got = [], 0
    while got < limit:
        tick()
        chunk = os.read(fd, min(1 << 20, limit - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
