"""The lab's slurm.conf and cgroup.conf lines that differ by the installed Slurm's version (what each
version offers is the product's: slurm_ft.slurm.versions.Features)."""
from __future__ import annotations

from typing import Mapping, Optional

from slurm_ft.runner import run
from slurm_ft.slurm.parse import parse_version
from slurm_ft.slurm.versions import Features, Version


def conf_lines(f: Features) -> str:
    """slurm.conf lines the lab adds for this version (the rest is the same on every version)."""
    lines, params = [], []
    if f.expedite:
        lines += ["# >= 25.11: `slurm-ft sbatch` submits with --requeue=expedite only where slurmctld allows it"]
        params.append("enable_expedited_requeue")
    if f.rate_limiter:
        lines += ["# >= 23.02: the RPC rate limiter on, with its defaults (a bucket of 30 per user, 2 a second),",
                  "# as large sites run it: the lab's jobs run as users, who are limited (root is not)"]
        params.append("rl_enable")
    if params:
        lines.append(f"SlurmctldParameters={','.join(params)}")
    if f.health_check_timeout:
        lines += ["# >= 26.05: the health program's deadline (fixed at 60 s before); the quick level takes < 1 s",
                  "HealthCheckTimeout=30"]
    return "".join(line + "\n" for line in lines)


def cgroup_conf(f: Features) -> Optional[str]:
    """cgroup.conf for the lab, or None where slurmd does without one (22.05 here)."""
    if not f.cgroup_plugin_disabled:
        return None
    return ("# Written by `slurm-ft lab up`: slurmd >= 23.02 refuses to start on this host's cgroup layout\n"
            "# (\"Hybrid mode is not supported\") unless told not to touch cgroups at all.\n"
            "CgroupPlugin=disabled\n")


def installed_version(env: Optional[Mapping[str, str]] = None) -> Version:
    """The Slurm installed here (`slurmctld -V`), for writing a lab's configuration before it runs."""
    return parse_version(run(["slurmctld", "-V"], timeout=10, env=env).stdout)
