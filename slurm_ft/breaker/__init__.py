"""The drain-rate breaker, which every node's check and the controller ask before taking a node out:
its rules (`rules`, pure) and its gate (`guard`: reads the fleet from Slurm, one drain at a time). Below
both rooms that drain (node/, fleet/), so that neither imports the other for it."""
