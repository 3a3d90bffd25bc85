"""slurm-ft: keep large synchronous GPU training jobs alive on Slurm clusters."""

__version__ = "0.1.0"
