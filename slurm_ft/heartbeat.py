"""Progress reports from inside the user's job: one call in the training loop, `slurm_ft.progress(step)`.

Runs in every rank, so it is the standard library only and costs one small file write at most once a
second per rank. Each rank keeps one file, replaced whole (write + rename, never a torn read):

    $SLURM_FT_CKPT_DIR/.slurm-ft-progress/rank-<R>.json
    {"step": 1200, "t": 1796034508.40, "rank": 3, "host": "gpu017", "node": "gpu017", "job": "4242",
     "restart": 1, "launch": 0, "first_step": 1001, "first_t": 1796034410.12, "busy_s": 0.912}
first_step/first_t: this process's first report (the first step after a start or restart), kept in every
report: a reader that looks only now and then still learns when the run's first step ended (goodput's end of
a recovery), not only the latest step. node: Slurm's name of the rank's node (SLURMD_NODENAME). busy_s (only from `progress(step, busy_s=S)`): the mean seconds this
rank spent computing a step (before it waited for the others) over the steps since its last report; the
hot-spare supervisor compares nodes by it to find one far slower than the rest (a straggler, job/planned.py).

SLURM_FT_CKPT_DIR is exported to the job by slurm-ft's starter; the checkpoint directory is the one place
every rank and the batch host share. A dot directory: checkpoint detection never reads it as a
checkpoint. Outside a slurm-ft job (no SLURM_FT_CKPT_DIR) a call does nothing. A report that cannot be
written is dropped, never raised: progress reporting must not fail a training step.

Readers (the hot-spare supervisor's hang detection, goodput) use `read_all`. The reader may be root
and the directory is the user's: it is opened without following a symlink (a `.slurm-ft-progress`
that is a link to elsewhere is not read, as the checkpoint scanner refuses it), its files are read
relative to it, and a bounded number of entries is looked at, whatever else the user put there.
"""
from __future__ import annotations

import json
import os
import socket
import time
from typing import Any, Dict, Mapping, Optional

DIR_NAME = ".slurm-ft-progress"
MIN_INTERVAL_S = 1.0
MAX_FILE_BYTES = 4096        # a reader takes no more than this of a rank file (the directory is user-writable)
MAX_RANKS = 100_000
Report = Dict[str, Any]       # one rank's last report: step, t, rank, host, job, restart, launch

_last: Dict[str, Optional[float]] = {"t": 0.0, "step": None}    # this process's last write
_first: Dict[str, float] = {}                                     # this process's first report: step, t
_busy: Dict[str, float] = {"s": 0.0, "n": 0}                      # compute seconds and steps since the last write


def progress_dir(ckpt_dir: str) -> str:
    return os.path.join(ckpt_dir, DIR_NAME)


def _rank(env: Mapping[str, str]) -> int:
    """The rank's number in the whole job: a replica group's ranks count from 0 in their own step, and the
    supervisor exports where the group's ranks start (SLURM_FT_RANK_OFFSET), so groups never share a file."""
    offset = env.get("SLURM_FT_RANK_OFFSET", "")
    base = int(offset) if offset.isdigit() else 0
    for key in ("RANK", "SLURM_PROCID"):
        value = env.get(key, "")
        if value.isdigit():
            return base + int(value)
    return base


def progress(step: int, *, force: bool = False, busy_s: Optional[float] = None) -> None:
    """Report that this rank finished `step` (`busy_s`: seconds it computed, before waiting for the other
    ranks). Throttled to one write a second unless `force`."""
    env = os.environ
    ckpt_dir = env.get("SLURM_FT_CKPT_DIR", "")
    now = time.time()
    if ckpt_dir and busy_s is not None and busy_s >= 0:
        _busy["s"] += float(busy_s)
        _busy["n"] += 1
    if not ckpt_dir or (not force and now - (_last["t"] or 0.0) < MIN_INTERVAL_S and _last["step"] is not None):
        return
    if not _first:
        _first.update(step=int(step), t=now)
    rank = _rank(env)
    record: Dict[str, Any] = {
              "step": int(step), "t": now, "rank": rank, "host": socket.gethostname(),
              "node": env.get("SLURMD_NODENAME", "") or socket.gethostname(),
              "job": env.get("SLURM_JOB_ID", ""), "restart": int(env.get("SLURM_RESTART_COUNT", "0") or 0),
              "launch": int(env.get("SLURM_FT_LAUNCH", "0") or 0),
              "first_step": int(_first["step"]), "first_t": _first["t"]}
    if _busy["n"]:
        record["busy_s"] = round(_busy["s"] / _busy["n"], 6)
    d = progress_dir(ckpt_dir)
    path = os.path.join(d, f"rank-{rank}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(d, exist_ok=True)
        with open(tmp, "w") as fh:
            fh.write(json.dumps(record))
        os.replace(tmp, path)
    except (OSError, ValueError):
        return
    _last["t"], _last["step"] = now, step
    _busy.update(s=0.0, n=0)


_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def max_entries(max_ranks: int) -> int:
    """Directory entries `read_all` looks at for `max_ranks` reports: each rank's file, a temporary file
    of a write in flight for each, and a few more."""
    return 2 * max_ranks + 64


def read_all(ckpt_dir: str, max_ranks: int = MAX_RANKS) -> Dict[int, Report]:
    """rank -> its last report. Regular files only, each read bounded, at most max_entries(max_ranks)
    entries looked at; the directory itself is not followed when it is a symlink; a file that is not a
    well-formed report is skipped (the directory is the user's)."""
    out: Dict[int, Report] = {}
    try:
        dfd = os.open(progress_dir(ckpt_dir), _OPEN_DIR)
    except OSError:                     # none yet, not a directory, or a symlink (ELOOP): nothing to read
        return out
    try:
        with os.scandir(dfd) as entries:
            for seen, e in enumerate(entries, 1):
                if e.name.startswith("rank-") and e.name.endswith(".json"):
                    rec = _read(e, dfd)
                    if rec is not None:
                        out[rec["rank"]] = rec
                if len(out) >= max_ranks or seen >= max_entries(max_ranks):
                    break
    except OSError:
        pass                            # the directory went away mid-listing: what was read stands
    finally:
        os.close(dfd)
    return out


def _read(entry: "os.DirEntry[str]", dfd: int) -> Optional[Report]:
    try:
        if not entry.is_file(follow_symlinks=False):
            return None
        fd = os.open(entry.name, _OPEN_FILE, dir_fd=dfd)
        try:
            data = os.read(fd, MAX_FILE_BYTES + 1)
        finally:
            os.close(fd)
        if len(data) > MAX_FILE_BYTES:
            return None
        rec = json.loads(data)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(rec, dict):
        return None
    step, t, rank = rec.get("step"), rec.get("t"), rec.get("rank")
    if not (type(step) is int and type(rank) is int and isinstance(t, (int, float)) and t == t
            and abs(t) < 1e11 and 0 <= rank < MAX_RANKS):
        return None
    busy = rec.get("busy_s")
    if busy is not None and not (isinstance(busy, (int, float)) and not isinstance(busy, bool) and 0 <= busy < 1e6):
        del rec["busy_s"]           # not a figure this module wrote: the report stands without it
    return rec
