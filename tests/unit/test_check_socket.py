"""A hook's `slurm-ft check` answered by the node's `slurm-ft watch` (issue 11, item 6: cheaper hooks).

The real watcher and the real `slurm-ft` console script over the real pynvml and the lab's fake
libnvidia-ml.so.1. What a user checks: the answer is the one the hook's own process gives (output,
exit status, the verdict line, the state file), the hook's process loads neither pynvml nor the YAML
parser when served, and everything the watcher must not answer runs in the hook's own process.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import example, given, strategies as st

from slurm_ft.cli.check import parser
from slurm_ft.node.check_socket import SERVED_LEVELS, ask, served_node

SLURM_FT = str(Path(sys.executable).parent / "slurm-ft")
# the console script, with one line on stderr at exit: did this process load the NVML bindings?
PROBE = ("import atexit, sys\n"
         "atexit.register(lambda: print('loaded:', 'pynvml' in sys.modules, 'yaml' in sys.modules, file=sys.stderr))\n"
         "from slurm_ft.cli import main\n"
         "sys.argv[0] = 'slurm-ft'\n"
         "main()\n")


@pytest.fixture
def node(tmp_path):
    """Node n1 with 8 fake GPUs, its config, and a `slurm-ft watch` that serves its checks (`start`)."""
    from slurm_ft_lab.fake_nvml import build
    lib = build(tmp_path / "lib")
    nvml = tmp_path / "nvml.state"
    nvml.write_text("")
    cfg = tmp_path / "slurm-ft.yaml"
    # no breaker: a hook's fail finding prints the verdict without asking Slurm (none here); health last,
    # so that a test may append keys to it
    cfg.write_text(f"state_dir: {tmp_path}/state\nlifecycle:\n  breaker_max_share: 0\n"
                   f"health:\n  kmsg_path: {tmp_path}/k\n"
                   f"  state_file: {tmp_path}/st/{{node}}.json\n  metrics_path: {tmp_path}/{{node}}.prom\n"
                   f"  deadline_s: {{quick: 1.0}}\n")
    cfg.chmod(0o644)
    (tmp_path / "k").write_text("")                 # the kernel log: a missing one is an error finding
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib.parent), SLURM_FT_FAKE_NVML_STATE=str(nvml),
               SLURM_FT_FAKE_NODE="n1", SLURMD_NODENAME="n1", SLURM_FT_CONFIG=str(cfg),
               SLURM_FT_CHECK_SOCKET=str(tmp_path / "run" / "check-{node}.sock"),
               SLURM_FT_QUERY_SOCKET=str(tmp_path / "run" / "query-{node}.sock"))
    watchers = []

    class N:
        sock = tmp_path / "run" / "check-n1.sock"

        @staticmethod
        def start(*extra: str, wait: bool = True) -> subprocess.Popen:
            p = subprocess.Popen([SLURM_FT, "-v", "watch", "--node", "n1", "--no-drain", *extra], env=env,
                                 stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"watch{len(watchers)}.log", "w"))
            watchers.append(p)
            deadline = time.monotonic() + 60
            while wait and "slurm-ft watch on n1" not in N.log(len(watchers) - 1):
                assert p.poll() is None and time.monotonic() < deadline, N.log(len(watchers) - 1)
                time.sleep(0.05)
            return p

        @staticmethod
        def log(i: int = 0) -> str:
            return (tmp_path / f"watch{i}.log").read_text()

        @staticmethod
        def check(*argv: str, **more: str):
            p = subprocess.run([sys.executable, "-c", PROBE, "check", *argv], env=dict(env, **more),
                               capture_output=True, text=True, timeout=120)
            *err, loaded = p.stderr.splitlines()
            return p.returncode, p.stdout, "\n".join(err), loaded == "loaded: False False"

        @staticmethod
        def fault(line: str) -> None:
            nvml.write_text(line + "\n")

    N.env = env
    yield N
    for p in watchers:
        p.terminate()
        p.wait(timeout=30)


def _same(text: str) -> str:
    """Output without what differs between two runs: the elapsed time and log lines' times."""
    return re.sub(r"^\d{4}-\d\d-\d\d [\d:,]+ ", "", re.sub(r"\(\d+\.\d+ s,", "(T s,", text), flags=re.M)


@pytest.mark.parametrize("level", ["quick", "prolog", "epilog"])
def test_a_served_check_answers_what_the_hooks_own_process_does(node, level):
    node.start()
    for fault in ("", "gpu 6 remap_failure 1"):
        node.fault(fault)
        served = node.check("--level", level)
        local = node.check("--level", level, "--local")
        assert served[3] and not local[3], "served: no pynvml, no yaml; --local: both"
        assert served[0] == local[0] == (1 if fault else 0)
        assert _same(served[1]) == _same(local[1]) and _same(served[2]) == _same(local[2])
    assert "slurm-ft-verdict: FAIL slurm-ft: REMAP_FAILURE gpu6" in served[1]
    assert node.log().count(f"served check --level {level}") == 2


def test_json_and_the_state_file_are_the_same_served(node, tmp_path):
    node.start()
    node.fault("gpu 2 remap_failure 1")
    code, out, _, served = node.check("--json", "--level", "quick")
    assert served and code == 1
    fails = [(f["code"], f["gpu"]) for f in json.loads(out)["findings"] if f["severity"] == "fail"]
    assert fails == [("REMAP_FAILURE", 2)]
    state = json.loads((tmp_path / "st" / "n1.json").read_text())
    assert "REMAP_FAILURE" in json.dumps(state)


def test_a_served_check_of_a_node_without_its_driver_reads_the_hooks_slurm_conf(node, tmp_path):
    """Whether NVML unusable is a fault is a question for slurmd's slurm.conf, the one the hook's SLURM_CONF
    names (configless: slurmd's cache): the watcher answers it with that file, as the hook's own process would."""
    node.start()
    node.fault("init_error 9")                       # NVML_ERROR_DRIVER_NOT_LOADED
    conf = tmp_path / "slurmd.conf"
    for gres, code, said in (("Gres=gpu:8", 1, "NVML_INIT"), ("", 0, "no GPUs expected on n1")):
        conf.write_text(f"NodeName=n1 CPUs=8 {gres}\n")
        served = node.check("--level", "quick", SLURM_CONF=str(conf))
        local = node.check("--level", "quick", "--local", SLURM_CONF=str(conf))
        assert served[3] and served[0] == local[0] == code and said in served[1], (served, local)
        assert _same(served[1]) == _same(local[1])


@pytest.mark.parametrize("argv, more", [
    (["--level", "full"], {}),                              # long levels run in the hook's process
    (["--level", "quick", "--local"], {}),
    (["--level", "quick", "--node", "n2"], {}),             # another node's check
    (["--level", "quick"], {"SLURMD_NODENAME": "n2"}),
    (["--level", "quick"], {"SLURM_FT_CONFIG": "/nonexistent/slurm-ft.yaml"}),   # another config
])
def test_what_the_watcher_must_not_answer_runs_in_the_hooks_process(node, argv, more):
    node.start()
    code, out, err, served = node.check(*argv, **more)
    assert not served
    if "SLURM_FT_CONFIG" in more:
        assert code == 2 and "config file not found" in err            # the hook's own error, as before
    else:
        assert code == 0 and "healthy" in out


def test_no_watcher_means_the_hook_checks_itself(node):
    code, out, _, served = node.check("--level", "prolog")
    assert code == 0 and "prolog: healthy" in out and not served


def test_a_socket_others_could_have_placed_is_not_asked(node, tmp_path):
    node.start()
    os.chmod(tmp_path / "run", 0o777)
    try:
        code, out, err, served = node.check("--level", "quick")
    finally:
        os.chmod(tmp_path / "run", 0o700)
    assert code == 0 and not served
    assert f"check socket {node.sock} not used: its directory is writable" in err


def test_a_user_cannot_ask_the_watcher(node, tmp_path):
    if os.geteuid() != 0:
        pytest.fail("needs root: the test asks as another user (CI and the clean rooms run as root)")
    import shutil
    import tempfile
    run = Path(tempfile.mkdtemp(prefix="slurm-ft-test-"))    # where user nobody can reach it
    node.env["SLURM_FT_CHECK_SOCKET"] = str(run / "check-{node}.sock")
    try:
        node.start()
        os.chmod(run, 0o755)
        os.chmod(run / "check-n1.sock", 0o666)     # even with the socket open to all, the watcher checks the peer
        _ask_as_nobody_and_as_root(node)
    finally:
        shutil.rmtree(run, ignore_errors=True)


def _ask_as_nobody_and_as_root(node) -> None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                             # the child asks as user nobody
        try:
            os.setuid(65534)
            os.write(w, b"answered" if ask(["--level", "quick"], node.env) else b"refused")
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 100) == b"refused"
    assert "check socket: refused uid 65534" in node.log()
    assert ask(["--level", "quick"], node.env) is not None          # root is answered


def test_a_hung_nvml_call_answers_then_stops_serving(node):
    node.start()
    node.fault("gpu 3 hang_ms 30000")
    code, out, _, served = node.check("--level", "quick")
    assert served and code == 0 and "NVML_HUNG" in out, out
    deadline = time.monotonic() + 10
    while node.sock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not node.sock.exists() and "hooks on n1 run their own checks from now on" in node.log()


def test_a_stale_socket_is_replaced_and_a_live_one_kept(node):
    import socket
    node.sock.parent.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(node.sock))
    dead.close()                               # a watcher that died: the file is left, nobody listens
    node.start()
    assert f"serving checks on {node.sock}" in node.log(0)
    node.start()
    assert "another process serves" in node.log(1) and "serving checks on" not in node.log(1)
    assert node.check("--level", "quick")[3]


@given(st.lists(st.sampled_from(["--level", "-l", "--node", "--job-id", "--json", "--drain", "--no-state",
                                 "--local", "--level=quick", "-l=prolog", "--help", "quick", "prolog", "epilog",
                                 "full", "n1", "", "=", "--", "-"]) | st.text(), max_size=6))
@example(["--level", "n1", "--level=quick"])   # argparse refuses the first --level though the last is fine
def test_the_client_serves_only_what_the_hooks_own_parser_accepts(argv):
    """Whatever it sends, the watcher's argparse never meets a usage error (it would exit the thread)."""
    env = {"SLURMD_NODENAME": "n1"}
    node = served_node(argv, env)
    if node is None:
        return
    args = parser(env).parse_args(argv)       # raises SystemExit on anything argparse refuses
    assert args.level in SERVED_LEVELS and not args.local and node == (args.node or "n1")
    assert "" not in argv or node
