"""slurm-ft's words on Slurm's objects (slurm_ft/vocab.py): what it owns, how long a reason may be, Slurm's times."""
from __future__ import annotations

import time

from hypothesis import given, strategies as st

from slurm_ft import vocab
from slurm_ft.slurm.client import check_reason


def test_only_reasons_that_start_with_the_owner_are_ours():
    assert vocab.owned("slurm-ft: XID79 gpu3 fallen off the bus")
    assert vocab.owned("  slurm-ft: quarantined, DOWN+NOT_RESPONDING during job 7")
    assert not vocab.owned("admin: bad fan (slurm-ft: XID79)")
    assert not vocab.owned("Prolog error")


@given(st.text(max_size=300))
def test_a_fitted_reason_is_one_line_within_the_limit_and_never_ends_in_a_space(text):
    out = vocab.fit(text)
    assert len(out) <= vocab.REASON_MAX and out == out.strip() and "\n" not in out
    assert check_reason(out) == out if out else True           # what the Slurm client accepts (issue 22)
    assert out.isascii() and out.isprintable()


def test_slurms_local_time_and_its_placeholders():
    assert vocab.slurm_time("2026-11-29T16:30:05") == time.mktime((2026, 11, 29, 16, 30, 5, 0, 0, -1))
    for none in ("", None, "None", "Unknown", "(null)", "N/A", "yesterday"):
        assert vocab.slurm_time(none) is None


def test_every_prolog_or_epilog_fault_reason_is_a_slurm_fault_reason():
    assert set(vocab.HOOK_FAULT_REASONS) < set(vocab.SLURM_FAULT_REASONS)


def test_an_admins_reason_is_any_but_ours_and_slurms_own():
    for theirs in ("admin: DIMM swap, ticket 4711", "bios update friday", " rack 4 power work", "XID79 again (bob)"):
        assert vocab.admins(theirs), theirs
    for not_theirs in ("", "  ", "slurm-ft: XID79 gpu3 x", "slurm-ft: quarantined, DOWN during job 7", "Prolog error",
                       "Epilog error", "Kill task failed", "Not responding", "Node unexpectedly rebooted"):
        assert not vocab.admins(not_theirs), not_theirs
    assert vocab.admins("Kill task failed", slurm_reasons=())           # the site's own list of Slurm's reasons


@given(st.text(max_size=120))
def test_a_reason_is_ours_slurms_or_an_admins_never_two(text):
    if vocab.owned(text):
        assert not vocab.admins(text)
