"""The SPANK plugin's own code outside Slurm (tests/unit/spank_harness.c compiles spank/slurm_ft.c with
Slurm's calls stubbed): what it refuses at submit time, and how it bounds the checkpoint resolver it runs
in the batch step before the user's script (review findings 11, 12, 15)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

HERE = Path(__file__).resolve().parent
SPANK = HERE.parents[1] / "spank"


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    if not shutil.which("gcc") or not Path("/usr/include/slurm/spank.h").exists():
        pytest.skip("needs gcc and Slurm's spank.h (libslurm-dev), as `make -C spank` does")
    exe = tmp_path_factory.mktemp("spank") / "spank_harness"
    subprocess.run(["gcc", "-std=gnu99", "-O1", "-g", "-Wall", "-Wextra", "-Werror", f"-I{SPANK}", "-o", str(exe),
                    str(HERE / "spank_harness.c")], check=True, capture_output=True, timeout=120)
    return exe


def run(harness, *args, timeout=60):
    return subprocess.run([str(harness), *args], capture_output=True, timeout=timeout)


def script(tmp_path, name, body):
    p = tmp_path / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return str(p)


def resolve(harness, seconds, *argv):
    t0 = time.monotonic()
    p = run(harness, "resolve", str(seconds), *argv)
    head, _, out = p.stdout.partition(b"\n")
    rc, n = re.fullmatch(rb"rc (-?\d+) len (\d+)", head).groups()
    return int(rc), out, p.stderr.decode(), time.monotonic() - t0


def test_the_resolvers_answer_is_read(harness, tmp_path):
    rc, out, err, _ = resolve(harness, 10, script(tmp_path, "ok", "printf '/ckpt/step_9\\n9\\n'\n"))
    assert (rc, out, err) == (0, b"/ckpt/step_9\n9\n", "")


def test_a_resolver_that_closes_stdout_and_runs_on_is_killed_at_the_timeout(harness, tmp_path):
    """R15: the timeout ended at EOF; a resolver that printed its answer, closed stdout and kept running
    held the batch step 6 s with a 3 s timeout (waitpid without a deadline)."""
    lingering = script(tmp_path, "lingering", "printf '/ckpt/x\\n7\\n'\nexec >&-\nsleep 6\n")
    rc, out, err, took = resolve(harness, 2, lingering)
    assert rc == -1 and out == b""
    assert "took over 2 s; killed" in err
    assert took < 4.5, took
    # what it left running in its process group goes with it: nothing holds the step afterwards
    rc, _, _, took = resolve(harness, 2, script(tmp_path, "bg", "sleep 6 &\nprintf '/ckpt/x\\n'\n"))
    assert rc == -1 and took < 4.5, took


def test_output_over_the_buffer_is_refused_not_cut_and_used(harness, tmp_path):
    """R15: 20 kB without a newline became SLURM_FT_CKPT's first 8,191 bytes, used as the path."""
    rc, out, err, _ = resolve(harness, 10, sys.executable, "-c", "print('x' * 20000, end='')")
    assert rc == -1 and out == b""
    assert "printed more than 8191 bytes (one path and one step): refused, killed" in err
    rc, out, _, _ = resolve(harness, 10, sys.executable, "-c", "print('x' * 8191, end='')")
    assert rc == 0 and out == b"x" * 8191                   # exactly what fits is fine


def test_a_resolver_that_cannot_run_says_why_and_exits_127(harness, tmp_path):
    rc, out, err, _ = resolve(harness, 10, str(tmp_path / "no-such-python"))
    assert (rc, out) == (127, b"")
    assert err == f"slurm-ft: cannot run {tmp_path / 'no-such-python'}: errno 2\n"


def test_the_child_calls_only_async_signal_safe_functions_before_exec():
    """slurmstepd has threads: between fork and execve the child may call only async-signal-safe
    functions (POSIX); fprintf and strerror (the failure message before) are not."""
    src = (SPANK / "slurm_ft.c").read_text()
    child = src[src.index("static void exec_child("):]
    child = child[:child.index("\n}\n")]
    say = src[src.index("static void say("):]
    say = say[:say.index("\n}\n")]
    calls = set(re.findall(r"\b([a-z_0-9]+)\s*\(", child + say)) - {"exec_child", "say", "if", "while", "sizeof"}
    assert calls <= {"dup2", "close", "setpgid", "execve", "_exit", "write"}, calls
    fork_site = src[src.index("pid = fork();"):src.index("setpgid(pid, pid);")]
    assert "exec_child(argv, env, fds[0], fds[1]);" in fork_site and "slurm_error" not in fork_site


def opts(harness, *pairs):
    p = run(harness, "opt", *pairs)
    return p.stdout.decode(), p.stderr.decode(errors="replace")


def test_the_plugin_refuses_hang_timeout_without_ckpt_dir(harness):
    """R12: restarts in place are counted in CKPT/slurm-ft-starts.jsonl; without a directory
    --max-restarts never ended them. Where plugstack.conf says `optional`, Slurm ignores the failure and
    submits: the values still go into the job control environment, so the policy sees and refuses them."""
    out, err = opts(harness, "ft-hang-timeout=60")
    assert "post_opt -1" in out and "setenv SLURM_FT_HANG_TIMEOUT=60" in out
    assert "slurm-ft: --ft-hang-timeout needs --ft-ckpt-dir" in err
    out, _ = opts(harness, "ft-hang-timeout=60", "ft-ckpt-dir=/ckpt/run7")
    assert "post_opt 0" in out and "setenv SLURM_FT_HANG_TIMEOUT=60" in out


def test_the_plugin_refuses_a_checkpoint_dir_that_is_not_utf8(harness):
    """R11: /ckpt/\\xff\\xfe passed, the policy tagged it ckpt=/ckpt/%FF%FE, and the controller's strict
    decoding then ignored the job: the user believed it was fault-tolerant."""
    p = subprocess.run([str(harness), "opt", os.fsencode("ft-ckpt-dir=/ckpt/\udcff\udcfe")], capture_output=True,
                       timeout=60)
    assert b"opt ft-ckpt-dir -1" in p.stdout and b"setenv" not in p.stdout
    assert p.stderr == (b"error: slurm-ft: --ft-ckpt-dir: the checkpoint directory is not valid UTF-8 (slurm-ft "
                        b"reads the directory as UTF-8: rename it)\n")      # the bytes are not echoed
    out, _ = opts(harness, "ft-ckpt-dir=/ckpt/caf\u00e9 \u65e5\u672c")
    assert "opt ft-ckpt-dir 0" in out


@settings(max_examples=150)
@given(st.binary(min_size=1, max_size=12).filter(lambda b: b"\0" not in b))
def test_the_plugins_utf8_check_is_pythons(harness, data):
    try:
        data.decode("utf-8")
        want = "1"
    except UnicodeDecodeError:
        want = "0"
    assert run(harness, "utf8", data.hex()).stdout.decode().strip() == want
