"""Detection by event on the real lab (issue 21): a node that drains itself tells the jobs on it through
`scontrol notify` and wakes the controller with a munge-signed datagram; nothing polls the fleet for it."""
from __future__ import annotations

import socket
import subprocess
import time

import pytest

from slurm_ft import wake
from slurm_ft.config import load_config
from slurm_ft.node import state
from slurm_ft.slurm import parse
from slurm_ft.vocab import parse_event
from slurm_ft_lab.waits import wait_for
from tests.lab.ctl_helpers import PY, controller_config, incidents, submit_ft, wait_job, xid_drain

pytestmark = pytest.mark.lab


def munge_socket(lab) -> str:
    return parse.munge_socket(lab.client.running_config())


def test_the_controller_hears_root_wakes_only_and_each_once(lab):
    munge = munge_socket(lab)
    with wake.Listener(0, host="127.0.0.1", munge_socket=munge) as heard:
        wake.send("127.0.0.1", heard.port, "gpu001", munge)
        assert heard.wait(10) == "wake gpu001"

        def send_raw(cred: bytes) -> None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(cred, ("127.0.0.1", heard.port))

        # a user's credential (munge says who signed it): not root, not heard
        user = subprocess.run(["runuser", "-u", "nobody", "--", "munge", f"--socket={munge}", "-s", "wake gpu002"],
                              capture_output=True, text=True, timeout=30)
        assert user.returncode == 0, user.stderr
        send_raw(user.stdout.strip().encode())
        assert heard.wait(1.5) is None
        # root's, sent twice: munge refuses the replay
        root = subprocess.run(["munge", f"--socket={munge}", "-s", "wake gpu003"], capture_output=True, text=True,
                              timeout=30).stdout.strip().encode()
        time.sleep(0.1)                                    # past the listener's per-datagram gap
        send_raw(root)
        assert heard.wait(10) == "wake gpu003"
        time.sleep(0.1)
        send_raw(root)
        send_raw(b"not a credential")
        assert heard.wait(1.5) is None


def test_a_drained_nodes_jobs_read_the_notice_in_their_output(lab, work):
    """The job's second node runs no step (only the batch script runs, on the first): who runs there is
    known from the prolog's record in the node's state file, not from Slurm."""
    out = work / "job.out"
    p = lab.run_as(["sbatch", "--parsable", "-N2", "-o", str(out), "--wrap", "sleep 600"], cwd=work, timeout=30)
    assert p.returncode == 0, p.stderr
    job = wait_job(lab, int(p.stdout.split(";")[0]), "RUNNING", timeout=60)
    second = [n for n in job.nodes if n != job.batch_host][0]
    config = load_config(str(lab.config_path))
    # RUNNING comes before the prologs end (PrologFlags=Alloc): an Xid before then fails the prolog instead
    wait_for(lambda: job.job_id in state.running_jobs(state.load(state.path_for(config.health, second))),
             60, f"the prolog's record on {second}")
    t0 = time.monotonic()
    drained = xid_drain(lab, second)
    assert drained.returncode == 1, drained.stdout + drained.stderr
    wait_for(lambda: any(parse_event(x) for x in out.read_text(errors="replace").splitlines()), 30,
             "the notice in the job's output")
    events = [e for e in map(parse_event, out.read_text(errors="replace").splitlines()) if e]
    assert events[0][:2] == ("failed", second) and events[0][2].startswith("slurm-ft: XID79")
    assert time.monotonic() - t0 < 30


def test_a_drain_wakes_the_controller_which_would_otherwise_sleep_a_minute(lab, work, tmp_path):
    config = controller_config(lab, tmp_path)            # root's config and journal; the job's files in `work`
    data = config.read_text().replace("poll_s: 0.05", "poll_s: 0.05\n  interval_s: 60.0")
    config.write_text(data)
    env = dict(lab.env, SLURM_FT_CONFIG=str(config))
    log = open(tmp_path / "controller.log", "w")
    ctl = subprocess.Popen([PY, "-m", "slurm_ft", "-v", "controller", "run"], env=env, stdout=log,
                           stderr=subprocess.STDOUT)     # -v: the wakes heard or refused, printed on failure
    try:
        job_id = submit_ft(lab, work, 2)
        job = wait_job(lab, job_id, "RUNNING", timeout=120)
        wait_for(lambda: "woken by nodes" in (tmp_path / "controller.log").read_text(), 60, "controller up")
        time.sleep(2)                                      # its first cycle (it then idles for 60 s)
        victim = [n for n in job.nodes if n != job.batch_host][0]
        drained = xid_drain(lab, victim)
        assert drained.returncode == 1, drained.stdout + drained.stderr
        t_drain = time.time()
        print(drained.stdout + drained.stderr)             # the check's own lines: the wake sent or not
        inc = wait_for(lambda: [i for i in incidents(lab, config)
                                if victim in i["nodes"]], 30, "the incident")[0]
        assert inc["opened_at"] - t_drain < 5.0, inc      # a wake; polling alone would take up to 60 s
    finally:
        ctl.terminate()
        ctl.wait(120)
        print((tmp_path / "controller.log").read_text()[-3000:])
