"""Real PyTorch under `slurm-ft sbatch --hot-spares 1 -N 2` (issue 11 item 5): a DDP job over gloo saving
with torch.distributed.checkpoint, launched one process per rank by srun, or by torchrun (one agent per
node). A fatal Xid on the step's node that is not the batch host: the supervisor relaunches the step on
the hot spare, with a new MASTER_PORT and MASTER_ADDR on rank 0's node, and the job resumes from its
newest DCP save inside the same allocation (no requeue)."""
from __future__ import annotations

import errno
import re
import socket
from pathlib import Path

import pytest

from ctl_helpers import PY, slurm_ft, wait_job, xid_drain
from slurm_ft.job.rendezvous import candidate_ports
from slurm_ft.slurm.hostlist import expand
from tests.lab.test_ckpt_lab import START_S, out_lines, wait_line
from tests.lab.test_hot_spares_lab import controller, supervisor_events  # noqa: F401 - the fixture

pytestmark = pytest.mark.lab

JOBS = Path(__file__).resolve().parent / "jobs"
LAUNCHERS = {
    "srun-per-rank": [PY, str(JOBS / "ddp_dcp.py")],
    "torchrun": [str(JOBS / "torchrun_job.sh"), str(Path(PY).parent / "torchrun"), str(JOBS / "ddp_dcp.py")],
}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_ddp_job_resumes_on_the_hot_spare_from_its_newest_dcp_save(lab, work, controller, launcher):
    pytest.importorskip("torch", reason="no torch in this venv: setup.sh found no build of the torch extra for this Python")
    ck, out = work / "ck", work / "job.out"
    p = slurm_ft(lab, None, "sbatch", "--ckpt-dir", str(ck), "--hot-spares", "1", "-N", "2", "--ntasks-per-node=1",
                 "-o", str(out), "--open-mode=append", *LAUNCHERS[launcher], "--ckpt-dir", str(ck),
                 "--resume", "{ckpt}", "--steps", "100000", "--step-time", "0.3", "--save-every", "5")
    jid = int(p.stdout.split()[-1])
    job = wait_job(lab, jid, "RUNNING", timeout=180)
    assert len(job.nodes) == 3 and job.batch_host == job.nodes[0]

    # launch 0: rank 0 runs on the batch host (Slurm's task placement), and the ranks met there
    rdv0 = wait_line(out, r"^rdv launch=0 node=(\S+) init=env://(\S+):(\d+)$", START_S, lab, jid)
    [launch0] = supervisor_events(ck, "launch")
    addr = lab.client.node(job.batch_host).addr
    port0 = int(rdv0.group(3))                    # the first candidate, or the next where another held it
    assert addr and rdv0.groups()[:2] == (job.batch_host, addr) and port0 in candidate_ports(jid, 0, 0)
    assert launch0["rank0"] == job.batch_host and launch0["master"] == f"{addr}:{port0}"
    wait_line(out, r"^start restart=0 world=2 from=- step=0$", START_S, lab, jid)
    wait_line(out, r"^saved step=10 ", 120, lab, jid)

    victim = next(x for x in expand(launch0["nodes"]) if x != job.batch_host)
    n_before = len(out_lines(out))
    with socket.socket() as other:      # another program holds launch 1's first port on the batch host
        try:
            other.bind(("", candidate_ports(jid, 0, 1)[0]))
            other.listen()
        except OSError as exc:          # held already: CI's rooms share the network, and job ids
            if exc.errno != errno.EADDRINUSE:
                raise
        chk = xid_drain(lab, victim)                                 # the GPU falls off the bus
        node = lab.client.node(victim)
        assert chk.returncode == 1 and node.drained and "XID79" in node.reason, (chk.stdout, chk.stderr, node)

        # launch 1, on the survivor and the hot spare: the next free port, rank 0 still on the batch host
        rdv1 = wait_line(out, r"^rdv launch=1 node=(\S+) init=env://(\S+):(\d+)$", START_S, lab, jid, after=n_before)
        assert rdv1.groups()[:2] == (job.batch_host, addr) and int(rdv1.group(3)) in candidate_ports(jid, 0, 1)[1:]
    launch1 = supervisor_events(ck, "launch")[1]
    assert victim not in expand(launch1["nodes"]) and len(expand(launch1["nodes"])) == 2
    start = wait_line(out, r"^start restart=0 world=2 from=(\S+) step=(\d+)$", START_S, lab, jid, after=n_before)
    lines = out_lines(out)
    i = lines.index(start.group(0), n_before)
    saved = [int(m.group(1)) for m in (re.match(r"saved step=(\d+) ", x) for x in lines[:i]) if m]
    step = int(start.group(2))
    # the newest save: the last one the job reported, or one it finished as the step was stopped
    assert step in (saved[-1], saved[-1] + 5) and step >= 10, (saved, start.group(0))
    assert start.group(1) == str(ck / f"step_{step}") and launch1["step"] == step
    wait_line(out, rf"^step={step + 1} ", 120, lab, jid, after=i)       # and it trains on from there

    now = lab.client.job(jid)
    assert now.state == "RUNNING" and now.restart_count == 0            # in the allocation: no requeue
