"""The Xid probe: catalog verdicts, user-caused Xids never drain, time window, recurrence heuristic."""
from __future__ import annotations

from dataclasses import replace

from slurm_ft.node.probes import ProbeContext, get
from slurm_ft.finding import Action, Severity
from slurm_ft.gpu.sample import NodeSample, XidEvent

probe = get("xid")
CTX = ProbeContext(now=1000.0)


def sample(*events) -> NodeSample:
    return NodeSample(node="gpu001", xids=tuple(events))


def ev(xid, gpu=3, t=900.0, detail="", kind="xid") -> XidEvent:
    return XidEvent(xid=xid, pci_bus_id="0000:1b:00", gpu=gpu, detail=detail, timestamp=t, kind=kind)


def test_fallen_off_bus_fails_with_reboot():
    [f] = probe(sample(ev(79)), CTX)
    assert (f.code, f.gpu, f.severity, f.action) == ("XID79", 3, Severity.FAIL, Action.REBOOT)
    assert "fallen off the bus" in f.reason.lower()


def test_dbe_and_remap_failure_xids():
    [f48] = probe(sample(ev(48)), CTX)
    assert (f48.severity, f48.action) == (Severity.FAIL, Action.RESET_GPU)
    [f64] = probe(sample(ev(64)), CTX)
    assert (f64.severity, f64.action) == (Severity.FAIL, Action.RMA)


def test_user_caused_xids_never_fail():
    for code in (13, 31, 43, 45, 68):
        [f] = probe(sample(ev(code)), CTX)
        assert f.severity is Severity.OK and f.action is Action.NONE, code
        assert "application" in f.reason


def test_recurring_user_xid_on_same_gpu_warns():
    ctx = replace(CTX, xid_history={(3, 13): 3})
    [f] = probe(sample(ev(13, gpu=3)), ctx)
    assert f.severity is Severity.WARN and "recurred" in f.reason
    [f] = probe(sample(ev(13, gpu=4)), ctx)
    assert f.severity is Severity.OK


def test_old_xids_outside_window_are_ignored():
    assert probe(sample(ev(79, t=100.0)), replace(CTX, xid_since=500.0)) == []
    assert probe(sample(ev(79, t=600.0)), replace(CTX, xid_since=500.0))[0].code == "XID79"


def test_repeated_xids_make_one_finding_with_count():
    [f] = probe(sample(ev(79, t=901), ev(79, t=902), ev(79, t=903)), CTX)
    assert "x3" in f.reason


def test_unmapped_gpu_names_pci_id():
    [f] = probe(sample(ev(79, gpu=None)), CTX)
    assert f.gpu is None and "0000:1b:00" in f.reason


def test_nvlink5_fatal_token_decides():
    [f] = probe(sample(ev(149, detail="NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000)")), CTX)
    assert f.severity is Severity.FAIL
    [f] = probe(sample(ev(149, detail="NETIR_BER_EVENT Nonfatal XC0 i0 Link 08 (0x0 0x0)")), CTX)
    assert f.severity is Severity.WARN


def test_unknown_xid_fails_by_policy():
    [f] = probe(sample(ev(9999)), CTX)
    assert f.severity is Severity.FAIL


def test_sxid_is_reported_not_drained():
    [f] = probe(sample(ev(20034, gpu=None, kind="sxid", detail="nvidia-nvswitch1: Fatal, Link 48")), CTX)
    assert f.code == "SXID20034" and f.severity is not Severity.FAIL
