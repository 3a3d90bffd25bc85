"""What other installed distributions add to slurm-ft, by entry-point group: a `slurm-ft` command
(`slurm_ft.commands`: name = "module:click_command") and a burn-in backend (`slurm_ft.burnin`: name =
"module:function"). The lab (lab/, never installed on a cluster) adds one of each."""
from __future__ import annotations

import sys
from importlib.metadata import EntryPoint, entry_points
from typing import Dict, Iterable

COMMANDS = "slurm_ft.commands"
BURNIN = "slurm_ft.burnin"


def added(group: str) -> Dict[str, EntryPoint]:
    """name -> entry point, for every installed distribution's entry in `group`."""
    eps = entry_points()
    found: Iterable[EntryPoint]
    if sys.version_info >= (3, 10):
        found = eps.select(group=group)
    else:                                  # Python 3.9: a dict of group -> entry points, no select()
        found = eps.get(group, [])
    return {ep.name: ep for ep in found}
