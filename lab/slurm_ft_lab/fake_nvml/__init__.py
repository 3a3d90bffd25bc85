"""Build the fake `libnvidia-ml.so.1` (fake_nvml.c) for the lab and the tests.

The library presents a lab node's GPUs from `<labdir>/nodes/<node>/nvml.state`; see the header of
fake_nvml.c for the environment it reads and the state format (written by slurm_ft_lab.inject).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from slurm_ft.errors import EnvironmentProblem
from slurm_ft.runner import run

SOURCE = Path(__file__).resolve().parent / "fake_nvml.c"
LIBNAME = "libnvidia-ml.so.1"


def build(dest_dir: str | os.PathLike, *, force: bool = False) -> Path:
    """Compile fake_nvml.c into dest_dir/libnvidia-ml.so.1 unless it is newer than the source."""
    dest_dir = Path(dest_dir)
    out = dest_dir / LIBNAME
    if not force and out.exists() and out.stat().st_mtime >= SOURCE.stat().st_mtime:
        return out
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise EnvironmentProblem("no C compiler to build the fake NVML library: apt-get install gcc")
    dest_dir.mkdir(parents=True, exist_ok=True)
    # build beside the target and rename: a concurrent build or a process loading the library
    # never sees half a file
    fd, tmp = tempfile.mkstemp(prefix=f".{LIBNAME}.", dir=dest_dir)
    os.close(fd)
    try:
        run([cc, "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter",
             "-o", tmp, str(SOURCE), "-lpthread"], timeout=120)
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out
