"""PyTorch Distributed Checkpoint (``torch.distributed.checkpoint.save``): a directory whose ``.metadata``
(a pickle, written last by the coordinator) names every ``__R_I.distcp`` storage file.

The pickle is never unpickled (it is user data, and unpickling runs code): the storage file names
appear in it verbatim, and a pickle ends with its STOP opcode, so a truncated one is told apart.
"""
from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Mapping, Optional, Tuple

if TYPE_CHECKING:
    from slurm_ft.job.ckptfs import FS, Entry

NAME = "dcp"
METADATA = ".metadata"
MAX_METADATA = 256 << 20
_DISTCP = re.compile(rb"__\d{1,9}_\d{1,9}\.distcp")


def evidence(fs: FS, path: str, kids: Mapping[str, Entry]) -> bool:
    e = kids.get(METADATA)
    return e is not None and not e.is_dir


def check(fs: FS, path: str, kids: Mapping[str, Entry], step: Optional[int], verify: bool = False
          ) -> Tuple[Optional[int], Optional[str]]:
    meta = kids.get(METADATA)
    if meta is None or meta.is_dir:
        return step, f"no {METADATA} (write not finished)"
    if meta.size <= 0:
        return step, f"{METADATA} is empty"
    if meta.size > MAX_METADATA:
        return step, f"{METADATA} is larger than {MAX_METADATA} bytes"
    raw = fs.read(os.path.join(path, METADATA), limit=MAX_METADATA) or b""
    if not raw.startswith(b"\x80") or not raw.endswith(b"."):
        return step, f"{METADATA} is not a whole pickle (truncated or foreign)"
    refs = sorted({m.decode() for m in _DISTCP.findall(raw)})
    if not refs:
        return step, f"{METADATA} names no .distcp storage file"
    for ref in refs:
        e = kids.get(ref)
        if e is None or e.is_dir:
            return step, f"{ref} named in {METADATA} is missing"
        if e.size <= 0:
            return step, f"{ref} is empty"
    return step, None
