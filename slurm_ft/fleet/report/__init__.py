"""What people and Prometheus read of the fleet, pure views over Slurm and the journal: the fleet view,
metrics, drain statistics, goodput, the spare pool against its plan."""
