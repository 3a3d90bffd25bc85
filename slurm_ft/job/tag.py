"""The fault-tolerance tag a job carries: the one grammar for the wrapper, the job_submit policy and the controller.

Where it lives depends on the site (config `controller.trust`, docs/plugin.md): in `AdminComment`,
written by the job_submit policy (etc/job_submit.lua) from the SPANK plugin's `--ft-*` options, which a
user cannot edit; or, at sites without the plugins, in the job's own `Comment`, written by `slurm-ft
sbatch`. The controller reads it back from `scontrol show job`. Keeping it in the job means no
registration and nothing lost when the controller restarts.

Format (one line, ASCII, no spaces inside values; keys in this order, absent ones left out)::

    slurm-ft:v1 ckpt=/data/my%20run min_nodes=60 hang_timeout=600 max_restarts=5
    slurm-ft:v1 ckpt=/data/run8 hot_spares=2 train_nodes=64 max_restarts=5
    slurm-ft:v1 ckpt=/data/run9 hot_spares=1 train_nodes=8 replica_groups=2 max_restarts=5

`hot_spares` K > 0: the job holds train_nodes + K nodes and its supervisor (the batch step) relaunches
the training step on healthy nodes of its own allocation; the controller leaves a fault to it while it
has enough healthy nodes (see docs/jobs.md, "Hot spares"). Only `slurm-ft sbatch --hot-spares` starts
that supervisor: the job_submit policy refuses `--ft-hot-spares` above 0.
`replica_groups` R >= 2: the training step is R torchft replica groups of train_nodes / R nodes each (R
divides train_nodes; hot_spares may be 0): its supervisor relaunches only a failed group (job/paths.py).

Values are percent-encoded (everything but A-Z a-z 0-9 _ . - ~ /, as UTF-8 bytes), so a checkpoint
path with spaces, '=' or newlines survives; job_submit.lua encodes the same way (a lab test compares
the two). Decoding is strict: the whole field must be a tag, so a user's unrelated comment ("slurm-ft
rocks") is not one. In AdminComment the controller may add a note after the tag, after NOTE_SEP.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Optional
from urllib.parse import quote, unquote

PREFIX = "slurm-ft:v"
VERSION = 1
DEFAULT_MAX_RESTARTS = 5

_HEAD = re.compile(r"slurm-ft:v([1-9][0-9]{0,3})\Z")
_FIELD = re.compile(r"([a-z_]+)=([A-Za-z0-9%._~/+:@,\-]*)\Z")
_INT = re.compile(r"(0|[1-9][0-9]{0,8})\Z")
_KEYS = ("ckpt", "min_nodes", "hot_spares", "train_nodes", "replica_groups", "hang_timeout", "max_restarts")
# the range of each number, the same in the SPANK plugin (spank/slurm_ft.c) and job_submit.lua (a unit test
# compares them); decode() reads any tag within the grammar, the submit paths refuse values outside these
LIMITS = {"min_nodes": (1, 100000), "hot_spares": (0, 10000), "hang_timeout": (1, 604800), "max_restarts": (0, 1000),
          "replica_groups": (2, 1000)}
NOTE_SEP = " | "          # tag | note: never inside a tag ('|' and ' ' are encoded or separate fields)


@dataclass(frozen=True)
class FtSpec:
    """What a fault-tolerant job asked for."""

    ckpt_dir: str = ""                      # "" = the job keeps no checkpoints slurm-ft can see
    min_nodes: Optional[int] = None         # None = not elastic: always restart at full size
    max_restarts: int = DEFAULT_MAX_RESTARTS
    version: int = VERSION
    hot_spares: int = 0                     # K idle nodes held in the allocation (0 = none)
    train_nodes: Optional[int] = None       # N, the training step's size, when hot_spares > 0 or replica_groups
    replica_groups: int = 0                 # R torchft replica groups of N / R nodes (0 = one gang)
    hang_timeout: Optional[int] = None      # seconds without progress that count as a hang


def encode(spec: FtSpec) -> str:
    """The comment string for `sbatch --comment`."""
    if spec.min_nodes is not None and spec.min_nodes < 1:
        raise ValueError("min_nodes must be >= 1")
    if spec.max_restarts < 0:
        raise ValueError("max_restarts must be >= 0")
    if spec.hot_spares < 0 or (spec.hot_spares and (not spec.train_nodes or spec.train_nodes < 1)):
        raise ValueError("hot_spares must be >= 0, and above 0 needs train_nodes >= 1")
    if spec.replica_groups and (spec.replica_groups < 2 or not spec.train_nodes
                                or spec.train_nodes % spec.replica_groups):
        raise ValueError("replica_groups must be >= 2 and divide train_nodes")
    if spec.hang_timeout is not None and spec.hang_timeout < 1:
        raise ValueError("hang_timeout must be >= 1")
    parts = [f"{PREFIX}{VERSION}"]
    if spec.ckpt_dir:
        parts.append("ckpt=" + quote(spec.ckpt_dir, safe="/"))
    if spec.min_nodes is not None:
        parts.append(f"min_nodes={spec.min_nodes}")
    if spec.hot_spares or spec.replica_groups:
        parts += [f"hot_spares={spec.hot_spares}", f"train_nodes={spec.train_nodes}"]
    if spec.replica_groups:
        parts.append(f"replica_groups={spec.replica_groups}")
    if spec.hang_timeout is not None:
        parts.append(f"hang_timeout={spec.hang_timeout}")
    parts.append(f"max_restarts={spec.max_restarts}")
    return " ".join(parts)


def with_note(tag: str, note: str) -> str:
    """AdminComment text: the tag, then the controller's note for the job's owner (one line)."""
    tag = tag.split(NOTE_SEP, 1)[0]
    note = " ".join(note.split())
    return f"{tag}{NOTE_SEP}{note}" if tag else note


def decode(comment: str, noted: bool = False) -> Optional[FtSpec]:
    """The FtSpec in a job's comment, or None if the comment is not exactly a tag we understand.
    noted: the field may carry a note after the tag (AdminComment, see with_note)."""
    if not comment:
        return None
    if noted:
        comment = comment.split(NOTE_SEP, 1)[0]
    words = comment.strip().split(" ")
    head = _HEAD.match(words[0])
    if not head or int(head.group(1)) != VERSION:
        return None
    fields: Dict[str, str] = {}
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
    hang_timeout = fields.get("hang_timeout")
    if hang_timeout is not None and (not _INT.match(hang_timeout) or int(hang_timeout) < 1):
        return None
    if not _INT.match(max_restarts):
        return None
    # hot_spares=0 is no hot spares; above 0, or with replica groups, it comes with train_nodes, which
    # means nothing alone
    hot, train, groups = fields.get("hot_spares"), fields.get("train_nodes"), fields.get("replica_groups")
    if any(x is not None and not _INT.match(x) for x in (hot, train, groups)):
        return None
    if (int(hot or 0) > 0 or groups is not None) != (train is not None) or train is not None and int(train) < 1:
        return None
    if groups is not None and (int(groups) < 2 or train is None or int(train) % int(groups)):
        return None
    return FtSpec(
        ckpt_dir=ckpt,
        min_nodes=int(min_nodes) if min_nodes is not None else None,
        max_restarts=int(max_restarts),
        version=VERSION,
        hot_spares=int(hot) if hot is not None else 0,
        train_nodes=int(train) if train is not None else None,
        replica_groups=int(groups) if groups is not None else 0,
        hang_timeout=int(hang_timeout) if hang_timeout is not None else None,
    )


def is_tagged(comment: str) -> bool:
    return decode(comment) is not None
