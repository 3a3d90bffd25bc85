"""How the checkpoint scanner reads a user's checkpoint directory: bounded, regular files only.

The controller runs as root over directories users control. A ``latest`` that is a FIFO, a symlink to
/dev/zero, a 100 GB tracker or a directory of a million entries must cost a bounded time and memory and
never block: every file is opened O_NOFOLLOW|O_NONBLOCK and fstat'ed (regular files only), every read
has a byte cap, every listing an entry cap, and the whole scan a deadline (``ScanTimeout``). A single
syscall hung on a dead network filesystem is not bounded here: callers that must not wait (the
controller) run the scan in a worker thread with their own deadline.

Below the root no component is followed, not only the last: a path is opened from the root down, one
component at a time, each directory O_DIRECTORY|O_NOFOLLOW relative to its parent's descriptor and the
file O_NOFOLLOW relative to its directory's, so a step directory swapped for a symlink between the
listing and the read cannot make root read a file elsewhere.
"""
from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

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
        # the directory whose files were read last, held open: a checkpoint's files are read one after
        # another from the same step directory, relative to the descriptor it was opened as
        self._held: Optional[Tuple[str, int]] = None

    def close(self) -> None:
        if self._held is not None:
            os.close(self._held[1])
            self._held = None

    def __del__(self) -> None:
        self.close()

    def _tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise ScanTimeout("checkpoint scan took too long")

    def _below_root(self, path: str) -> Optional[List[str]]:
        """The components of `path` below the root ([] for the root itself), or None when `path` is not
        under it (a root of "/" is no root: such paths are opened as given, their last component guarded)."""
        path = path.rstrip("/") or "/"
        if self.root == "/" or not (path == self.root or path.startswith(self.root + "/")):
            return None
        parts = path[len(self.root):].strip("/").split("/") if path != self.root else []
        if any(p in ("", ".", "..") for p in parts):
            raise NotRegular(0, "not a plain path below the checkpoint directory")
        return parts

    def _open_dir(self, path: str) -> Optional[int]:
        """A descriptor of directory `path`, no component below the root followed; None when it is not
        there, not a directory, or a symlink below the root."""
        self._tick()
        parts = self._below_root(path)
        try:
            if parts is None:
                return os.open(path, _OPEN_DIR if path.rstrip("/") == self.root else _OPEN_DIR | os.O_NOFOLLOW)
            fd = os.open(self.root, _OPEN_DIR)           # the root itself may be a link (/ckpt -> /lustre/...)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None                              # a symlink below the root: not followed
            raise
        for part in parts:
            try:
                nfd = os.open(part, _OPEN_DIR | os.O_NOFOLLOW, dir_fd=fd)
            except (FileNotFoundError, NotADirectoryError):
                nfd = -1
            except OSError as exc:
                os.close(fd)
                if exc.errno == errno.ELOOP:
                    return None
                raise
            os.close(fd)
            if nfd < 0:
                return None
            fd = nfd
        return fd

    def _dir_of(self, parent: str) -> Optional[int]:
        """The held descriptor of directory `parent`, opened (_open_dir) when another one is held."""
        if self._held is not None and self._held[0] == parent:
            return self._held[1]
        self.close()
        fd = self._open_dir(parent)
        if fd is not None:
            self._held = (parent, fd)
        return fd

    def _open_file(self, path: str) -> Optional[int]:
        self._tick()
        parent, name = os.path.split(path.rstrip("/"))
        try:
            if self._below_root(parent or "/") is None:
                fd = os.open(path, _OPEN_FILE)           # outside the root: the last component guarded
            else:
                dfd = self._dir_of(parent)
                if dfd is None:                          # gone, or swapped for a symlink since it was listed
                    return None
                fd = os.open(name, _OPEN_FILE, dir_fd=dfd)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:                 # the last component is a symlink
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
        fd = self._open_dir(path)
        if fd is None:
            return None
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
