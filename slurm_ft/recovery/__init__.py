"""Moved: the job's modules are in slurm_ft.job, the controller's in slurm_ft.fleet. Only jobstart stays
reachable here, for the starters of jobs submitted before the move (see jobstart.py)."""
