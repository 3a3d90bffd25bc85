"""A checkpoint asked for now: the hot-spare supervisor writes the request, the ranks read it with
`slurm_ft.checkpoint_requested()`.

Before a planned swap (a node of the step is degraded: job/planned.py) the supervisor writes

    $SLURM_FT_CKPT_DIR/.slurm-ft-control/checkpoint-request.json
    {"job": "4242", "restart": 0, "launch": 1, "id": 1, "t": 1796034508.4, "why": "gpu017: ECC_SBE_RATE ..."}

and `checkpoint_requested()` is True in every rank of that launch of that job (SLURM_JOB_ID,
SLURM_RESTART_COUNT, SLURM_FT_LAUNCH) until the next launch. The contract (docs/jobs.md, "Planned swaps"):
save one complete checkpoint at the end of the current step, all ranks at the same step (agree first:
rank 0 asks and broadcasts, or all-reduce the flag), then exit 0. The supervisor relaunches the step without
the degraded node from that checkpoint: no step is done twice. A trainer that trains on after it is stopped
once the supervisor sees the checkpoint (the steps after it are redone); one that ignores the request is
swapped at its next periodic checkpoint, or after `lifecycle.planned_wait_s` from its latest one.

Runs in every rank: the standard library only, one stat() at most every MIN_INTERVAL_S (the file is read
again only when it changed). The directory is the job's own: a request only ever steers that job.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, Mapping, Optional, Tuple

DIR_NAME = ".slurm-ft-control"
FILE_NAME = "checkpoint-request.json"
MIN_INTERVAL_S = 1.0
MAX_BYTES = 4096

_seen: Dict[str, Any] = {"t": 0.0, "key": None, "answer": False}


def path(ckpt_dir: str) -> str:
    return os.path.join(ckpt_dir, DIR_NAME, FILE_NAME)


def request(ckpt_dir: str, job: str, restart: int, launch: int, why: str, rid: int, now: Optional[float] = None
            ) -> Dict[str, Any]:
    """Ask this launch for a checkpoint now (write + rename: a rank never reads half of it)."""
    rec = {"job": str(job), "restart": int(restart), "launch": int(launch), "id": int(rid),
           "t": time.time() if now is None else now, "why": why[:300]}
    p = path(ckpt_dir)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    tmp = f"{p}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        fh.write(json.dumps(rec))
    os.replace(tmp, p)
    return rec


def clear(ckpt_dir: str) -> None:
    try:
        os.unlink(path(ckpt_dir))
    except OSError:
        pass


def read(ckpt_dir: str) -> Optional[Dict[str, Any]]:
    """The request in the directory, or None (none, unreadable, or not one we wrote)."""
    try:
        fd = os.open(path(ckpt_dir), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        try:
            data = os.read(fd, MAX_BYTES + 1)
        finally:
            os.close(fd)
        rec = json.loads(data) if len(data) <= MAX_BYTES else None
    except (OSError, ValueError, RecursionError):
        return None
    if not (isinstance(rec, dict) and type(rec.get("restart")) is int and type(rec.get("launch")) is int
            and isinstance(rec.get("job"), str)):
        return None
    return rec


def for_me(rec: Optional[Mapping[str, Any]], env: Mapping[str, str]) -> bool:
    """A request names this rank's launch of this job."""
    if not rec:
        return False
    return (rec.get("job") == env.get("SLURM_JOB_ID", "")
            and rec.get("restart") == _int(env.get("SLURM_RESTART_COUNT")) and rec.get("launch") == _int(env.get("SLURM_FT_LAUNCH")))


def requested(env: Optional[Mapping[str, str]] = None, now: Optional[float] = None) -> bool:
    """Is a checkpoint asked for, for this launch? Outside a slurm-ft job: False."""
    env = os.environ if env is None else env
    ckpt_dir = env.get("SLURM_FT_CKPT_DIR", "")
    if not ckpt_dir:
        return False
    now = time.monotonic() if now is None else now
    if now - _seen["t"] < MIN_INTERVAL_S and _seen["t"]:
        return bool(_seen["answer"])
    _seen["t"] = now
    try:
        st = os.stat(path(ckpt_dir))
        key: Optional[Tuple[int, int, int]] = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        key = None
    if key != _seen["key"]:
        _seen["key"] = key
        _seen["answer"] = key is not None and for_me(read(ckpt_dir), env)
    return bool(_seen["answer"])


def _int(text: Optional[str]) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return -1
