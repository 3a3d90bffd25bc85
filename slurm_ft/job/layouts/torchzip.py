"""A ``torch.save`` file (Lightning's ``*.ckpt``, plain ``*.pt``/``*.pth``): a zip archive whose central
directory (at the end, written last) lists ``<name>/data.pkl``. A truncated file has no end record, or
one that points past the file's end."""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Optional, Tuple

if TYPE_CHECKING:
    from slurm_ft.job.ckptfs import FS

NAME = "torchzip"
SUFFIXES = (".ckpt", ".pt", ".pth")
ZIP_MAGIC = b"PK\x03\x04"
ZIP_EOCD = b"PK\x05\x06"
ZIP64_LOCATOR = b"PK\x06\x07"
_TAIL = 65557                        # the end record lies within the last 64 KiB + 22 bytes


def claims(name: str) -> bool:
    return name.endswith(SUFFIXES)


def check_file(fs: FS, path: str, size: int, step: Optional[int]) -> Tuple[Optional[int], Optional[str]]:
    if size <= 0:
        return step, "file is empty"
    if (fs.read(path, limit=4) or b"") != ZIP_MAGIC:
        return step, "not a zip archive (torch.save writes zip): truncated or foreign"
    tail = fs.read_tail(path, min(size, _TAIL)) or b""
    at = tail.rfind(ZIP_EOCD)
    if at < 0 or len(tail) - at < 22:
        return step, "zip end-of-central-directory missing (truncated)"
    entries, cd_size, cd_off = struct.unpack("<HII", tail[at + 10:at + 20])
    if at >= 20 and tail[at - 20:at - 16] == ZIP64_LOCATOR:
        return step, None            # zip64 (over 4 GiB): the end record's sizes are placeholders
    if cd_off + cd_size > size or entries == 0:
        return step, "zip central directory points past the end of the file (truncated)"
    cd = fs.read_tail(path, size - cd_off) if size - cd_off <= (64 << 20) else None
    if cd is not None and b"data.pkl" not in cd[:cd_size]:
        return step, "zip archive without data.pkl: not a torch.save file"
    return step, None
