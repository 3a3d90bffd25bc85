"""The fleet-wide breaker: one pure decision over Slurm's node states and reasons (issue 10, item 2).

Every node's check, the sweep and the controller read the same snapshot and so give the same answer;
quarantine rewrites and Slurm's "Prolog error" drains count; an unknown count refuses."""
from __future__ import annotations

import time
from dataclasses import replace


from slurm_ft.config import Config, HealthConfig, LifecycleConfig
from slurm_ft.breaker import rules as brk
from slurm_ft.breaker import guard
from slurm_ft.slurm.types import Node
from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path

HOUR = 3600.0
NOW = 1_764_430_000.0


def stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))   # Slurm's ReasonTime: local time


def out(name: str, reason: str, age: float = 60.0, state: str = "IDLE") -> Node:
    return Node(name, state, frozenset({"DRAIN"}), reason, reason_time=stamp(NOW - age))


def fleet(*taken, total: int = 20):
    up = [Node(f"ok{i:02d}", "IDLE") for i in range(total - len(taken))]
    return list(taken) + up


def ask(nodes, want, share=0.0, count=2, window=HOUR):
    return brk.may_take_out(brk.view(nodes, NOW), want, NOW, max_share=share, max_nodes=count, window_s=window)


def test_quarantine_rewrites_and_failed_hooks_count_admin_drains_do_not():
    nodes = fleet(out("a", "slurm-ft: QUARANTINED XID79 gpu1 x"), out("b", "Prolog error"),
                  out("c", "admin: bios update"), Node("d", "DOWN", frozenset({"NOT_RESPONDING"}), "Not responding"))
    assert [n for n, _ in brk.view(nodes, NOW).out] == ["a", "b"]
    d = ask(nodes, ["gpu9"])
    assert not d.allowed and d.count == 2 and "breaker open" in d.reason and "gpu9" in d.reason


def test_drains_age_out_of_the_window_by_reason_time():
    nodes = fleet(out("a", "slurm-ft: XID79 gpu1 x", age=2 * HOUR), out("b", "slurm-ft: ECC_DBE gpu0 x"))
    assert ask(nodes, ["gpu9"]).allowed
    assert not ask(nodes, ["gpu9"], window=3 * HOUR).allowed


def test_a_reason_without_a_time_counts_as_now():
    nodes = fleet(Node("a", "IDLE", frozenset({"DRAIN"}), "slurm-ft: XID79 gpu1 x", reason_time="Unknown"),
                  out("b", "slurm-ft: XID79 gpu2 x", age=10 * HOUR))
    d = ask(nodes, ["gpu9"], count=1)
    assert not d.allowed and d.count == 1


def test_nodes_already_out_cost_nothing_and_a_batch_must_fit_whole():
    nodes = fleet(out("a", "slurm-ft: XID79 gpu1 x"))
    assert ask(nodes, ["a"], count=1).allowed                    # a reason rewrite, not a new take-out
    d = ask(nodes, ["x", "y"], count=2)                           # 1 out + 2 new > 2
    assert not d.allowed and d.tripped and "x, y" in d.reason
    assert ask(nodes, ["x", "a"], count=2).allowed


def test_every_host_gets_the_same_answer_from_the_same_snapshot():
    nodes = fleet(out("a", "slurm-ft: XID79 gpu1 x"), total=10)
    answers = {ask(list(reversed(nodes)), ["gpu9"], share=0.1, count=0).allowed,
               ask(nodes, ["gpu9"], share=0.1, count=0).allowed}
    assert answers == {False}


def down() -> FakeSlurm:
    s = FakeSlurm(train=(), spares=())
    s.fleet_reads_fail = True
    return s


def holding(nodes) -> FakeSlurm:
    """The shared fake holding exactly `nodes`, in no partition."""
    s = FakeSlurm(train=(), spares=())
    s.n = {x.name: x for x in nodes}
    return s


def cfg(tmp_path, **lc) -> Config:
    return Config(lifecycle=replace(LifecycleConfig(), **{"breaker_max_share": 0.0, "breaker_max_nodes": 1, **lc}),
                  health=replace(HealthConfig(), state_file=str(tmp_path / "state" / "{node}.json")))


def test_guard_refuses_loudly_when_the_count_is_unknown(tmp_path, caplog):
    d = guard.may_take_out(cfg(tmp_path), ["gpu1"], client=down(), now=NOW)
    assert not d.allowed and "unknown" in d.reason
    assert any(r.levelname == "ERROR" and "unknown" in r.message for r in caplog.records)


def test_past_the_limit_are_the_drains_beyond_it_by_reason_time_ties_against():
    """The controller recovers a fault drained within the limit and holds one drained past it: the
    latest drains beyond `cap`, by reason time (racers in one second all count as past, as in `keeps`)."""
    within = fleet(out("a", "slurm-ft: XID79 gpu1 x", age=300), out("b", "Prolog error", age=200))
    assert brk.past_limit(brk.view(within, NOW), NOW, cap=2, window_s=HOUR) == frozenset()
    over = fleet(out("a", "slurm-ft: XID79 gpu1 x", age=300), out("b", "Prolog error", age=200),
                 out("c", "Epilog error", age=100), out("old", "slurm-ft: QUARANTINED x", age=2 * HOUR))
    assert brk.past_limit(brk.view(over, NOW), NOW, cap=2, window_s=HOUR) == {"c"}
    assert brk.past_limit(brk.view(over, NOW), NOW, cap=1, window_s=HOUR) == {"b", "c"}
    tied = fleet(out("a", "slurm-ft: XID79 gpu1 x", age=100), out("b", "slurm-ft: XID79 gpu2 x", age=100))
    assert brk.past_limit(brk.view(tied, NOW), NOW, cap=1, window_s=HOUR) == {"a", "b"}
    view = brk.view(over, NOW)
    assert {n for n, _ in view.out if not brk.keeps(view, n, NOW, max_share=0, max_nodes=2, window_s=HOUR)} == {"c"}


def test_a_failing_hook_reads_the_fleet_count_then_and_only_then(tmp_path):
    """No saved view: a prolog/epilog about to fail its node reads Slurm once; unreadable says no."""
    c = cfg(tmp_path, breaker_max_nodes=2)
    room = holding(fleet(out("a", "slurm-ft: XID79 gpu1 x")))
    assert guard.hook_decision(c, "gpu1", now=NOW, client=room).allowed
    assert room.reads == [("fleet",)]
    full = holding(fleet(out("a", "slurm-ft: XID79 gpu1 x"), out("b", "Epilog error")))
    assert not guard.hook_decision(c, "gpu1", now=NOW, client=full).allowed
    d = guard.hook_decision(c, "gpu1", now=NOW, client=down())
    assert not d.allowed and "unknown" in d.reason


def test_hook_decision_with_the_breaker_off_allows_without_a_read(tmp_path):
    s = holding(fleet())
    assert guard.hook_decision(cfg(tmp_path, breaker_max_nodes=0), "gpu1", now=NOW, client=s).allowed
    assert s.reads == []


def test_racing_drains_step_back_so_the_fleet_never_passes_the_limit():
    """Two checks on different hosts both saw room for one more (limit 2, 1 out) and both drained."""
    kw = dict(max_share=0.0, max_nodes=2, window_s=HOUR)
    first = out("a", "slurm-ft: XID79 gpu1 x", age=600)
    same_second = fleet(first, out("b", "slurm-ft: XID79 gpu1 x", age=5), out("c", "slurm-ft: XID79 gpu1 x", age=5))
    v = brk.view(same_second, NOW)
    assert [brk.keeps(v, n, NOW, **kw) for n in "abc"] == [True, False, False]   # ties: both step back
    later = fleet(first, out("b", "slurm-ft: XID79 gpu1 x", age=9), out("c", "slurm-ft: XID79 gpu1 x", age=5))
    v = brk.view(later, NOW)
    assert [brk.keeps(v, n, NOW, **kw) for n in "abc"] == [True, True, False]    # the later one steps back
    assert brk.keeps(brk.view(fleet(first), NOW), "zz", NOW, **kw)              # not out: nothing to undo


def test_settle_undoes_our_drain_past_the_limit_and_when_slurm_cannot_be_read(tmp_path):
    c = cfg(tmp_path, breaker_max_nodes=1)
    now = time.time()
    mine = Node("b", "IDLE", frozenset({"DRAIN"}), "slurm-ft: XID79 gpu1 x", reason_time=stamp(now))

    other = Node("a", "IDLE", frozenset({"DRAIN"}), "slurm-ft: ECC_DBE gpu0 x", reason_time=stamp(now - 1))
    s = holding([other, mine] + [Node(f"n{i}", "IDLE") for i in range(8)])
    assert "undone" in guard.settle(c, "b", mine.reason, client=s) and s.calls == [("resume", ("b",))]
    s = holding([mine] + [Node(f"n{i}", "IDLE") for i in range(9)])
    assert guard.settle(c, "b", mine.reason, client=s) == "" and s.calls == []
    s = holding([mine])
    s.fleet_reads_fail = True
    assert "unknown" in guard.settle(c, "b", mine.reason, client=s) and s.calls == [("resume", ("b",))]
