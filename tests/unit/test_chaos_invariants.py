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
