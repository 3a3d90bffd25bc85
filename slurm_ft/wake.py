"""Wake the controller now: a munge-signed UDP datagram from a node's root to the controller host.

The controller polls Slurm slowly (controller.interval_s); a node that has just drained itself sends one
of these so that the controller reads Slurm at once. The datagram carries no fault: the controller still
learns what happened from Slurm, as always. It is signed with munge, Slurm's own authentication: the
listener checks the credential with `unmunge` and accepts root's only (a user cannot make the controller
read Slurm in a loop), and munge refuses a replayed credential. Unsigned, forged, replayed or excess
datagrams are dropped; a wake that is lost costs only the controller's next poll.

One fact rides along, because Slurm forgets it: a failed prolog's wake names its job (`wake NODE prolog
JOB`). Slurm requeues that job held with no nodes, so by the controller's read the run the prolog ended
may be gone; the wake tells which node that run had (fleet/recovery/plan.py `prolog_runs`).
"""
from __future__ import annotations

import logging
import re
import select
import socket
import time
from typing import List, Optional, Tuple

from slurm_ft.errors import CommandError
from slurm_ft.runner import run

log = logging.getLogger(__name__)

MAX_DATAGRAM = 4096           # a munge credential with a short payload is ~150 bytes
MUNGE_TIMEOUT_S = 5.0
_PAYLOAD_RE = re.compile(r"wake (?P<node>[A-Za-z0-9_.\-]{1,64})(?: prolog (?P<job>[1-9][0-9]{0,9}))?")


def payload(node: str, prolog_job: Optional[int] = None) -> str:
    return f"wake {node}" + (f" prolog {prolog_job}" if prolog_job is not None else "")


def parse(text: str) -> Tuple[str, Optional[int]]:
    """(node, job of the failed prolog or None) of a verified payload."""
    m = _PAYLOAD_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"not a wake: {text[:80]!r}")
    return m.group("node"), (int(m.group("job")) if m.group("job") else None)


def _munge_argv(tool: str, munge_socket: Optional[str]) -> List[str]:
    return [tool, *([f"--socket={munge_socket}"] if munge_socket else [])]


def send(host: str, port: int, node: str, munge_socket: Optional[str] = None, prolog_job: Optional[int] = None
         ) -> None:
    """Ask the controller at host:port to read Slurm now, signed by this process's uid. Raises
    CommandError (munge) or OSError (the network): the caller logs it, nothing else depends on it."""
    cred = run([*_munge_argv("munge", munge_socket), "-s", payload(node, prolog_job)],
               timeout=MUNGE_TIMEOUT_S).stdout.strip()
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, kind, proto) as s:
        s.sendto(cred.encode("ascii", "replace")[:MAX_DATAGRAM], addr)


def verify(cred: bytes, munge_socket: Optional[str] = None, uids: Tuple[int, ...] = (0,)) -> Optional[str]:
    """The payload (`wake NODE [prolog JOB]`) of a credential munge accepts from one of `uids`, else None."""
    try:
        res = run(_munge_argv("unmunge", munge_socket), input=cred.decode("ascii", "replace"),
                  timeout=MUNGE_TIMEOUT_S, check=False)
    except CommandError as exc:
        log.warning("wake: cannot run unmunge: %s", exc)
        return None
    meta, _, payload = res.stdout.partition("\n\n")
    uid = re.search(r"^UID:\s*\S*\s*\((\d+)\)", meta, re.M)
    if res.returncode != 0 or uid is None or int(uid.group(1)) not in uids:
        status = re.search(r"^STATUS:\s*(.*)$", meta, re.M)
        log.info("wake refused: %s", status.group(1) if status else (res.stderr.strip() or f"rc {res.returncode}")[:200])
        return None
    payload = payload.strip()
    return payload if _PAYLOAD_RE.fullmatch(payload) else None


class Listener:
    """The controller's side: `wait(timeout)` returns a verified wake's payload, or None when the timeout
    passed first. At most `max_per_s` datagrams are checked a second (each costs an unmunge); the rest are
    read and dropped, so a flood delays the controller to its poll at worst."""

    def __init__(self, port: int, host: str = "", munge_socket: Optional[str] = None, uids: Tuple[int, ...] = (0,),
                 max_per_s: float = 20.0):
        self.munge_socket = munge_socket
        self.uids = uids
        self.min_gap_s = 1.0 / max_per_s if max_per_s > 0 else 0.0
        self._last = 0.0
        family = socket.getaddrinfo(host or None, port, type=socket.SOCK_DGRAM, flags=socket.AI_PASSIVE)[0][0]
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind((host, port))
        self.port = self.sock.getsockname()[1]

    def wait(self, timeout: float) -> Optional[str]:
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.sock], [], [], max(left, 0.0))
            if not ready:
                return None
            data, peer = self.sock.recvfrom(MAX_DATAGRAM)
            now = time.monotonic()
            if now - self._last >= self.min_gap_s:      # over the rate: dropped unchecked
                self._last = now
                payload = verify(data, self.munge_socket, self.uids)
                if payload is not None:
                    log.info("woken by %s (%s)", payload, peer[0])
                    return payload
            if time.monotonic() >= deadline:
                return None

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Listener":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
