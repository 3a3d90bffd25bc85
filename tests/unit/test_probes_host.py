"""Host probes (leftover GPU processes, disk, InfiniBand) and the burn-in verdict on hand-built readings."""
from __future__ import annotations

from dataclasses import replace

from slurm_ft.config import NodeType
from slurm_ft.node.probes import ProbeContext, get
from slurm_ft.finding import Action, Severity
from slurm_ft.gpu.sample import GpuSample, HostReadings, NodeSample
from slurm_ft.node.host import BurninResult, DiskSpace, Disks, GpuProcesses, IbPort, IbPorts, Process

CTX = ProbeContext(now=0.0, ignore_processes=("nvidia-persistenced",))


def read(**by_reader) -> NodeSample:
    return NodeSample(node="n", host=HostReadings(by_reader))


def test_leftover_process_fails_that_gpu_allowed_programs_pass():
    facts = {11: Process("nvidia-persiste", 0, "/usr/bin/nvidia-persistenced", True),
             42: Process("python", 1000, "/usr/bin/python3.11", True)}
    s = replace(read(processes=GpuProcesses({0: (11,), 1: (42,)}, facts)),
                gpus=(GpuSample(0, processes=(11,)), GpuSample(1, processes=(42,))))
    [f] = get("processes")(s, CTX)
    assert (f.code, f.gpu, f.severity, f.action) == ("GPU_PROC_LEFT", 1, Severity.FAIL, Action.DRAIN)
    assert "42 (python)" in f.reason


def test_disk_thresholds_and_unreadable_mount():
    gib = 1 << 30
    s = read(disk=Disks((DiskSpace("/ckpt", 100 * gib, 3 * gib), DiskSpace("/tmp", 100 * gib, 8 * gib),
                         DiskSpace("/scratch", 100 * gib, 50 * gib),
                         DiskSpace("/gone", error="No such file or directory"))))
    got = [(f.code, f.severity) for f in get("disk")(s, CTX)]
    # a job can fill a disk, not break it: full is reported, never a drain; an unreadable mount is a fault
    assert got == [("DISK_FULL", Severity.WARN), ("DISK_FULL", Severity.WARN), ("DISK_UNREADABLE", Severity.FAIL)]


def _port(dev, state="4: ACTIVE", phys="5: LinkUp", rate=400):
    return IbPort(dev, 1, state, phys, rate)


def test_infiniband_ports_counted_against_node_type():
    ctx = replace(CTX, node_type=NodeType(ib_ports=2, ib_rate_gbps=400))
    ok = read(infiniband=IbPorts((_port("mlx5_0"), _port("mlx5_1"))))
    assert get("infiniband")(ok, ctx) == []
    bad = read(infiniband=IbPorts((_port("mlx5_0"), _port("mlx5_1", "1: DOWN", "3: Disabled", 0))))
    [f] = get("infiniband")(bad, ctx)
    assert f.code == "IB_DOWN" and "mlx5_1:1 DOWN/Disabled" in f.reason
    slow = read(infiniband=IbPorts((_port("mlx5_0"), _port("mlx5_1", rate=200))))
    assert get("infiniband")(slow, ctx)[0].code == "IB_DOWN"
    [skip] = get("infiniband")(bad, CTX)            # node type without IB: not checked, and it says so
    assert skip.severity is Severity.OK and "not checked" in skip.reason


def test_burnin_slow_gpu_against_best_and_expected():
    ctx = replace(CTX, node_type=NodeType(tflops_bf16=700.0))
    s = read(burnin=BurninResult.of({"backend": "torch", "label": "torch bf16 matmul",
                                     "gpus": {0: 690.0, 1: 700.0, 2: 350.0}}))
    f = get("burnin")(s, ctx)
    fails = [x for x in f if x.severity is Severity.FAIL]
    assert [(x.code, x.gpu) for x in fails] == [("BURNIN_SLOW", 2)]
    assert "50% of the node's best" in fails[0].reason


def test_burnin_uniformly_slow_node_fails_against_expected_only():
    ctx = replace(CTX, node_type=NodeType(tflops_bf16=700.0))
    s = read(burnin=BurninResult.of({"backend": "torch", "gpus": {0: 400.0, 1: 400.0}}))
    assert len([x for x in get("burnin")(s, ctx) if x.severity is Severity.FAIL]) == 2


def test_burnin_skip_is_not_a_pass():
    s = read(burnin=BurninResult.of({"skipped": "no backend (no torch/cupy with CUDA, no dcgmi)"}))
    [f] = get("burnin")(s, CTX)
    assert f.severity is Severity.WARN and f.code == "BURNIN_SKIPPED" and "no backend" in f.reason
