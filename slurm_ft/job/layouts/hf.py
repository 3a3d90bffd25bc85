"""Hugging Face Trainer: ``checkpoint-N/`` with ``trainer_state.json`` (written after the model and the
optimizer) whose ``global_step`` is N, and non-empty weights."""
from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Mapping, Optional, Tuple

if TYPE_CHECKING:
    from slurm_ft.job.ckptfs import FS, Entry

NAME = "hf"
STATE = "trainer_state.json"
MAX_STATE = 64 << 20
_WEIGHTS = re.compile(r"(model|pytorch_model|adapter_model)(-\d+-of-\d+)?\.(safetensors|bin)\Z")


def evidence(fs: FS, path: str, kids: Mapping[str, Entry]) -> bool:
    e = kids.get(STATE)
    return e is not None and not e.is_dir


def check(fs: FS, path: str, kids: Mapping[str, Entry], step: Optional[int], verify: bool = False
          ) -> Tuple[Optional[int], Optional[str]]:
    if STATE not in kids:
        return step, f"no {STATE} (the Trainer writes it after the model and optimizer)"
    try:
        state = json.loads(fs.read(os.path.join(path, STATE), limit=MAX_STATE) or b"")
    except (ValueError, RecursionError, UnicodeError):
        return step, f"{STATE} is unreadable or truncated"
    got = state.get("global_step") if isinstance(state, dict) else None
    if type(got) is not int or got < 0:
        return step, f"{STATE} has no valid global_step"
    if step is not None and got != step:
        return got, f"{STATE} says step {got}, directory says {step}"
    weights = [e for n, e in kids.items() if _WEIGHTS.match(n)]
    if any(e.size <= 0 for e in weights):
        return got, "an empty weights file"
    if not weights and not any(e.is_dir for e in kids.values()):   # DeepSpeed/FSDP keep them in a subdirectory
        return got, "no model weights"
    return got, None
