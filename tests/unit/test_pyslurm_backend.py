"""The pyslurm backend over a stand-in `pyslurm` module with pyslurm's attribute names (the real library
runs in CI's bookworm-25.11 room: tests/lab/test_client_contract.py compares it with the commands field by
field). Review 2026-12-07 #1 and #5: the drain time, the time bound, which nodes are resumed."""
from __future__ import annotations

import sys
import time

import pytest

from slurm_ft.breaker import rules
from slurm_ft.slurm import pyslurm_backend as pb
from slurm_ft.slurm.client import SlurmTimeout
from slurm_ft.vocab import slurm_time

STAND_IN = '''
import time
__version__ = "25.11.2"
NODES = {}        # name -> dict of attributes, set by the test
CALLS = []
FAIL = []         # messages the next modify calls raise, one each
DELAY = [0.0]

class RPCError(Exception):
    pass

class Node:
    def __init__(self, name=None, **kw):
        self.name = name
        self.__dict__.update(NODES.get(name, {}))
        self.changes = kw

    def modify(self, changes):
        CALLS.append((self.name, changes.changes))
        if FAIL:
            raise RPCError(FAIL.pop(0))

class Nodes:
    @staticmethod
    def load():
        time.sleep(DELAY[0])
        return {name: Node(name) for name in NODES}
'''

MONTH_AGO = time.time() - 30 * 86400


def attrs(state="IDLE", reason=None, **kw):
    base = dict(state=state, reason=reason, reason_user="root" if reason else None, partitions=["train"],
                configured_gres={"gpu": 8}, total_cpus=64, real_memory=512000, comment=None, address="10.0.0.1")
    base.update(kw)
    return base


@pytest.fixture
def pyslurm(tmp_path, monkeypatch):
    (tmp_path / "pyslurm.py").write_text(STAND_IN)
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=lab\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pyslurm", raising=False)
    monkeypatch.setattr(pb, "_imported_with", None)
    monkeypatch.setenv("SLURM_CONF", str(conf))
    import pyslurm as module
    yield module, pb.PySlurmClient(conf=str(conf), timeout=2)
    sys.modules.pop("pyslurm", None)


@pytest.mark.parametrize("style", ["epoch", "formatted"])
def test_an_old_slurm_ft_drain_keeps_its_time_and_does_not_hold_the_breaker_open(pyslurm, style):
    """A node left drained RMA a month ago, on a 12-node fleet (limit 1): read with its drain time, it is
    outside the breaker's window, so a fresh Xid 79 elsewhere may still be drained."""
    module, client = pyslurm
    old = (dict(reason_time=int(MONTH_AGO)) if style == "epoch" else
           dict(reason_time_raw=int(MONTH_AGO), reason_time=time.strftime("%Y-%m-%dT%H:%M:%S",
                                                                          time.localtime(MONTH_AGO))))
    module.NODES.update({f"gpu{i:03d}": attrs() for i in range(1, 12)})
    module.NODES["gpu012"] = attrs("IDLE+DRAIN", "slurm-ft: RMA XID79 gpu3 GPU has fallen off the bus", **old)
    (rma,) = [n for n in client.fleet_nodes() if n.drained]
    assert abs(slurm_time(rma.reason_time) - int(MONTH_AGO)) < 1
    fleet = rules.view(client.fleet_nodes(), time.time())
    decision = rules.may_take_out(fleet, ["gpu003"], time.time(), max_share=0.1, max_nodes=0, window_s=3600)
    assert decision.allowed, decision.reason


def test_a_node_with_no_reason_has_no_time(pyslurm):
    module, client = pyslurm
    module.NODES["gpu001"] = attrs(reason_time=0, reason_time_raw=None)
    assert client.fleet_nodes()[0].reason_time == ""


def test_a_read_past_the_timeout_raises_in_time(pyslurm):
    module, client = pyslurm
    module.NODES["gpu001"] = attrs()
    module.DELAY[0] = 5.0
    t0 = time.monotonic()
    with pytest.raises(SlurmTimeout, match="timed out after 2 s"):
        client.fleet_nodes()
    assert time.monotonic() - t0 < 3.5


def test_resume_leaves_a_node_only_not_responding_and_retries_a_state_race(pyslurm):
    """As the commands do: a node that is only NOT_RESPONDING is not resumed (its slurmd answers the
    next ping); Slurm's "Invalid node state" (a node changed between the read and the update) is tried
    again on a fresh read."""
    module, client = pyslurm
    module.NODES.update({"gpu001": attrs("IDLE+NOT_RESPONDING"),
                         "gpu002": attrs("IDLE+DRAIN", "slurm-ft: XID79 gpu3", reason_time=int(time.time()))})
    module.FAIL.append("Invalid node state specified")
    assert client.resume(["gpu001", "gpu002"]) == ["gpu002"]
    assert module.CALLS == [("gpu002", {"state": "RESUME"}), ("gpu002", {"state": "RESUME"})]
