from slurm_ft.cli import main

main(prog_name="slurm-ft")
