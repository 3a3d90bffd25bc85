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
    p.write_text("xid,name,category,severity,action,drains,tokens,source\n13,x,user_app,fail,reboot,yes,,s\n")
    with pytest.raises(xid.CatalogError, match="user_app"):
        xid.load_catalog(p)
    p.write_text("xid,name,category,severity,action,drains,source\n13,x,driver,warn,none,maybe,s\n")
    with pytest.raises(xid.CatalogError, match="row 2"):
        xid.load_catalog(p)


def test_a_new_range_with_severity_words_is_rows_alone(tmp_path):
    # a made-up Xid whose line says Critical or Benign: the CSV says what each word means, no code changes
    p = tmp_path / "cat.csv"
    p.write_text("xid,name,category,severity,action,drains,tokens,source\n"
                 "170,made up,nvlink,warn,none,no,Critical=fail/reboot Benign=ignore/none,s\n")
    [info] = xid.load_catalog(p).values()
    critical = xid.token_in(info, "LINK_EVT Critical Link 3")
    assert (critical.severity, critical.action) == ("fail", "reboot")
    assert xid.token_in(info, "Benign, then Critical").word == "Benign"        # the first in the line decides
    assert xid.token_in(info, "Criticality unknown") is None                  # whole words only
    assert xid.token_in(info, "") is None


def test_nvlink5_rows_carry_their_words_in_the_catalog():
    for code in range(144, 151):
        assert [(t.word, t.severity, t.action) for t in xid.lookup(code).tokens] == [
            ("Fatal", "fail", "reset_gpu"), ("Nonfatal", "warn", "none")], code
    # 147 and 148 do not drain by their row; their Fatal line does, and that drain needs a GPU reset
    assert not xid.lookup(147).drains and xid.drained_action(147) == "reset_gpu"
    assert xid.drained_action(79) == "reboot" and xid.drained_action(999) == "drain"


@pytest.mark.parametrize("tokens, why", [
    ("Fatal", "is not WORD=severity/action"), ("Fatal=fatal/reboot", "bad severity/action"),
    ("Fatal=fail/explode", "bad severity/action"), ("Fatal=fail/reboot Fatal=warn/none", "listed twice"),
])
def test_a_bad_token_rule_is_refused_naming_its_row(tmp_path, tokens, why):
    p = tmp_path / "cat.csv"
    p.write_text(f"xid,name,category,severity,action,drains,tokens,source\n170,x,nvlink,warn,none,no,{tokens},s\n")
    with pytest.raises(xid.CatalogError, match=f"row 2: .*{why}"):
        xid.load_catalog(p)


def test_a_user_caused_row_may_not_drain_by_a_word_either(tmp_path):
    p = tmp_path / "cat.csv"
    p.write_text("xid,name,category,severity,action,drains,tokens,source\n13,x,user_app,ignore,none,no,Fatal=fail/reboot,s\n")
    with pytest.raises(xid.CatalogError, match="user_app"):
        xid.load_catalog(p)
