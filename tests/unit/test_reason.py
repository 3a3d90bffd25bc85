"""The drain reasons slurm-ft writes, rendered and read back in vocab.py alone (issue 26): each form's
reader gets back what its writer put in, every form is one line of at most REASON_MAX printable ASCII
characters, and a reason slurm-ft did not write reads as nobody's."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ft import vocab

TEXT = st.text(max_size=200)
CODE = st.from_regex(r"(XID[1-9][0-9]{0,2}|[A-Z][A-Z0-9]{1,8}(_[A-Z0-9]{1,8}){1,3})", fullmatch=True)
GPU = st.one_of(st.none(), st.integers(0, 15))
FOREIGN = TEXT.filter(lambda t: not t.strip().startswith(vocab.OWNER))


def one_line(reason: str) -> bool:
    return len(reason) <= vocab.REASON_MAX and all(" " <= c <= "~" for c in reason) and reason == reason.strip()


@settings(max_examples=300)
@given(CODE, GPU, TEXT, st.integers(0, 30))
def test_a_checks_reason_names_its_code_and_gpu(code, gpu, finding, more):
    r = vocab.check_reason(code, gpu, finding, more)
    assert one_line(r) and vocab.owned(r)
    assert vocab.code_of(r) == code
    assert vocab.finding_code(r) == (code, gpu)
    if more:
        assert r.endswith(f"(+{more} more)")


SEEN = st.from_regex(r"[A-Z_+]{1,20}(: [A-Za-z]{1,10}( [a-z]{1,10})?)?", fullmatch=True)   # how Slurm showed it


@given(SEEN, st.integers(1, 10**7))
def test_an_unresponsive_quarantine_reads_back_as_written_and_through_the_sweeps_rewrite(seen, job):
    r = vocab.unresponsive_reason(seen, job)
    assert one_line(r)
    cause = vocab.unresponsive_cause(r)
    assert cause is not None and f"{seen} during job {job}".startswith(cause)
    assert vocab.unresponsive_cause(vocab.rewritten_reason("QUARANTINED", r)) == cause
    # answering again: the sweep's validation reads how it was seen and whether it was an outage
    for outage in (False, True):
        back = vocab.revalidate_reason(r, outage)
        assert one_line(back) and vocab.revalidation(back)[1] is outage
        assert vocab.code_of(back) == "REVALIDATE" and vocab.unresponsive_cause(back) is None


@given(CODE, GPU, TEXT)
def test_the_lifecycles_rewrites_keep_what_the_reason_said(code, gpu, finding):
    r = vocab.check_reason(code, gpu, finding)
    q = vocab.rewritten_reason("QUARANTINED", r)
    assert vocab.code_of(q) == "QUARANTINED" and vocab.finding_code(q) == (code, gpu)
    # a second rewrite replaces the tag, it does not stack them
    assert vocab.rewritten_reason("QUARANTINED", vocab.rewritten_reason("RMA", q)) == q
    assert vocab.code_of(vocab.rewritten_reason("RMA", q)) == "RMA"
    assert one_line(vocab.reboot_reason(f"{code} gpu{gpu}", 1, 2))
    assert vocab.finding_code(vocab.reboot_reason(f"{code} gpu{gpu}", 1, 2)) == (code, gpu)


@given(FOREIGN)
def test_a_reason_slurm_ft_did_not_write_is_nobodys(reason):
    assert not vocab.owned(reason) and vocab.code_of(reason) == ""
    assert vocab.revalidation(reason) is None and vocab.unresponsive_cause(reason) is None
    assert not vocab.planned(reason) and not vocab.planned_unquarantined(reason)
    # an admin's reason the sweep keeps while quarantining is carried, not claimed
    assert vocab.code_of(vocab.rewritten_reason("QUARANTINED", reason)) == "QUARANTINED"


@given(st.lists(st.tuples(CODE, GPU, TEXT), min_size=1, max_size=5))
def test_a_hang_culprits_first_code_reads_back(findings):
    why = vocab.hang_culprit(findings)
    assert len(why) <= 300 and vocab.owned(why)
    assert vocab.hang_code(why) == findings[0][0]


def test_each_form_as_an_admin_sees_it_in_sinfo():
    assert vocab.check_reason("XID79", 3, "GPU has fallen off the bus", 1) == \
        "slurm-ft: XID79 gpu3 GPU has fallen off the bus (+1 more)"
    assert vocab.unresponsive_reason("DOWN+NOT_RESPONDING: Not responding", 7) == \
        "slurm-ft: quarantined, DOWN+NOT_RESPONDING: Not responding during job 7"
    assert vocab.admin_quarantine_reason("alice", "fans loud") == "slurm-ft: QUARANTINED by alice: fans loud"
    assert vocab.rewritten_reason("RMA", "slurm-ft: QUARANTINED XID79 gpu3 x") == "slurm-ft: RMA XID79 gpu3 x"
    assert vocab.reboot_reason("XID79 gpu3", 1, 2) == "slurm-ft: REBOOT XID79 gpu3 attempt 1/2"
    assert vocab.validation_failed_reason("burnin: gpu2 41 TFLOPS") == "slurm-ft: validation failed: burnin: gpu2 41 TFLOPS"
    assert vocab.revalidate_reason("slurm-ft: quarantined, DOWN during job 7", True) == \
        "slurm-ft: REVALIDATE outage, answers again; quarantined, DOWN during job 7"
    assert vocab.sim_reason("xid", "hard") == "slurm-ft: SIM xid (hard fault, simulated)"
    assert vocab.job_comment("held: no spare") == "slurm-ft: held: no spare"
