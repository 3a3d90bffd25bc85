"""One view of a node, on the real lab (issue 39 item 5): node commands take hostlists, `keep_off` keeps
slurm-ft's hands off a node (its real health check finds the Xid and drains nothing; the controller opens no
incident), and an admin's breaker hold decides over the breaker until released."""
from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml

from ctl_helpers import PY, controller_config, incidents, once, parts, slurm_ft, submit_ft, wait_job
from slurm_ft.slurm.hostlist import compress

pytestmark = pytest.mark.lab


@pytest.fixture
def cfg(lab, tmp_path):
    lab.reset()
    yield controller_config(lab, tmp_path)
    lab.reset()


def with_keys(path, **keys):
    data = yaml.safe_load(path.read_text())
    data.update(keys)
    path.write_text(yaml.safe_dump(data))
    return path


def xid_check(lab, config, node: str) -> subprocess.CompletedProcess:
    """A fatal Xid 79 on `node` at the fake driver, then the node's real `check --drain` under `config`."""
    from slurm_ft_lab.inject import inject
    inject(lab.dir, node, "xid", gpu=3, value=79)
    env = dict(lab.env, SLURMD_NODENAME=node, SLURM_FT_CONFIG=str(config), LD_LIBRARY_PATH=str(lab.dir / "lib"))
    return subprocess.run([PY, "-m", "slurm_ft", "check", "--node", node, "--drain"], capture_output=True,
                          text=True, timeout=120, env=env)


def test_a_keep_off_node_is_checked_not_drained_and_opens_no_incident(lab, cfg, work):
    jid = submit_ft(lab, work, 4)
    bad = wait_job(lab, jid).nodes[1]
    with_keys(cfg, keep_off=bad)
    p = xid_check(lab, cfg, bad)
    assert p.returncode == 1 and "XID79" in p.stdout, p.stdout + p.stderr
    assert f"{bad} is in keep_off: slurm-ft leaves it alone" in p.stdout and "keep_off:" in p.stderr
    assert not lab.client.node(bad).drained
    lab.client.drain([bad], "slurm-ft: XID79 gpu3 GPU has fallen off the bus")   # as if drained before keep_off
    out = once(lab, cfg)
    assert incidents(lab, cfg) == [] and bad in parts(lab)["train"], out.stdout + out.stderr
    assert "keep_off: " in out.stderr
    status = json.loads(slurm_ft(lab, cfg, "status", "--json").stdout)
    assert status["keep_off"] == [bad]


def test_node_commands_take_a_hostlist(lab, cfg):
    two = sorted(lab.spare_nodes)[:2]
    expr = compress(two)
    out = slurm_ft(lab, cfg, "node", "quarantine", expr, "--reason", "rack PDU").stdout
    assert [line.split(":")[0] for line in out.splitlines()[:2]] == two
    assert all(lab.client.node(n).drained for n in two) and not set(two) & set(parts(lab)["spares"])
    bad = slurm_ft(lab, cfg, "node", "repaired", expr + ",nosuch[1-2]", check=False)
    assert bad.returncode == 2 and bad.stderr.strip() == ("slurm-ft: error: unknown nodes 'nosuch[1-2]' "
                                                         "(not in this cluster's slurm.conf)")


def test_a_breaker_held_open_drains_nothing_until_released(lab, cfg, work):
    jid = submit_ft(lab, work, 4)
    bad = wait_job(lab, jid).nodes[2]
    slurm_ft(lab, cfg, "breaker", "hold", "open", "--for", "10m", "--reason", "lab roll-out")
    st = slurm_ft(lab, cfg, "breaker", "status", "--json", check=False)
    assert st.returncode == 1 and json.loads(st.stdout)["hold"]["reason"] == "lab roll-out"
    p = xid_check(lab, cfg, bad)
    assert "held open by root" in p.stdout + p.stderr and not lab.client.node(bad).drained
    slurm_ft(lab, cfg, "breaker", "release")
    p = xid_check(lab, cfg, bad)
    deadline = time.monotonic() + 30
    while not lab.client.node(bad).drained and time.monotonic() < deadline:
        time.sleep(0.5)
    assert lab.client.node(bad).drained, p.stdout + p.stderr
