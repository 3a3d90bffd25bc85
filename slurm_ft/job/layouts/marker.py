"""slurm-ft's own layout: ``step_N/`` holding the files plus a ``COMPLETE`` JSON manifest written last.

``{"format": "slurm-ft-ckpt", "version": 1, "step": N, "files": {name: {"size", "sha256"}}}``.
"""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Tuple

if TYPE_CHECKING:
    from slurm_ft.job.ckptfs import FS, Entry

NAME = "slurm-ft"
MARKER = "COMPLETE"
FORMAT = "slurm-ft-ckpt"
MAX_MANIFEST = 16 << 20


def evidence(fs: FS, path: str, kids: Mapping[str, Entry]) -> bool:
    e = kids.get(MARKER)
    return e is not None and not e.is_dir


def parse_manifest(raw: bytes) -> Tuple[Optional[Dict[str, Any]], str]:
    """(manifest, "") or (None, why): only a well-formed slurm-ft manifest with an integer step."""
    try:
        manifest = json.loads(raw)
    except (ValueError, RecursionError, UnicodeError):
        return None, f"{MARKER} marker is unreadable or truncated"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(manifest.get("files"), dict):
        return None, f"{MARKER} marker is not a slurm-ft manifest"
    step = manifest.get("step")
    if type(step) is not int or step < 0:                  # 1e999 is a float (inf), True a bool: neither
        return None, f"{MARKER} marker has no valid step"
    return manifest, ""


def check(fs: FS, path: str, kids: Mapping[str, Entry], step: Optional[int], verify: bool = False
          ) -> Tuple[Optional[int], Optional[str]]:
    raw = fs.read(os.path.join(path, MARKER), limit=MAX_MANIFEST)
    if raw is None:
        return step, f"no {MARKER} marker (write not finished)"
    if len(raw) >= MAX_MANIFEST:
        return step, f"{MARKER} marker is larger than {MAX_MANIFEST} bytes"
    manifest, why = parse_manifest(raw)
    if manifest is None:
        return step, why
    got = manifest["step"]
    if step is not None and got != step:
        return got, f"{MARKER} marker says step {got}, directory says {step}"
    for name, meta in sorted(manifest["files"].items()):
        e = kids.get(name)
        if e is None or e.is_dir or e.link is not None:
            return got, f"file {name} listed in the manifest is missing"
        want = meta.get("size") if isinstance(meta, dict) else None
        if type(want) is not int:
            return got, f"manifest entry for {name} has no size"
        if e.size != want:
            return got, f"file {name} is {e.size} bytes, manifest says {want} (truncated)"
        if verify and isinstance(meta.get("sha256"), str) and fs.sha256(os.path.join(path, name)) != meta["sha256"]:
            return got, f"file {name} does not match its sha256 in the manifest"
    return got, None
