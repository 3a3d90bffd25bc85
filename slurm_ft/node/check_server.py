"""The watcher's side of the check socket (check_socket.py): answer this node's hooks, one at a time.

Only root (or the watcher's own user) may ask: the answer is a hook's exit status, and a prolog's can
take a node out. Each request is bounded (size, read time) and checked again here: the node, the
config file, the level and every option must be what a hook in a process of its own would run with,
else the answer is a refusal and the hook runs the check itself. A served check whose NVML call hung
is answered, then the watcher stops serving: its gather thread is stuck in the driver, and every
later hook must use its own process's deadline and exit.
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
from typing import TYPE_CHECKING, Dict, Mapping, Optional, Tuple

from slurm_ft.config import DEFAULT_PATH, ENV_VAR
from slurm_ft.fsutil import refuse_unsafe
from slurm_ft.node.check_lock import CheckLock
from slurm_ft.node import check_socket as proto, jobscope

if TYPE_CHECKING:
    from typing import Callable, List, TextIO

    # argv, env, out, err -> (exit status, NVML hung)
    Handler = Callable[[List[str], Dict[str, str], TextIO, TextIO], Tuple[int, bool]]

log = logging.getLogger(__name__)

READ_S = 2.0             # a hook sends its request at once; a peer that does not is dropped
BUSY_S = 10.0            # the watcher's own check or another hook's runs first; longer -> the hook runs its own
MAX_ARGS = 32


class CheckServer:
    SOCKET_UMASK = 0o177     # srw-------: root's hooks only (and SO_PEERCRED checked again per connection)
    DIR_MODE = 0o700         # the socket's directory, when the server makes it

    def __init__(self, node: str, handler: Handler, lock: CheckLock,
                 env: Optional[Mapping[str, str]] = None) -> None:
        self.node = node
        self.handler = handler
        self.lock = lock                 # shared with the watcher's own checks: one check at a time
        self.env = dict(os.environ if env is None else env)
        self.path = proto.socket_path(node, self.env)
        self._sock: Optional[socket.socket] = None
        self._inode = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> bool:
        """Listen and serve in a thread; False (and why, logged) when this watcher cannot serve."""
        try:
            directory = os.path.dirname(self.path) or "."
            if not os.path.isdir(directory):
                os.makedirs(directory, mode=self.DIR_MODE, exist_ok=True)
                os.chmod(directory, self.DIR_MODE)       # the service's umask (0077) must not narrow it
            refuse_unsafe(directory, "check socket directory")
            if not self._clear_stale():
                return False
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old = os.umask(self.SOCKET_UMASK)
            try:
                sock.bind(self.path)
            finally:
                os.umask(old)
            sock.listen(16)
            sock.settimeout(0.2)
        except Exception as exc:  # noqa: BLE001 - the watch goes on; hooks run their own checks
            log.error("not serving checks on %s: %s", self.path, exc)
            return False
        self._sock, self._inode = sock, os.stat(self.path).st_ino
        self._thread = threading.Thread(target=self._serve, name="check-serve", daemon=True)
        self._thread.start()
        return True

    def _clear_stale(self) -> bool:
        """Remove a socket no process listens on (a watcher that died); refuse to take a live one."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return True
        if not stat.S_ISSOCK(st.st_mode):
            log.error("not serving checks: %s exists and is not a socket", self.path)
            return False
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(1.0)
            probe.connect(self.path)
        except OSError:
            os.unlink(self.path)
            return True
        finally:
            probe.close()
        log.error("not serving checks: another process serves %s", self.path)
        return False

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self._close()

    def _close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        sock.close()
        try:
            if os.stat(self.path).st_ino == self._inode:     # ours, not a later watcher's
                os.unlink(self.path)
        except OSError:
            pass

    WHAT = "check socket"
    GIVING_UP = "not serving checks any more"

    def _serve(self) -> None:
        while not self._stop.is_set() and self._sock is not None:
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError as exc:
                log.error("%s %s: %s; %s", self.WHAT, self.path, exc, self.GIVING_UP)
                break
            if not self._handle(conn):
                break
        self._close()

    def _handle(self, conn: socket.socket) -> bool:
        """Serve one connection (and close it); False when the server must stop."""
        with conn:
            hung = self._one(conn)
        if hung:
            log.error("an NVML call hung in a served check: hooks on %s run their own checks from now on",
                      self.node)
        return not hung

    def _one(self, conn: socket.socket) -> bool:
        """Answer one connection; True when its check hung in NVML."""
        t0 = time.monotonic()
        try:
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
            if uid not in (0, os.geteuid()):
                log.warning("check socket: refused uid %d", uid)
                return False
            req = json.loads(proto.read_bounded(conn, proto.MAX_REQUEST, time.monotonic() + READ_S))
            reply, hung, what = self.answer(req)
            conn.settimeout(READ_S)
            conn.sendall(json.dumps(reply).encode())
        except Exception as exc:  # noqa: BLE001 - one hook's connection; the hook then runs its own check
            log.warning("check socket: dropped a request: %s", exc)
            return False
        log.info("served %s: %s (%.1f ms)", what, reply.get("code", reply.get("fallback")),
                 (time.monotonic() - t0) * 1000)
        return hung

    def answer(self, req: object) -> Tuple[Dict[str, object], bool, str]:
        """(the reply, NVML hung, what was asked) for one decoded request."""
        why = self._refusal(req)
        if why:
            return {"v": proto.VERSION, "fallback": why}, False, "refusal"
        assert isinstance(req, dict)
        argv, env = list(req["argv"]), dict(req["env"])
        what = f"check {' '.join(argv)} (job {env.get('SLURM_JOB_ID', '-')})"
        if not self.lock.acquire(timeout=BUSY_S):
            return {"v": proto.VERSION, "fallback": "busy"}, False, what
        try:
            out, err = io.StringIO(), io.StringIO()
            code, hung = self.handler(argv, env, out, err)
        except SystemExit:          # argparse refused what the client let through: the hook's own run says why
            return {"v": proto.VERSION, "fallback": "usage"}, False, what
        finally:
            self.lock.release()
        return {"v": proto.VERSION, "code": code, "out": out.getvalue(), "err": err.getvalue()}, hung, what

    def _refusal(self, req: object) -> str:
        """Why this request is not the watcher's to answer ("" when it is)."""
        if not isinstance(req, dict) or req.get("v") != proto.VERSION:
            return "not a version 1 request"
        argv, env, node = req.get("argv"), req.get("env"), req.get("node")
        if not (isinstance(argv, list) and len(argv) <= MAX_ARGS and all(isinstance(a, str) for a in argv)):
            return "bad arguments"
        if not (isinstance(env, dict) and all(k in proto.ENV_KEYS and isinstance(v, str) for k, v in env.items())):
            return "bad environment"
        if any(jobscope.device_list(env[k]) is None for k in jobscope.ENV_KEYS if k in env):
            return "a job GPU list that is not one"
        if node != self.node or proto.served_node(argv, env) != self.node:
            return f"this watcher serves {self.node}"
        if _config_file(env) != _config_file(self.env):
            return "another config file"
        return ""


def _config_file(env: Mapping[str, str]) -> str:
    return os.path.realpath(env.get(ENV_VAR) or DEFAULT_PATH)
