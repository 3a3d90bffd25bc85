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

from typing import TYPE_CHECKING, Mapping, Optional, Protocol, Tuple

from slurm_ft.job.layouts import dcp, deepspeed, hf, marker, megatron, torchzip
from slurm_ft.job.layouts.names import looks_like_checkpoint, step_of

if TYPE_CHECKING:
    from slurm_ft.job.ckptfs import FS, Entry

__all__ = ["DIR_LAYOUTS", "FILE_LAYOUTS", "TRACKERS", "file_layout", "looks_like_checkpoint", "step_of"]


class DirLayout(Protocol):
    """What a directory layout module provides (marker, hf, megatron, deepspeed, dcp)."""
    NAME: str

    def evidence(self, fs: FS, path: str, kids: Mapping[str, Entry]) -> bool: ...

    def check(self, fs: FS, path: str, kids: Mapping[str, Entry], step: Optional[int], verify: bool = False
              ) -> Tuple[Optional[int], Optional[str]]: ...


class FileLayout(Protocol):
    """What a single-file layout module provides (torchzip): which names it claims, and the check."""
    NAME: str

    def claims(self, name: str) -> bool: ...

    def check_file(self, fs: FS, path: str, size: int, step: Optional[int]) -> Tuple[Optional[int], Optional[str]]: ...


class TrackerLayout(Protocol):
    """What a layout with a directory-wide tracker provides (megatron, deepspeed)."""
    NAME: str
    TRACKER: str

    def tracker(self, fs: FS, d: str, kids: Mapping[str, Entry]) -> Optional[megatron.Tracked]: ...


DIR_LAYOUTS: Tuple[DirLayout, ...] = (marker, hf, megatron, deepspeed, dcp)
FILE_LAYOUTS: Tuple[FileLayout, ...] = (torchzip,)
TRACKERS: Tuple[TrackerLayout, ...] = (megatron, deepspeed)


def file_layout(name: str) -> Optional[FileLayout]:
    """The single-file layout whose names `name` has (Lightning's `*.ckpt`...), or None."""
    return next((x for x in FILE_LAYOUTS if x.claims(name)), None)
