"""The node's one check lock: the watcher's own checks, the hooks' (check socket) and users' questions
(query socket) take turns, one check at a time on the node.

A fault drain comes first: while the watcher waits to drain for a fatal Xid, nobody else takes the lock
before it (Python's Lock has no order, so a few users asking in turn could hold it off for seconds:
review 2026-12-07 #3). It still waits for the check that is running, one check's time at most.
"""
from __future__ import annotations

import threading
from typing import Any, Optional


class CheckLock:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._held = False
        self._urgent = 0               # fault drains waiting

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None, *, urgent: bool = False) -> bool:
        """As threading.Lock's; urgent: ahead of every waiter that is not."""
        with self._cond:
            if urgent:
                self._urgent += 1
            try:
                ok = self._cond.wait_for(lambda: not self._held and (urgent or not self._urgent),
                                         timeout if blocking else 0)
                if ok:
                    self._held = True
                return ok
            finally:
                if urgent:
                    self._urgent -= 1
                    self._cond.notify_all()

    def release(self) -> None:
        with self._cond:
            if not self._held:
                raise RuntimeError("release of a CheckLock not held")
            self._held = False
            self._cond.notify_all()

    def locked(self) -> bool:
        return self._held

    def __enter__(self) -> "CheckLock":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
