"""The lab with slurm-ft's Slurm plugins loaded (`lab up --plugin`): the SPANK plugin (spank/slurm_ft.c,
built here with `make -C spank O=<lab>/lib`) in the lab's plugstack.conf, and the job_submit policy
(slurm_ft/data/job_submit.lua, also etc/job_submit.lua) next to its slurm.conf with the lab's site rules.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Sequence

import slurm_ft
from slurm_ft.errors import EnvironmentProblem
from slurm_ft.runner import run

REPO_ROOT = Path(__file__).resolve().parents[2]
SPANK_DIR = REPO_ROOT / "spank"
SPANK_SO = "slurm_ft.so"
SPANK_H = Path("/usr/include/slurm/spank.h")
LUA_TEMPLATE = Path(slurm_ft.__file__).resolve().parent / "data" / "job_submit.lua"
INSTALL_HINT = "apt-get install -y gcc make libslurm-dev"


def build(dest_dir: Path) -> Path:
    """dest_dir/slurm_ft.so from spank/slurm_ft.c, with spank/Makefile (rebuilt when the source is newer)."""
    missing = [what for what, ok in (("a C compiler", shutil.which("gcc") or shutil.which("cc")),
                                     ("make", shutil.which("make")), (str(SPANK_H), SPANK_H.exists())) if not ok]
    if missing:
        raise EnvironmentProblem(f"cannot build the slurm-ft SPANK plugin: no {', no '.join(missing)}: {INSTALL_HINT}")
    dest_dir.mkdir(parents=True, exist_ok=True)
    run(["make", "-s", "-C", str(SPANK_DIR), f"O={dest_dir}"], timeout=120)
    return dest_dir / SPANK_SO


def plugstack_conf(so: Path, python: str) -> str:
    """`optional`: a node without the .so runs its jobs as if the plugin were not there."""
    return ("# Written by `slurm-ft lab up --plugin`: the slurm-ft SPANK plugin (--ft-* options)\n"
            f"optional {so} python={python}\n")


def _lua_list(values: Sequence[str]) -> str:
    for v in values:
        if not v.isprintable() or '"' in v or "\\" in v:
            raise ValueError(f"not a plain site-rule value: {v!r}")
    return "{" + ", ".join(f'"{v}"' for v in values) + "}"


def job_submit_lua(ft_partitions: Sequence[str] = (), ckpt_roots: Sequence[str] = (), expedite: bool = False) -> str:
    """job_submit.lua with these site rules in its @site lines (the rest of the file as shipped)."""
    text = LUA_TEMPLATE.read_text()
    values = {"ft_partitions": _lua_list(ft_partitions), "ckpt_roots": _lua_list(ckpt_roots),
              "expedite": "true" if expedite else "false"}
    for key, value in values.items():
        text, n = re.subn(rf"^(local [A-Z_]+ = )\S+(\s+-- @site {key}:)", lambda m: m.group(1) + value + m.group(2),
                          text, count=1, flags=re.M)
        if n != 1:
            raise ValueError(f"{LUA_TEMPLATE}: no '@site {key}' line")
    return text


def slurm_conf_lines(plugstack: Path) -> str:
    return (f"# slurm-ft's plugins: the SPANK plugin (sbatch --ft-*) and the job_submit policy (job_submit.lua)\n"
            f"PlugStackConfig={plugstack}\nJobSubmitPlugins=lua\n")
