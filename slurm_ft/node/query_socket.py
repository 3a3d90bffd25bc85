"""A user's `slurm-ft check`, answered by the node's `slurm-ft watch` over a socket any local user may use.

A job's user cannot read the kernel log on a real node (/dev/kmsg with kernel.dmesg_restrict=1, the
Debian and Ubuntu default: the Xid probe is blind), cannot drain a node, and cannot reach the
watcher's root-only check socket (check_socket.py). Yet the hot-spare supervisor's exit and hang checks
run as that user, inside the job (`srun ... slurm-ft check --level prolog --json --no-state`, then
`--drain` on a believable culprit). So the watcher answers a narrow question on a second socket: "what
is wrong with this node", at the quick or prolog level, read by root and answered to anyone local; and
"take it out", which it does only for evidence no user can write. What it answers, and to whom, is
decided by the watcher (node/query.py, node/query_server.py); this side only asks, and says why when
it could not (the caller then runs the check itself, blind to the kernel log).

A request is one closed structure, never an argument list: {"v", "node", "level", "json", "drain"}.
Like check_socket.py, this module imports nothing of slurm-ft but that one stdlib-only module.
"""
from __future__ import annotations

import json
import os
import socket
import stat
import time

from slurm_ft.node.check_socket import Answer, options, read_bounded

TYPE_CHECKING = False          # typing's import is a tenth of what asking the watcher costs
if TYPE_CHECKING:
    from typing import Dict, Mapping, Optional, Sequence, Tuple

PATH_ENV = "SLURM_FT_QUERY_SOCKET"           # may name the node ({node}): the lab's nodes share a host
DEFAULT_PATH = "/run/slurm-ft-query/query.sock"
LEVELS = ("quick", "prolog")     # the epilog's leftover-process check names other users' processes
VERSION = 1
MAX_REQUEST = 4096
MAX_ANSWER = 1 << 20
CONNECT_S = 1.0
ANSWER_S = 60.0          # the watcher answers within its busy wait (10 s) and the level's deadline (20 s)

_FLAGS = {"--json": "json", "--drain": "drain", "--no-state": ""}   # a user's check never writes state anyway
_VALUED = {"--level": "level", "-l": "level", "--node": "node"}


class Query:
    """One question a user may ask the watcher: the node, the level, JSON or text, drain or look."""
    __slots__ = ("node", "level", "json", "drain")

    def __init__(self, node: str, level: str, as_json: bool, drain: bool) -> None:
        self.node, self.level, self.json, self.drain = node, level, as_json, drain

    def to_dict(self) -> Dict[str, object]:
        return {"v": VERSION, "node": self.node, "level": self.level, "json": self.json, "drain": self.drain}

    @classmethod
    def from_dict(cls, req: object) -> "Optional[Query]":
        """The request as a Query; None for anything but exactly what to_dict makes, with a served level."""
        if not isinstance(req, dict) or set(req) != {"v", "node", "level", "json", "drain"} or \
                type(req["v"]) is not int or req["v"] != VERSION:
            return None
        node, level, as_json, drain = req["node"], req["level"], req["json"], req["drain"]
        if not (isinstance(node, str) and 0 < len(node) <= 255 and node.isprintable() and level in LEVELS
                and type(as_json) is bool and type(drain) is bool):
            return None
        return cls(node, level, as_json, drain)


def parse(argv: Sequence[str], env: Mapping[str, str]) -> Optional[Query]:
    """The Query that `slurm-ft check ARGV` is; None when it is not one a user may ask the watcher
    (another level, --local, --job-id, an option this parser does not know)."""
    seen = options(argv, _FLAGS, _VALUED, LEVELS)
    if seen is None:
        return None
    node = str(seen["node"]) or env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    return Query(node, str(seen["level"]), bool(seen.get("json")), bool(seen.get("drain")))


def socket_path(node: str, env: Mapping[str, str]) -> str:
    return (env.get(PATH_ENV) or DEFAULT_PATH).replace("{node}", node)


def unsafe(path: str) -> str:
    """Why what answers at `path` may not be the watcher ("" when it is root's): a socket a user could
    have placed (another user's, or in a directory others may write) could answer anything."""
    parent = os.stat(os.path.dirname(path) or ".")
    if parent.st_uid != 0 or parent.st_mode & stat.S_IWOTH or (parent.st_mode & stat.S_IWGRP and parent.st_gid != 0):
        return "its directory is not root's alone"
    sock = os.lstat(path)
    if not stat.S_ISSOCK(sock.st_mode):
        return "not a socket"
    if sock.st_uid != 0:
        return f"owned by uid {sock.st_uid}, not root"
    return ""


def ask(argv: Sequence[str], env: Mapping[str, str]) -> Tuple[Optional[Answer], str]:
    """(the watcher's answer to `slurm-ft check ARGV`, "") or (None, why it did not answer)."""
    query = parse(argv, env)
    if query is None:
        return None, (f"not a question the watcher answers users (levels {', '.join(LEVELS)}; options --json, "
                      f"--drain, --node, --no-state)")
    path = socket_path(query.node, env)
    try:
        why = unsafe(path)
    except OSError as exc:
        return None, f"no watcher socket at {path} ({exc.strerror or exc}): is `slurm-ft watch` running?"
    if why:
        return None, f"{path} not used: {why}"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_S)
            conn.connect(path)
            try:
                conn.sendall(json.dumps(query.to_dict()).encode() + b"\n")
                conn.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass        # refused before it read the question: the refusal is what there is to read
            data = read_bounded(conn, MAX_ANSWER, time.monotonic() + ANSWER_S)
        reply = json.loads(data)
    except OSError as exc:
        return None, f"the watcher at {path} did not answer: {exc.strerror or exc}"
    except ValueError as exc:
        return None, f"the watcher at {path} answered no valid reply: {exc}"
    if isinstance(reply, dict) and reply.get("v") == VERSION and isinstance(reply.get("refused"), str):
        return None, f"the watcher at {path} refused: {reply['refused'][:200]}"
    if not (isinstance(reply, dict) and reply.get("v") == VERSION and type(reply.get("code")) is int
            and 0 <= reply["code"] < 256 and isinstance(reply.get("out"), str) and isinstance(reply.get("err"), str)):
        return None, f"the watcher at {path} answered no valid reply"
    return Answer(reply["code"], reply["out"], reply["err"]), ""
