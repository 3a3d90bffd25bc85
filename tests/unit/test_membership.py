"""One fleet lock for node membership: the controller's swap and the sweep's pool edits interleaved.

The model Slurm below returns each partition read as it was *before* a concurrent writer's step runs, which
is exactly the window in which an unlocked read-modify-write loses a change. The other writer's step is
injected into that window deterministically; under the fleet lock it must wait (Busy when its short wait
runs out), and what both wanted is in Slurm at the end: no node lost, none in two partitions.
"""
from __future__ import annotations

import itertools
import time

import pytest

from slurm_ft.config import Config, ControllerConfig
from slurm_ft.errors import Busy
from slurm_ft.slurm.membership import Delta, Membership, apply_deltas, lock_path
from slurm_ft.fleet.lifecycle.transitions import State
from slurm_ft.fleet.lifecycle.node_history import Store
from slurm_ft.fleet.lifecycle.sweep import Sweeper
from slurm_ft.fleet.recovery.records import Step
from slurm_ft.slurm.types import Node
from slurm_ft.fleet.recovery import journal as jn
from slurm_ft.fleet import db
from slurm_ft.fleet.recovery.controller import Controller

from test_lifecycle_sweep import ModelSlurm   # same directory: pytest puts it on sys.path

NODES = [f"gpu{i:03d}" for i in range(1, 9)]


class RacySlurm(ModelSlurm):
    """Runs the next queued step of the "other writer" right after a partition read has been taken."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.between = []          # callables, one per partition read
        self.outcomes = []

    def partitions(self):
        snapshot = super().partitions()
        if self.between:
            step = self.between.pop(0)
            try:
                self.outcomes.append(("ok", step()))
            except Busy as exc:
                self.outcomes.append(("busy", str(exc)))
        return snapshot


def where(slurm):
    """node -> the partitions holding it."""
    out = {n: [] for n in slurm.n}
    for p, ns in slurm.parts.items():
        for n in ns:
            out[n].append(p)
    return out


def config(tmp_path, **kw):
    return Config(state_dir=str(tmp_path / "state"),
                  controller=ControllerConfig(job_partitions=("train",), poll_s=0.0, read_progress=False), **kw)


def controller_and_incident(tmp_path, slurm, cfg, spare="gpu005"):
    ctl = Controller(slurm, jn.connect(db.path_in(cfg.state_dir)), cfg, sleep=lambda s: None)
    iid = jn.open_incident(ctl.conn, job_id=100, nodes=["gpu002"], faults=["gpu002: XID79"], partition="train",
                           restart_count=0, job_nodes=4, ckpt_step=None, fault_at=None, now=time.time())
    jn.update_incident(ctl.conn, iid, spares=[spare])
    inc = jn.incidents(ctl.conn, open_only=True)[0]
    step = Step("swap", 100, incident_id=iid, nodes=("gpu002",), spares=(spare,), partition="train")
    return ctl, inc, step


def sweeper(cfg, slurm, store, wait_s):
    sw = Sweeper(cfg, slurm, store)
    sw.membership.wait_s = wait_s     # the injected writer gives up fast instead of waiting 30 s
    return sw


def test_swap_and_return_to_pool_interleaved_lose_nothing(tmp_path):
    # gpu007 was repaired and validated: the sweep returns it to the pool while the controller takes gpu005
    slurm = RacySlurm(spares=("gpu005", "gpu006"))
    slurm.n["gpu007"] = Node("gpu007", "IDLE")
    cfg = config(tmp_path)
    ctl, inc, step = controller_and_incident(tmp_path, slurm, cfg)
    with Store(cfg.state_dir) as store:
        sw = sweeper(cfg, slurm, store, wait_s=0.05)
        slurm.between.append(lambda: sw.put_in_pool("gpu007"))   # lands between the swap's read and write
        assert ctl._swap(step, inc)[0] == "ok"
        if slurm.outcomes[0][0] == "busy":                       # the sweep's next pass tries again
            assert sw.put_in_pool("gpu007")
    assert slurm.parts["train"] == ["gpu001", "gpu002", "gpu003", "gpu004", "gpu005"]
    assert sorted(slurm.parts["spares"]) == ["gpu006", "gpu007"]
    assert all(len(ps) <= 1 for ps in where(slurm).values())
    assert slurm.outcomes[0][0] == "busy" and "fleet.lock" in slurm.outcomes[0][1]


def test_return_to_pool_first_then_swap_waits_for_it(tmp_path):
    slurm = RacySlurm(spares=("gpu005", "gpu006"))
    slurm.n["gpu007"] = Node("gpu007", "IDLE")
    cfg = config(tmp_path)
    ctl, inc, step = controller_and_incident(tmp_path, slurm, cfg)
    ctl.membership.wait_s = 0.05
    with Store(cfg.state_dir) as store:
        sw = Sweeper(cfg, slurm, store)
        slurm.between.append(lambda: ctl._swap(step, inc))        # lands inside the sweep's locked edit
        assert sw.put_in_pool("gpu007")
    if slurm.outcomes[0][0] == "busy":
        assert ctl._swap(step, inc)[0] == "ok"                     # the controller's next cycle
    assert "gpu005" in slurm.parts["train"] and sorted(slurm.parts["spares"]) == ["gpu006", "gpu007"]
    assert [n for n, ps in where(slurm).items() if len(ps) != 1] == []
    assert slurm.outcomes[0][0] == "busy"


def test_spare_taken_out_by_the_sweep_is_not_swapped_in(tmp_path):
    # a spare fails its re-check and the sweep takes it out just before the controller's swap reads
    slurm = RacySlurm(spares=("gpu005", "gpu006"))
    cfg = config(tmp_path)
    ctl, inc, step = controller_and_incident(tmp_path, slurm, cfg)
    with Store(cfg.state_dir) as store:
        Sweeper(cfg, slurm, store).take_out("gpu005")
    outcome, detail = ctl._swap(step, inc)
    assert outcome == "failed" and "gpu005" in detail and "choosing again" in detail
    assert "gpu005" not in slurm.parts["train"] and "gpu005" not in slurm.parts["spares"]
    assert jn.incidents(ctl.conn, open_only=True)[0].spares == ()


def test_recheck_skips_a_spare_the_controller_took_meanwhile(tmp_path):
    slurm = RacySlurm(spares=("gpu005", "gpu006"))
    cfg = config(tmp_path)
    ctl, inc, step = controller_and_incident(tmp_path, slurm, cfg)
    assert ctl._swap(step, inc)[0] == "ok"
    with Store(cfg.state_dir) as store:
        store.enrol("gpu005", State.SPARE, time.time())
        sw = Sweeper(cfg, slurm, store)
        # the sweep had classified gpu005 as an idle spare before the swap
        assert sw._start(sw_report(), slurm.node("gpu005"), recheck=True) == {}
    assert slurm.resv == {} and "gpu005" in slurm.parts["train"]


def sw_report():
    from slurm_ft.fleet.lifecycle.sweep import SweepReport
    return SweepReport(started=time.time())


def test_the_lock_is_one_file_for_every_writer(tmp_path):
    cfg = config(tmp_path)
    slurm = ModelSlurm()
    ctl = Controller(slurm, jn.connect(db.path_in(cfg.state_dir)), cfg)
    with Store(cfg.state_dir) as store:
        sw = Sweeper(cfg, slurm, store)
        assert ctl.membership._lock.path == sw.membership._lock.path == tmp_path / "state" / "fleet.lock"
    assert str(lock_path(config(tmp_path, fleet_lock="/run/x.lock"))) == "/run/x.lock"


def test_a_held_lock_fails_after_its_wait_with_the_holder_named(tmp_path):
    slurm = ModelSlurm()
    a = Membership(slurm, tmp_path / "fleet.lock")
    b = Membership(slurm, tmp_path / "fleet.lock", wait_s=0.05)
    with a.locked(), a.locked():          # re-entrant within one handle
        with pytest.raises(Busy, match=r"pid \d+"):
            b.add("spares", ["gpu001"])
    assert b.add("spares", ["gpu001"]) and "gpu001" in slurm.parts["spares"]
    assert not b.add("spares", ["gpu001"])   # already there: no write
    assert [c for c in slurm.calls if c[0] == "partition"] == [("partition", "spares", ("gpu005", "gpu006", "gpu001"))]


def test_change_with_a_read_from_outside_the_lock_is_refused(tmp_path):
    slurm = ModelSlurm()
    m = Membership(slurm, tmp_path / "fleet.lock")
    parts = m.partitions()
    with pytest.raises(RuntimeError):
        m.change({"spares": Delta(add=("gpu001",))}, parts)


def subsets(pool):
    return [list(c) for r in range(len(pool) + 1) for c in itertools.permutations(pool, r)]


def test_deltas_keep_others_and_write_additions_first():
    # every ordered list of up to 3 of 3 nodes, against every add and remove set of them: exhaustive
    pool = NODES[:3]
    lists, sets = subsets(pool), [list(c) for r in range(4) for c in itertools.combinations(pool, r)]
    for cur_a, cur_b, add, remove in itertools.product(lists, lists, sets, sets):
        parts = {"a": cur_a, "b": cur_b}
        deltas = {"a": Delta(remove=tuple(remove)), "b": Delta(add=tuple(add))}
        writes = apply_deltas(parts, deltas)
        result = {**parts, **dict(writes)}
        assert [n for n in cur_a if n not in remove] == result["a"]       # order kept, only removals gone
        assert result["b"][:len(cur_b)] == cur_b and set(result["b"]) == set(cur_b) | set(add)
        assert len(result["b"]) == len(set(result["b"]))                  # never twice in one list
        if len(writes) == 2:
            assert writes[0][0] == "b"                                    # the addition goes first
        assert all(new != parts[p] for p, new in writes)                  # no write that changes nothing
