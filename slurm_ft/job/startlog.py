"""The bounded reader of CKPT/slurm-ft-starts.jsonl (the starter's and the supervisor's JSON lines).

The file sits in the user's checkpoint directory: it is data, possibly large, torn or edited. Only its
last MAX_BYTES are read; a line that is not a JSON object is skipped.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List

MAX_BYTES = 1 << 20          # the last 1 MiB: thousands of starts, far more than any restart limit
MAX_LINE = 64 * 1024


def parse(data: bytes, partial_head: bool = False) -> List[Dict[str, Any]]:
    """The JSON objects in `data`, in order. partial_head: the first line may be cut (a tail read)."""
    lines = data.split(b"\n")
    if partial_head and lines:
        lines = lines[1:]
    out = []
    for line in lines:
        if not line.strip() or len(line) > MAX_LINE:
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def read(path: str, max_bytes: int = MAX_BYTES) -> List[Dict[str, Any]]:
    """The records of the log's last `max_bytes`; [] when it cannot be read (nothing to learn from)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return []
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        os.lseek(fd, start, os.SEEK_SET)
        chunks, left = [], size - start
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return []
    finally:
        os.close(fd)
    return parse(b"".join(chunks), partial_head=start > 0)
