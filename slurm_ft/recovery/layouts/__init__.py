"""Checkpoint layouts, one module each, told apart by the evidence inside a candidate, never by its name.

Each module answers three questions about one candidate (a directory, or a file for ``torchzip``):
``evidence(fs, path, kids)``: does it carry my layout's own traces (a COMPLETE manifest, a DCP
``.metadata``, ``mp_rank_*`` shards...)?  ``check(fs, path, kids, step)``: is it complete, and at which
step (from the evidence where it says, else the name's)?  It returns ``(step, None)`` when complete, or
``(step, reason)``. Directory-wide trackers (Megatron's, DeepSpeed's) are read by ``tracker(fs, d, kids)``.
Order matters only where one candidate carries two layouts' evidence (a Megatron torch_dist iteration
holds a DCP ``.metadata``): the first in ``DIR_LAYOUTS`` that claims it judges it.
"""
from __future__ import annotations

import re
from typing import Optional

from slurm_ft.recovery.layouts import dcp, deepspeed, hf, marker, megatron, torchzip

DIR_LAYOUTS = (marker, hf, megatron, deepspeed, dcp)
FILE_LAYOUTS = (torchzip,)
TRACKERS = (megatron, deepspeed)

_STEPISH = re.compile(r"(?:step|iter|global_step|checkpoint|ckpt|epoch)[-_=]?(\d{1,18})|\A(\d{1,18})\Z")


def step_of(name: str) -> Optional[int]:
    """The step a checkpoint's name carries (step_000123, iter_0000123, checkpoint-123, epoch=1-step=300)."""
    m = re.search(r"step[_=-]?(\d{1,18})", name) or re.search(r"(\d{1,18})", name)
    return int(m.group(1)) if m else None


def looks_like_checkpoint(name: str) -> bool:
    """A directory named like a checkpoint (step_7, iter_0000007, global_step7, checkpoint-7, 7): without
    any layout's evidence inside, it is an unfinished (or foreign) write, not something to ignore."""
    return bool(_STEPISH.search(name))
