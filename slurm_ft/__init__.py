"""slurm-ft: keep large synchronous GPU training jobs alive on Slurm clusters.

Inside a training job, one line in the loop lets slurm-ft see progress (hangs, goodput):

    import slurm_ft
    slurm_ft.progress(step)
"""

__version__ = "0.1.0"


def progress(step: int, *, force: bool = False) -> None:
    """Report that this rank finished `step` (slurm_ft.heartbeat; a no-op outside a slurm-ft job)."""
    # lazy: every training rank imports slurm_ft; heartbeat (json, socket) loads at the first report only
    from slurm_ft.heartbeat import progress as report
    report(step, force=force)
