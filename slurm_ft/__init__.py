"""slurm-ft: keep large synchronous GPU training jobs alive on Slurm clusters.

Inside a training job, one line in the loop lets slurm-ft see progress (hangs, goodput):

    import slurm_ft
    slurm_ft.progress(step)

and one more lets it take a planned swap with no step lost (save, then exit 0 when asked):

    if slurm_ft.checkpoint_requested(): save(); sys.exit(0)
"""
from __future__ import annotations

__version__ = "0.1.0"


def progress(step: int, *, force: bool = False, busy_s: float | None = None) -> None:
    """Report that this rank finished `step` (slurm_ft.heartbeat; a no-op outside a slurm-ft job). `busy_s`:
    the seconds it computed the step before waiting for the other ranks (finds a straggler node)."""
    # lazy: every training rank imports slurm_ft; heartbeat (json, socket) loads at the first report only
    from slurm_ft.heartbeat import progress as report
    report(step, force=force, busy_s=busy_s)


def checkpoint_requested() -> bool:
    """Has slurm-ft asked this launch for a checkpoint now (a planned swap: a node of the job is degraded)?
    Then save one complete checkpoint at the end of this step, every rank at the same step, and exit 0
    (slurm_ft.job.ckptrequest; docs/jobs.md, "Planned swaps"). False outside a slurm-ft job."""
    # lazy: as progress(); one stat() at most once a second
    from slurm_ft.job.ckptrequest import requested
    return requested()
