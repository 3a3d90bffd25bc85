"""`ckpt plan`: state size in TB and TiB, bytes per rank, hops, sync vs async blocking, run-time share."""
from __future__ import annotations

import json

import pytest

from planning_helpers import check_printed_steps, run_cli
from slurm_ft.plan.ckpt_io import plan_checkpoint


def test_70b_is_1_12_tb_and_1_02_tib_with_the_1_13_note():
    p = plan_checkpoint(70e9, gpus=1024)
    assert p.state_gb == 1120
    assert p.state_tib == pytest.approx(70e9 * 16 / 2 ** 40, abs=5e-4)      # 1.019 TiB
    assert any("1.13 TB" in n and "70.6e9" in n for n in p.notes)


def test_405b_is_6_5_tb():
    assert plan_checkpoint(405e9, gpus=16384).state_gb / 1000 == pytest.approx(6.48)


def test_bytes_per_rank_and_hops():
    # fully sharded over 1,024 GPUs: 1,120 GB / 1,024 = 1.094 GB a rank; 8.75 GB a node
    p = plan_checkpoint(70e9, gpus=1024, d2h_gbps=25, node_storage_gbps=50, storage_gbps=2000, interval_min=30)
    assert p.per_rank_gb == pytest.approx(1.094) and p.per_node_gb == pytest.approx(8.75)
    assert p.gpu_to_host_s == pytest.approx(1.094 / 25, rel=1e-3)
    assert p.host_to_storage_s == pytest.approx(1120 / 2000) and p.bottleneck == "storage aggregate"
    assert p.sync_blocking_s == pytest.approx(p.gpu_to_host_s + p.host_to_storage_s, rel=1e-3)
    assert p.async_blocking_s == p.gpu_to_host_s < p.sync_blocking_s
    assert p.sync_share == pytest.approx(p.sync_blocking_s / (1800 + p.sync_blocking_s), rel=1e-3)
    # 8 shards (model parallel only, replicated otherwise): 140 GB each, written by 8 nodes
    q = plan_checkpoint(70e9, gpus=1024, shards=8, node_storage_gbps=50)
    assert q.per_rank_gb == 140 and q.per_node_gb == 140
    assert q.bottleneck == "node links" and q.host_to_storage_s == pytest.approx(2.8)


def test_slow_storage_warns_that_async_cannot_keep_up():
    p = plan_checkpoint(405e9, gpus=16384, storage_gbps=5, interval_min=10)
    assert not p.async_keeps_up
    assert any("cannot keep up" in n for n in p.notes)


def test_printed_arithmetic(capsys):
    for args in (["--params", "70e9", "--gpus", "1024"],
                 ["--params", "405e9", "--gpus", "16384", "--shards", "128", "--interval-min", "5"],
                 ["--params", "8e9", "--gpus", "64", "--bytes-per-param", "14", "--d2h-gbps", "12.5"]):
        code, out, err = run_cli(capsys, "ckpt", "plan", *args)
        assert code == 0, err
        check_printed_steps(out, minimum=12)


def test_json(capsys):
    code, out, _ = run_cli(capsys, "ckpt", "plan", "--params", "70e9", "--gpus", "1024", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["state_tb"] == pytest.approx(1.12) and d["bytes_per_rank"] == pytest.approx(1.094e9)
    for key in ("gpu_to_host_s", "host_to_storage_s", "sync_blocking_s", "async_blocking_s",
                "sync_share_of_run_time", "async_share_of_run_time", "derivation"):
        assert key in d


@pytest.mark.parametrize("args,fragment", [
    (["--params", "-1", "--gpus", "8"], "--params must be a positive number"),
    (["--params", "7e9", "--gpus", "0"], "must be positive"),
    (["--params", "7e9", "--gpus", "12"], "not a multiple"),
    (["--params", "7e9", "--gpus", "8", "--shards", "9"], "--shards must be between 1 and --gpus"),
    (["--params", "7e9", "--gpus", "8", "--storage-gbps", "0"], "--storage-gbps must be a positive number"),
    (["--params", "7e9", "--gpus", "8", "--interval-min", "-3"], "--interval-min must be a positive number"),
])
def test_bad_input(capsys, args, fragment):
    code, out, err = run_cli(capsys, "ckpt", "plan", *args)
    assert code == 2 and fragment in err and err.count("\n") == 1
