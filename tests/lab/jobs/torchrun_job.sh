#!/bin/sh
# The lab's DDP job launched by torchrun, one agent per node (srun --ntasks-per-node=1):
#   torchrun_job.sh TORCHRUN ddp_dcp.py ARGS...
# MASTER_ADDR / MASTER_PORT come from the hot-spare supervisor (new for every launch); torchrun gives the
# script RANK, WORLD_SIZE and the rendezvous. exec: srun's SIGTERM reaches torchrun, which stops its worker.
set -eu
torchrun=$1
shift
exec "$torchrun" --nnodes="$SLURM_NNODES" --nproc-per-node=1 --node-rank="$SLURM_NODEID" \
    --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" "$@"
