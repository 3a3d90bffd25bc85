"""The watcher's side of the query socket (query_socket.py): answer a local user's check, as root.

Anyone local may connect (the socket is srw-rw-rw- in a root directory others may enter); who gets an
answer, how often and to what is node/query.py's: a token bucket per uid (from the peer's credentials,
SO_PEERCRED, never from the request), a few questions in flight, one check at a time on the node, a
short cache for looks, the quick and prolog levels only, answers scrubbed of process names. The check
itself is the handler's (cli/watch.py: cli/check.py's answer_user), run in a thread of its own per
question so that a user who connects and sends nothing holds one slot for READ_S, not the socket.
"""
from __future__ import annotations

import io
import json
import logging
import os
import socket
import stat
import struct
import threading
import time
from typing import TYPE_CHECKING, Callable, Dict, Mapping, Optional, Tuple

from slurm_ft.node import query as policy
from slurm_ft.node.check_lock import CheckLock
from slurm_ft.node import query_socket as proto
from slurm_ft.node.check_server import BUSY_S, CheckServer
from slurm_ft.node.check_socket import read_bounded

if TYPE_CHECKING:
    from typing import TextIO

    # the question, out, err -> (exit status, NVML hung)
    UserHandler = Callable[[proto.Query, TextIO, TextIO], Tuple[int, bool]]

log = logging.getLogger(__name__)

READ_S = 1.0             # the client sends its question at once; one that does not frees its slot after this


class QueryServer(CheckServer):
    SOCKET_UMASK = 0o111     # srw-rw-rw-: any local user may connect; policy.Limits decides who is answered
    DIR_MODE = 0o755         # others must be able to enter the directory to reach the socket

    def __init__(self, node: str, handler: UserHandler, lock: CheckLock,
                 env: Optional[Mapping[str, str]] = None, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(node, _no_hooks, lock, env)
        self.path = proto.socket_path(node, self.env)
        self.user_handler = handler
        self.clock = clock
        self.limits = policy.Limits()
        self.cache = policy.Cache()
        self._mutex = threading.Lock()       # limits and cache, shared by the questions' threads

    def start(self) -> bool:
        if not super().start():
            return False
        directory = os.path.dirname(self.path) or "."
        if not os.stat(directory).st_mode & stat.S_IXOTH:
            log.warning("users cannot reach %s: %s is not searchable by others", self.path, directory)
        return True

    WHAT = "query socket"
    GIVING_UP = "not answering users any more"

    def _handle(self, conn: socket.socket) -> bool:
        """Refuse at once (no read) or hand the question to a thread of its own."""
        try:
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
        except OSError:
            conn.close()
            return True
        with self._mutex:
            why = self.limits.admit(uid, self.clock())
        if why:
            log.info("query socket: refused uid %d: %s", uid, why)
            self._send(conn, {"v": proto.VERSION, "refused": why})
            _discard_and_close(conn)
            return True
        threading.Thread(target=self._one_user, args=(conn, uid), name=f"query-uid{uid}", daemon=True).start()
        return True

    def _send(self, conn: socket.socket, reply: Dict[str, object]) -> None:
        try:
            conn.settimeout(READ_S)
            conn.sendall(json.dumps(reply).encode())
        except OSError:
            pass                     # the user went away: their loss

    def _one_user(self, conn: socket.socket, uid: int) -> None:
        t0 = time.monotonic()
        hung = False
        try:
            with conn:
                try:
                    req = json.loads(read_bounded(conn, proto.MAX_REQUEST, time.monotonic() + READ_S))
                except (OSError, ValueError) as exc:
                    log.info("query socket: dropped uid %d's question: %s", uid, exc)
                    return
                reply, hung, what = self.reply(req, uid)
                self._send(conn, reply)
            log.info("answered uid %d: %s: %s (%.1f ms)", uid, what, reply.get("code", reply.get("refused")),
                     (time.monotonic() - t0) * 1000)
        except Exception as exc:  # noqa: BLE001 - one user's question; the user then runs a check of their own
            log.warning("query socket: uid %d's question failed: %s", uid, exc)
        finally:
            with self._mutex:
                self.limits.release(uid)
        if hung:
            log.error("an NVML call hung in a user's check: users of %s run their own checks from now on", self.node)
            self._stop.set()

    def reply(self, req: object, uid: int) -> Tuple[Dict[str, object], bool, str]:
        """(the reply, NVML hung, what was asked) for one decoded question of `uid`."""
        q = proto.Query.from_dict(req)
        if q is None:
            return {"v": proto.VERSION, "refused": f"not a question this watcher answers (levels "
                                                  f"{', '.join(proto.LEVELS)})"}, False, "refusal"
        if q.node != self.node:
            return {"v": proto.VERSION, "refused": f"this watcher answers for {self.node}"}, False, "refusal"
        what = f"{q.level}{' --drain' if q.drain else ''}{' --json' if q.json else ''}"
        # drains too: users together run at most one check a level per CACHE_S, however many ask
        key = (q.level, q.json, q.drain)
        with self._mutex:
            hit = self.cache.get(key, self.clock())
        if hit is not None:
            return hit, False, f"{what} (cached)"
        if not self.lock.acquire(timeout=BUSY_S):
            return {"v": proto.VERSION, "refused": "busy: the node's check lock stayed held"}, False, what
        try:
            out, err = io.StringIO(), io.StringIO()
            code, hung = self.user_handler(q, out, err)
            at = self.clock()
        finally:
            self.lock.release()
        reply: Dict[str, object] = {"v": proto.VERSION, "code": code, "out": policy.scrub(out.getvalue()),
                                    "err": policy.scrub(err.getvalue())}
        if not hung:
            with self._mutex:
                self.cache.put(key, reply, at)
        return reply, hung, what


def _discard_and_close(conn: socket.socket) -> None:
    """Close after a refusal without waiting for the question: a Unix socket closed with unread data
    resets its peer (ECONNRESET instead of the refusal), so what already arrived is read first, without
    blocking (a user who sends nothing must not hold the accept loop)."""
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.setblocking(False)
        for _ in range(proto.MAX_REQUEST // 1024 + 1):
            if not conn.recv(1024):
                break
    except OSError:
        pass
    conn.close()


def _no_hooks(*args: object) -> Tuple[int, bool]:
    raise AssertionError("the query socket answers users through its own handler, never a hook's argv")
