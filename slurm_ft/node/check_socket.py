"""A hook's `slurm-ft check`, answered by the node's `slurm-ft watch` over a root-only Unix socket.

A hook is a fresh Python process: it imports pynvml, the config's YAML and the check engine, then
initialises NVML (on real GPUs most of a second). The watcher has all of that loaded. When it serves,
`slurm-ft check` sends its arguments here and prints the answer: the same code runs the same check
with the same state file, output and exit code, and the hook's process imports only this module.
Anything else runs the check in the hook's own process, as without a watcher: no socket, another
node or config, a level the watcher does not serve (full, burnin), an option this client does not
know (`--local` is one), a socket others could have placed, a refusal, a malformed answer or a
timeout. The socket saves time; it never decides alone.

This module is all the hook imports: os, socket, json, stat and time, nothing of slurm-ft.
"""
from __future__ import annotations

import json
import os
import socket
import stat
import time

TYPE_CHECKING = False          # typing's own import is a tenth of what this module saves
if TYPE_CHECKING:
    from typing import Dict, Mapping, Optional, Sequence, TextIO

PATH_ENV = "SLURM_FT_CHECK_SOCKET"           # may name the node ({node}): the lab's nodes share a host
DEFAULT_PATH = "/run/slurm-ft/check.sock"
SERVED_LEVELS = ("quick", "prolog", "epilog")
# what a check reads of a hook's environment (the epilog's job GPUs: node/jobscope.py; the watcher
# refuses a value that is no GPU list, and the hook then judges it in its own process; SLURM_CONF: slurmd's
# own slurm.conf, where a node without NVML learns whether Slurm gives it GPUs: node/expect.py)
ENV_KEYS = ("SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_JOB_UID", "SLURM_JOB_RESERVATION", "SLURM_FT_CONFIG",
            "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_CONF")
VERSION = 1
MAX_REQUEST = 16 * 1024
MAX_ANSWER = 1 << 20
CONNECT_S = 1.0
ANSWER_S = 60.0          # the watcher answers within the level's deadline; this bounds a wedged one

_FLAGS = ("--json", "--drain", "--no-state")
_VALUED = {"--level": "level", "-l": "level", "--node": "node", "--job-id": "job_id"}


def served_node(argv: Sequence[str], env: Mapping[str, str]) -> Optional[str]:
    """The node a watcher may answer `check ARGV` for; None when only a run in this process may.
    Only what the hooks pass, in forms `slurm-ft check`'s own parser reads the same way."""
    seen = options(argv, {f: "" for f in _FLAGS}, _VALUED, SERVED_LEVELS)
    if seen is None:
        return None
    return str(seen["node"]) or env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def options(argv: Sequence[str], flags: Mapping[str, str], valued: Mapping[str, str], levels: Sequence[str]
            ) -> Optional[Dict[str, object]]:
    """`check ARGV`'s options as `slurm-ft check`'s own parser reads them ({field: value}; a flag named in
    `flags` sets its field True), or None for anything else: an option not in `flags` or `valued`, a value
    that looks like an option, a `-x=v` form argparse reads otherwise, a level not in `levels`."""
    seen: Dict[str, object] = {"level": "quick", "node": ""}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in flags:
            if flags[arg]:
                seen[flags[arg]] = True
            i += 1
            continue
        key, eq, value = arg.partition("=")
        if key not in valued or (eq and not key.startswith("--")):
            return None
        if not eq:
            if i + 1 == len(argv) or argv[i + 1].startswith("-"):
                return None
            i += 1
            value = argv[i]
        if valued[key] == "level" and value not in levels:
            return None          # argparse checks every --level given, not only the last one
        seen[valued[key]] = value
        i += 1
    return seen


def socket_path(node: str, env: Mapping[str, str]) -> str:
    return (env.get(PATH_ENV) or DEFAULT_PATH).replace("{node}", node)


def unsafe(path: str) -> str:
    """Why root must not trust what answers at `path` ("" when it may): its directory or the socket is
    another user's to replace."""
    me = os.geteuid()
    parent = os.stat(os.path.dirname(path) or ".")
    if parent.st_uid not in (0, me) or parent.st_mode & stat.S_IWOTH or (
            parent.st_mode & stat.S_IWGRP and parent.st_gid != 0):
        return "its directory is writable by or owned by another user"
    sock = os.lstat(path)
    if not stat.S_ISSOCK(sock.st_mode):
        return "not a socket"
    if sock.st_uid not in (0, me):
        return f"owned by uid {sock.st_uid}"
    return ""


class Answer:
    """What the watcher answered: print `out` and `err`, exit `code`."""
    __slots__ = ("code", "out", "err")

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err


def request(argv: Sequence[str], node: str, env: Mapping[str, str]) -> bytes:
    return json.dumps({"v": VERSION, "argv": list(argv), "node": node,
                       "env": {k: env[k] for k in ENV_KEYS if k in env}}).encode() + b"\n"


def read_bounded(conn: socket.socket, limit: int, deadline: float) -> bytes:
    """Everything the peer sends until it closes, within `limit` bytes and the monotonic `deadline`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no full message in time")
        conn.settimeout(left)
        chunk = conn.recv(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise ValueError(f"message over {limit} bytes")
        chunks.append(chunk)


def ask(argv: Sequence[str], env: Mapping[str, str], warn: Optional[TextIO] = None) -> Optional[Answer]:
    """The watcher's answer to `slurm-ft check ARGV`, or None: then the caller runs the check itself.
    A socket that is there but unsafe is named on `warn` (a text stream), once per call."""
    node = served_node(argv, env)
    if node is None:
        return None
    path = socket_path(node, env)
    try:
        why = unsafe(path)
    except OSError:
        return None                                   # no watcher serving here: the usual case
    if why:
        if warn is not None:
            print(f"slurm-ft: warning: check socket {path} not used: {why}", file=warn)
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_S)
            conn.connect(path)
            conn.sendall(request(argv, node, env))
            conn.shutdown(socket.SHUT_WR)
            data = read_bounded(conn, MAX_ANSWER, time.monotonic() + ANSWER_S)
        reply = json.loads(data)
    except (OSError, ValueError):
        return None
    if not (isinstance(reply, dict) and reply.get("v") == VERSION and type(reply.get("code")) is int
            and 0 <= reply["code"] < 256 and isinstance(reply.get("out"), str) and isinstance(reply.get("err"), str)):
        return None                                   # a refusal ({"fallback": why}) or not our protocol
    return Answer(reply["code"], reply["out"], reply["err"])
