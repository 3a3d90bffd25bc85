"""An outage is not a fault (issue 14), against the real lab: slurmds stopped (SIGSTOP) the way a network
partition or a hung host looks to slurmctld, while `slurm-ft controller run` runs."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from ctl_helpers import PY, controller_config, incidents, parts, slurm_ft, submit_ft, wait_job

pytestmark = pytest.mark.lab


@pytest.fixture
def cfg(lab, tmp_path):
    lab.reset()
    path = controller_config(lab, tmp_path)
    data = yaml.safe_load(path.read_text())
    data["controller"].update(wave_settle_s=15.0, interval_s=0.5)
    path.write_text(yaml.safe_dump(data))
    stopped = []
    yield path, stopped
    for pid in stopped:                 # the node stopped for good: let reset() find it alive
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    lab.reset()


def _responding(lab, names):
    return all(not n.down for n in lab.client.nodes(list(names)))


def test_a_wave_of_unresponsive_nodes_leaves_train_alone_and_one_dead_node_is_still_replaced(lab, work, cfg, tmp_path):
    config, stopped = cfg
    jid = submit_ft(lab, work, 64)
    job = wait_job(lab, jid, timeout=240)
    wave, dead = list(job.nodes[10:30]), job.nodes[40]
    log = open(tmp_path / "controller.log", "w")
    env = {**lab.env, "SLURM_FT_CONFIG": str(config)}
    ctl = subprocess.Popen([PY, "-m", "slurm_ft", "controller", "run"], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        time.sleep(2)
        # one through the CLI, the rest through the same call, together: 21 slurmds stop at once
        start = time.monotonic()
        slurm_ft(lab, None, "lab", "inject", wave[0], "--unresponsive", "25", "--dir", str(lab.dir))
        for n in wave[1:]:
            lab.cluster.stop_slurmd(n, 25)
        stopped.append(lab.cluster.kill_slurmd(dead, signal.SIGSTOP))     # this one for good
        # how many of them slurmctld itself saw stop answering (24.11 may take longer than the 25 s to notice)
        deadline, seen_down = time.monotonic() + 120, set()
        while True:
            seen_down |= {n.name for n in lab.client.nodes(wave) if n.down}
            if time.monotonic() > start + 26 and _responding(lab, wave):
                break
            assert time.monotonic() < deadline, "the stopped slurmds did not answer again"
            assert ctl.poll() is None, "the controller died"
            time.sleep(1)
        # the wave settles 15 s after the last one came back; then the dead node is a single fault
        deadline = time.monotonic() + 240
        while not any(i["status"] == "recovered" for i in incidents(lab, config)):
            assert time.monotonic() < deadline, f"no recovery of {dead}: {incidents(lab, config)}"
            assert ctl.poll() is None, "the controller died"
            time.sleep(2)
    finally:
        ctl.send_signal(signal.SIGTERM)
        try:
            ctl.wait(timeout=30)
        except subprocess.TimeoutExpired:
            ctl.kill()
        log.close()
    text = Path(tmp_path / "controller.log").read_text()
    train = parts(lab)["train"]
    assert set(wave) <= train, f"wave nodes left train: {sorted(set(wave) - train)}"
    incs = incidents(lab, config)
    assert [i["nodes"] for i in incs] == [[dead]], incs
    assert dead not in train and len(train) == 64
    if len(seen_down) >= 8:             # controller.wave_nodes: Slurm saw a wave, so it is named as one,
        # with as many of the 21 as slurmctld marked before the first came back (all, unless loaded)
        alert = re.search(r"ALERT: wave of unresponsive nodes: (\d+) stopped answering", text)
        assert alert and 8 <= int(alert.group(1)) <= 21, text[-3000:]
        assert wave[0] in text or "gpu[" in text
    else:                               # Slurm never saw most of them stop: nothing to call a wave
        print(f"slurmctld saw {len(seen_down)} of the 21 stopped nodes not responding")
    job = wait_job(lab, jid, timeout=240)
    assert dead not in job.nodes and not set(job.nodes) & (set(lab.spare_nodes) - train)
