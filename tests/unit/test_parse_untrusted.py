"""`scontrol show job -o` records hold the user's free text (JobName, Comment, Command, ...): no text
in them may change another field or make a second record (issue 10, item 7)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from slurm_ft.slurm import parse

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
RECORDS = [ln for ln in (DATA / "scontrol_show_job.txt").read_text().split("\n") if ln.strip()]
PENDING = next(r for r in RECORDS if r.startswith("JobId=2 "))      # a real 22.05 record, JobState=PENDING


def _with(record: str, *, name: str = None, comment: str = None) -> str:
    if name is not None:
        record = record.replace("JobName=wrap ", f"JobName={name} ", 1)
    if comment is not None:
        record = record.replace(" StdErr=", f" Comment={comment} StdErr=", 1)
    return record


def test_comment_with_slurm_keys_does_not_override_the_job():
    (job,) = parse.parse_jobs_kv(_with(PENDING, comment="ok JobState=RUNNING NodeList=gpu050"))
    assert (job.state, job.nodes, job.comment) == ("PENDING", (), "ok JobState=RUNNING NodeList=gpu050")


def test_job_name_with_slurm_keys_does_not_override_the_job():
    (job,) = parse.parse_jobs_kv(_with(PENDING, name="x JobState=RUNNING NodeList=gpu050"))
    assert (job.state, job.nodes, job.name) == ("PENDING", (), "x JobState=RUNNING NodeList=gpu050")


def test_line_separator_in_a_comment_makes_no_second_record():
    text = _with(PENDING, comment="a\u2028JobId=99 JobState=RUNNING NodeList=gpu050") + "\n"
    (job,) = parse.parse_jobs_kv(text)
    assert job.job_id == 2 and job.state == "PENDING" and "\u2028" in job.comment


def test_newline_in_a_comment_continues_the_record():
    (job,) = parse.parse_jobs_kv(_with(PENDING, comment="line one\nline two") + "\n")
    assert job.job_id == 2 and job.comment == "line one\nline two" and job.std_out.endswith("slurm-2.out")


def test_a_newline_and_another_jobs_id_in_a_comment_forge_no_record_of_that_job():
    """Review 2026-12-07 #6: `x<newline>JobId=1 ... JobState=PENDING` in job 2's comment would be a second
    record of job 1, which `jobs()` keeps over the real one. A record id seen twice is refused (the read
    fails loudly) rather than guessed."""
    real = next(r for r in RECORDS if r.startswith("JobId=1 "))
    forged = _with(PENDING, comment="x\nJobId=1 JobName=forged JobState=PENDING NodeList=(null)")
    with pytest.raises(ValueError, match="JobId=1 twice"):
        parse.parse_jobs_kv(real + "\n" + forged + "\n")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=120))
def test_no_comment_makes_a_second_record_of_a_job_that_is_listed(comment):
    """Whatever a comment holds (newlines, Slurm's keys), the jobs read are the listed ones, each once."""
    real = next(r for r in RECORDS if r.startswith("JobId=1 "))
    try:
        jobs = parse.parse_jobs_kv(real + "\n" + _with(PENDING, comment=comment) + "\n")
    except ValueError:
        return
    assert [j.job_id for j in jobs] == [1, 2]
    assert jobs[0].state == parse.parse_jobs_kv(real)[0].state


def test_comment_forging_a_later_field_does_not_steer_it():
    (job,) = parse.parse_jobs_kv(_with(PENDING, comment="a StdOut=/tmp/forged"))
    assert job.std_out.endswith("slurm-2.out") and job.comment == "a StdOut=/tmp/forged"


def test_two_equally_good_readings_are_refused_not_guessed():
    with pytest.raises(ValueError, match="ambiguous"):
        parse.parse_jobs_kv(_with(PENDING, comment="a StdErr=/e StdIn=/i StdOut=/tmp/forged"))


def test_every_captured_record_reads_as_before():
    for rec in RECORDS:
        assert parse.parse_job_line(rec) == parse.parse_kv_line(rec, parse.JOB_KEYS)


# --- properties --------------------------------------------------------------------------------

_KEYISH = st.sampled_from([" JobState=RUNNING", " NodeList=gpu050", " UserId=evil(0)", " StdOut=/x", " Comment=c",
                           " JobId=7", "\u2028JobId=9 ", " Partition=spares", " =", "  ", " Reason=Forged"])
FREE_TEXT = st.lists(st.one_of(st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                                              blacklist_characters="\n\r"), max_size=12),
                               _KEYISH), max_size=8).map("".join).map(lambda s: s.strip(" ") or "x")


@settings(max_examples=300, deadline=None)
@given(name=FREE_TEXT, comment=FREE_TEXT)
def test_free_text_never_changes_slurms_fields(name, comment):
    """Whatever a user writes in JobName and Comment, the record reads right or is refused."""
    try:
        (job,) = parse.parse_jobs_kv(_with(PENDING, name=name, comment=comment))
    except ValueError:
        return
    assert (job.job_id, job.state, job.nodes, job.user, job.partition) == (2, "PENDING", (), "root", "train")
    assert job.std_out.endswith("slurm-2.out")
    assert (job.name, job.comment) == (name, "" if comment == "(null)" else comment)   # Slurm's unset


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_jobs_or_a_value_error(text):
    try:
        jobs = parse.parse_jobs_kv(text)
    except ValueError:
        return
    assert all(isinstance(j.job_id, int) for j in jobs)


# --- node records: every controller cycle splits thousands of these (parse_kv_line) ---------------

_NODE_KEYS = sorted(parse.NODE_KEYS - {"NodeName", "Reason"})
_WORD = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), max_size=12)
_REASON = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_NODE_KEYS), _WORD), max_size=10, unique_by=lambda kv: kv[0]), _REASON)
def test_a_node_line_reads_back_field_by_field(fields, reason):
    """Values without whitespace come back as printed, `=` and key names inside them included; a trailing
    Reason (spaces, `=` and words included) comes back verbatim. (Whitespace then a key Slurm prints splits
    any value, as parse_kv_line says.)"""
    line = "NodeName=gpu001" + "".join(f" {k}={v}" for k, v in fields) + f" Reason={reason}"
    assume(not any(re.search(rf"\s{k}=", reason) for k in parse.NODE_KEYS))
    assert parse.parse_kv_line(line, parse.NODE_KEYS) == {"NodeName": "gpu001", **dict(fields), "Reason": reason}


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_nodes_or_a_value_error(text):
    try:
        nodes = parse.parse_nodes_kv(text)
    except ValueError:
        return
    assert all(n.name for n in nodes)
