"""What each Slurm version offers slurm-ft: the one place that knows version numbers.

Tested (a lab run of the whole suite): 22.05 (Debian 12), 24.11 (Debian 13), 25.11 (built from its
source in a Debian 12 root), 26.05 (Debian sid).
Any other version works with the features its number implies here, after one warning.
Sources: /work/shared/research/slurm-versions.md (SchedMD release notes) and the captures in
tests/data/slurm/<version>/.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional, Tuple


log = logging.getLogger(__name__)

Version = Tuple[int, int, int]

TESTED = ((22, 5), (24, 11), (25, 11), (26, 5))


@dataclass(frozen=True)
class Features:
    version: Version
    # `scontrol show node|job|partition|reservation --json` (data_parser JSON: state lists,
    # {"set","infinite","number"} numbers). 22.05 has only squeue/sinfo --json (openapi v0.0.38).
    scontrol_json: bool
    # `sbatch --requeue=expedite` exists (it is refused unless slurmctld runs with
    # SlurmctldParameters=enable_expedited_requeue: see SlurmClient.expedited_requeue).
    expedite: bool
    # HealthCheckNodeState=START_ONLY (check once when slurmd starts) and SlurmctldParameters=requeue_delay.
    health_start_only: bool
    # HealthCheckTimeout= (the health program's deadline; fixed at 60 s before).
    health_check_timeout: bool
    # slurmd reads cgroup.conf even with proctrack/linuxproc and task/none, and refuses to start on a
    # host without a usable cgroup mount unless it says CgroupPlugin=disabled (not a 22.05 value).
    cgroup_plugin_disabled: bool
    # slurmctld's RPC rate limiter (SlurmctldParameters=rl_enable: a token bucket per user, root and
    # SlurmUser exempt); 22.05 has none.
    rate_limiter: bool = False

    @property
    def tested(self) -> bool:
        return self.version[:2] in TESTED


def features(version: Version) -> Features:
    v = tuple(version[:2])
    return Features(
        version=tuple(version),  # type: ignore[arg-type]
        scontrol_json=v >= (23, 2),
        expedite=v >= (25, 11),
        health_start_only=v >= (25, 11),
        health_check_timeout=v >= (26, 5),
        cgroup_plugin_disabled=v >= (23, 2),
        rate_limiter=v >= (23, 2),
    )


def untested_warning(version: Version) -> Optional[str]:
    """One line for a version slurm-ft was never tested on; None for a tested one."""
    if tuple(version[:2]) in TESTED:
        return None
    tested = ", ".join(f"{a}.{b:02d}" for a, b in TESTED)
    return (f"Slurm {text(version)} was never tested with slurm-ft (tested: {tested}); "
            f"using the features its version number implies")


def text(version: Version) -> str:
    return f"{version[0]}.{version[1]:02d}.{version[2]}"


# --- expedited requeue ------------------------------------------------------------------------------

def expedite_enabled(version: Version, slurmctld_parameters: str) -> bool:
    """May jobs ask for `--requeue=expedite`? Slurm >= 25.11 refuses such a job (ESLURM_NOT_SUPPORTED)
    unless slurmctld runs with SlurmctldParameters=enable_expedited_requeue."""
    if not features(version).expedite:
        return False
    return any(p.strip().split("=", 1)[0] == "enable_expedited_requeue" for p in slurmctld_parameters.split(","))


def requeue_option(version: Version, slurmctld_parameters: str) -> str:
    """The sbatch option slurm-ft submits with: `--requeue=expedite` (Slurm requeues the job itself on
    node failure, eligible at once, top priority) where the cluster allows it, else plain `--requeue`
    (the controller requeues and clears the begin time)."""
    return "--requeue=expedite" if expedite_enabled(version, slurmctld_parameters) else "--requeue"
