"""The checkpoint contract: find the newest COMPLETE checkpoint in a directory, and write one atomically.

The scan judges every candidate in DIR (each child directory with a checkpoint-like name or any layout's
evidence, each ``*.ckpt``/``*.pt``/``*.pth`` file, and DIR itself) by the evidence inside it, never by its
name: ``step_7/`` holding a DCP ``.metadata`` is a DCP checkpoint, not an unfinished slurm-ft one. The
layouts, one module each, live in ``slurm_ft.job.layouts``: slurm-ft's own (``COMPLETE`` manifest),
PyTorch DCP (``.metadata`` naming its ``.distcp`` shards), Hugging Face Trainer (``trainer_state.json``),
Megatron (``mp_rank_*``, tracker ``latest_checkpointed_iteration.txt``), DeepSpeed (``*model_states.pt``,
tracker ``latest``), torch.save zip files (Lightning ``*.ckpt``).

Each candidate gets a verdict: complete, incomplete (a write not finished, a tracker newer than it) or
unreadable (odd content, a FIFO, a symlink out of DIR). ``latest`` is the newest complete one. When DIR
holds candidates but none is complete, the answer is ``refuse``: a job must not start from scratch over
checkpoints we merely failed to read (it would overwrite them). Every read is bounded (see ckptfs).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.job import layouts
from slurm_ft.job.ckptfs import DEFAULT_DEADLINE_S, FS, Entry, LocalFS, NotRegular, ScanTimeout  # noqa: F401
from slurm_ft.job.layouts import dcp as _dcp, marker as _marker, megatron as _megatron

MARKER = _marker.MARKER
FORMAT = _marker.FORMAT
STEP_DIR = re.compile(r"step_(\d+)\Z")
STAGING = re.compile(r"\.step_(\d+)\.partial(?:-.*)?\Z")
# What slurm-ft itself keeps beside the checkpoints (trainer log, starts log): never candidates.
OWN_FILES = frozenset({"trainer-log.jsonl", "slurm-ft-starts.jsonl"})
# Parsers of foreign bytes fail in these ways on odd content: such a candidate is unreadable, not fatal.
_BAD_DATA = (ValueError, OverflowError, RecursionError, UnicodeError, TypeError, KeyError, AttributeError,
             IndexError, MemoryError)


# --- results ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str
    step: Optional[int] = None
    verdict: str = "incomplete"           # incomplete | unreadable | ignored (our own staging)
    layout: Optional[str] = None


@dataclass(frozen=True)
class Latest:
    """The answer: ``path`` is None when no complete checkpoint exists (``reason`` says why).

    ``refuse``: DIR holds checkpoint data none of which is complete: do NOT start from scratch.
    ``error``: DIR (or the scan) could not be read at all: do not start from scratch either."""

    directory: str
    path: Optional[str]
    step: Optional[int]
    layout: Optional[str]
    skipped: Tuple[Skipped, ...] = ()
    reason: str = ""
    error: bool = False
    refuse: bool = False

    @property
    def must_not_start(self) -> bool:
        return self.path is None and (self.error or self.refuse)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "directory": self.directory,
            "error": self.error,
            "refuse": self.refuse,
            "path": self.path,
            "step": self.step,
            "layout": self.layout,
            "reason": self.reason,
            "skipped": [asdict(s) for s in self.skipped],
        }


@dataclass(frozen=True)
class _Verdict:
    path: str
    step: Optional[int]
    layout: Optional[str]
    reason: Optional[str]                # None: complete
    verdict: str = "incomplete"


_join = os.path.join


def check_marker(fs: FS, path: str, expected_step: Optional[int] = None, verify: bool = False) -> Optional[str]:
    """Why the slurm-ft checkpoint directory ``path`` is not complete, or None."""
    entries = fs.list(path)
    if entries is None:
        return "directory missing"
    try:
        return _marker.check(fs, path, {e.name: e for e in entries}, expected_step, verify)[1]
    except _BAD_DATA as exc:
        return f"unreadable: {type(exc).__name__}"


# --- judging one candidate ----------------------------------------------------------------------

def _judge_dir(fs: FS, path: str, name_step: Optional[int], verify: bool, named_like: bool) -> Optional[_Verdict]:
    kids_list = fs.list(path)
    if kids_list is None:
        return _Verdict(path, name_step, None, "not a directory we may read (a symlink below DIR?)", "unreadable")
    kids = {e.name: e for e in kids_list}
    for lay in layouts.DIR_LAYOUTS:
        if lay.evidence(fs, path, kids):
            step, why = lay.check(fs, path, kids, name_step, verify)
            return _Verdict(path, step, lay.NAME, why, "incomplete")
    if named_like and not kids:     # a save killed before its first byte: nothing there to lose
        return _Verdict(path, name_step, None, "empty directory (a write that never began)", "ignored")
    if named_like:
        return _Verdict(path, name_step, None, "holds files, but no layout's evidence of a finished write (none of "
                        "COMPLETE, .metadata, trainer_state.json, mp_rank_*/, *model_states.pt): write not "
                        "finished, or a format slurm-ft does not know", "incomplete")
    return None


def _judge(fs: FS, d: str, name: str, e: Entry, kids: Dict[str, Entry], verify: bool) -> Optional[_Verdict]:
    path = _join(d, name)
    step = layouts.step_of(name)
    if e.link is not None:
        target = kids.get(e.link) if e.link and "/" not in e.link and e.link not in (".", "..") else None
        if target is None or target.link is not None:
            if e.is_dir or layouts.looks_like_checkpoint(name) or layouts.file_layout(name):
                return _Verdict(path, step, None, f"symlink to {e.link!r}: not followed out of the directory",
                                "unreadable")
            return None
        # Lightning's last.ckpt -> epoch=3-step=300.ckpt: judged as its target, named as itself
        v = _judge(fs, d, e.link, target, kids, verify)
        return None if v is None else _Verdict(path, v.step, v.layout, v.reason, v.verdict)
    single = layouts.file_layout(name)
    if e.is_dir:
        return _judge_dir(fs, path, step, verify, layouts.looks_like_checkpoint(name) or single is not None)
    if single is not None:
        got, why = single.check_file(fs, path, e.size, step)
        return _Verdict(path, got, single.NAME, why, "incomplete")
    return None


def _safe(fn: Callable[[], Optional[_Verdict]], path: str, step: Optional[int]) -> Optional[_Verdict]:
    try:
        return fn()
    except ScanTimeout:
        raise
    except NotRegular as exc:
        return _Verdict(path, step, None, f"unreadable: {exc.strerror}", "unreadable")
    except OSError as exc:
        return _Verdict(path, step, None, f"unreadable: {exc.strerror or exc}", "unreadable")
    except _BAD_DATA as exc:
        return _Verdict(path, step, None, f"unreadable: odd content ({type(exc).__name__})", "unreadable")


# --- the scan -----------------------------------------------------------------------------------

def latest(directory: str, fs: Optional[FS] = None, verify: bool = False,
           deadline_s: float = DEFAULT_DEADLINE_S, exclude: Iterable[int] = ()) -> Latest:
    """The newest complete checkpoint under ``directory``: pure over ``fs``; never raises on bad data.

    A directory that cannot be read at all, or not within ``deadline_s``, gives ``error=True``; one that
    holds checkpoint data none of which is complete gives ``refuse=True``. Either way: not from scratch.
    ``exclude``: steps of complete checkpoints passed over (restart loops, ckptfallback.py).
    """
    d = directory.rstrip("/") or "/"
    fs = fs or LocalFS(deadline_s, root=d)
    try:
        return _latest(fs, d, verify, frozenset(exclude))
    except ScanTimeout:
        return Latest(d, None, None, None, (), f"scanning {d} took longer than {deadline_s:g} s", error=True)
    except OSError as exc:
        return Latest(d, None, None, None, (), f"cannot read {d}: {exc.strerror or exc}", error=True)


def _order(v: Skipped) -> Tuple[int, str]:
    return (v.step if v.step is not None else -1, v.path)


def _latest(fs: FS, d: str, verify: bool, exclude: FrozenSet[int] = frozenset()) -> Latest:
    entries = fs.list(d)
    if entries is None:
        return Latest(d, None, None, None, (), f"{d} does not exist or is not a directory (no checkpoint yet)")
    kids = {e.name: e for e in entries}
    verdicts: List[_Verdict] = []
    ignored: List[Skipped] = []
    trackers: List[_megatron.Tracked] = []
    for t in layouts.TRACKERS:
        tr = _safe_tracker(t, fs, d, kids)
        if tr is not None:
            trackers.append(tr)
    own = _safe(lambda: _judge_dir(fs, d, None, verify, False), d, None)   # DIR itself is one checkpoint
    if own is not None and own.layout is not None:
        if own.layout == _marker.NAME or own.reason is None or own.layout == _dcp.NAME:
            verdicts.append(own)
    for name, e in sorted(kids.items()):
        if name in OWN_FILES or any(name == os.path.basename(t.file) for t in trackers):
            continue
        if name.startswith("."):
            s = STAGING.match(name)
            if s and e.is_dir:
                ignored.append(Skipped(_join(d, name), "staging directory of an unfinished write",
                                       int(s.group(1)), "ignored", _marker.NAME))
            continue
        v = _safe(functools.partial(_judge, fs, d, name, e, kids, verify), _join(d, name), layouts.step_of(name))
        if v is not None:
            verdicts.append(v)
    verdicts, tracker_skips = _apply_trackers(d, verdicts, trackers)
    skipped = list(tracker_skips) + ignored
    # newest first; last.ckpt without a step in its target's name is the newest by definition
    verdicts.sort(key=lambda v: (v.step if v.step is not None else (1 << 62 if v.path.endswith("/last.ckpt") else -1),
                                 v.path), reverse=True)
    found = next((v for v in verdicts if v.reason is None and v.step not in exclude), None)
    for v in verdicts:
        if v is found:
            break
        if v.reason is None:
            skipped.append(Skipped(v.path, "passed over: the job failed on it repeatedly", v.step, "passed_over", v.layout))
        else:
            skipped.append(Skipped(v.path, v.reason, v.step, v.verdict, v.layout))
    skipped.sort(key=_order, reverse=True)
    if found is not None:
        return Latest(d, found.path, found.step, found.layout, tuple(skipped))
    if not skipped or all(s.verdict == "ignored" for s in skipped):
        return Latest(d, None, None, None, tuple(skipped), f"no checkpoint in {d} yet")
    bad = next(s for s in skipped if s.verdict != "ignored")
    return Latest(d, None, None, bad.layout, tuple(skipped),
                  f"no complete checkpoint in {d}, but checkpoint data: not starting from scratch over it "
                  f"(newest: {bad.path}: {bad.reason})", refuse=True)


def _safe_tracker(t: layouts.TrackerLayout, fs: FS, d: str, kids: Dict[str, Entry]) -> Optional[_megatron.Tracked]:
    try:
        return t.tracker(fs, d, kids)
    except ScanTimeout:
        raise
    except (OSError,) + _BAD_DATA as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        return _megatron.Tracked(t.NAME, _join(d, t.TRACKER), None, None, f"tracker is unreadable ({why})")


def _apply_trackers(d: str, verdicts: List[_Verdict], trackers: Sequence[_megatron.Tracked]
                    ) -> Tuple[List[_Verdict], List[Skipped]]:
    """A tracker names the checkpoint its framework finished last: a candidate newer than that (whatever
    it holds: a Megatron torch_dist iteration is a DCP directory) is a write in progress; a tracker that
    cannot be read, or names nothing there, is evidence too."""
    skips: List[Skipped] = []
    for tr in trackers:
        if tr.reason:
            skips.append(Skipped(tr.file, tr.reason, None, "unreadable", tr.layout))
            continue
        assert tr.target is not None        # a readable tracker names its target (parse_tracker)
        target = _join(d, tr.target)
        if not any(v.path == target for v in verdicts):
            skips.append(Skipped(target, "tracker points at a missing directory", tr.step, "incomplete", tr.layout))
        if tr.step is None:
            continue
        out = []
        for v in verdicts:
            if v.step is not None and v.step > tr.step and v.reason is None:
                v = _Verdict(v.path, v.step, v.layout, f"newer than the tracker ({tr.target}): write in progress",
                             "incomplete")
            out.append(v)
        verdicts = out
    return verdicts, skips


# --- writing our own layout ---------------------------------------------------------------------

def step_name(step: int) -> str:
    return f"step_{step:06d}"


def staging_dir(directory: str, step: int, run_id: str) -> str:
    """Where the files of ``step`` are written before the commit; hidden, never mistaken for a checkpoint."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
    return os.path.join(directory, f".{step_name(step)}.partial-{safe}")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_synced(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def write_shard(directory: str, step: int, run_id: str, name: str, data: bytes) -> str:
    """One writer's part of a checkpoint (a rank's shard), into the staging directory."""
    if "/" in name or name in (MARKER, "", ".", ".."):
        raise ValueError(f"bad checkpoint file name {name!r}")
    stage = staging_dir(directory, step, run_id)
    os.makedirs(stage, exist_ok=True)
    path = os.path.join(stage, name)
    tmp = path + ".tmp"
    write_file_synced(tmp, data)
    os.replace(tmp, path)
    return path


def commit(directory: str, step: int, run_id: str, expect: Optional[Iterable[str]] = None,
           meta: Optional[Mapping[str, Any]] = None) -> str:
    """Seal a staged checkpoint: manifest of every file, marker written last, rename into place."""
    stage = staging_dir(directory, step, run_id)
    names = sorted(n for n in os.listdir(stage) if n != MARKER and not n.endswith(".tmp"))
    missing = sorted(set(expect or ()) - set(names))
    if missing:
        raise FileNotFoundError(f"checkpoint step {step}: missing {', '.join(missing[:5])}")
    files = {}
    for n in names:
        p = os.path.join(stage, n)
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        files[n] = {"size": os.path.getsize(p), "sha256": h.hexdigest()}
    _fsync_dir(stage)
    manifest = {"format": FORMAT, "version": 1, "step": step, "time": time.time(), "files": files}
    if meta:
        manifest["meta"] = dict(meta)
    write_file_synced(os.path.join(stage, MARKER + ".tmp"), json.dumps(manifest, sort_keys=True).encode())
    os.replace(os.path.join(stage, MARKER + ".tmp"), os.path.join(stage, MARKER))
    _fsync_dir(stage)
    final = os.path.join(directory, step_name(step))
    if os.path.exists(final):                     # an older write of the same step: set it aside first
        trash = os.path.join(directory, f".{step_name(step)}.old-{os.getpid()}-{time.monotonic_ns()}")
        os.replace(final, trash)
        os.replace(stage, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(stage, final)
    _fsync_dir(directory)
    return final


def write_checkpoint(directory: str, step: int, files: Mapping[str, bytes], meta: Optional[Mapping[str, Any]] = None
                     ) -> str:
    """Write a whole checkpoint from one process: stage, fsync, marker last, rename. Returns its path."""
    os.makedirs(directory, exist_ok=True)
    run_id = f"{os.getpid()}-{time.monotonic_ns()}"
    for name, data in files.items():
        write_shard(directory, step, run_id, name, data)
    return commit(directory, step, run_id, expect=files.keys(), meta=meta)


def prune(directory: str, keep: int) -> List[str]:
    """Remove all but the ``keep`` newest complete slurm-ft checkpoints (never the newest complete one)."""
    if keep < 1:
        raise ValueError("keep must be >= 1")
    fs = LocalFS()
    steps = sorted(((int(m.group(1)), e.name) for e in fs.list(directory) or []
                    if e.is_dir and (m := STEP_DIR.match(e.name))), reverse=True)
    complete = [n for s, n in steps if check_marker(fs, os.path.join(directory, n), s) is None]
    removed = []
    for name in complete[keep:]:
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
        removed.append(os.path.join(directory, name))
    return removed
