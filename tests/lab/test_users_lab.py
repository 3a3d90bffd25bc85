"""What a job's user sees and may do on a node, on the real lab (issue 22, finding 8 and build item 2).

The lab's jobs run as an unprivileged user (slurmft-u0), and each node's kernel log is root's, as
/dev/kmsg is with kernel.dmesg_restrict=1. The hot-spare supervisor's checks are `srun --overlap ...
slurm-ft check --level prolog --json --no-state` inside the job, as that user: here the same, run in a
user's job on a node whose kernel log holds an Xid 79 (the only evidence: the fake driver shows nothing).
"""
from __future__ import annotations

import json
import pwd
import subprocess

import pytest

from ctl_helpers import PY, periodic_check_skips, wait_job, watching
from slurm_ft_lab.inject import inject
from slurm_ft_lab.waits import wait_for

pytestmark = pytest.mark.lab


def _holder(lab, work, node: str) -> int:
    """A job of the user's holding `node`, its prolog done (its batch script ran)."""
    started = work / "started"
    p = lab.run_as(["sbatch", "--parsable", "-N1", "-w", node, "--gres=gpu:8", "-o", str(work / "holder.out"),
                    "--wrap", f"touch {started} && exec sleep 600"], cwd=work, timeout=60)
    assert p.returncode == 0, p.stderr
    job_id = int(p.stdout.strip().split(";")[0])
    wait_job(lab, job_id, "RUNNING", timeout=180)
    wait_for(lambda: started.exists(), 180, f"job {job_id}'s batch script")
    return job_id


def _check_in_job(lab, job_id: int, node: str, *argv: str) -> subprocess.CompletedProcess:
    """`slurm-ft check ARGV` on `node` inside the user's job, as the supervisor runs it (srun --overlap)."""
    return lab.run_as(["srun", f"--jobid={job_id}", "--overlap", "-N1", "-n1", "-w", node, PY, "-m", "slurm_ft",
                       "check", *argv], env={"LD_LIBRARY_PATH": str(lab.dir / "lib")}, timeout=180)


def _findings(out: str) -> dict:
    return {f["check"]: f for f in json.loads(out)["findings"]}


def test_a_users_in_job_check_cannot_read_the_kernel_log_and_gets_the_answer_through_the_watcher(lab, work):
    node = lab.train_nodes[20]
    uid = pwd.getpwnam(lab.user).pw_uid
    with periodic_check_skips(lab, node):
        job_id = _holder(lab, work, node)
        try:
            inject(lab.dir, node, "xid", gpu=3, value=79, driver=False)          # after the prolog looked
            # no watcher: the check runs in the user's process and cannot see the Xid; it says so
            blind = _check_in_job(lab, job_id, node, "--level", "prolog", "--json", "--no-state")
            assert blind.returncode == 0, blind.stderr
            xid = _findings(blind.stdout)["xid"]
            assert xid["severity"] == "error" and f"not readable as uid {uid}" in xid["reason"], xid
            assert f"kernel log not readable as uid {uid}; the node's watcher did not answer (no watcher socket at " \
                   f"{lab.dir}/run/query-{node}.sock" in blind.stderr, blind.stderr
            # the node's watcher (root) answers the same question with what root sees
            with watching(lab, [node], work) as logs:
                seen = _check_in_job(lab, job_id, node, "--level", "prolog", "--json", "--no-state")
                text = _check_in_job(lab, job_id, node, "--level", "prolog", "--local")
            assert seen.returncode == 1, seen.stderr
            xid = _findings(seen.stdout)["xid"]
            assert (xid["severity"], xid["code"], xid["gpu"]) == ("fail", "XID79", 3), xid
            assert f"answered uid {uid}: prolog --json" in logs[node].read_text()
            assert text.returncode == 0 and "did not answer (not asked: --local)" in text.stderr    # --local: its own
            assert not lab.client.node(node).drained                              # a look drains nothing
        finally:
            lab.client.cancel(job_id)


def test_a_users_drain_request_takes_the_node_out_only_for_evidence_no_user_can_write(lab, work):
    """A hot GPU may be the user's own load: looked at, reported, not drained at their request. An Xid in
    the kernel log (root-written, one the watcher missed) is drained by the node's watcher at the user's
    request, through the breaker, as root."""
    node = lab.train_nodes[21]
    uid = pwd.getpwnam(lab.user).pw_uid
    with periodic_check_skips(lab, node):
        job_id = _holder(lab, work, node)
        try:
            inject(lab.dir, node, "temp", gpu=2, value=97)
            with watching(lab, [node], work):
                look = _check_in_job(lab, job_id, node, "--level", "prolog", "--json", "--no-state")
                assert look.returncode == 1 and _findings(look.stdout)["temperature"]["code"] == "TEMP_HIGH", look
                hot = _check_in_job(lab, job_id, node, "--level", "prolog", "--json", "--no-state", "--drain")
                assert hot.returncode == 0 and "temperature" not in _findings(hot.stdout), hot
                assert "drain" not in json.loads(hot.stdout) or json.loads(hot.stdout)["drain"]["action"] == "none"
            assert not lab.client.node(node).drained
            inject(lab.dir, node, "xid", gpu=3, value=79, driver=False)     # while no watcher ran
            with watching(lab, [node], work) as logs:
                out = _check_in_job(lab, job_id, node, "--level", "prolog", "--json", "--no-state", "--drain")
                log = logs[node].read_text()
            assert out.returncode == 1, out.stderr
            assert json.loads(out.stdout)["drain"]["action"] == "drained", out.stdout
            n = lab.client.node(node)
            assert n.drained and n.reason.startswith("slurm-ft: XID79 gpu3"), n
            assert f"answered uid {uid}: prolog --drain --json" in log and "quick check" not in log, log
        finally:
            lab.client.cancel(job_id)
