"""The fault-tolerance tag a job carries in its own Slurm comment.

`slurm-ft sbatch` writes it with `--comment`; the controller reads it back from `scontrol show job`.
Keeping it in the job means no registration and nothing lost when the controller restarts.

Format (one line, ASCII, no spaces inside values)::

    slurm-ft:v1 ckpt=/data/my%20run min_nodes=60 max_restarts=5
    slurm-ft:v1 ckpt=/data/run8 max_restarts=5 hot_spares=2 train_nodes=64

`hot_spares` K > 0: the job holds train_nodes + K nodes and its supervisor (the batch step) relaunches
the training step on healthy nodes of its own allocation; the controller leaves a fault to it while it
has enough healthy nodes (see docs/jobs.md, "Hot spares").

Values are percent-encoded, so a checkpoint path with spaces, '=' or newlines survives. Decoding is
strict: the whole comment must be a tag, so a user's unrelated comment ("slurm-ft rocks") is not one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional
from urllib.parse import quote, unquote

PREFIX = "slurm-ft:v"
VERSION = 1
DEFAULT_MAX_RESTARTS = 5

_HEAD = re.compile(r"slurm-ft:v([1-9][0-9]{0,3})\Z")
_FIELD = re.compile(r"([a-z_]+)=([A-Za-z0-9%._~/+:@,\-]*)\Z")
_INT = re.compile(r"(0|[1-9][0-9]{0,8})\Z")
_KEYS = ("ckpt", "min_nodes", "max_restarts", "hot_spares", "train_nodes")


@dataclass(frozen=True)
class FtSpec:
    """What a fault-tolerant job asked for."""

    ckpt_dir: str = ""                      # "" = the job keeps no checkpoints slurm-ft can see
    min_nodes: Optional[int] = None         # None = not elastic: always restart at full size
    max_restarts: int = DEFAULT_MAX_RESTARTS
    version: int = VERSION
    hot_spares: int = 0                     # K idle nodes held in the allocation (0 = none)
    train_nodes: Optional[int] = None       # N, the training step's size, when hot_spares > 0


def encode(spec: FtSpec) -> str:
    """The comment string for `sbatch --comment`."""
    if spec.min_nodes is not None and spec.min_nodes < 1:
        raise ValueError("min_nodes must be >= 1")
    if spec.max_restarts < 0:
        raise ValueError("max_restarts must be >= 0")
    parts = [f"{PREFIX}{VERSION}"]
    if spec.ckpt_dir:
        parts.append("ckpt=" + quote(spec.ckpt_dir, safe="/"))
    if spec.min_nodes is not None:
        parts.append(f"min_nodes={spec.min_nodes}")
    parts.append(f"max_restarts={spec.max_restarts}")
    if spec.hot_spares:
        if spec.hot_spares < 0 or not spec.train_nodes or spec.train_nodes < 1:
            raise ValueError("hot_spares needs train_nodes >= 1")
        parts += [f"hot_spares={spec.hot_spares}", f"train_nodes={spec.train_nodes}"]
    return " ".join(parts)


def decode(comment: str) -> Optional[FtSpec]:
    """The FtSpec in a job's comment, or None if the comment is not exactly a tag we understand."""
    if not comment:
        return None
    words = comment.strip().split(" ")
    head = _HEAD.match(words[0])
    if not head or int(head.group(1)) != VERSION:
        return None
    fields: dict = {}
    for word in words[1:]:
        m = _FIELD.match(word)
        if not m or m.group(1) not in _KEYS or m.group(1) in fields:
            return None
        fields[m.group(1)] = m.group(2)
    try:
        ckpt = unquote(fields.get("ckpt", ""), errors="strict")
    except UnicodeDecodeError:
        return None
    min_nodes = fields.get("min_nodes")
    max_restarts = fields.get("max_restarts", str(DEFAULT_MAX_RESTARTS))
    if min_nodes is not None and (not _INT.match(min_nodes) or int(min_nodes) < 1):
        return None
    if not _INT.match(max_restarts):
        return None
    hot, train = fields.get("hot_spares"), fields.get("train_nodes")
    if (hot is None) != (train is None):
        return None
    if hot is not None and (not _INT.match(hot) or not _INT.match(train) or int(hot) < 1 or int(train) < 1):
        return None
    return FtSpec(
        ckpt_dir=ckpt,
        min_nodes=int(min_nodes) if min_nodes is not None else None,
        max_restarts=int(max_restarts),
        version=VERSION,
        hot_spares=int(hot) if hot is not None else 0,
        train_nodes=int(train) if train is not None else None,
    )


def is_tagged(comment: str) -> bool:
    return decode(comment) is not None
