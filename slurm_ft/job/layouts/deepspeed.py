"""DeepSpeed: ``latest`` (a tag) naming ``<tag>/`` that holds ``*model_states.pt`` (and optimizer states)."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Mapping, Optional, Tuple

from slurm_ft.job.layouts.megatron import Tracked
from slurm_ft.job.layouts.names import step_of

if TYPE_CHECKING:
    from slurm_ft.job.ckptfs import FS, Entry

NAME = "deepspeed"
TRACKER = "latest"


def evidence(fs: FS, path: str, kids: Mapping[str, Entry]) -> bool:
    return any(n.endswith("model_states.pt") and not e.is_dir for n, e in kids.items())


def parse_tracker(raw: bytes) -> Tuple[Optional[str], str]:
    tag = raw.decode("utf-8", "replace").strip()
    if not tag or "/" in tag or tag in (".", "..") or "\x00" in tag or len(tag) > 255:
        return None, f"tracker is unreadable ({tag[:40]!r})"
    return tag, ""


def tracker(fs: FS, d: str, kids: Mapping[str, Entry]) -> Optional[Tracked]:
    e = kids.get(TRACKER)
    if e is None or e.is_dir:
        return None
    path = os.path.join(d, TRACKER)
    tag, why = parse_tracker(fs.read(path, limit=4096) or b"")
    return Tracked(NAME, path, tag, step_of(tag) if tag else None, why)


def check(fs: FS, path: str, kids: Mapping[str, Entry], step: Optional[int], verify: bool = False
          ) -> Tuple[Optional[int], Optional[str]]:
    models = [e for n, e in kids.items() if n.endswith("model_states.pt") and not e.is_dir]
    if not models:
        return step, "no *model_states.pt file (write not finished)"
    for e in models + [e for n, e in kids.items() if n.endswith("optim_states.pt")]:
        if e.size <= 0:
            return step, f"{e.name} is empty"
    return step, None
