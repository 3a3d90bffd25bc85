"""The hot-spare supervisor learns of faults by event: the notices the node's side and the controller send
with `scontrol notify`, read in the job's own output file, not by polling Slurm (issue 21).

The supervisor runs its real loop here over the shared fake Slurm; only the training step is stood in for
(no srun in a unit test): `launch` records where the step would run, `stop` ends it.
"""
from __future__ import annotations

import threading
import time

import pytest

from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path
from slurm_ft.job import hotplan as hp
from slurm_ft.job.notices import Follower
from slurm_ft.job.supervisor import Supervisor
from slurm_ft.vocab import event_line

ALLOC = ("n1", "n2", "n3", "n4")          # -N 3 --hot-spares 1
BAD = "slurm-ft: XID79 gpu3 GPU has fallen off the bus"


class Step:
    """A training step that runs until stopped or told to end."""
    def __init__(self) -> None:
        self.rc = None

    def poll(self):
        return self.rc


class Stepless(Supervisor):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.launched = []

    def launch(self, nodes, reason):
        self.launched.append(tuple(nodes))
        self.step_nodes, self.exited_at, self.exit_checked = tuple(nodes), None, False
        self.proc = Step()
        self.launches += 1
        return None

    def stop(self):
        if self.proc is not None and self.proc.rc is None:
            self.proc.rc = -15
        return True


def setup(tmp_path, **kw):
    slurm = FakeSlurm(train=ALLOC, spares=())
    jid = slurm.add_job(4)
    out = tmp_path / "slurm-7.out"
    out.write_bytes(b"training starts\n")
    sup = Stepless(slurm, jid, 3, "", ["train"], env={}, say=lambda m: None,
                   notices=Follower(open(out, "rb")), **kw)
    return slurm, sup, out


def run_in_thread(sup):
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("rc", sup.run()), daemon=True)
    t.start()
    return t, result


def wait_for(what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def say(out, line: str) -> None:
    with open(out, "a") as f:            # what slurmstepd prints for `scontrol notify JOB LINE`
        f.write(f"slurmstepd-n1: error: {line}\n")


def test_a_notice_relaunches_without_the_node_and_slurm_is_not_polled(tmp_path):
    slurm, sup, out = setup(tmp_path)
    t, result = run_in_thread(sup)
    wait_for(lambda: sup.launched == [("n1", "n2", "n3")])
    start_reads = list(slurm.reads)
    time.sleep(0.5)                                        # ten polls: no Slurm read while all is well
    assert slurm.reads == start_reads
    slurm.fail("n3", BAD)                                   # the node's side drains it, then tells the job
    t0 = time.monotonic()
    say(out, event_line("failed", "n3", BAD))
    say(out, event_line("quarantined", "n3"))               # the controller, once it took n3 out
    wait_for(lambda: len(sup.launched) == 2)
    assert time.monotonic() - t0 < 5.0                     # a notice, not the 300 s backstop
    assert sup.launched[1] == ("n1", "n2", "n4")
    assert ("shrink", sup.job_id, ("n1", "n2", "n4")) in slurm.calls      # n3 given back: quarantined
    assert slurm.reads == start_reads                       # the notices said it all: no read, no partition read
    sup.proc.rc = 0
    t.join(5)
    assert result["rc"] == 0


def test_without_the_quarantine_notice_the_partitions_are_read_once(tmp_path):
    slurm, sup, out = setup(tmp_path)
    t, result = run_in_thread(sup)
    wait_for(lambda: len(sup.launched) == 1)
    slurm.fail("n3", BAD)
    slurm.parts["train"].remove("n3")                      # the controller quarantined it, but said nothing
    say(out, event_line("failed", "n3", BAD))
    wait_for(lambda: len(sup.launched) == 2)
    assert slurm.reads.count(("partition", "train")) == 1  # after QUARANTINE_WAIT_S without the notice
    assert ("shrink", sup.job_id, ("n1", "n2", "n4")) in slurm.calls
    sup.proc.rc = 0
    t.join(5)


def test_the_backstop_read_finds_a_fault_no_notice_reported(tmp_path):
    slurm, sup, out = setup(tmp_path, backstop_s=0.3)
    t, result = run_in_thread(sup)
    wait_for(lambda: len(sup.launched) == 1)
    slurm.fail("n2", BAD)                                   # no notice: a watcher that could not tell the job
    wait_for(lambda: len(sup.launched) == 2, timeout=5)
    assert sup.launched[1] == ("n1", "n3", "n4")
    sup.proc.rc = 0
    t.join(5)


def test_a_notice_for_another_jobs_node_or_a_garbled_line_changes_nothing(tmp_path):
    slurm, sup, out = setup(tmp_path)
    t, result = run_in_thread(sup)
    wait_for(lambda: len(sup.launched) == 1)
    say(out, event_line("failed", "n9", BAD))               # not in this job's allocation
    say(out, "slurm-ft-event v1 failed")                    # cut short
    say(out, "slurm-ft-event v1 rebooted n2 nonsense")      # not a kind we know
    time.sleep(0.5)
    assert len(sup.launched) == 1 and sup.known(ALLOC) == {}
    sup.proc.rc = 0
    t.join(5)
    assert result["rc"] == 0


def test_a_failed_step_ends_the_job_only_after_reading_slurm(tmp_path, monkeypatch):
    monkeypatch.setattr(hp, "EXIT_GRACE_S", 0.5)
    # the in-job checks of a failed step are test_hotplan's: here they find nothing
    monkeypatch.setattr(Stepless, "failed_step_action", lambda self, view, rc: hp.Action("wait"))
    slurm, sup, out = setup(tmp_path)
    t, result = run_in_thread(sup)
    wait_for(lambda: len(sup.launched) == 1)
    before = len(slurm.reads)
    sup.proc.rc = 1
    t.join(5)
    assert result["rc"] == 1
    assert len(slurm.reads) == before + 1                  # one read at the end of the grace, none before


def test_follower_reads_only_what_was_written_after_it_started(tmp_path):
    out = tmp_path / "o"
    out.write_text(f"slurmstepd-n1: error: {event_line('failed', 'n1', 'old')}\n")
    f = Follower(open(out, "rb"))
    assert f.events() == []
    with open(out, "a") as w:
        w.write("rank 0: step 5\nslurmstepd-n1: error: " + event_line("failed", "n2", BAD)[:30])
    assert f.events() == []                                # a line not finished yet
    with open(out, "a") as w:
        w.write(event_line("failed", "n2", BAD)[30:] + "\n")
    assert f.events() == [("failed", "n2", BAD)]
    out.write_text("")                                      # truncated: read from the start again
    with open(out, "a") as w:
        w.write(f"x {event_line('quarantined', 'n2')}\n")
    assert f.events() == [("quarantined", "n2", "")]


@pytest.mark.parametrize("line", ["", "slurm-ft-event v1 failed n\x00", "slurm-ft-event v1 failed " + "n" * 65,
                                  "slurm-ft-event v2 failed n1 x"])
def test_garbage_is_no_event(line):
    from slurm_ft.vocab import parse_event
    assert parse_event(line) is None


def test_hang_restarts_end_at_the_limit_even_without_a_checkpoint_dir(tmp_path, monkeypatch):
    """R12 of the 2026-12-01 review: the restarts in place were counted only in CKPT/slurm-ft-starts.jsonl,
    never written without a checkpoint directory, so `max_restarts 1` never ended the job."""
    slurm = FakeSlurm(train=ALLOC, spares=())
    jid = slurm.add_job(4)
    monkeypatch.chdir(tmp_path)                            # where os.path.join("", log) used to point
    sup = Stepless(slurm, jid, 3, "", ["train"], env={}, say=lambda m: None, hang_timeout=60, max_restarts=1)
    monkeypatch.setattr(sup, "check_nodes", lambda nodes, drain=False: {})
    sup.step_nodes = ("n1", "n2", "n3")
    view = hp.View(allocation=ALLOC, faults={}, batch_host="n1", train_nodes=3, step_nodes=sup.step_nodes)
    kinds = [sup.hang_action(view, "no progress for 60 s").kind for _ in range(3)]
    assert kinds == ["restart", "exit", "exit"]


def test_srun_saying_a_node_failed_is_a_failed_node(tmp_path):
    """A hot-spare job runs --no-kill: a node that goes DOWN leaves the job, and srun says so."""
    out = tmp_path / "o"
    out.write_text("")
    f = Follower(open(out, "rb"))
    with open(out, "a") as w:
        w.write("srun: error: Node failure on gpu003\nsrun: error: gpu002: task 1: Killed\n"
                "rank 0: srun: error: Node failure on ../../x\n")
    assert f.events() == [("failed", "gpu003", "DOWN: node failure reported to srun")]


def test_a_job_handed_to_the_requeue_path_that_nothing_requeues_requeues_itself(tmp_path, monkeypatch):
    """Its spares used up (or the batch host failed), the supervisor waits for the controller's requeue;
    when none comes (only the supervisor saw the fault, or no controller runs) it requeues its own job."""
    import slurm_ft.job.supervisor as sv
    monkeypatch.setattr(sv, "FALLBACK_REQUEUE_S", 0.3)
    slurm, sup, out = setup(tmp_path)
    t, result = run_in_thread(sup)
    wait_for(lambda: len(sup.launched) == 1)
    for n in ("n3", "n4"):                                  # a failure, and the one hot spare too
        slurm.fail(n, BAD)
        say(out, event_line("failed", n, BAD))
    wait_for(lambda: ("requeue", sup.job_id, False) in slurm.calls, timeout=10)
    assert len(sup.launched) == 1                            # no relaunch: the requeue path's
