"""A job user's `slurm-ft check`, answered by the node's `slurm-ft watch` (issue 22, finding 8).

On a real node the job's user cannot read the kernel log (kernel.dmesg_restrict=1), so an in-job check
that runs in its own process cannot see an Xid. The real watcher and the real `slurm-ft` console script,
over the real pynvml and the lab's fake libnvidia-ml.so.1, with the node's kernel log readable by root
only: what a user checks is that their check sees the Xid through the watcher, says clearly when it
cannot, is limited in how often it may ask, and never learns other users' process names.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import example, given, strategies as st

from slurm_ft.cli.check import parser

SLURM_FT = str(Path(sys.executable).parent / "slurm-ft")
NOBODY = 65534


def _asker() -> int:
    """The user whose checks these are: nobody, or where nobody cannot enter the checkout (root's home, /root
    0700) a lab job user, let in as `lab up` lets them (an ACL for the lab's users alone: slurm_ft_lab.users)."""
    from slurm_ft_lab import users
    import slurm_ft
    paths = [SLURM_FT, sys.prefix, str(Path(slurm_ft.__file__).resolve().parent)]
    if not users.closed_dirs(paths):
        return NOBODY
    user = users.ensure(users.NAMES[-1:])[0]
    users.let_in([user], paths)
    return user.uid
XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=4242, name=secretproc, GPU has fallen off the bus."   # gpu0


def _root() -> None:
    if os.geteuid() != 0:
        pytest.fail("needs root: the test runs checks as user nobody (CI and the clean rooms run as root)")


@pytest.fixture
def node():
    """Node n1 with 8 fake GPUs, an Xid 79 in its root-only kernel log, and `start()` for its watcher;
    everything in a directory user nobody can reach (pytest's tmp_path is root's alone)."""
    _root()
    from slurm_ft_lab.fake_nvml import build
    asker = _asker()
    d = Path(tempfile.mkdtemp(prefix="slurm-ft-query-test-"))
    os.chmod(d, 0o755)
    lib = build(d / "lib")
    nvml = d / "nvml.state"
    nvml.write_text("")
    nvml.chmod(0o644)
    kmsg = d / "kmsg"
    usec = int((time.time() - psutil.boot_time()) * 1e6)
    kmsg.write_text(f"3,1,{usec},-;{XID79}\n")          # facility 0 (kernel), priority 3
    kmsg.chmod(0o600)                                    # root's, as /dev/kmsg with dmesg_restrict=1
    cfg = d / "slurm-ft.yaml"
    cfg.write_text(f"state_dir: {d}/state\nhealth:\n  kmsg_path: {kmsg}\n  state_file: {d}/st/{{node}}.json\n"
                   f"  metrics_path: {d}/{{node}}.prom\n")
    cfg.chmod(0o644)
    (d / "run").mkdir(mode=0o755)
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib.parent), SLURM_FT_FAKE_NVML_STATE=str(nvml),
               SLURM_FT_FAKE_NODE="n1", SLURMD_NODENAME="n1", SLURM_FT_CONFIG=str(cfg),
               SLURM_FT_CHECK_SOCKET=str(d / "run" / "check-{node}.sock"),
               SLURM_FT_QUERY_SOCKET=str(d / "run" / "query-{node}.sock"))
    watchers = []

    class N:
        dir = d
        sock = d / "run" / "query-n1.sock"
        uid = asker

        @staticmethod
        def start(*extra: str) -> subprocess.Popen:
            log = d / f"watch{len(watchers)}.log"
            p = subprocess.Popen([SLURM_FT, "-v", "watch", "--node", "n1", "--no-drain", "--no-nvml", *extra],
                                 env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
            watchers.append(p)
            deadline = time.monotonic() + 60
            while "slurm-ft watch on n1" not in log.read_text():
                assert p.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            return p

        @staticmethod
        def log(i: int = 0) -> str:
            return (d / f"watch{i}.log").read_text()

        @staticmethod
        def check(*argv: str, user: int = -1):
            """`slurm-ft check ARGV` as `user` (default: the asker, N.uid): (exit status, stdout, stderr)."""
            user = asker if user < 0 else user
            p = subprocess.run([SLURM_FT, "check", *argv], env=env, capture_output=True, text=True, timeout=120,
                               user=user, group=user if user else 0, extra_groups=[], cwd=str(d))
            return p.returncode, p.stdout, p.stderr

    N.env = env
    try:
        yield N
    finally:
        for p in watchers:
            p.terminate()
            p.wait(timeout=30)
        shutil.rmtree(d, ignore_errors=True)


def _fails(out: str):
    return [(f["check"], f["code"], f["gpu"]) for f in json.loads(out)["findings"] if f["severity"] == "fail"]


def _xid_line(out: str) -> dict:
    return next(f for f in json.loads(out)["findings"] if f["check"] == "xid")


# --- what a user's check sees ------------------------------------------------------------------------

def test_a_users_check_cannot_read_the_kernel_log_and_says_so(node):
    """No watcher: the check runs in the user's process, blind to the Xid, and says why."""
    code, out, err = node.check("--level", "prolog", "--json", "--no-state")
    assert code == 0 and _fails(out) == []
    xid = _xid_line(out)
    assert xid["severity"] == "error" and f"not readable as uid {node.uid}" in xid["reason"], xid
    assert f"kernel log not readable as uid {node.uid}; the node's watcher did not answer (no watcher socket at " \
           f"{node.sock}" in err, err
    assert "Traceback" not in err


def test_through_the_watcher_a_users_check_sees_the_xid_root_sees(node):
    node.start()
    code, out, err = node.check("--level", "prolog", "--json", "--no-state")
    assert code == 1 and _fails(out) == [("xid", "XID79", 0)], (out, err)
    assert "not readable" not in out + err
    root = node.check("--level", "prolog", "--json", "--no-state", "--local", user=0)
    assert _fails(root[1]) == _fails(out)                        # what a check as root sees by itself
    assert f"answered uid {node.uid}: prolog --json" in node.log()
    # --local: the user asked for a run of their own, and gets the blind one, with the reason
    code, out, err = node.check("--level", "prolog", "--json", "--local")
    assert code == 0 and _xid_line(out)["severity"] == "error" and "did not answer (not asked: --local)" in err


def test_a_users_look_writes_nothing_and_text_output_has_no_verdict_line(node):
    node.start()
    code, out, err = node.check("--level", "prolog")
    assert code == 1 and "XID79" in out and "slurm-ft-verdict" not in out, out
    assert not (node.dir / "st" / "n1.json").exists()           # the node's state file untouched


def test_the_answer_names_no_process_and_carries_none_of_the_watchers_log(node):
    node.start()
    _, out, err = node.check("--level", "prolog", "--json")
    assert "4242" not in out + err and "secretproc" not in out + err
    assert " INFO " not in err and " WARNING " not in err


def test_a_users_drain_request_on_a_watcher_that_drains_nothing_looks_only(node):
    node.start()
    code, out, err = node.check("--level", "prolog", "--json", "--drain", "--no-state")
    assert code == 1 and _fails(out) == [("xid", "XID79", 0)]
    assert "drains nothing" in err and "drain" not in json.loads(out)


@pytest.mark.parametrize("argv", [["--level", "epilog"], ["--level", "full"], ["--level", "quick", "--job-id", "7"]])
def test_what_the_watcher_does_not_answer_users_runs_in_their_process(node, argv):
    node.start()
    code, out, err = node.check(*argv)
    assert "not a question the watcher answers users (levels quick, prolog" in err, err
    assert f"answered uid {node.uid}" not in node.log()


def test_a_socket_a_user_placed_is_not_asked(node):
    node.start()
    node.sock.unlink()
    fake = socket.socket(socket.AF_UNIX)
    fake.bind(str(node.sock))
    os.chown(node.sock, node.uid, node.uid)
    try:
        code, out, err = node.check("--level", "quick", "--json")
    finally:
        fake.close()
    assert f"{node.sock} not used: owned by uid {node.uid}, not root" in err, err
    assert _xid_line(out)["severity"] == "error"


def test_the_users_socket_is_open_to_all_and_the_hooks_socket_stays_roots(node):
    node.start()
    assert node.sock.stat().st_mode & 0o777 == 0o666
    assert (node.dir / "run" / "check-n1.sock").stat().st_mode & 0o777 == 0o600


# --- the watcher's limits, in-process over a real socket ---------------------------------------------

@pytest.fixture
def server(tmp_path):
    """A QueryServer whose check is a stub that counts its calls and prints a process name."""
    from slurm_ft.node.query_server import QueryServer
    calls = []

    def handler(q, out, err):
        calls.append(q)
        print(f"{q.node} {q.level}: held by pid=77, name=hidden", file=out)
        print("a note for the user", file=err)
        return 1, False

    env = {"SLURM_FT_QUERY_SOCKET": str(tmp_path / "run" / "query-{node}.sock")}
    (tmp_path / "run").mkdir(mode=0o755)
    s = QueryServer("n1", handler, threading.Lock(), env=env)
    assert s.start()
    s.calls = calls
    s.env_ = dict(env, SLURMD_NODENAME="n1")
    yield s
    s.stop()


def test_a_look_is_answered_from_the_cache_and_scrubbed(server):
    from slurm_ft.node.query_socket import ask
    a, why = ask(["--level", "prolog", "--json"], server.env_)
    b, _ = ask(["--level", "prolog", "--json"], server.env_)
    assert why == "" and a.code == 1 and a.out == b.out == "n1 prolog: held by pid=-, name=-\n"
    assert a.err == "a note for the user\n"
    assert len(server.calls) == 1                                # the second from the cache
    ask(["--level", "prolog", "--drain"], server.env_)
    ask(["--level", "prolog", "--drain"], server.env_)
    assert len(server.calls) == 2          # a drain request runs its own check, then shares the cache too
    assert server.calls[-1].drain


def test_a_user_asking_too_often_is_refused_with_the_reason(server):
    from slurm_ft.node import query
    from slurm_ft.node.query_socket import ask
    answers = [ask(["--level", "quick", "--drain"], server.env_) for _ in range(query.BURST + 1)]
    assert all(a is not None for a, _ in answers[:query.BURST])
    a, why = answers[-1]
    assert a is None and "refused: uid 0 asked too often" in why, why
    assert len(server.calls) == 1                                # the others from the cache


def test_a_connection_that_sends_nothing_does_not_hold_up_another_user(server):
    from slurm_ft.node.query_socket import ask
    idle = socket.socket(socket.AF_UNIX)
    idle.connect(server.path)                                    # connected, sends nothing
    try:
        t0 = time.monotonic()
        a, why = ask(["--level", "quick"], server.env_)
        assert a is not None and time.monotonic() - t0 < 0.5, why
    finally:
        idle.close()


def test_a_question_for_another_node_or_level_is_refused(server):
    from slurm_ft.node.query_socket import Query
    assert server.reply(Query("n2", "quick", False, False).to_dict(), 1000)[0]["refused"] == \
        "this watcher answers for n1"
    assert "refused" in server.reply({"v": 1, "node": "n1", "level": "epilog", "json": False, "drain": False}, 1000)[0]
    assert server.calls == []


# --- pure parts ---------------------------------------------------------------------------------------

def test_limits_bucket_refill_and_in_flight():
    from slurm_ft.node.query import Limits
    lim = Limits(burst=2, refill_s=2.0, per_uid=1, max_in_flight=2)
    assert lim.admit(5, 0.0) == ""
    assert "in flight" in lim.admit(5, 0.0)                      # one of uid 5's at a time
    lim.release(5)
    assert lim.admit(5, 0.0) == ""
    lim.release(5)
    assert "asked too often" in lim.admit(5, 0.0)
    assert lim.admit(5, 2.0) == ""                               # one token back after refill_s
    assert lim.admit(6, 2.0) == ""                               # another user has a bucket of their own
    assert "busy" in lim.admit(7, 2.0)                           # max_in_flight in all
    lim.release(5), lim.release(6)
    assert lim.admit(7, 2.0) == ""


def test_limits_table_stays_bounded():
    from slurm_ft.node.query import Limits
    lim = Limits(burst=1, refill_s=1.0, max_uids=4)
    for uid in range(100):
        assert lim.admit(uid, float(uid)) == ""
        lim.release(uid)
        assert len(lim._buckets) <= 4


def test_cache_ttl():
    from slurm_ft.node.query import Cache
    c = Cache(2.0)
    c.put(("quick", True), {"code": 0}, 10.0)
    assert c.get(("quick", True), 11.9) == {"code": 0}
    assert c.get(("quick", True), 12.0) is None and c.get(("quick", False), 11.0) is None
    assert c.get(("quick", True), 9.0) is None                   # a clock that went back: not trusted


def test_a_users_drain_checks_only_evidence_no_user_can_write_and_never_resumes():
    from slurm_ft.config import Config
    from slurm_ft.node import levels
    from slurm_ft.node.query import USER_DRAIN_CHECKS, checks_for_user
    config = Config()
    assert checks_for_user(config, "prolog", drain=False) is config
    narrowed = checks_for_user(config, "prolog", drain=True)
    checks = levels.checks_for("prolog", narrowed.health.levels)
    assert set(checks) == set(levels.checks_for("prolog")) - {"temperature", "clocks", "disk"}
    assert set(checks) <= USER_DRAIN_CHECKS and "xid" in checks and not narrowed.health.auto_resume
    assert levels.checks_for("quick", narrowed.health.levels) == levels.checks_for("quick")


def test_scrub():
    from slurm_ft.node.query import scrub
    assert scrub('pid=4242, name=python3 "name=x" pid=1;') == 'pid=-, name=- "name=-" pid=-;'
    assert scrub("no pids here: spid=3") == "no pids here: spid=3"


@given(st.lists(st.sampled_from(["--level", "-l", "--node", "--job-id", "--json", "--drain", "--no-state",
                                 "--local", "--level=quick", "-l=prolog", "--help", "quick", "prolog", "epilog",
                                 "full", "n1", "", "=", "--", "-"]) | st.text(), max_size=6))
@example(["--level", "n1", "--level=quick"])
def test_a_question_is_exactly_what_the_checks_own_parser_reads(argv):
    from slurm_ft.node.query_socket import LEVELS, parse
    env = {"SLURMD_NODENAME": "n1"}
    q = parse(argv, env)
    if q is None:
        return
    args = parser(env).parse_args(argv)        # raises SystemExit on anything argparse refuses
    assert args.level == q.level in LEVELS and not args.local and args.job_id is None
    assert (args.node or "n1") == q.node and args.as_json == q.json and args.drain == q.drain


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=6),
                     max_leaves=12)


@given(st.dictionaries(st.sampled_from(["v", "node", "level", "json", "drain", "argv"]), _json, max_size=6) | _json)
def test_a_request_is_read_only_in_its_one_shape(req):
    from slurm_ft.node.query_socket import LEVELS, Query
    q = Query.from_dict(req)
    if q is not None:
        assert q.to_dict() == req and q.level in LEVELS and q.node.isprintable()


def test_the_check_writes_text_and_json_the_same_as_a_users_own_run(tmp_path):
    """answer_user prints through the check's own printers: what a user's own check would show."""
    from slurm_ft.cli.check import answer_user
    from slurm_ft.config import Config, HealthConfig
    from slurm_ft.node.query_socket import Query
    config = Config(health=HealthConfig(levels={"quick": ("disk",)}, disk_paths=(str(tmp_path),),
                                        state_file=str(tmp_path / "state.json")))
    out, err = io.StringIO(), io.StringIO()
    code, hung = answer_user(Query("n1", "quick", True, False), out, err, config)
    assert (code, hung) == (0, False) and json.loads(out.getvalue())["level"] == "quick" and err.getvalue() == ""


def test_users_drain_questions_hold_off_the_watchers_xid_drain_one_check_at_most(tmp_path):
    """Review 2026-12-07 #3: eight users' threads asking `--drain` as fast as they can (no rate limit: more
    than the socket admits) while the watcher handles fatal Xids. Its drain waits for the check that is
    running, never behind the queue (it waited 7 s with 4 users and 1 s checks)."""
    from slurm_ft.gpu.sample import XidEvent
    from slurm_ft.node.query_server import QueryServer
    from slurm_ft.node.watch import Watcher
    from tests.unit.test_health_run import config
    check_s = 0.4

    def handler(q, out, err):
        time.sleep(check_s)
        return 0, False

    started = []

    def fake_check(level, node, cfg, **kw):
        started.append(time.monotonic())
        return None

    w = Watcher("n1", config(tmp_path), use_nvml=False, use_kmsg=False, check=fake_check)
    server = QueryServer("n1", handler, w.check_lock)
    server.cache.ttl = 0                    # every question a check of its own: the worst case
    stop = threading.Event()

    def ask():
        while not stop.is_set():
            server.reply({"v": 1, "node": "n1", "level": "quick", "json": False, "drain": True}, 1000)

    users = [threading.Thread(target=ask) for _ in range(8)]
    for t in users:
        t.start()
    waits = []
    try:
        for _ in range(4):
            time.sleep(check_s * 1.5)
            t0 = time.monotonic()
            w.handle([XidEvent(79, gpu=2)])
            waits.append(started[-1] - t0)
    finally:
        stop.set()
        for t in users:
            t.join(5)
    assert not any(t.is_alive() for t in users)
    assert max(waits) < check_s + 0.25, [round(x, 2) for x in waits]
