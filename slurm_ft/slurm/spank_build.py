"""Which Slurm release the slurm-ft SPANK plugin in plugstack.conf was built for, read off the .so.

Slurm loads a plugin only when the major.minor of its `plugin_version` symbol (SLURM_VERSION_NUMBER of
the spank.h it was built with) is its own. After a Slurm upgrade the old slurm_ft.so is refused, and with
`optional` in plugstack.conf the refusal is one line in slurmd's and srun's logs: users then meet
"unrecognized option '--ft-ckpt-dir'". `slurm-ft config check` reads the symbol here, without loading
the library (no constructor of it runs in a root process), and says to rebuild (docs/plugin.md).
"""
from __future__ import annotations

import glob
import os
import re
import struct
from pathlib import Path
from typing import List, Optional, Tuple

PLUGIN = "slurm_ft.so"
MAX_BYTES = 64 << 20            # a SPANK plugin is tens of KiB: a larger file is not one
_ELF64_LE = b"\x7fELF\x02\x01"


def plugin_version(path: str) -> Optional[int]:
    """The `plugin_version` symbol's value of an ELF64 little-endian shared object; None when `path` is no
    such file, or has no such symbol."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_BYTES or not data.startswith(_ELF64_LE):
        return None
    try:
        return _symbol_u32(data, b"plugin_version")
    except (struct.error, IndexError, ValueError):
        return None                     # truncated or malformed: not a plugin Slurm would load either


def _symbol_u32(data: bytes, name: bytes) -> Optional[int]:
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    for sh in sections:
        if sh[1] != 11:                 # SHT_DYNSYM; its sh_link is the string table
            continue
        strtab, entsize = sections[sh[6]], sh[9] or 24
        for off in range(sh[4], sh[4] + sh[5], entsize):
            st_name, _, _, st_shndx, st_value, _ = struct.unpack_from("<IBBHQQ", data, off)
            start = strtab[4] + st_name
            if data[start:data.index(b"\0", start)] != name or st_shndx == 0:
                continue
            home = sections[st_shndx]               # the section holding it: address -> file offset
            value, = struct.unpack_from("<I", data, home[4] + st_value - home[3])
            return int(value)
    return None


def major_minor(number: int) -> Tuple[int, int]:
    """SLURM_VERSION_NUMBER's (major, minor): SLURM_VERSION_NUM(a, b, c) is a << 16 | b << 8 | c."""
    return number >> 16 & 0xFF, number >> 8 & 0xFF


def plugstack_files(slurm_conf: str) -> List[str]:
    """plugstack.conf as Slurm finds it (slurm.conf's PlugStackConfig, else beside slurm.conf), and the
    files its `include` lines name."""
    conf = Path(slurm_conf)
    stack = str(conf.parent / "plugstack.conf")
    try:
        for line in conf.read_text(errors="replace").splitlines():
            m = re.match(r"\s*PlugStackConfig\s*=\s*(\S+)", line, re.I)
            if m:
                stack = m.group(1)
    except OSError:
        return []
    out: List[str] = []
    todo = [stack]
    while todo and len(out) < 64:
        path = todo.pop(0)
        if not os.path.isfile(path) or path in out:
            continue
        out.append(path)
        for line in Path(path).read_text(errors="replace").splitlines():
            m = re.match(r"\s*include\s+(\S+)", line)
            if m:
                pattern = m.group(1) if m.group(1).startswith("/") else str(Path(path).parent / m.group(1))
                todo += sorted(glob.glob(pattern))
    return out


def plugins_named(slurm_conf: str) -> List[str]:
    """The paths of slurm-ft's SPANK plugin that plugstack.conf loads (`required`/`optional` lines)."""
    found: List[str] = []
    for path in plugstack_files(slurm_conf):
        for line in Path(path).read_text(errors="replace").splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 2 and words[0] in ("required", "optional") and os.path.basename(words[1]) == PLUGIN:
                found.append(words[1])
    return found


def mismatches(slurm_conf: str, slurm: Tuple[int, int, int]) -> List[str]:
    """One line per slurm_ft.so in plugstack.conf that Slurm `slurm` will refuse to load."""
    out: List[str] = []
    for so in plugins_named(slurm_conf):
        number = plugin_version(so)
        if number is None:
            out.append(f"{so} (plugstack.conf) is missing or no Slurm plugin: build it with `make -C spank "
                       f"install` on this Slurm (docs/plugin.md)")
        elif major_minor(number) != tuple(slurm[:2]):
            built = "%d.%02d" % major_minor(number)
            out.append(f"{so} was built for Slurm {built}, this is {slurm[0]}.{slurm[1]:02d}: Slurm refuses to "
                       f"load it and sbatch --ft-* fails; rebuild it (`make -C spank install`, docs/plugin.md)")
    return out
