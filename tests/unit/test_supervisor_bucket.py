"""The relaunch when the job's user has emptied their RPC bucket (Slurm's rate limiter): the failed nodes'
give-back (a read of the partitions, the shrink) is bounded, so that the training step starts again
whatever those RPCs wait for, and srun starts just after a refill of the bucket."""
from __future__ import annotations

from hypothesis import given, strategies as st

from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path
from slurm_ft.errors import CommandTimeout
from slurm_ft.job import hotplan as hp
from slurm_ft.job import supervisor as sv

ALLOC = ("n1", "n2", "n3")


@given(st.floats(min_value=0, max_value=4e9, allow_nan=False))
def test_srun_starts_within_the_phase_after_a_whole_second(now):
    wait = sv.refill_wait(now)
    assert 0 <= wait < 1
    assert (now + wait) % 1.0 <= sv.REFILL_PHASE_S + 1e-6 or (now + wait) % 1.0 > 1 - 1e-6
    if now % 1.0 <= sv.REFILL_PHASE_S:
        assert wait == 0                       # already just after one: no wait


class Held(FakeSlurm):
    """A user whose bucket is empty: the shrink and the partition read are held past any timeout, and
    each says what timeout it was given."""
    def __init__(self):
        super().__init__(train=ALLOC, spares=())
        self.timeouts = []

    def shrink(self, job_id, keep, timeout=None):
        self.timeouts.append(("shrink", timeout))
        raise CommandTimeout(["scontrol", "update", f"JobId={job_id}"], timeout or 30)

    def partition(self, name, timeout=None):
        self.timeouts.append(("partition", timeout))
        raise CommandTimeout(["scontrol", "show", "partition"], timeout or 30)


class Recorded(sv.Supervisor):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.launched = []

    def launch(self, nodes, reason):
        self.launched.append(tuple(nodes))
        return None


def relaunch_without_n2(quarantine_notice: bool):
    slurm, said = Held(), []
    jid = slurm.add_job(3)
    sup = Recorded(slurm, jid, 2, "", ["train"], env={}, say=said.append)
    if quarantine_notice:
        sup.quarantine_notices.add("n2")
    act = hp.Action("relaunch", nodes=("n1", "n3"), release=("n2",), failed=("n2",), reason="n2: Xid 79")
    rc, allocation = sup.relaunch(act, ALLOC, "gpu")
    return rc, allocation, sup, slurm, said


def test_a_shrink_the_bucket_holds_is_given_up_and_the_step_starts_on_the_spare():
    rc, allocation, sup, slurm, said = relaunch_without_n2(quarantine_notice=True)
    assert rc is None and sup.launched == [("n1", "n3")]
    assert allocation == ALLOC                                  # n2 stays in the job, unused
    [(what, timeout)] = slurm.timeouts
    assert what == "shrink" and 0 < timeout <= sv.QUARANTINE_WAIT_S + hp.GIVE_BACK_S
    assert sup.may_shrink                                       # held is not refused: tried again next time
    assert any("could not give n2 back" in m for m in said)


def test_without_a_quarantine_notice_the_read_and_the_shrink_share_one_bound():
    rc, allocation, sup, slurm, said = relaunch_without_n2(quarantine_notice=False)
    assert rc is None and sup.launched == [("n1", "n3")] and allocation == ALLOC
    [(what, timeout)] = slurm.timeouts                          # the read failed: nothing known quarantined
    assert what == "partition" and 0 < timeout <= sv.QUARANTINE_WAIT_S + hp.GIVE_BACK_S
    assert any("cannot read partition gpu" in m for m in said)
