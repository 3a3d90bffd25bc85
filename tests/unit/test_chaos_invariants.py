"""The fault campaign's invariants (lab/slurm_ft_lab/invariants.py, bench/chaos.py): each one catches a
violation planted in a healthy world, and the healthy world breaks none (a check that cannot fail, or
one that fails on a recovered fault, would make the campaign's "0 violations" mean nothing)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_ft_lab import invariants as inv


def test_the_healthy_world_breaks_no_invariant():
    world, faults = inv._healthy_world()
    assert inv.check(world, faults) == []


@pytest.mark.parametrize("name", inv.INVARIANTS)
def test_each_invariant_catches_its_planted_violation(name):
    results = {n: (caught, evidence) for n, caught, evidence in inv.self_test()}
    caught, evidence = results[name]
    assert caught, evidence


def test_a_fault_not_settled_yet_is_not_judged():
    world, faults = inv._healthy_world()
    early = replace(world, now=faults[0].t + 10, steps={7: [(990.0, 40), (999.0, 44)]})
    assert [v for v in inv.check(early, faults) if v.invariant == "runs_again"] == []
    late = replace(early, now=faults[0].t + faults[0].settle_s + 1)
    assert [v.invariant for v in inv.check(late, faults) if v.fault == 1] == ["runs_again"]


def test_a_node_the_campaign_repaired_counts_as_healthy_again():
    world, faults = inv._healthy_world()
    repaired = [replace(faults[0], repaired=True)]
    assert [v.invariant for v in inv.check(world, repaired)] == ["healthy_in_service"]   # n2 still out


def test_the_old_ranks_stepping_on_until_slurm_kills_them_are_no_recovery():
    world, faults = inv._healthy_world()
    stale = replace(world, steps={7: [(990.0, 40), (999.0, 44), (1005.0, 47)]}, starts={7: [(900.0, None)]})
    assert [(v.invariant, "never started again" in v.evidence) for v in inv.check(stale, faults)] == [
        ("runs_again", True)]


def _partition(world, faults, *, slurm_recovers: bool, reason: str = ""):
    """Fault 2 a partition of job 7's batch host n1 at t=1050, no incident of its own; the job started again
    at 1060 from its newest checkpoint and stepped on; n1 drained with `reason` if any."""
    nodes = dict(world.nodes)
    if reason:
        nodes["n1"] = replace(nodes["n1"], flags=frozenset({"DRAIN"}), reason=reason)
    fault = inv.Fault(2, "partition_batch", 1050.0, 7, ("n1",), fatal=True, settle_s=300.0,
                      slurm_recovers=slurm_recovers)
    starts = {7: [*world.starts[7], (1060.0, 40)]}
    return replace(world, nodes=nodes, starts=starts), [*faults, fault]


def test_a_partition_slurm_requeued_by_itself_needs_no_incident_while_the_node_is_in_service():
    assert inv.check(*_partition(*inv._healthy_world(), slurm_recovers=True)) == []


def test_a_partition_needs_its_incident_when_slurm_ft_took_the_node_out_or_slurm_does_not_requeue():
    world, faults = inv._healthy_world()
    out = inv.check(*_partition(world, faults, slurm_recovers=True, reason="slurm-ft: QUARANTINED unreachable"))
    assert "one_incident" in [v.invariant for v in out]
    assert [v.invariant for v in inv.check(*_partition(world, faults, slurm_recovers=False))] == ["one_incident"]


def test_a_fault_on_an_idle_hot_spare_needs_no_restart_but_the_job_must_step_on():
    world, faults = inv._healthy_world()
    spare = [replace(faults[0], restarts=False)]
    on = replace(world, starts={7: [(900.0, None)]}, steps={7: [(990.0, 40), (999.0, 44), (1030.0, 60)]})
    assert inv.check(on, spare) == []
    stopped = replace(on, steps={7: [(990.0, 40), (999.0, 44), (1005.0, 45)]})
    assert [(v.invariant, "idle spare" in v.evidence) for v in inv.check(stopped, spare)] == [("runs_again", True)]
    assert [v.invariant for v in inv.check(on, faults)] == ["runs_again"]     # a rank's node: it must restart
