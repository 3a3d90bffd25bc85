"""The drain-rate breaker's limit (the decision over a Slurm snapshot: test_fleet_breaker.py)."""
from __future__ import annotations

import pytest

from slurm_ft.breaker import rules as brk


@pytest.mark.parametrize("total,share,count,want", [
    (68, 0.1, 0, 6), (68, 0.1, 4, 4), (68, 0.0, 3, 3), (5, 0.1, 0, 1), (1000, 0.05, 0, 50)])
def test_limit_is_the_smaller_of_share_and_count(total, share, count, want):
    assert brk.limit(total, share, count) == want
