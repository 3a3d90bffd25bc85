"""Detection by event (issue 21): who is told of a drain, and what the controller does at its reads.

The node's side tells the jobs on a node it drained and wakes the controller (node/tell.py); the controller
tells a hot-spare job of its fault and quarantine and settles bursts of prolog/epilog drains past the
breaker. Over the shared fake Slurm; real munge and real notices are the lab's (tests/lab/test_events_lab.py).
"""
from __future__ import annotations

import socket
import time
from dataclasses import replace

from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path
from hypothesis import given, strategies as st_

from slurm_ft import wake
from slurm_ft.config import Config, ControllerConfig, LifecycleConfig
from slurm_ft.fleet.recovery import journal as jn
from slurm_ft.fleet import db
from slurm_ft.fleet.recovery.controller import Controller
from slurm_ft.job.tag import FtSpec
from slurm_ft.node import state as st, tell
from slurm_ft.vocab import parse_event

XID = "slurm-ft: XID79 gpu3 GPU has fallen off the bus"


def step_socket(directory, name):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(directory / name))
    return s


def test_the_jobs_on_a_node_are_read_off_slurmds_step_sockets(tmp_path):
    held = [step_socket(tmp_path, n) for n in ("gpu001_17.0", "gpu001_17.4294967291", "gpu001_23.1",
                                                "gpu002_99.0", "gpu001_x.0")]
    (tmp_path / "gpu001_55.0").write_text("a file, not a socket")
    (tmp_path / "hwloc_topo_17.0.xml").write_text("")
    assert tell.jobs_in_spool(str(tmp_path), "gpu001") == [17, 23]
    assert tell.jobs_in_spool(str(tmp_path / "none"), "gpu001") == []
    for s in held:
        s.close()


def test_the_prolog_records_a_job_the_epilog_forgets_and_the_list_is_bounded():
    state = st.empty("gpu001")
    st.job_started(state, "17", 1.0)
    st.job_started(state, "23", 2.0)
    st.job_ended(state, "17")
    assert st.running_jobs(state) == [23]
    for i in range(st.MAX_RUNNING + 10):
        st.job_started(state, str(100 + i), 10.0 + i)
    assert len(st.running_jobs(state)) == st.MAX_RUNNING and 100 not in st.running_jobs(state)


class Told(FakeSlurm):
    def __init__(self, spool: str, **kw):
        super().__init__(**kw)
        self.spool = spool

    def running_config(self):
        return {"SlurmdSpoolDir": self.spool + "/slurmd.%n", "SlurmctldHost[0]": "ctl(127.0.0.1)"}


def test_after_a_drain_every_job_on_the_node_is_told_once(tmp_path):
    spool = tmp_path / "slurmd.gpu001"
    spool.mkdir()
    held = step_socket(spool, "gpu001_23.0")
    s = Told(str(tmp_path))
    cfg = Config(controller=ControllerConfig(wake_port=0))
    told = tell.after_drain(s, cfg, "gpu001", XID, running=[17, 23])    # 17: the prolog's record; 23: a step
    assert told == [17, 23]
    notices = [(c[1], parse_event(c[2])) for c in s.calls if c[0] == "notify"]
    assert notices == [(17, ("failed", "gpu001", XID)), (23, ("failed", "gpu001", XID))]
    assert s.reads == []                                       # no Slurm read to find them
    held.close()


def test_a_wake_that_munge_cannot_sign_is_logged_and_the_drain_stands(tmp_path, caplog):
    class NoMunge(Told):
        def running_config(self):
            return {**super().running_config(), "AuthInfo": f"socket={tmp_path}/no-munged.socket"}

    s = NoMunge(str(tmp_path))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(0.5)
        cfg = Config(controller=ControllerConfig(wake_host="127.0.0.1", wake_port=rx.getsockname()[1]))
        tell.after_drain(s, cfg, "gpu001", XID)
        try:
            got = rx.recv(4096)
        except socket.timeout:
            got = b""
    assert got == b""                                          # nothing unsigned is ever sent
    assert any("not woken" in r.message for r in caplog.records)


# --- the controller --------------------------------------------------------------------------------

def make(tmp_path, slurm, **lc):
    cfg = Config(state_dir=str(tmp_path / "state"),
                 controller=ControllerConfig(poll_s=0.0, read_progress=False, cycle_budget_s=5.0),
                 lifecycle=LifecycleConfig(**{"breaker_max_share": 0.0, "breaker_max_nodes": 0, **lc}))
    return Controller(slurm, jn.connect(db.path_in(cfg.state_dir)), cfg, sleep=lambda s: None)


def test_the_controller_tells_a_hot_spare_job_of_its_fault_and_the_quarantine(tmp_path):
    names = [f"gpu{i:03d}" for i in range(1, 7)]
    s = FakeSlurm(train=names[:4], spares=names[4:])
    jid = s.add_job(4, FtSpec(ckpt_dir="", hot_spares=1, train_nodes=3), batch_host="gpu001")
    s.fail("gpu003", XID)
    make(tmp_path, s).cycle(budget_s=0.5)
    told = [parse_event(c[2]) for c in s.calls if c[0] == "notify" and c[1] == jid]
    assert told[:2] == [("failed", "gpu003", XID), ("quarantined", "gpu003", "")]


def test_a_burst_of_hook_drains_past_the_breaker_is_settled_by_the_controller(tmp_path, caplog):
    names = [f"gpu{i:03d}" for i in range(1, 21)]
    s = FakeSlurm(train=names, spares=())
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    early = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 60))
    s.n["gpu001"] = replace(s.n["gpu001"], flags=frozenset({"DRAIN"}), reason=XID, reason_time=early)
    for n in ("gpu002", "gpu003", "gpu004"):                  # three epilogs failed in one second
        s.n[n] = replace(s.n[n], flags=frozenset({"DRAIN"}), reason="Epilog error", reason_time=stamp)
    s.n["gpu005"] = replace(s.n["gpu005"], flags=frozenset({"DRAIN"}), reason="admin: bios", reason_time=stamp)
    c = make(tmp_path, s, breaker_max_nodes=2)
    c.observe()
    resumed = [c_[1] for c_ in s.calls if c_[0] == "resume"]
    assert resumed == [("gpu002", "gpu003", "gpu004")]       # ties in one second step back, all of them
    assert "DRAIN" in s.n["gpu001"].flags                     # ours, within the limit
    assert "DRAIN" in s.n["gpu005"].flags                     # an admin's drain is never touched
    assert any(r.levelname == "ERROR" and "ALERT" in r.message and "gpu[002-004]" in r.message
               for r in caplog.records)


def test_hook_drains_within_the_limit_stay(tmp_path):
    names = [f"gpu{i:03d}" for i in range(1, 21)]
    s = FakeSlurm(train=names, spares=())
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    s.n["gpu002"] = replace(s.n["gpu002"], flags=frozenset({"DRAIN"}), reason="Prolog error", reason_time=stamp)
    make(tmp_path, s, breaker_max_nodes=2).observe()
    assert not [c for c in s.calls if c[0] == "resume"]


def test_node_state_roundtrip_keeps_running_jobs(tmp_path):
    path = tmp_path / "n.json"
    with st.locked(path, "gpu001") as state:
        st.job_started(state, "42", 5.0)
    assert st.running_jobs(st.load(path, "gpu001")) == [42]


def test_an_epilog_on_a_shared_node_counts_xids_from_its_own_jobs_start():
    """Two jobs' prologs on one node: the second overwrote the last-prolog record, the running list keeps both."""
    state = st.empty("gpu001")
    state["job"] = {"id": "23", "start": 20.0}
    st.job_started(state, "17", 10.0)
    st.job_started(state, "23", 20.0)
    assert st.job_start(state, "17") == 10.0 and st.job_start(state, "23") == 20.0
    assert st.job_start(state, "99") is None


# --- a failed prolog's wake -------------------------------------------------------------------------

@given(st_.from_regex(r"[A-Za-z0-9_.\-]{1,64}", fullmatch=True), st_.one_of(st_.none(), st_.integers(1, 9_999_999_999)))
def test_a_wake_payload_reads_back_as_sent(node, job):
    assert wake.parse(wake.payload(node, job)) == (node, job)


@given(st_.text(max_size=120))
def test_anything_else_is_no_wake(text):
    try:
        node, job = wake.parse(text)
    except ValueError:
        return
    assert text == wake.payload(node, job)


def test_a_job_slurm_requeued_held_after_its_prolog_failed_is_recovered_from_the_prologs_wake(tmp_path):
    """The controller never saw the run (Slurm requeued it held, with no nodes, between two reads): the
    prolog's wake names the node, the incident claims it and a spare replaces it."""
    names = [f"gpu{i:03d}" for i in range(1, 7)]
    s = FakeSlurm(train=names[:4], spares=names[4:])
    jid = s.add_job(2, FtSpec(ckpt_dir=""))
    s.n["gpu001"] = replace(s.n["gpu001"], state="IDLE")
    s.n["gpu002"] = replace(s.n["gpu002"], state="IDLE", flags=frozenset({"DRAIN"}), reason="Prolog error")
    s.j[jid] = replace(s.j[jid], state="PENDING", nodes=(), restart_count=1, held=True,
                       reason="launch_failed_requeued_held")
    c = make(tmp_path, s)
    c.heard(wake.payload("gpu002", jid))
    c.heard(wake.payload("gpu003"))                  # a drain's wake carries no job
    c.cycle(budget_s=0.5)
    [inc] = jn.incidents(c.conn)
    assert inc.nodes == ("gpu002",) and inc.spares and inc.spares[0] in names[4:]
