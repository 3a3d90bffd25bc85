"""Which field of a job the controller takes its fault-tolerance tag from (config `controller.trust`, one
of config.TRUST_MODES).

`admin_comment`: sites with the job_submit policy (etc/job_submit.lua), which writes the tag into
AdminComment from the SPANK plugin's --ft-* options after checking the site rules; users cannot change
that field, so a tag a user writes into Comment by hand is ignored. `comment`: sites without the
plugins, where `slurm-ft sbatch` writes the tag into the job's own Comment. `auto` (the default):
admin_comment where slurmctld runs job_submit/lua, else comment. `slurm-ft sbatch` follows the same
rule, so the jobs it submits are the ones the controller will follow.
"""
from __future__ import annotations

from typing import Iterable, Optional

from slurm_ft.job.tag import FtSpec, decode
from slurm_ft.slurm.types import Job


def resolve(setting: str, job_submit_plugins: Iterable[str]) -> str:
    """The field to trust: `setting` unless it is auto; then by slurmctld's JobSubmitPlugins."""
    if setting != "auto":
        return setting
    names = {p.strip().rsplit("/", 1)[-1] for p in job_submit_plugins}
    return "admin_comment" if "lua" in names else "comment"


def spec_of(job: Job, mode: str) -> Optional[FtSpec]:
    """The job's tag from the trusted field only (AdminComment may carry the controller's note after it)."""
    if mode == "admin_comment":
        return decode(job.admin_comment, noted=True)
    return decode(job.comment)
