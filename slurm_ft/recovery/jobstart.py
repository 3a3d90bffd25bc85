"""The start code's old name. A job submitted before slurm-ft's modules moved into rooms has a starter that
imports `slurm_ft.recovery.jobstart` (and an old SPANK plugin runs `python -m slurm_ft.recovery.jobstart`):
pending or requeued across an upgrade, it must still start. New starters name slurm_ft.job.jobstart."""
import sys

from slurm_ft.job.jobstart import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
