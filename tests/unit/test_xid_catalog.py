"""Catalog invariants: what drains and what never does."""
from __future__ import annotations

import pytest

from slurm_ft.gpu import xid
from slurm_ft.gpu.sample import XidEvent

USER_CAUSED = (13, 31, 43, 45, 68)
MUST_DRAIN = (48, 64, 74, 79, 95)


@pytest.mark.parametrize("code", USER_CAUSED)
def test_user_caused_xids_never_drain(code):
    info = xid.lookup(code)
    assert info.known and info.user_caused
    assert not info.drains and info.action == "none"


def test_every_user_app_row_never_drains():
    rows = [i for i in xid.catalog().values() if i.category == "user_app"]
    assert len(rows) >= 5
    assert not any(i.drains for i in rows)


@pytest.mark.parametrize("code", MUST_DRAIN)
def test_hardware_xids_drain(code):
    info = xid.lookup(code)
    assert info.drains and info.severity == "fail"
    assert info.action in ("reset_gpu", "reboot", "rma", "drain")


def test_specific_actions():
    assert xid.lookup(79).action == "reboot"
    assert xid.lookup(64).action == "rma"
    assert xid.lookup(48).action == "reset_gpu"
    assert xid.lookup(94).severity == "warn" and not xid.lookup(94).drains


def test_drains_exactly_when_fail():
    for info in xid.catalog().values():
        assert info.drains == (info.severity == "fail"), info.xid
        assert info.source, info.xid


def test_unknown_xid_is_conservative():
    info = xid.lookup(999)
    assert not info.known and info.drains and info.action == "drain"


def test_nvlink5_fatal_token_decides():
    fatal = XidEvent(xid=149, detail="NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x0)")
    nonfatal = XidEvent(xid=149, detail="NETIR_BER_EVENT Nonfatal XC1 i0 Link 12 (0x0 0x0)")
    assert xid.verdict(fatal).drains and xid.verdict(fatal).action == "reset_gpu"
    assert not xid.verdict(nonfatal).drains
    trex_fatal = XidEvent(xid=147, detail="TREX Fatal XC0 i0 Link -1 (0x0 0x0)")
    assert xid.verdict(trex_fatal).drains


def test_sxid_never_drains():
    ev = XidEvent(xid=20034, detail="nvidia-nvswitch1: Fatal, Link 48 LTSSM Fault Up", kind="sxid")
    assert not xid.verdict(ev).drains


def test_bad_catalog_rejected(tmp_path):
    p = tmp_path / "cat.csv"
    p.write_text("xid,name,category,severity,action,drains,source\n13,x,user_app,fail,reboot,yes,s\n")
    with pytest.raises(xid.CatalogError, match="user_app"):
        xid.load_catalog(p)
    p.write_text("xid,name,category,severity,action,drains,source\n13,x,driver,warn,none,maybe,s\n")
    with pytest.raises(xid.CatalogError, match="row 2"):
        xid.load_catalog(p)
