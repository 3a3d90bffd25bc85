"""An outage is not a fault: grace for NOT_RESPONDING, waves by rate, the fleet-wide out-of-service
budget, and the revalidation of nodes quarantined for not answering (pure: outage.py and the plan)."""
from __future__ import annotations

from slurm_ft.fleet.recovery.records import Incident, StepRecord

from slurm_ft.slurm.types import Job, Node, Partition
from slurm_ft.fleet.recovery import outage as out
from slurm_ft.fleet.recovery.plan import ControllerSettings, plan
from slurm_ft.fleet.recovery.snapshot import Snapshot
from slurm_ft.job.tag import FtSpec

NOW = 1_000_000.0
P = ControllerSettings(unresponsive_grace_s=60, wave_nodes=8, wave_window_s=120, wave_settle_s=60, restore_after_s=30)
N = 64
TRAIN = [f"gpu{i:03d}" for i in range(1, N + 1)]
SPARES = [f"gpu{i:03d}" for i in range(N + 1, N + 5)]


def snap(bad=None, seen=None, counted=(), limit=0, incidents_nodes=None, spare_state="IDLE", **kw):
    bad = bad or {}
    nodes = [bad.get(n) or Node(n, "ALLOCATED") for n in TRAIN] + [Node(s, spare_state) for s in SPARES]
    parts = [Partition("train", tuple(n for n in TRAIN if n not in (incidents_nodes or ()))),
             Partition("spares", tuple(SPARES))]
    job = Job(job_id=7, name="t", state="RUNNING", partition="train", nodes=tuple(TRAIN), num_nodes=N, requeue=True)
    return Snapshot.of(nodes, [job], parts, specs={7: FtSpec(ckpt_dir="/ck")}, seen=seen or {},
                       out_counted=frozenset(counted), out_limit=limit, **kw)


def unresp(name, down=False):
    return Node(name, "DOWN" if down else "ALLOCATED", frozenset({"NOT_RESPONDING"}),
                reason="Not responding" if down else "")


def kinds(steps):
    return [s.kind for s in steps]


def test_not_responding_is_a_fault_only_after_the_grace():
    bad = {"gpu010": unresp("gpu010")}
    fresh = {"gpu010": out.Seen(NOW - 20)}
    assert kinds(plan(snap(bad, fresh), [], P, NOW)) == []
    old = {"gpu010": out.Seen(NOW - 61)}
    steps = plan(snap(bad, old), [], P, NOW)
    assert kinds(steps) == ["open"] and steps[0].nodes == ("gpu010",)


def test_slurm_down_is_a_fault_at_once():
    bad = {"gpu010": unresp("gpu010", down=True)}
    steps = plan(snap(bad, {"gpu010": out.Seen(NOW - 1)}), [], P, NOW)
    assert kinds(steps) == ["open"]


def test_a_wave_holds_every_member_back_and_alerts_with_its_names():
    names = TRAIN[:20]
    bad = {n: unresp(n, down=True) for n in names}
    seen = {n: out.Seen(NOW - 25 + i * 0.1) for i, n in enumerate(names)}
    steps = plan(snap(bad, seen), [], P, NOW)
    assert kinds(steps) == ["alert"]
    assert "20 stopped answering" in steps[0].reason and "gpu[001-020]" in steps[0].reason
    assert "paused" in steps[0].reason


def test_a_wave_is_a_rate_not_a_share_of_the_fleet():
    # 8 nodes over 10 minutes are single faults; 8 within 2 minutes are a wave, in any fleet size
    names = TRAIN[:8]
    bad = {n: unresp(n, down=True) for n in names}
    spread = {n: out.Seen(NOW - 600 + i * 80) for i, n in enumerate(names)}
    assert out.waves(spread, NOW, nodes=8, window_s=120, settle_s=60) == []
    assert kinds(plan(snap(bad, spread), [], P, NOW)) == ["open"]
    close = {n: out.Seen(NOW - 100 + i) for i, n in enumerate(names)}
    [w] = out.waves(close, NOW, nodes=8, window_s=120, settle_s=60)
    assert w.still_out == tuple(names)
    assert out.waves(close, NOW, nodes=9, window_s=120, settle_s=60) == []


def test_every_wave_is_held_back_two_racks_five_minutes_apart():
    """R5: rack A stopped at t-600 s, rack B at t-300 s, none back. Only B was held back; A's eight
    were single faults (8 of the breaker's 10 spent on an outage, spares swapped in)."""
    a, b = TRAIN[:8], TRAIN[8:16]
    seen = {**{n: out.Seen(NOW - 600 + i) for i, n in enumerate(a)}, **{n: out.Seen(NOW - 300 + i) for i, n in enumerate(b)}}
    bad = {n: unresp(n, down=True) for n in a + b}
    steps = plan(snap(bad, seen, limit=10), [], P, NOW)
    assert kinds(steps) == ["alert"] and steps[0].job_id == 0 and steps[0].nodes == tuple(sorted(a + b))
    assert "2 waves at once" in steps[0].reason and "gpu[001-008]" in steps[0].reason and "gpu[009-016]" in steps[0].reason
    active = out.waves(seen, NOW, nodes=8, window_s=120, settle_s=60)
    assert [w.members for w in active] == [tuple(a), tuple(b)]


def test_one_outage_spreading_past_the_window_is_one_wave():
    """R5: 20 nodes, one every 15 s over 285 s: every one of them is held back, not only the latest 9."""
    names = TRAIN[:20]
    seen = {n: out.Seen(NOW - 300 + 15 * i) for i, n in enumerate(names)}
    bad = {n: unresp(n, down=True) for n in names}
    steps = plan(snap(bad, seen), [], P, NOW)
    assert kinds(steps) == ["alert"] and steps[0].nodes == tuple(names)
    [w] = out.waves(seen, NOW, nodes=8, window_s=120, settle_s=60)
    assert w.members == tuple(names) and w.still_out == tuple(names)
    # a trickle below the rate stays single faults, however long it goes on
    slow = {n: out.Seen(NOW - 3000 + 150 * i) for i, n in enumerate(names)}
    assert out.waves(slow, NOW, nodes=8, window_s=120, settle_s=60) == []


def test_a_wave_settles_then_the_one_still_out_is_a_single_fault():
    names = TRAIN[:20]
    seen = {n: out.Seen(NOW - 200, back_at=NOW - 150) for n in names[1:]}
    seen[names[0]] = out.Seen(NOW - 200)
    bad = {names[0]: unresp(names[0], down=True)}
    during = plan(snap(bad, seen), [], P, NOW - 120)       # 30 s after the others came back: still held
    assert kinds(during) == ["alert"] and "1 still out" in during[0].reason
    steps = plan(snap(bad, seen), [], P, NOW)               # 150 s after: settled
    assert kinds(steps) == ["open"] and steps[0].nodes == (names[0],)


def test_quarantine_counts_against_the_fleet_wide_breaker():
    bad = {n: unresp(n, down=True) for n in TRAIN[:3]}
    seen = {n: out.Seen(NOW - 500 * i) for i, n in enumerate(TRAIN[:3], start=1)}   # no wave
    steps = plan(snap(bad, seen, counted={"gpu050"}, limit=3), [], P, NOW)
    assert kinds(steps) == ["alert"] and "limit 3" in steps[0].reason and steps[0].job_id == 7
    assert kinds(plan(snap(bad, seen, counted={"gpu050"}, limit=4), [], P, NOW)) == ["open"]
    # nodes a check already drained cost nothing more
    drained = {n: Node(n, "ALLOCATED", frozenset({"DRAIN"}), reason="slurm-ft: XID79 gpu1") for n in TRAIN[:3]}
    assert kinds(plan(snap(drained, {}, counted=set(TRAIN[:3]), limit=3), [], P, NOW)) == ["open"]


def test_breaker_room_pure():
    assert out.breaker_room({"a"}, (), ["a", "b"], (), 2) is None
    assert "limit 2" in out.breaker_room({"a"}, (), ["b", "c"], (), 2)
    assert out.breaker_room(set(), (), ["a"], (), 0) is None
    # drained already: free at the limit (finding 9), unless drained past it
    assert out.breaker_room({"a", "b"}, (), ["b"], ["b"], 2) is None
    assert "past the limit" in out.breaker_room({"a", "b", "c"}, {"c"}, ["c"], ["c"], 2)
    assert out.breaker_room({"a", "b", "c"}, {"c"}, ["b"], ["b"], 2) is None


def _closed(nodes, faults, spares=()):
    return Incident(id=3, job_id=7, status="recovered", nodes=tuple(nodes), faults=tuple(faults), partition="train",
                    spares=tuple(spares), restart_count=0, job_nodes=N, opened_at=NOW - 400, closed_at=NOW - 300,
                    steps=(StepRecord("open", NOW - 400, NOW - 400, "ok"),))


def test_a_node_quarantined_for_not_answering_goes_to_validation_once_it_answers():
    """R13: it was put straight back into the spare pool 30 s after it answered, unvalidated: a node whose
    own hang took it off the network came back as a known-good spare. Now its reason hands it to the
    sweep's validation (it stays drained and out of every partition until it passes)."""
    name = "gpu010"
    q = Node(name, "IDLE", frozenset({"DRAIN"}), reason="slurm-ft: quarantined, DOWN+NOT_RESPONDING: Not responding during job 7")
    inc = _closed([name], [f"{name}: DOWN+NOT_RESPONDING"], spares=("gpu065",))
    base = dict(bad={name: q}, incidents_nodes=[name])
    assert kinds(plan(snap(seen={name: out.Seen(NOW - 300, back_at=NOW - 10)}, **base), [inc], P, NOW)) == []
    steps = plan(snap(seen={name: out.Seen(NOW - 300, back_at=NOW - 31)}, **base), [inc], P, NOW)
    assert kinds(steps) == ["revalidate"] and steps[0].nodes == (name,) and not steps[0].partition
    assert steps[0].reason.startswith("slurm-ft: REVALIDATE answers again; quarantined, DOWN+NOT_RESPONDING")
    # the sweep's rewrite of our reason is recognised too (the node answered after the next sweep)
    rewritten = Node(name, "IDLE", frozenset({"DRAIN"}), reason="slurm-ft: QUARANTINED quarantined, DOWN: Not responding during job 7")
    steps = plan(snap(bad={name: rewritten}, incidents_nodes=[name], seen={name: out.Seen(NOW - 300, back_at=NOW - 31)}),
                 [inc], P, NOW)
    assert kinds(steps) == ["revalidate"] and steps[0].reason.startswith("slurm-ft: REVALIDATE answers again; quarantined, DOWN: ")
    # still not answering, or a health check drained it since, or a real fault, or handed over already: stays
    assert kinds(plan(snap(seen={name: out.Seen(NOW - 300)}, **base), [inc], P, NOW)) == []
    for reason in ("slurm-ft: XID79 gpu2 fell off the bus", "slurm-ft: quarantined, slurm-ft: XID79 gpu2 during job 7",
                   steps[0].reason):
        other = Node(name, "IDLE", frozenset({"DRAIN"}), reason=reason)
        assert kinds(plan(snap(bad={name: other}, incidents_nodes=[name]), [inc], P, NOW + 999)) == [], reason


def test_a_node_quarantined_before_its_wave_formed_gets_the_lighter_check():
    """The first of a wave is DOWN by Slurm and quarantined at once; seven more follow within the window:
    it was an outage. It still goes through validation, marked `outage` (the sweep's re-check levels)."""
    name, others = TRAIN[0], TRAIN[1:9]
    q = Node(name, "IDLE", frozenset({"DRAIN"}), reason="slurm-ft: quarantined, DOWN: Not responding during job 7")
    seen = {name: out.Seen(NOW - 400, back_at=NOW - 200), **{n: out.Seen(NOW - 390, back_at=NOW - 200) for n in others}}
    steps = plan(snap(bad={name: q}, incidents_nodes=[name], seen=seen), [_closed([name], [])], P, NOW)
    assert kinds(steps) == ["revalidate"] and steps[0].reason.startswith("slurm-ft: REVALIDATE outage, answers again")


def test_track_keeps_the_first_sighting_and_the_return():
    s1 = out.track({}, [unresp("a"), Node("b", "IDLE")], NOW, horizon_s=600)
    assert s1 == {"a": out.Seen(NOW)}
    s2 = out.track(s1, [unresp("a"), Node("b", "IDLE")], NOW + 5, horizon_s=600)
    assert s2 == {"a": out.Seen(NOW)}
    s3 = out.track(s2, [Node("a", "IDLE"), Node("b", "IDLE")], NOW + 9, horizon_s=600)
    assert s3 == {"a": out.Seen(NOW, NOW + 9)}
    assert out.track(s3, [Node("a", "IDLE")], NOW + 700, horizon_s=600) == {}
