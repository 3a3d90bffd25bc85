"""An fcntl lock file: non-blocking by default (two sweeps never overlap), or waiting a bounded time
(the fleet lock that every change of partition or reservation membership takes, held for a few calls).

The kernel drops the lock when its holder dies (even by SIGKILL), so a crashed sweep never leaves a
stale lock behind; the pid and start time written into the file only serve the message.
"""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Optional

from slurm_ft.errors import Busy, EnvironmentProblem


class FileLock:
    def __init__(self, path: str | os.PathLike[str], what: str = "sweep") -> None:
        self.path = Path(path)
        self.what = what
        self._fd: Optional[int] = None

    def acquire(self, wait_s: float = 0.0) -> "FileLock":
        """Take the lock; with wait_s > 0, retry for that long before giving up (Busy, exit 5)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise EnvironmentProblem(f"{self.path}: cannot open the lock file: {exc.strerror}") from None
        deadline = time.monotonic() + max(0.0, wait_s)
        pause = 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(pause)
                    pause = min(0.05, pause * 2)
                    continue
                holder = _read(fd)
                os.close(fd)
                waited = f" for {wait_s:g} s" if wait_s > 0 else ""
                raise Busy(f"another {self.what} is running{holder}; it holds {self.path}{waited}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {time.time():.0f}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "FileLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read(fd: int) -> str:
    for _ in range(5):   # the holder writes its pid just after taking the lock
        try:
            pid, started = os.pread(fd, 64, 0).decode().split()
            return f" (pid {pid}, started {time.strftime('%H:%M:%S', time.localtime(float(started)))})"
        except (ValueError, OSError):
            time.sleep(0.05)
    return ""
