"""The drain-rate breaker: the pure decision, and its state in the journal under concurrent callers."""
from __future__ import annotations

import multiprocessing as mp

import pytest

from slurm_ft.lifecycle import breaker as brk
from slurm_ft.lifecycle.store import Store

HOUR = 3600.0


@pytest.mark.parametrize("total,share,count,want", [
    (68, 0.1, 0, 6), (68, 0.1, 4, 4), (68, 0.0, 3, 3), (5, 0.1, 0, 1), (1000, 0.05, 0, 50)])
def test_limit_is_the_smaller_of_share_and_count(total, share, count, want):
    assert brk.limit(total, share, count) == want


def _decide(state, node, now, total=20, share=0.1, count=0, window=HOUR):
    return brk.decide(state, node, now, total_nodes=total, max_share=share, max_nodes=count, window_s=window)


def test_trips_on_the_drain_past_the_limit_and_stays_open():
    s = brk.BreakerState()
    d1, s = _decide(s, "gpu001", 0.0)
    d2, s = _decide(s, "gpu002", 10.0)
    assert d1.allowed and d2.allowed and d2.count == 1 and d2.limit == 2
    d3, s = _decide(s, "gpu003", 20.0)
    assert not d3.allowed and d3.tripped and s.open
    assert "2 nodes drained within 1 h (limit 2)" in d3.reason
    # open stays open even once the window has passed, until a reset
    d4, s = _decide(s, "gpu004", 10 * HOUR)
    assert not d4.allowed and not d4.tripped and "breaker reset" in d4.reason


def test_the_same_node_twice_counts_once():
    s = brk.BreakerState()
    _, s = _decide(s, "gpu001", 0.0, count=1, share=0)
    d, s = _decide(s, "gpu001", 5.0, count=1, share=0)     # the controller after the check
    assert d.allowed and not d.counted and not s.open


def test_window_slides():
    s = brk.BreakerState()
    _, s = _decide(s, "gpu001", 0.0, count=1, share=0)
    d, s = _decide(s, "gpu002", HOUR + 1, count=1, share=0)
    assert d.allowed


def test_reset_forgets_earlier_drains():
    s = brk.BreakerState()
    for i, t in enumerate((0.0, 1.0, 2.0)):
        _, s = _decide(s, f"gpu00{i}", t, count=2, share=0)
    assert s.open
    s = brk.reset(s, 3.0)
    assert not s.open
    d, s = _decide(s, "gpu009", 4.0, count=2, share=0)
    assert d.allowed and d.count == 0


def test_store_persists_trip_and_reset(tmp_path):
    kw = dict(total_nodes=68, max_share=0.0, max_nodes=1, window_s=HOUR)
    with Store(str(tmp_path)) as s:
        assert s.breaker_decide("gpu001", 1.0, **kw).allowed
        assert not s.breaker_decide("gpu002", 2.0, **kw).allowed
    with Store(str(tmp_path)) as s:
        st = s.breaker_state()
        assert st.open and st.open_since == 2.0 and "limit 1" in st.open_reason
        s.breaker_reset(3.0, actor="admin:root")
        assert not s.breaker_state().open
        assert s.breaker_decide("gpu002", 4.0, **kw).allowed


def _ask(args):
    state_dir, node = args
    with Store(state_dir) as s:
        return s.breaker_decide(node, 100.0, total_nodes=64, max_share=0.0, max_nodes=3, window_s=HOUR).allowed


def test_concurrent_checks_cannot_overrun_the_limit(tmp_path):
    """16 processes ask at once (the lab's fleet-wide fault): exactly the limit get through."""
    Store(str(tmp_path)).close()
    with mp.get_context("fork").Pool(8) as pool:
        answers = pool.map(_ask, [(str(tmp_path), f"gpu{i:03d}") for i in range(16)])
    assert sum(answers) == 3
    with Store(str(tmp_path)) as s:
        assert s.breaker_state().open


def test_drains_seen_in_slurm_count_too():
    """Checks on hosts that do not share the journal still count each other's drains through Slurm."""
    s = brk.BreakerState()
    d, s = brk.decide(s, "gpu003", 100.0, total_nodes=20, max_share=0, max_nodes=2, window_s=HOUR,
                      seen=["gpu001", "gpu002"])
    assert not d.allowed and d.tripped and d.count == 2
    d, _ = brk.decide(brk.BreakerState(), "gpu001", 100.0, total_nodes=20, max_share=0, max_nodes=2,
                      window_s=HOUR, seen=["gpu001", "gpu002"])
    assert d.allowed and not d.counted            # already drained: a reason update, not a new drain


def test_store_filters_seen_by_window_and_reset(tmp_path):
    kw = dict(total_nodes=68, max_share=0.0, max_nodes=1, window_s=HOUR)
    with Store(str(tmp_path)) as s:
        s.breaker_reset(1000.0)
        old = [("gpu001", 500.0)]                  # before the reset: no longer counts
        assert s.breaker_decide("gpu002", 2000.0, seen=old, **kw).allowed
        assert not s.breaker_decide("gpu003", 2001.0, seen=[("gpu004", 1990.0)], **kw).allowed
