"""The checkpoint fallback (job/ckptfallback.py), its starts-log reader (startlog.py), and the
starter passing over a checkpoint the job keeps failing on (jobstart, the requeue path)."""
from __future__ import annotations

import json
import os

from hypothesis import HealthCheck, given, settings, strategies as st

from slurm_ft.job import ckpt, ckptfallback as cf, jobstart, startlog, startprep


def start(step, reached=None, newest=None, event="launch", job="7", restart=0, launch=0):
    return {"event": event, "job": job, "step": step, "prev_reached": reached, "newest": newest,
            "restart": restart, "launch": launch}


def test_starts_from_a_checkpoint_that_get_nowhere_count_until_m_then_it_is_passed_over():
    starts = [start(None), start(10, reached=12, newest=10), start(10, reached=None, newest=10)]
    assert cf.failed_streak(starts, reached_now=None, newest_now=10) == {10: 2}
    assert cf.passed_over(starts, None, 10, m=3) == {}
    assert cf.passed_over(starts, None, 10, m=2) == {10: 2}
    assert cf.passed_over(starts, None, 10, m=0) == {}          # 0: never fall back


def test_progress_past_the_checkpoint_is_not_a_failure_and_ends_the_count():
    # each start reported the checkpoint's own step only: nothing trained
    starts = [start(10), start(10, reached=10, newest=10), start(10, reached=10, newest=10)]
    assert cf.failed_streak(starts, reached_now=10, newest_now=10) == {10: 3}
    # the last one reached 11: it trained, it just died before the next checkpoint
    assert cf.failed_streak(starts, reached_now=11, newest_now=10) == {}
    # the second one reached 11 (what the third start read): the count starts after it
    starts[2] = start(10, reached=11, newest=10)
    assert cf.failed_streak(starts, reached_now=10, newest_now=10) == {10: 1}


def test_without_reports_a_newer_checkpoint_at_the_next_start_is_progress():
    starts = [start(5), start(10, newest=10)]
    assert cf.failed_streak(starts, None, 10) == {10: 1}
    assert cf.failed_streak(starts, None, 15) == {}


def test_the_fallback_chain_counts_each_checkpoint_and_stops_at_a_start_from_scratch():
    starts = [start(None), *[start(10, newest=10) for _ in range(3)], start(5, newest=10),
              start(5, reached=5, newest=10)]
    # the starts from 5 (after 10 was passed over) reported step 5 only: failed too
    assert cf.failed_streak(starts, reached_now=5, newest_now=10) == {10: 3, 5: 2}
    # without reports: no checkpoint newer than 10 (the newest when they started) appeared: failed too
    assert cf.failed_streak(starts[:-1], reached_now=None, newest_now=10) == {10: 3, 5: 1}
    assert cf.failed_streak(starts[:-1], reached_now=None, newest_now=15) == {}
    assert cf.passed_over(starts, 5, 10, m=3) == {10: 3}


def test_starts_of_takes_this_jobs_starts_and_launches_only():
    recs = [start(1, event="jobstart"), start(2, job="8"), {"event": "hang", "job": "7"}, start(3, restart=1), "x"]
    assert [r["step"] for r in cf.starts_of([r for r in recs if isinstance(r, dict)], "7")] == [1, 3]


def test_the_plugins_start_record_and_the_supervisors_first_launch_are_one_start():
    """Through the SPANK plugin a supervised job logs its start twice: the plugin's resolver as the batch
    step starts, the supervisor's launch 0. Counted twice, one failed start would look like two."""
    recs = [start(None, event="jobstart", restart=0), start(None, event="launch", restart=0, launch=0),
            start(10, event="jobstart", restart=1), start(10, event="launch", restart=1, launch=0),
            start(10, event="launch", restart=1, launch=1),
            start(10, event="jobstart", restart=2)]                # the supervisor of restart 2 launches now
    assert [(r["event"], r["restart"]) for r in cf.starts_of(recs, "7", restart=2)] == [
        ("launch", 0), ("launch", 1), ("launch", 1)]
    assert cf.passed_over(cf.starts_of(recs, "7", restart=2), reached_now=10, newest_now=10, m=2) == {10: 2}
    assert cf.passed_over(cf.starts_of(recs, "7"), reached_now=10, newest_now=10, m=3) == {10: 3}   # no supervisor
    odd = [dict(recs[2], restart=[1]), dict(recs[3], launch="0")]       # the user's directory: any JSON
    assert cf.starts_of(odd, "7", restart=1) == odd


def test_reached_is_the_highest_step_the_launch_reported():
    records = {0: {"job": "7", "restart": 1, "launch": 0, "step": 12}, 1: {"job": "7", "restart": 1, "launch": 0, "step": 13},
               2: {"job": "7", "restart": 0, "launch": 0, "step": 99}}
    assert cf.reached(records, "7", 1, 0) == 13
    assert cf.reached(records, "7", 2, 0) is None


# --- the reader -----------------------------------------------------------------------------------

def test_the_reader_reads_the_tail_and_skips_what_is_not_an_object(tmp_path):
    p = tmp_path / "log"
    p.write_bytes(b'{"a": 1}\nnot json\n[1]\n\n{"b": 2}\n{"torn": ')
    assert startlog.read(str(p)) == [{"a": 1}, {"b": 2}]
    big = b"".join(json.dumps({"i": i}).encode() + b"\n" for i in range(5000))
    p.write_bytes(big)
    got = startlog.read(str(p), max_bytes=1000)
    assert got and got[-1] == {"i": 4999} and len(got) < 100 and all(set(r) == {"i"} for r in got)
    assert startlog.read(str(tmp_path / "none")) == []
    os.symlink(p, tmp_path / "link")
    assert startlog.read(str(tmp_path / "link")) == []          # the user's directory: no symlinks followed


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000), st.booleans())
def test_the_reader_never_raises_and_returns_objects_only(data, partial):
    got = startlog.parse(data, partial_head=partial)
    assert all(isinstance(r, dict) for r in got)


# generation time is the shared host's load (one draw took 31 s at load 100 in CI), not this test's
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.fixed_dictionaries({"event": st.sampled_from(["jobstart", "launch", "hang"]),
                                       "job": st.sampled_from(["7", 7, None]),
                                       "step": st.one_of(st.none(), st.integers(-5, 50), st.text(max_size=3)),
                                       "prev_reached": st.one_of(st.none(), st.integers(-5, 50), st.booleans()),
                                       "newest": st.one_of(st.none(), st.integers(-5, 50), st.floats())}),
                max_size=8),
       st.one_of(st.none(), st.integers(0, 50)), st.one_of(st.none(), st.integers(0, 50)), st.integers(0, 5))
def test_the_decision_takes_any_log_and_passes_over_only_checkpoints_started_from(records, reached, newest, m):
    starts = cf.starts_of(records, "7")
    bad = cf.passed_over(starts, reached, newest, m)
    assert all(type(s) is int and n >= max(m, 1) for s, n in bad.items())
    assert set(bad) <= {r["step"] for r in starts if type(r["step"]) is int}


# --- the starter (requeue path) -------------------------------------------------------------------

def test_the_starter_passes_over_a_checkpoint_that_failed_m_starts(tmp_path, monkeypatch, capsys):
    ck = tmp_path / "ck"
    for step in (5, 10):
        ckpt.write_checkpoint(str(ck), step, {"w": b"x"})
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    starts = []
    for restart in range(4):
        monkeypatch.setenv("SLURM_RESTART_COUNT", str(restart))
        resolved, found = jobstart._start(str(ck), ["t", "{ckpt}"], m=3)
        starts.append(found.step)
    assert starts == [10, 10, 10, 5]          # three starts from 10 never got past it: the fourth uses 5
    log = [json.loads(x) for x in (ck / startprep.STARTS_LOG).read_text().splitlines()]
    assert log[3]["passed_over"] == {"10": 3} and log[3]["newest"] == 10 and log[3]["step"] == 5
    assert "checkpoint step 10 failed 3 starts in a row (--ckpt-fails 3): passed over; the previous complete " \
           "checkpoint, step 5" in capsys.readouterr().err


def test_the_starter_does_not_fall_back_when_the_job_trained_past_its_checkpoint(tmp_path, monkeypatch):
    ck = tmp_path / "ck"
    for step in (5, 10):
        ckpt.write_checkpoint(str(ck), step, {"w": b"x"})
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_FT_CKPT_DIR", str(ck))
    from slurm_ft import heartbeat
    for restart in range(4):
        monkeypatch.setenv("SLURM_RESTART_COUNT", str(restart))
        _, found = jobstart._start(str(ck), ["t"], m=2)
        assert found.step == 10
        heartbeat.progress(13, force=True)      # each run got to step 13, then died before checkpoint 15


def test_the_starter_refuses_when_every_checkpoint_failed(tmp_path, monkeypatch):
    ck = tmp_path / "ck"
    ckpt.write_checkpoint(str(ck), 5, {"w": b"x"})
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    for _ in range(2):
        assert jobstart._start(str(ck), ["t"], m=2)[0] is not None
    resolved, found = jobstart._start(str(ck), ["t"], m=2)
    assert resolved is None and found.must_not_start
    assert jobstart.main(["--ckpt-dir", str(ck), "--ckpt-fails", "2", "--", "/bin/true"]) == 4
