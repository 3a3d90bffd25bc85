"""SIGKILL the controller right after each step's intent or result is journaled, start it again: the end
state is that of an uninterrupted run. The job is requeued once, the spare is in exactly one partition,
the failed node is out, and the incident is closed."""
from __future__ import annotations

import signal

import pytest

from ctl_helpers import controller_config, crash_once, fail_node, incidents, once, parts, submit_ft, wait_job

pytestmark = pytest.mark.lab

STEPS = ["open", "quarantine", "swap", "requeue", "exclude", "start", "confirm"]
# With --requeue=expedite (Slurm >= 25.11) our requeue leaves the job eligible at once: Slurm may start it
# on idle nodes before the controller reads it PENDING, and then there is no exclude or start to crash at.
SKIPPABLE_WITH_EXPEDITE = ("exclude", "start")


@pytest.fixture
def cfg(lab, tmp_path):
    lab.reset()
    yield controller_config(lab, tmp_path)
    lab.reset()


@pytest.mark.parametrize("point", [f"{s}:{w}" for s in STEPS for w in ("intent", "result")])
def test_sigkill_at_each_step_then_restart_ends_as_an_uninterrupted_run(lab, cfg, point, work):
    jid = submit_ft(lab, work, 3)
    job = wait_job(lab, jid)
    bad = job.nodes[1]
    pool = parts(lab)["spares"]
    fail_node(lab, bad)

    killed = crash_once(lab, cfg, point)
    step = point.split(":")[0]
    if killed.returncode == 0 and step in SKIPPABLE_WITH_EXPEDITE and lab.client.expedited_requeue_available():
        # the restart came before the step: the run ended without it (and without a crash)
        [inc] = incidents(lab, cfg)
        assert step not in [s["name"] for s in inc["steps"]] and inc["status"] == "recovered", inc
    else:
        assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(incidents(lab, cfg)) == 1                                # the journal kept the incident

    once(lab, cfg)                                                      # a new controller over the same journal
    job = wait_job(lab, jid, restart_count=1)                           # requeued exactly once
    [inc] = incidents(lab, cfg)
    assert inc["status"] == "recovered" and inc["nodes"] == [bad]
    [spare] = inc["spares"]
    p = parts(lab)
    assert spare in p["train"] and p["spares"] == pool - {spare}        # no spare lost or doubled
    assert bad not in p["train"] and bad not in job.nodes and lab.client.node(bad).drained
    assert '"steps": []' in once(lab, cfg).stdout                       # nothing left: no second requeue
    assert lab.client.job(jid).restart_count == 1
