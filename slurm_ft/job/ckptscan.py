"""The controller's checkpoint scans: each in its own worker thread, with a per-job deadline.

The controller reads users' checkpoint directories (as root) when it opens an incident. A read that
hangs (a dead network filesystem) or a directory too large to judge must hold up only its own job: the
scan runs in a daemon thread, the controller waits for it at most ``deadline_s`` from when it started,
and a scan that did not finish by then is a verdict of its own (hold that job, say why). Scans of one
cycle start together, so the jobs whose scans finish are opened first.
"""
from __future__ import annotations

import threading
import time
from typing import Dict, Optional

from slurm_ft.job import ckpt

HOLD_PREFIX = "checkpoint hold: "     # an incident note that starts so: the job stays held (see plan)
FRESH_S = 10.0                        # a finished scan this recent answers again (started with the cycle)


class Scan:
    def __init__(self, directory: str, deadline_s: float):
        self.directory = directory
        self.started = time.monotonic()
        self.deadline_s = deadline_s
        self.result: Optional[ckpt.Latest] = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ckpt-scan {directory}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            # the scan's own deadline a little inside ours: a slow but live directory answers "too slow"
            self.result = ckpt.latest(self.directory, deadline_s=max(0.0, self.deadline_s * 0.9))
        except Exception as exc:        # a bug of ours must not kill the controller: fail safe, hold
            self.result = ckpt.Latest(self.directory, None, None, None, (), f"scan failed: {exc!r}", error=True)
        finally:
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self) -> ckpt.Latest:
        """The verdict, or a timeout verdict once ``deadline_s`` has passed since the scan started."""
        left = self.deadline_s - (time.monotonic() - self.started)
        if self._done.wait(max(0.0, left)) and self.result is not None:
            return self.result
        return ckpt.Latest(self.directory, None, None, None, (),
                           f"scanning {self.directory} did not finish within {self.deadline_s:g} s", error=True)


class Scanner:
    """Scans by directory; one still running (hung) is not started again until it ends."""

    def __init__(self, deadline_s: float):
        self.deadline_s = deadline_s
        self._scans: Dict[str, Scan] = {}

    def start(self, directory: str) -> Scan:
        s = self._scans.get(directory)
        if s is None or (s.done() and time.monotonic() - s.started > FRESH_S):
            s = self._scans[directory] = Scan(directory, self.deadline_s)
        return s

    def finished(self, directory: str) -> bool:
        s = self._scans.get(directory)
        return s is None or s.done() or time.monotonic() - s.started >= self.deadline_s

    def verdict(self, directory: str) -> ckpt.Latest:
        return self.start(directory).wait()


def hold_reason(found: ckpt.Latest) -> Optional[str]:
    """Why a job must stay held rather than restart (from scratch over its checkpoints), or None."""
    if not found.must_not_start:
        return None
    return HOLD_PREFIX + found.reason[:500]
