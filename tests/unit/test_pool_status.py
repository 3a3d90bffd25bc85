"""The live pool against the plan, over snapshots built from the shared model (no daemons)."""
from __future__ import annotations

import pytest

from slurm_ft.errors import UsageError
from slurm_ft.slurm.types import Node, Partition
from slurm_ft.fleet.report.pool_status import gpus_in_gres, pool_status


@pytest.mark.parametrize("gres,gpus", [
    ("gpu:8", 8), ("gpu:h100:8(S:0-1)", 8), ("gpu:a100:4,gpu:h100:4", 8), ("gpu:h100:8(S:0-1),nic:2", 8),
    ("", 0), ("(null)", 0), ("nic:4", 0), ("gpu:4(S:0),gpu:4(S:1)", 8),
])
def test_gpus_in_gres(gres, gpus):
    assert gpus_in_gres(gres) == gpus


def snapshot():
    train = [Node(f"gpu{i:03d}", "IDLE", gres="gpu:8") for i in range(1, 7)]
    spares = [Node("gpu007", "IDLE", gres="gpu:8"),
              Node("gpu008", "ALLOCATED", gres="gpu:8"),
              Node("gpu009", "IDLE", frozenset({"DRAIN"}), reason="slurm-ft: XID79 gpu 2", gres="gpu:8"),
              Node("gpu010", "DOWN", frozenset({"NOT_RESPONDING"}), reason="Not responding", gres="gpu:8")]
    parts = [Partition("train", tuple(n.name for n in train), default=True),
             Partition("spares", tuple(n.name for n in spares) + ("gpu011",)),
             Partition("debug", ("gpu001", "gpu002"))]
    return train + spares, parts


def test_pool_is_sorted_into_healthy_busy_and_not_healthy():
    nodes, parts = snapshot()
    st = pool_status(nodes, parts, "spares")
    assert st.cluster_nodes == 6 and st.cluster_gpus == 48 and st.gpus_per_node == 8
    assert st.job_partitions == ("debug", "train")      # every partition but the pool; nodes counted once
    assert st.healthy_idle == ["gpu007"] and st.busy == ["gpu008"]
    assert [u[0] for u in st.unhealthy] == ["gpu009", "gpu010", "gpu011"]
    assert st.unhealthy[0] == ("gpu009", "IDLE+DRAIN", "slurm-ft: XID79 gpu 2")
    assert st.unhealthy[2][2] == "not reported by Slurm"
    assert st.pool_size == 5


def test_job_partitions_and_gpus_per_node_can_be_given():
    nodes, parts = snapshot()
    st = pool_status(nodes, parts, "spares", job_partitions=("debug",), gpus_per_node=4)
    assert st.cluster_nodes == 2 and st.gpus_per_node == 4


def test_a_spare_that_is_also_in_train_is_not_counted_as_cluster():
    nodes, parts = snapshot()
    parts = [Partition("train", parts[0].nodes + ("gpu007",)), parts[1]]
    assert pool_status(nodes, parts, "spares").cluster_nodes == 6


def test_unknown_pool_partition():
    nodes, parts = snapshot()
    with pytest.raises(UsageError, match="no partition 'pool'"):
        pool_status(nodes, parts, "pool")
