"""Where the ranks of one launch of a hot-spare job meet (torch's env:// and torchrun's static rendezvous):
MASTER_ADDR and MASTER_PORT for each launch, pure.

MASTER_ADDR is the address of the node that runs rank 0. `srun --nodelist=...` lays tasks out in Slurm's
node order, not in the order of the list, so rank 0 (and SLURM_NODEID 0, torchrun's --node-rank 0) is on
the first node of the step in Slurm's order; its address is its NodeAddr (Slurm's default: the host
name). In the hot-spare path that node is the batch host (the first node of the allocation, never left
out of a launch: its failure takes the requeue path), but nothing here assumes it.

MASTER_PORT differs for every launch of a job, so a relaunch never meets a TCPStore of the launch before
it (a rank of the killed step still exiting, a listening socket not yet closed):
    PORT_LO + (job_id * JOB_STRIDE + restart * 100 + launch % 100) % PORT_SPAN
Two launches in a row of one job (also across a requeue) always differ by 1 to 100 in the sum, so never
share a port; the stride spreads jobs that share a node. The range lies below Linux's ephemeral ports
(32768-60999), so no outgoing connection holds it. Where that port is taken on rank 0's node (another
job's store, any other listener: the supervisor can see this when rank 0 runs beside it, on the batch
host), the next of PORT_TRIES candidates PORT_HOP apart is taken; a hop of 1000 never lands on the
port of the launch before (1..100 apart, modulo the span). A MASTER_PORT the user set (exported into
the job) is kept for every launch instead: then a relaunch binds the port the stopped step's rank 0 had.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Sequence, Tuple

PORT_LO, PORT_SPAN = 20000, 10000
JOB_STRIDE = 7919            # a prime: consecutive job ids land far apart in the range
PORT_HOP, PORT_TRIES = 1000, 10


def master_port(job_id: int, restart: int, launch: int) -> int:
    return PORT_LO + (job_id * JOB_STRIDE + restart * 100 + launch % 100) % PORT_SPAN


def candidate_ports(job_id: int, restart: int, launch: int) -> List[int]:
    """master_port first, then the others to try where it is taken."""
    base = master_port(job_id, restart, launch) - PORT_LO
    return [PORT_LO + (base + k * PORT_HOP) % PORT_SPAN for k in range(PORT_TRIES)]


def user_port(env: Mapping[str, str]) -> int:
    """The MASTER_PORT the user exported into the job, 0 when none (or not a port number)."""
    text = env.get("MASTER_PORT", "").strip()
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else 0


def launch_env(env: Mapping[str, str], step_nodes: Sequence[str], addrs: Mapping[str, str], job_id: int,
               restart: int, launch: int, free: Callable[[str, int], bool] = lambda node, port: True
               ) -> Tuple[Dict[str, str], str]:
    """(MASTER_ADDR and MASTER_PORT for this launch, the rank-0 node). `step_nodes` in Slurm's order, as
    hotplan.pick gives them (the allocation's order): rank 0 runs on the first. MASTER_ADDR always follows
    rank 0 (a value exported from the submit host cannot know where it runs); MASTER_PORT is the user's if
    set, else the first candidate `free(rank-0 node, port)` finds free (the first when none is: torch then
    reports the port in use)."""
    if not step_nodes:
        raise ValueError("a launch on no node")
    node = step_nodes[0]
    ports = candidate_ports(job_id, restart, launch)
    port = user_port(env) or next((p for p in ports if free(node, p)), ports[0])
    return {"MASTER_ADDR": addrs.get(node) or node, "MASTER_PORT": str(port)}, node
