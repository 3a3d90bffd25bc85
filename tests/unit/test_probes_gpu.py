"""GPU probes judged on hand-built samples: each fault class fails the right GPU with the right action."""
from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_ft.config import NodeType, Thresholds
from slurm_ft.node.probes import ProbeContext, get
from slurm_ft.finding import Action, Severity
from slurm_ft.gpu.sample import EccCounts, GpuSample, HostReadings, NodeSample, NvLink, Pcie, RetiredPages, RowRemap
from slurm_ft.node.host import ClockSeries


def healthy_gpu(i: int) -> GpuSample:
    return GpuSample(
        index=i, uuid=f"GPU-{i}", pci_bus_id=f"00000000:{0x18 + i:02x}:00.0", name="NVIDIA H100 80GB HBM3",
        ecc=EccCounts(0, 0, 0, 0), remap=RowRemap(), retired=None,
        nvlinks=tuple(NvLink(l, True, 0, 0, 0) for l in range(18)),
        pcie=Pcie(gen=5, max_gen=5, width=16, max_width=16), clock_event_reasons=0x1, temperature_c=40,
        power_w=100.0)


def node(*gpus, **kw) -> NodeSample:
    return NodeSample(node="gpu001", gpus=tuple(gpus) or tuple(healthy_gpu(i) for i in range(8)), **kw)


def with_gpu(i: int, **changes) -> NodeSample:
    gpus = [healthy_gpu(g) for g in range(8)]
    gpus[i] = replace(gpus[i], **changes)
    return node(*gpus)


CTX = ProbeContext(node_type=NodeType(), thresholds=Thresholds(), now=1000.0)
ALL = ["inventory", "ecc", "remap", "retired", "pcie", "nvlink", "clocks", "temperature"]


def only(findings, severity):
    return [f for f in findings if f.severity is severity]


@pytest.mark.parametrize("check", ALL)
def test_healthy_node_has_no_findings(check):
    assert get(check)(node(), CTX) == []


def test_missing_gpu_fails_count():
    f = get("inventory")(node(*[healthy_gpu(i) for i in range(7)]), CTX)
    assert [(x.code, x.severity, x.action) for x in f] == [("GPU_COUNT", Severity.FAIL, Action.REBOOT)]
    assert "7 of 8" in f[0].reason


def test_lost_gpu_fails_that_gpu():
    f = get("inventory")(with_gpu(3, lost=True, error="GPU is lost"), CTX)
    assert [(x.code, x.gpu) for x in f] == [("GPU_LOST", 3)]


def test_nvml_error_fails_only_when_gpus_expected():
    s = NodeSample(node="n", nvml_error="NVML library not found")
    assert get("inventory")(s, CTX)[0].code == "NVML_INIT"
    assert get("inventory")(s, replace(CTX, node_type=NodeType(gpus=0))) == []


def test_lost_gpu_is_not_judged_by_other_probes():
    s = with_gpu(2, lost=True, ecc=EccCounts(5, 5), pcie=Pcie(1, 5, 1, 16), temperature_c=120)
    for check in ("ecc", "pcie", "temperature"):
        assert get(check)(s, CTX) == []


def test_volatile_uncorrectable_ecc_fails_with_reset():
    f = get("ecc")(with_gpu(5, ecc=EccCounts(volatile_corrected=0, volatile_uncorrected=2)), CTX)
    assert [(x.code, x.gpu, x.severity, x.action) for x in f] == [("ECC_DBE", 5, Severity.FAIL, Action.RESET_GPU)]


def test_aggregate_only_ecc_is_history_not_a_finding():
    assert get("ecc")(with_gpu(5, ecc=EccCounts(0, 0, 10, 3)), CTX) == []


def test_many_corrected_ecc_warns():
    f = get("ecc")(with_gpu(1, ecc=EccCounts(volatile_corrected=5000, volatile_uncorrected=0)), CTX)
    assert [(x.code, x.severity) for x in f] == [("ECC_SBE_HIGH", Severity.WARN)]


def test_remap_pending_resets_and_failure_is_rma():
    f = get("remap")(with_gpu(0, remap=RowRemap(1, 1, pending=True)), CTX)
    assert [(x.code, x.action) for x in f] == [("REMAP_PENDING", Action.RESET_GPU)]
    f = get("remap")(with_gpu(0, remap=RowRemap(1, 1, failure=True)), CTX)
    assert [(x.code, x.action, x.severity) for x in f] == [("REMAP_FAILURE", Action.RMA, Severity.FAIL)]


def test_retired_pages_threshold_and_pending():
    f = get("retired")(with_gpu(0, retired=RetiredPages(60, 3)), CTX)
    assert [(x.code, x.action) for x in f] == [("RETIRED_PAGES", Action.RMA)]
    assert get("retired")(with_gpu(0, retired=RetiredPages(60, 2)), CTX) == []
    f = get("retired")(with_gpu(0, retired=RetiredPages(1, 0, pending=True)), CTX)
    assert [(x.code, x.action) for x in f] == [("RETIRE_PENDING", Action.RESET_GPU)]


def test_pcie_width_below_max_fails_gen_only_warns_when_idle():
    f = get("pcie")(with_gpu(4, pcie=Pcie(gen=5, max_gen=5, width=8, max_width=16)), CTX)
    assert [(x.code, x.gpu, x.severity) for x in f] == [("PCIE_WIDTH", 4, Severity.FAIL)]
    assert "x8 of x16" in f[0].reason
    f = get("pcie")(with_gpu(4, pcie=Pcie(gen=1, max_gen=5, width=16, max_width=16)), CTX)
    assert [(x.code, x.severity) for x in f] == [("PCIE_GEN", Severity.WARN)]
    f = get("pcie")(with_gpu(4, pcie=Pcie(gen=1, max_gen=5, width=16, max_width=16)), replace(CTX, level="burnin"))
    assert [(x.code, x.severity) for x in f] == [("PCIE_GEN", Severity.FAIL)]


def test_pcie_width_below_node_type_fails_even_if_slot_reports_narrow_max():
    f = get("pcie")(with_gpu(0, pcie=Pcie(gen=5, max_gen=5, width=8, max_width=8)), CTX)
    assert f and f[0].code == "PCIE_WIDTH"


def test_nvlink_down_names_links():
    links = tuple(NvLink(l, l not in (3, 7), 0, 0, 0) for l in range(18))
    f = get("nvlink")(with_gpu(6, nvlinks=links), CTX)
    assert [(x.code, x.gpu, x.severity, x.action) for x in f] == [("NVLINK_DOWN", 6, Severity.FAIL, Action.RESET_GPU)]
    assert "16 of 18" in f[0].reason and "3,7" in f[0].reason


def test_nvlink_not_checked_when_node_type_has_none():
    ctx = replace(CTX, node_type=NodeType(nvlinks_per_gpu=0))
    assert get("nvlink")(with_gpu(0, nvlinks=(), unsupported=("nvlink",)), ctx) == []
    assert get("nvlink")(with_gpu(0, nvlinks=(), unsupported=("nvlink",)), CTX)[0].code == "NVLINK_DOWN"


def test_nvlink_error_counters_warn():
    links = tuple(NvLink(l, True, 500 if l == 2 else 0, 0, 0) for l in range(18))
    f = get("nvlink")(with_gpu(1, nvlinks=links), CTX)
    assert [(x.code, x.severity) for x in f] == [("NVLINK_ERRORS", Severity.WARN)]


def test_single_clock_event_warns_persistent_fails():
    f = get("clocks")(with_gpu(2, clock_event_reasons=0x8), CTX)
    assert [(x.code, x.severity) for x in f] == [("HW_SLOWDOWN", Severity.WARN)]
    s = replace(with_gpu(2, clock_event_reasons=0x8), host=HostReadings({"clocks": ClockSeries({2: (0x8, 0x8, 0x8)})}))
    f = get("clocks")(s, CTX)
    assert [(x.code, x.gpu, x.severity) for x in f] == [("HW_SLOWDOWN", 2, Severity.FAIL)]
    s = replace(with_gpu(2, clock_event_reasons=0x8), host=HostReadings({"clocks": ClockSeries({2: (0x8, 0x0, 0x8)})}))
    assert only(get("clocks")(s, CTX), Severity.FAIL) == []


def test_sw_power_cap_and_idle_are_normal():
    assert get("clocks")(with_gpu(0, clock_event_reasons=0x1 | 0x4 | 0x10), CTX) == []


def test_temperature_warn_and_fail():
    assert get("temperature")(with_gpu(0, temperature_c=88), CTX)[0].severity is Severity.WARN
    f = get("temperature")(with_gpu(0, temperature_c=97), CTX)
    assert (f[0].severity, f[0].code) == (Severity.FAIL, "TEMP_HIGH")


def test_unsupported_readings_never_fail():
    g = GpuSample(index=0, ecc=None, remap=None, retired=None, pcie=None, temperature_c=None,
                  unsupported=("ecc", "remap", "pcie"))
    s = node(g)
    ctx = replace(CTX, node_type=NodeType(gpus=1, nvlinks_per_gpu=0))
    for check in ALL:
        assert only(get(check)(s, ctx), Severity.FAIL) == []
