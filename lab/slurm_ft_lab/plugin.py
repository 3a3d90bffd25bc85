"""The lab with slurm-ft's Slurm plugins loaded (`lab up --plugin`): the SPANK plugin (spank/slurm_ft.c,
built here with `make -C spank O=<lab>/lib`) in the lab's plugstack.conf, and the job_submit policy
(slurm_ft/data/slurm_ft_policy.lua, the module) next to its slurm.conf, called by a site's job_submit.lua
(slurm_ft/data/job_submit.lua, also etc/) with the lab's site rules and a rule of the "site's" own beside it.
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
LUA_TEMPLATE = Path(slurm_ft.__file__).resolve().parent / "data" / "job_submit.lua"          # the site's script
LUA_POLICY = Path(slurm_ft.__file__).resolve().parent / "data" / "slurm_ft_policy.lua"     # slurm-ft's module
# the lab site's own rule, beside slurm-ft's: a site's job_submit.lua keeps working with slurm-ft in it
SITE_REFUSED_NAME = "refused-by-site"
SITE_RULE = (f'if job_desc.name == "{SITE_REFUSED_NAME}" then\n'
             f'\t\tslurm.log_user("site rule: no job may be named {SITE_REFUSED_NAME} here")\n'
             '\t\treturn slurm.ERROR\n\tend\n\treturn slurm.SUCCESS')
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


def job_submit_lua(ft_partitions: Sequence[str] = (), ckpt_roots: Sequence[str] = (), expedite: bool = False,
                   site_rule: str = "") -> str:
    """The site's job_submit.lua with slurm-ft's site rules in its configure{} (@site lines) and, if given,
    `site_rule` (Lua, ending in a return) as the body of its own site_rules(); the rest as shipped."""
    text = LUA_TEMPLATE.read_text()
    values = {"ft_partitions": _lua_list(ft_partitions), "ckpt_roots": _lua_list(ckpt_roots),
              "expedite": "true" if expedite else "false"}
    for key, value in values.items():
        text, n = re.subn(rf"^(\s*{key} = )\S+(,\s+-- @site {key}:)", lambda m: m.group(1) + value + m.group(2),
                          text, count=1, flags=re.M)
        if n != 1:
            raise ValueError(f"{LUA_TEMPLATE}: no '@site {key}' line")
    if site_rule:
        text, n = re.subn(r"^\treturn slurm\.SUCCESS\s+-- @site rules$", lambda m: "\t" + site_rule, text, count=1,
                          flags=re.M)
        if n != 1:
            raise ValueError(f"{LUA_TEMPLATE}: no '@site rules' line")
    return text


def slurm_conf_lines(plugstack: Path) -> str:
    return (f"# slurm-ft's plugins: the SPANK plugin (sbatch --ft-*) and the job_submit policy (job_submit.lua)\n"
            f"PlugStackConfig={plugstack}\nJobSubmitPlugins=lua\n")
