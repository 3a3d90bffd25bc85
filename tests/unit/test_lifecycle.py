"""Lifecycle rules (pure) and the node-history store (a real SQLite journal in a temp dir)."""
from __future__ import annotations

import os
import time

import pytest

from slurm_ft.errors import ConfigError, UsageError
from slurm_ft.fleet.lifecycle.reconcile import classify, count_states, reason_age, state_of
from slurm_ft.fleet.lifecycle.transitions import Event, HistoryEntry, State, TransitionError, incidents, next_state
from slurm_ft.fleet.lifecycle.node_history import Store
from slurm_ft.slurm.types import Node

DAY = 86400.0


def test_full_lap_of_transitions():
    st = State.IN_SERVICE
    for event, want in [(Event.FAULT, State.FAILED), (Event.QUARANTINE, State.QUARANTINED),
                        (Event.REPAIRED, State.REPAIRED), (Event.VALIDATE, State.VALIDATING),
                        (Event.PASS, State.SPARE), (Event.SWAP_IN, State.IN_SERVICE)]:
        st = next_state(st, event)
        assert st is want


def test_failed_validation_goes_back_to_quarantine():
    assert next_state(State.VALIDATING, Event.FAIL, incident_count=1, lemon_k=3) is State.QUARANTINED


def test_lemon_goes_to_rma_on_the_kth_incident():
    assert next_state(State.FAILED, Event.QUARANTINE, incident_count=2, lemon_k=3) is State.QUARANTINED
    assert next_state(State.FAILED, Event.QUARANTINE, incident_count=3, lemon_k=3) is State.RMA
    assert next_state(State.VALIDATING, Event.FAIL, incident_count=3, lemon_k=3) is State.RMA
    # a pass never sends a node to RMA, whatever its past
    assert next_state(State.VALIDATING, Event.PASS, incident_count=9, lemon_k=3) is State.SPARE


@pytest.mark.parametrize("state,event,words", [
    (State.RMA, Event.REPAIRED, "node release"),
    (State.IN_SERVICE, Event.REPAIRED, "only a quarantined node"),
    (State.SPARE, Event.RELEASE, "only a node on the RMA list"),
    (State.QUARANTINED, Event.QUARANTINE, "already quarantined"),
])
def test_refusals_say_what_to_do(state, event, words):
    with pytest.raises(TransitionError, match=words) as exc:
        next_state(state, event)
    assert isinstance(exc.value, UsageError)   # exit 2


def _h(t, event, frm=State.IN_SERVICE, to=State.FAILED):
    return HistoryEntry("gpu001", t, event, frm, to)


def test_incidents_count_window_and_release():
    now = 100 * DAY
    hist = [_h(now - 40 * DAY, Event.FAULT), _h(now - 10 * DAY, Event.FAULT),
            _h(now - 5 * DAY, Event.FAIL, State.VALIDATING, State.QUARANTINED), _h(now - 1 * DAY, Event.FAULT)]
    assert incidents(hist, now, 30 * DAY) == 3      # the 40-day-old one is outside the window
    released = hist + [HistoryEntry("gpu001", now - 2 * DAY, Event.RELEASE, State.RMA, State.REPAIRED)]
    assert incidents(released, now, 30 * DAY) == 1  # only what came after the release
    # a second finding while the node is already failed is the same incident
    assert incidents([_h(now, Event.FAULT), _h(now, Event.FAULT, State.FAILED, State.FAILED)], now, DAY) == 1


def node(name, state="IDLE", flags=(), reason="", parts=("train",), reason_time=""):
    return Node(name=name, state=state, flags=frozenset(flags), reason=reason, partitions=tuple(parts),
                reason_time=reason_time)


def _classify(nodes, recorded=None, last_pass=None, now=1e9, **kw):
    args = dict(spare_partition="spares", job_partitions=("train",), grace_s=120, recheck_s=DAY)
    args.update(kw)
    return classify(nodes, recorded or {}, last_pass or {}, now, **args)


def test_classify_slurm_ft_drain_is_a_fault_and_an_admin_drain_is_not():
    w = _classify([node("gpu001", "ALLOCATED", {"DRAIN"}, "slurm-ft: XID79 gpu3 fell off the bus"),
                   node("gpu002", "IDLE", {"DRAIN"}, "admin: bios update")])
    assert [(c.node, c.event) for c in w.changes] == [("gpu001", Event.FAULT)]
    assert w.changes[0].cause.startswith("slurm-ft: XID79")


def test_classify_quarantines_a_failed_node_the_controller_moved_out():
    w = _classify([node("gpu001", "IDLE", {"DRAIN"}, "slurm-ft: XID79 gpu3", parts=())],
                  {"gpu001": State.FAILED})
    assert [(c.event, c.act) for c in w.changes] == [(Event.QUARANTINE, "")]


def test_classify_leaves_a_fresh_drain_to_the_controller_then_quarantines_it():
    now = time.time()
    fresh = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now - 10))
    old = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now - 600))
    w = _classify([node("gpu001", "IDLE", {"DRAIN"}, "slurm-ft: ECC_DBE gpu0", reason_time=fresh)],
                  {"gpu001": State.FAILED}, now=now)
    assert w.changes == ()
    w = _classify([node("gpu001", "IDLE", {"DRAIN"}, "slurm-ft: ECC_DBE gpu0", reason_time=old)],
                  {"gpu001": State.FAILED}, now=now)
    assert [(c.event, c.act) for c in w.changes] == [(Event.QUARANTINE, "quarantine")]
    # still running a job (DRAINING): never taken out from under it
    w = _classify([node("gpu001", "ALLOCATED", {"DRAIN"}, "slurm-ft: ECC_DBE gpu0", reason_time=old)],
                  {"gpu001": State.FAILED}, now=now)
    assert w.changes == ()


def test_classify_swap_in_validate_recheck_poll():
    now = 10 * DAY
    w = _classify([node("gpu065", "ALLOCATED", parts=("train",)),      # a spare the controller swapped in
                   node("gpu066", parts=("spares",)),                  # never checked: due
                   node("gpu067", parts=("spares",)),                  # passed an hour ago: not due
                   node("gpu068", "IDLE", {"MAINTENANCE", "RESERVED"}, parts=("spares",)),
                   node("gpu010", "IDLE", {"DRAIN"}, "slurm-ft: x", parts=()),
                   node("gpu011", "IDLE", {"DRAIN"}, "slurm-ft: x", parts=("spares",))],
                  {"gpu065": State.SPARE, "gpu010": State.REPAIRED, "gpu011": State.VALIDATING},
                  {"gpu067": now - 3600}, now=now)
    assert [(c.node, c.event) for c in w.changes] == [("gpu065", Event.SWAP_IN)]
    assert w.recheck == ("gpu066",)
    assert w.validate == ("gpu010",)
    assert w.poll == ("gpu011",)
    assert _classify([node("gpu066", parts=("spares",))], recheck_s=0).recheck == ()


def test_state_of_shows_an_unrecorded_drain_as_failed():
    n = node("gpu001", "MIXED", {"DRAIN"}, "slurm-ft: XID79 gpu3")
    assert state_of(n, {}, "spares") is State.FAILED
    assert state_of(node("gpu066", parts=("spares",)), {}, "spares") is State.SPARE
    assert count_states([State.SPARE, State.SPARE, State.RMA])["spare"] == 2


def test_reason_age_parses_slurm_local_time():
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now - 30))
    assert 29 <= reason_age(node("a", reason_time=stamp), now) <= 31
    assert reason_age(node("a", reason_time="None"), now) is None


# --- the store --------------------------------------------------------------------------------

def test_store_records_history_and_applies_the_lemon_rule(tmp_path):
    with Store(str(tmp_path / "state")) as s:
        kw = dict(default=State.IN_SERVICE, lemon_k=3, lemon_window_s=30 * DAY, actor="test")
        t = 1000.0
        s.apply("gpu007", Event.FAULT, t, cause="slurm-ft: XID79 gpu3", **kw)
        s.apply("gpu007", Event.QUARANTINE, t + 1, **kw)
        s.apply("gpu007", Event.REPAIRED, t + 2, **kw)
        s.apply("gpu007", Event.VALIDATE, t + 3, **kw)
        assert s.apply("gpu007", Event.FAIL, t + 4, **kw).to_state is State.QUARANTINED   # incident 2
        s.apply("gpu007", Event.REPAIRED, t + 5, **kw)
        s.apply("gpu007", Event.VALIDATE, t + 6, **kw)
        last = s.apply("gpu007", Event.FAIL, t + 7, cause="ECC_DBE gpu0", **kw)              # incident 3
        assert last.to_state is State.RMA and "lemon: 3 incidents" in last.cause
        assert s.record("gpu007").state is State.RMA
        with pytest.raises(TransitionError, match="node release"):
            s.apply("gpu007", Event.REPAIRED, t + 8, **kw)
        hist = s.history("gpu007")
        assert [h.event for h in hist][:3] == [Event.FAULT, Event.QUARANTINE, Event.REPAIRED]
        assert hist[0].cause == "slurm-ft: XID79 gpu3" and hist[0].actor == "test"
        s.apply("gpu007", Event.RELEASE, t + 9, **kw)
        assert s.record("gpu007").state is State.REPAIRED
    # the file is root-only and reopens with the same content
    assert oct(os.stat(tmp_path / "state" / "journal.db").st_mode & 0o777) == "0o600"
    with Store(str(tmp_path / "state")) as s:
        assert len(s.history("gpu007")) == 9   # the refused event left no trace


def test_store_pass_sets_last_pass(tmp_path):
    with Store(str(tmp_path)) as s:
        s.apply("gpu066", Event.VALIDATE, 50.0, default=State.SPARE)
        s.set_validation("gpu066", 123, 50.0)
        assert s.record("gpu066").validation_job == 123
        s.apply("gpu066", Event.PASS, 60.0, default=State.SPARE)
        rec = s.record("gpu066")
        assert rec.state is State.SPARE and rec.last_pass == 60.0 and rec.validation_job is None


def test_store_refuses_a_world_writable_state_dir(tmp_path):
    d = tmp_path / "state"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(ConfigError, match="writable by others"):
        Store(str(d))


def test_store_without_journal_when_not_creating(tmp_path):
    with pytest.raises(ConfigError, match="no journal yet"):
        Store(str(tmp_path / "none"), create=False)
