"""Megatron-LM: ``latest_checkpointed_iteration.txt`` (an iteration number, or ``release``) and
``iter_NNNNNNN/`` directories holding ``mp_rank_*/*.pt`` (or a torch_dist ``.metadata``: judged as DCP)."""
from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Mapping, NamedTuple, Optional, Tuple

if TYPE_CHECKING:
    from slurm_ft.job.ckptfs import FS, Entry

NAME = "megatron"
TRACKER = "latest_checkpointed_iteration.txt"
_ITER = re.compile(r"[0-9]{1,18}\Z")                     # ASCII digits only: '²'.isdigit() is True


class Tracked(NamedTuple):
    layout: str
    file: str
    target: Optional[str]     # the candidate's name it points at
    step: Optional[int]
    reason: str               # why it cannot be read ("" when it can)


def evidence(fs: FS, path: str, kids: Mapping[str, Entry]) -> bool:
    return any(e.is_dir and n.startswith("mp_rank_") for n, e in kids.items())


def parse_tracker(raw: bytes) -> Tuple[Optional[str], Optional[int], str]:
    """(target dir name, step, "") or (None, None, why)."""
    text = raw.decode("ascii", "replace").strip()
    if text == "release":
        return "release", None, ""
    if _ITER.match(text):
        step = int(text)
        return f"iter_{step:07d}", step, ""
    return None, None, f"tracker is unreadable ({text[:40]!r})"


def tracker(fs: FS, d: str, kids: Mapping[str, Entry]) -> Optional[Tracked]:
    e = kids.get(TRACKER)
    if e is None or e.is_dir:
        return None
    path = os.path.join(d, TRACKER)
    target, step, why = parse_tracker(fs.read(path, limit=4096) or b"")
    return Tracked(NAME, path, target, step, why)


def check(fs: FS, path: str, kids: Mapping[str, Entry], step: Optional[int], verify: bool = False
          ) -> Tuple[Optional[int], Optional[str]]:
    ranks = [n for n, e in kids.items() if e.is_dir and n.startswith("mp_rank_")]
    if not ranks:
        return step, "no mp_rank_* directories (write not finished)"
    for r in sorted(ranks):
        files = fs.list(os.path.join(path, r)) or []
        models = [e for e in files if e.name.endswith(".pt") and not e.is_dir]
        if not models:
            return step, f"{r} holds no model file"
        empty = [e.name for e in models if e.size <= 0]
        if empty:
            return step, f"{r}/{empty[0]} is empty"
    return step, None
