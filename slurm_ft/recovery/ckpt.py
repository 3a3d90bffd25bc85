"""The checkpoint contract: find the newest COMPLETE checkpoint in a directory, and write one atomically.

Layouts recognised (the first one found in a directory decides, in this order):

``slurm-ft``   our own:  ``DIR/step_000123/`` holding the files plus a ``COMPLETE`` marker, a JSON manifest
               ``{"format": "slurm-ft-ckpt", "version": 1, "step": 123, "files": {name: {"size", "sha256"}}}``
               written LAST, atomically, after every file was fsynced; the directory is staged under a
               hidden name and renamed into place, so ``step_*`` never holds half a write.
``megatron``   ``DIR/latest_checkpointed_iteration.txt`` -> ``DIR/iter_0000123/`` (mp_rank_* model files or
               a torch_dist ``.metadata``).
``deepspeed``  ``DIR/latest`` (a tag) -> ``DIR/<tag>/`` holding ``*model_states.pt``.
``hf``         Hugging Face Trainer: ``DIR/checkpoint-123/`` with ``trainer_state.json`` (written after the model
               and optimizer) whose ``global_step`` is 123, and non-empty weights.
``dcp``        PyTorch Distributed Checkpoint: a directory with ``.metadata`` (written last by DCP); either DIR
               itself or its step subdirectories. Every ``*.distcp`` file named in ``.metadata`` must exist.
``lightning``  ``DIR/last.ckpt`` (or ``*step=N*.ckpt``): non-empty, zip magic and an end-of-central-directory
               record (torch.save's zip format), so a truncated file is refused.

A candidate that fails a check is skipped with the reason and the previous complete one is returned.
The logic reads the disk only through the small ``FS`` seam, so unit tests run over an in-memory tree.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Tuple

MARKER = "COMPLETE"
FORMAT = "slurm-ft-ckpt"
STEP_DIR = re.compile(r"step_(\d+)\Z")
STAGING = re.compile(r"\.step_(\d+)\.partial(?:-.*)?\Z")
MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
MEGATRON_DIR = re.compile(r"iter_(\d+)\Z")
DEEPSPEED_TRACKER = "latest"
DCP_METADATA = ".metadata"
ZIP_MAGIC = b"PK\x03\x04"
ZIP_EOCD = b"PK\x05\x06"
_DISTCP = re.compile(rb"__\d+_\d+\.distcp")
_DIGITS = re.compile(r"(\d+)")


# --- the filesystem seam ------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    name: str
    is_dir: bool
    size: int = 0
    link: Optional[str] = None      # symlink target, as written


class FS:
    """What the scanner needs from a filesystem. LocalFS is the real one."""

    def list(self, path: str) -> Optional[List[Entry]]:      # None: no such directory
        raise NotImplementedError

    def read(self, path: str, limit: int = 1 << 20) -> Optional[bytes]:
        raise NotImplementedError

    def read_tail(self, path: str, n: int) -> Optional[bytes]:
        raise NotImplementedError

    def sha256(self, path: str) -> Optional[str]:
        raise NotImplementedError


class LocalFS(FS):
    def list(self, path: str) -> Optional[List[Entry]]:
        try:
            it = os.scandir(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        out = []
        with it:
            for e in it:
                try:
                    is_dir = e.is_dir()                      # follows symlinks, like a resume would
                    size = 0 if is_dir else e.stat().st_size
                except OSError:                              # dangling link
                    is_dir, size = False, -1
                link = os.readlink(e.path) if e.is_symlink() else None
                out.append(Entry(e.name, is_dir, size, link))
        return out

    def read(self, path: str, limit: int = 1 << 20) -> Optional[bytes]:
        try:
            with open(path, "rb") as fh:
                return fh.read(limit)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def read_tail(self, path: str, n: int) -> Optional[bytes]:
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - n))
                return fh.read(n)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def sha256(self, path: str) -> Optional[str]:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        except (FileNotFoundError, IsADirectoryError):
            return None
        return h.hexdigest()


# --- results ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str
    step: Optional[int] = None


@dataclass(frozen=True)
class Latest:
    """The answer: ``path`` is None when no complete checkpoint exists (``reason`` says why)."""

    directory: str
    path: Optional[str]
    step: Optional[int]
    layout: Optional[str]
    skipped: Tuple[Skipped, ...] = ()
    reason: str = ""
    error: bool = False             # DIR could not be read (permissions, I/O): not the same as "none yet"

    def to_dict(self) -> dict:
        return {
            "directory": self.directory,
            "error": self.error,
            "path": self.path,
            "step": self.step,
            "layout": self.layout,
            "reason": self.reason,
            "skipped": [asdict(s) for s in self.skipped],
        }


@dataclass
class _Cand:
    path: str
    step: Optional[int]
    check: Callable[[], Optional[str]]   # returns the reason it is NOT complete, or None


_join = os.path.join


def _children(fs: FS, path: str) -> Dict[str, Entry]:
    return {e.name: e for e in fs.list(path) or []}


# --- our own layout -----------------------------------------------------------------------------

def check_marker(fs: FS, path: str, expected_step: Optional[int] = None, verify: bool = False) -> Optional[str]:
    """Why the slurm-ft checkpoint directory ``path`` is not complete, or None."""
    entries = fs.list(path)
    if entries is None:
        return "directory missing"
    names = {e.name: e for e in entries}
    if MARKER not in names:
        return f"no {MARKER} marker (write not finished)"
    raw = fs.read(_join(path, MARKER))
    try:
        manifest = json.loads(raw or b"")
        if manifest.get("format") != FORMAT or not isinstance(manifest.get("files"), dict):
            return f"{MARKER} marker is not a slurm-ft manifest"
        step = int(manifest["step"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return f"{MARKER} marker is unreadable or truncated"
    if expected_step is not None and step != expected_step:
        return f"{MARKER} marker says step {step}, directory says {expected_step}"
    for name, meta in sorted(manifest["files"].items()):
        e = names.get(name)
        if e is None:
            return f"file {name} listed in the manifest is missing"
        try:
            want = int(meta["size"])
        except (TypeError, KeyError, ValueError):
            return f"manifest entry for {name} has no size"
        if e.size != want:
            return f"file {name} is {e.size} bytes, manifest says {want} (truncated)"
        if verify and meta.get("sha256") and fs.sha256(_join(path, name)) != meta["sha256"]:
            return f"file {name} does not match its sha256 in the manifest"
    return None


def _marker_candidates(fs: FS, d: str, kids: Dict[str, Entry], verify: bool) -> Tuple[List[_Cand], List[Skipped]]:
    cands, skipped = [], []
    for name, e in kids.items():
        m = STEP_DIR.match(name)
        if m and e.is_dir:
            step, path = int(m.group(1)), _join(d, name)
            cands.append(_Cand(path, step, lambda p=path, s=step: check_marker(fs, p, s, verify)))
        s = STAGING.match(name)
        if s and e.is_dir:
            skipped.append(Skipped(_join(d, name), "staging directory of an unfinished write", int(s.group(1))))
    if MARKER in kids and not kids[MARKER].is_dir:      # DIR itself is one checkpoint
        cands.append(_Cand(d, None, lambda: check_marker(fs, d, None, verify)))
    return cands, skipped


def _marker_step(fs: FS, path: str) -> Optional[int]:
    try:
        return int(json.loads(fs.read(_join(path, MARKER)) or b"")["step"])
    except (ValueError, TypeError, KeyError):
        return None


# --- Megatron -----------------------------------------------------------------------------------

def _check_megatron_iter(fs: FS, path: str) -> Optional[str]:
    kids = fs.list(path)
    if kids is None:
        return "directory missing"
    names = {e.name: e for e in kids}
    if DCP_METADATA in names:                               # torch_dist format
        return _check_dcp(fs, path)
    ranks = [e for e in kids if e.is_dir and e.name.startswith("mp_rank_")]
    if not ranks:
        return "no mp_rank_* directories (write not finished)"
    for r in ranks:
        files = _children(fs, _join(path, r.name))
        models = [e for n, e in files.items() if n.endswith(".pt")]
        if not models:
            return f"{r.name} holds no model file"
        empty = [e.name for e in models if e.size <= 0]
        if empty:
            return f"{r.name}/{empty[0]} is empty"
    return None


def _megatron(fs: FS, d: str, kids: Dict[str, Entry]) -> Tuple[List[_Cand], List[Skipped]]:
    cands, skipped = [], []
    tracked: Optional[int] = None
    raw = fs.read(_join(d, MEGATRON_TRACKER))
    text = (raw or b"").decode("utf-8", "replace").strip()
    if text == "release":
        path = _join(d, "release")
        cands.append(_Cand(path, None, lambda p=path: _check_megatron_iter(fs, p)))
    elif text.isdigit():
        tracked = int(text)
    else:
        skipped.append(Skipped(_join(d, MEGATRON_TRACKER), f"tracker is unreadable ({text[:40]!r})"))
    iters = {int(m.group(1)): name for name, e in kids.items() if e.is_dir and (m := MEGATRON_DIR.match(name))}
    if tracked is not None and tracked not in iters:
        skipped.append(Skipped(_join(d, f"iter_{tracked:07d}"), "tracker points at a missing directory", tracked))
    for step, name in iters.items():
        path = _join(d, name)
        if tracked is not None and step > tracked:
            skipped.append(Skipped(path, f"newer than the tracker (iteration {tracked}): write in progress", step))
            continue
        cands.append(_Cand(path, step, lambda p=path: _check_megatron_iter(fs, p)))
    return cands, skipped


# --- DeepSpeed ----------------------------------------------------------------------------------

def _check_deepspeed_tag(fs: FS, path: str) -> Optional[str]:
    kids = fs.list(path)
    if kids is None:
        return "directory missing"
    models = [e for e in kids if e.name.endswith("model_states.pt")]
    if not models:
        return "no *model_states.pt file (write not finished)"
    for e in models + [e for e in kids if e.name.endswith("optim_states.pt")]:
        if e.size <= 0:
            return f"{e.name} is empty"
    return None


def _step_of(name: str) -> Optional[int]:
    m = re.search(r"step[_=]?(\d+)", name) or _DIGITS.search(name)
    return int(m.group(1)) if m else None


def _deepspeed(fs: FS, d: str, kids: Dict[str, Entry]) -> Tuple[List[_Cand], List[Skipped]]:
    cands, skipped = [], []
    tag = (fs.read(_join(d, DEEPSPEED_TRACKER)) or b"").decode("utf-8", "replace").strip()
    tag_step = _step_of(tag) if tag else None
    if not tag or "/" in tag:
        skipped.append(Skipped(_join(d, DEEPSPEED_TRACKER), f"tracker is unreadable ({tag[:40]!r})"))
    elif tag not in kids or not kids[tag].is_dir:
        skipped.append(Skipped(_join(d, tag), "tracker points at a missing directory", tag_step))
    else:
        path = _join(d, tag)
        cands.append(_Cand(path, tag_step, lambda p=path: _check_deepspeed_tag(fs, p)))
    for name, e in kids.items():
        if not e.is_dir or name == tag or not name.startswith("global_step"):
            continue
        step, path = _step_of(name), _join(d, name)
        if tag_step is not None and step is not None and step > tag_step:
            skipped.append(Skipped(path, f"newer than the tracker ({tag}): write in progress", step))
            continue
        cands.append(_Cand(path, step, lambda p=path: _check_deepspeed_tag(fs, p)))
    return cands, skipped


# --- Hugging Face Trainer ---------------------------------------------------------------------

HF_DIR = re.compile(r"checkpoint-(\d+)\Z")
HF_STATE = "trainer_state.json"
_HF_WEIGHTS = re.compile(r"(model|pytorch_model|adapter_model)(-\d+-of-\d+)?\.(safetensors|bin)\Z")


def _check_hf(fs: FS, path: str, step: int) -> Optional[str]:
    kids = fs.list(path)
    if kids is None:
        return "directory missing"
    names = {e.name: e for e in kids}
    if HF_STATE not in names:
        return f"no {HF_STATE} (the Trainer writes it after the model and optimizer)"
    try:
        state = json.loads(fs.read(_join(path, HF_STATE)) or b"")
        got = int(state["global_step"])
    except (ValueError, TypeError, KeyError):
        return f"{HF_STATE} is unreadable or truncated"
    if got != step:
        return f"{HF_STATE} says step {got}, directory says {step}"
    weights = [e for n, e in names.items() if _HF_WEIGHTS.match(n)]
    if any(e.size <= 0 for e in weights):
        return "an empty weights file"
    if not weights and not any(e.is_dir for e in kids):     # DeepSpeed/FSDP keep them in a subdirectory
        return "no model weights"
    return None


def _hf(fs: FS, d: str, kids: Dict[str, Entry]) -> Tuple[List[_Cand], List[Skipped]]:
    cands = []
    for name, e in kids.items():
        m = HF_DIR.match(name)
        if m and e.is_dir:
            path, step = _join(d, name), int(m.group(1))
            cands.append(_Cand(path, step, lambda p=path, s=step: _check_hf(fs, p, s)))
    return cands, []


# --- PyTorch DCP --------------------------------------------------------------------------------

def _check_dcp(fs: FS, path: str) -> Optional[str]:
    kids = fs.list(path)
    if kids is None:
        return "directory missing"
    names = {e.name: e for e in kids}
    meta = names.get(DCP_METADATA)
    if meta is None or meta.is_dir:
        return f"no {DCP_METADATA} (write not finished)"
    if meta.size <= 0:
        return f"{DCP_METADATA} is empty"
    raw = fs.read(_join(path, DCP_METADATA), limit=64 << 20) or b""
    # .metadata is a pickle; we do not unpickle it, but the storage file names appear in it verbatim.
    for ref in sorted({m.decode() for m in _DISTCP.findall(raw)}):
        e = names.get(ref)
        if e is None:
            return f"{ref} named in {DCP_METADATA} is missing"
        if e.size <= 0:
            return f"{ref} is empty"
    return None


def _dcp(fs: FS, d: str, kids: Dict[str, Entry]) -> Tuple[List[_Cand], List[Skipped]]:
    if DCP_METADATA in kids:
        return [_Cand(d, _step_of(os.path.basename(d.rstrip("/"))), lambda: _check_dcp(fs, d))], []
    cands = []
    for name, e in kids.items():
        step = _step_of(name)
        if e.is_dir and step is not None and not name.startswith("."):
            path = _join(d, name)
            cands.append(_Cand(path, step, lambda p=path: _check_dcp(fs, p)))
    return cands, []


def _has_dcp_child(fs: FS, d: str, kids: Dict[str, Entry]) -> bool:
    if DCP_METADATA in kids:
        return True
    return any(e.is_dir and DCP_METADATA in _children(fs, _join(d, e.name)) for e in kids.values()
               if _step_of(e.name) is not None and not e.name.startswith("."))


# --- Lightning ----------------------------------------------------------------------------------

def _check_zip(fs: FS, path: str, size: int) -> Optional[str]:
    if size <= 0:
        return "file is empty"
    head = fs.read(path, limit=4) or b""
    if head != ZIP_MAGIC:
        return "not a zip file (torch.save writes zip): truncated or foreign"
    tail = fs.read_tail(path, 65557) or b""          # EOCD is within the last 64 KiB + 22 bytes
    if ZIP_EOCD not in tail:
        return "zip end-of-central-directory missing (truncated)"
    return None


def _lightning(fs: FS, d: str, kids: Dict[str, Entry]) -> Tuple[List[_Cand], List[Skipped]]:
    cands = []
    def check(path: str, e: Entry) -> Callable[[], Optional[str]]:
        # a sharded (FSDP/DCP) Lightning checkpoint is a directory named *.ckpt
        return (lambda: _check_dcp(fs, path)) if e.is_dir else (lambda: _check_zip(fs, path, e.size))

    last = kids.get("last.ckpt")
    if last is not None:
        step = _step_of(os.path.basename(last.link)) if last.link else None
        path = _join(d, "last.ckpt")
        # last.ckpt is by definition the newest: rank it above every step-named file.
        cands.append(_Cand(path, step if step is not None else 1 << 62, check(path, last)))
    for name, e in kids.items():
        if name == "last.ckpt" or not name.endswith(".ckpt"):
            continue
        path = _join(d, name)
        cands.append(_Cand(path, _step_of(name), check(path, e)))
    return cands, []


# --- the scan -----------------------------------------------------------------------------------

def detect_layout(fs: FS, d: str, kids: Dict[str, Entry]) -> Optional[str]:
    if any((STEP_DIR.match(n) or STAGING.match(n)) and e.is_dir for n, e in kids.items()) or MARKER in kids:
        return "slurm-ft"
    if MEGATRON_TRACKER in kids or any(MEGATRON_DIR.match(n) and e.is_dir for n, e in kids.items()):
        return "megatron"
    if DEEPSPEED_TRACKER in kids and not kids[DEEPSPEED_TRACKER].is_dir:
        return "deepspeed"
    if any(HF_DIR.match(n) and e.is_dir for n, e in kids.items()):
        return "hf"
    if _has_dcp_child(fs, d, kids):
        return "dcp"
    if any(n.endswith(".ckpt") for n in kids):
        return "lightning"
    return None


def latest(directory: str, fs: Optional[FS] = None, verify: bool = False) -> Latest:
    """The newest complete checkpoint under ``directory``: pure over ``fs``; never raises on bad data.

    A directory that cannot be read at all gives ``error=True`` (a job must not restart from scratch
    because its checkpoint filesystem is down); an unreadable candidate is skipped with the reason.
    """
    fs = fs or LocalFS()
    d = directory.rstrip("/") or "/"
    try:
        return _latest(fs, d, verify)
    except OSError as exc:
        return Latest(d, None, None, None, (), f"cannot read {d}: {exc.strerror or exc}", error=True)


def _latest(fs: FS, d: str, verify: bool) -> Latest:
    entries = fs.list(d)
    if entries is None:
        return Latest(d, None, None, None, (), f"{d} does not exist or is not a directory (no checkpoint yet)")
    kids = {e.name: e for e in entries}
    layout = detect_layout(fs, d, kids)
    if layout is None:
        return Latest(d, None, None, None, (), f"no checkpoint in {d} (no known layout found)")
    if layout == "slurm-ft":
        cands, skipped = _marker_candidates(fs, d, kids, verify)
    else:
        cands, skipped = {"megatron": _megatron, "deepspeed": _deepspeed, "hf": _hf,
                          "dcp": _dcp, "lightning": _lightning}[layout](fs, d, kids)
    skipped = list(skipped)
    # newest first; a candidate without a step (DIR itself, a 'release' dir) counts as step -1
    cands.sort(key=lambda c: (c.step if c.step is not None else -1, c.path), reverse=True)
    for c in cands:
        try:
            why = c.check()
        except OSError as exc:
            why = f"unreadable: {exc.strerror or exc}"
        step = c.step if c.step != 1 << 62 else None
        if why is None:
            if layout == "slurm-ft" and step is None:
                step = _marker_step(fs, c.path)
            skipped.sort(key=lambda s: (s.step if s.step is not None else -1, s.path), reverse=True)
            return Latest(d, c.path, step, layout, tuple(skipped))
        skipped.append(Skipped(c.path, why, step))
    skipped.sort(key=lambda s: (s.step if s.step is not None else -1, s.path), reverse=True)
    return Latest(d, None, None, layout, tuple(skipped), f"no complete {layout} checkpoint in {d}")


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
           meta: Optional[Mapping] = None) -> str:
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


def write_checkpoint(directory: str, step: int, files: Mapping[str, bytes], meta: Optional[Mapping] = None) -> str:
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
