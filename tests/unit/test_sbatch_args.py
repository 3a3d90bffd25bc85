"""`slurm-ft sbatch` command-line splitting, the sbatch argv it builds, and the job starter's {ckpt} resolution."""
from __future__ import annotations

import json
import re
import os
import subprocess
import sys

import pytest
from pathlib import Path

from slurm_ft.errors import UsageError
from slurm_ft.job import ckpt, jobstart, startprep, submit as sub
from slurm_ft.job.submit import parse, sbatch_argv, script_directives, starter_script
from slurm_ft.slurm.versions import requeue_option
from slurm_ft.job.tag import FtSpec, decode

NOFILE = lambda p: False  # noqa: E731  (no script files exist: SCRIPT is a command name)


def test_ours_vs_sbatch_options_and_script_args():
    r = parse(["--ckpt-dir", "ck", "--min-nodes=3", "-N", "4", "--gres=gpu:8", "-p", "train", "--time", "10",
               "--max-restarts", "2", "python", "-m", "trainer", "--resume", "{ckpt}", "-N", "9"],
              cwd="/work", file_exists=NOFILE)
    assert r.spec == FtSpec(ckpt_dir="/work/ck", min_nodes=3, max_restarts=2)
    assert r.sbatch_options == ("-N", "4", "--gres=gpu:8", "-p", "train", "--time", "10")
    assert r.script == "python"
    assert r.args == ("-m", "trainer", "--resume", "{ckpt}", "-N", "9")     # after SCRIPT: the job's, untouched
    assert r.nodes == 4


@pytest.mark.parametrize("words,opts", [
    (["-N4"], ("-N", "4")),
    (["-N", "4"], ("-N", "4")),
    (["--nodes=4"], ("--nodes=4",)),
    (["--nodes", "4"], ("--nodes", "4")),
    (["-vv"], ("-v", "-v")),
    (["-kHN2"], ("-k", "-H", "-N", "2")),
    (["--exclusive", "--hold"], ("--exclusive", "--hold")),
    (["--exclusive=user"], ("--exclusive=user",)),
    (["-J", "my job"], ("-J", "my job")),
    (["--job-name", "-weird-"], ("--job-name", "-weird-")),      # a value may start with '-'
])
def test_value_forms(words, opts):
    r = parse(words + ["x"], file_exists=NOFILE)
    assert r.sbatch_options == opts and r.script == "x"


def test_requeue_and_parsable_are_ours():
    r = parse(["--requeue", "--parsable", "x"], file_exists=NOFILE)
    assert r.sbatch_options == () and r.parsable


def test_argv_built_for_sbatch_carries_tag_requeue_and_user_argv_verbatim():
    evil = ["it's", '"q"', "$(touch /tmp/pwned)", "a;b", "`id`", "line1\nline2", "{ckpt}"]
    r = parse(["--ckpt-dir", "/c d", "-N", "2", "job.sh", *evil], cwd="/w", file_exists=lambda p: p == "/w/job.sh")
    argv = sbatch_argv(r, "/tmp/start.py")
    assert argv[:2] == ["-N", "2"]
    assert "--requeue" in argv and "--job-name=job.sh" in argv
    tag = [a for a in argv if a.startswith("--comment=")][0][len("--comment="):]
    assert decode(tag) == FtSpec(ckpt_dir="/c d")
    i = argv.index("/tmp/start.py")
    assert argv[i + 1:] == ["--ckpt-dir", "/c d", "--", "/w/job.sh", *evil]


@pytest.mark.parametrize("version,params,option", [
    ((22, 5, 8), "enable_expedited_requeue", "--requeue"), ((25, 5, 0), "enable_expedited_requeue", "--requeue"),
    ((25, 11, 0), "enable_expedited_requeue", "--requeue=expedite"),
    ((26, 5, 1), "enable_stepmgr,enable_expedited_requeue", "--requeue=expedite"),
    ((26, 5, 1), "(null)", "--requeue"), ((26, 5, 1), "enable_expedited_requeue_x", "--requeue"),
])
def test_requeue_option_by_slurm_version_and_config(version, params, option):
    """Expedited requeue exists from 25.11 and is refused unless slurmctld enables it."""
    r = parse(["--requeue=expedite", "-N", "2", "x"], file_exists=NOFILE)    # the user's own is replaced
    argv = sbatch_argv(r, "/st", requeue_option(version, params))
    assert [a for a in argv if a.startswith("--requeue")] == [option]
    assert argv.index(option) < argv.index("/st")       # an sbatch option, not the job's argument


def test_job_name_not_added_when_given():
    argv = sbatch_argv(parse(["-Jx", "s"], file_exists=NOFILE), "/st")
    assert not any(a.startswith("--job-name") for a in argv)


@pytest.mark.parametrize("words,msg", [
    (["--comment=hi", "x"], "--comment"),
    (["--no-requeue", "x"], "requeueable"),
    (["--wrap", "echo hi"], "shell"),
    (["-W", "x"], "--wait"),
    (["--array=1-4", "x"], "arrays"),
    (["-a", "1-4", "x"], "arrays"),
    (["--test-only", "x"], "submits nothing"),
    (["--bogus", "x"], "unknown sbatch option --bogus"),
    (["-Z", "x"], "unknown sbatch option -Z"),
    (["-N"], "needs a value"),
    (["--ckpt-dir"], "needs a value"),
    (["-N", "4"], "no SCRIPT"),
    (["--min-nodes", "0", "x"], ">= 1"),
    (["--max-restarts", "many", "x"], "integer"),
    (["--min-nodes", "5", "-N", "4", "x"], "larger than"),
    (["x", "{ckpt}"], "needs --ckpt-dir"),
    (["./missing.sh"], "no such file"),
])
def test_bad_input_is_a_usage_error(words, msg):
    with pytest.raises(UsageError, match=msg):
        parse(words, file_exists=NOFILE)


def test_hang_timeout_needs_a_checkpoint_dir():
    """R12: restarts in place after a hang are counted in CKPT/slurm-ft-starts.jsonl; without --ckpt-dir
    nothing counted them and --max-restarts 1 never ended the job."""
    with pytest.raises(UsageError, match="^--hang-timeout needs --ckpt-dir: restarts after a hang are counted in "
                                         "the checkpoint directory"):
        parse(["--hang-timeout", "60", "--max-restarts", "1", "x"], file_exists=NOFILE)
    assert parse(["--hang-timeout", "60", "--ckpt-dir", "/ck", "x"], file_exists=NOFILE).spec.hang_timeout == 60


def test_a_checkpoint_dir_that_is_not_utf8_is_refused():
    """R11: argv's undecodable bytes arrive as surrogates; through the plugin they went on as the same
    bytes (ckpt=/ckpt/%FF%FE, a tag the controller ignores), through --comment quote() raised a traceback."""
    with pytest.raises(UsageError, match=r"^--ckpt-dir /ckpt/\\xff\\xfe: the checkpoint directory is not valid UTF-8"):
        parse(["--ckpt-dir", os.fsdecode(b"/ckpt/\xff\xfe"), "x"], file_exists=NOFILE)
    with pytest.raises(UsageError, match="not valid UTF-8"):      # relative, under a working directory that is not
        parse(["--ckpt-dir", "ck", "x"], cwd=os.fsdecode(b"/home/\xe9"), file_exists=NOFILE)
    assert parse(["--ckpt-dir", "/ckpt/caf\u00e9", "x"], file_exists=NOFILE).spec.ckpt_dir == "/ckpt/caf\u00e9"
    # the command: one line, exit 2, before Slurm is asked anything (no config, no Slurm here)
    p = subprocess.run([sys.executable, "-m", "slurm_ft", "sbatch", "--ckpt-dir", b"/ckpt/\xff", "/bin/true"],
                       capture_output=True, timeout=120, env=dict(os.environ, SLURM_FT_CONFIG="/nonexistent"))
    assert p.returncode == 2 and b"Traceback" not in p.stderr
    assert p.stderr == (b"slurm-ft: error: --ckpt-dir /ckpt/\\xff: the checkpoint directory is not valid UTF-8 "
                        b"(slurm-ft reads the directory as UTF-8: rename it)\n")


def test_double_dash_ends_options():
    r = parse(["-N", "1", "--", "-script-starting-with-dash"], file_exists=NOFILE)
    assert r.script == "-script-starting-with-dash"


def test_script_directives_copied_until_first_command():
    text = "#!/bin/bash\n#SBATCH -N 4\n\n# note\n#SBATCH --gres=gpu:8\nsrun x\n#SBATCH -N 9\n"
    assert script_directives(text) == ["#SBATCH -N 4", "#SBATCH --gres=gpu:8"]
    s = starter_script(["#SBATCH -N 4"], python="/usr/bin/python3")
    assert s.startswith("#!/usr/bin/python3\n# -*- coding: utf-8 -*-\n#SBATCH -N 4\n")
    compile(s, "starter", "exec")


# --- the starter ---------------------------------------------------------------------------------

def test_resolve_empty_then_latest(tmp_path):
    d = str(tmp_path)
    argv, found = startprep.resolve(["t", "--resume", "{ckpt}", "--x={ckpt}/rank0"], d)
    assert argv == ["t", "--resume", "", "--x=/rank0"] and found.path is None
    ckpt.write_checkpoint(d, 7, {"a": b"x"})
    argv, found = startprep.resolve(["t", "--resume", "{ckpt}"], d)
    assert argv == ["t", "--resume", os.path.join(d, "step_000007")] and found.step == 7


def test_exec_argv_uses_shebang_for_non_executable(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash -e\necho hi\n")
    os.chmod(script, 0o644)
    assert startprep.exec_argv(str(script), ["a"]) == ["/bin/bash", "-e", str(script), "a"]
    os.chmod(script, 0o755)
    assert startprep.exec_argv(str(script), ["a"]) == [str(script), "a"]
    assert startprep.exec_argv("python3", ["-c", "1"]) == ["python3", "-c", "1"]


def test_starter_execs_with_resolved_argv(tmp_path):
    """Run the real starter in a child: it resolves {ckpt}, logs the start and execs the command."""
    import subprocess
    import sys
    d = tmp_path / "ck"
    ckpt.write_checkpoint(str(d), 3, {"a": b"x"})
    out = tmp_path / "argv.json"
    code = "import json,sys,os; json.dump([sys.argv[1:], os.environ['SLURM_FT_CKPT_STEP']], open(sys.argv[1], 'w'))"
    p = subprocess.run([sys.executable, "-m", "slurm_ft.job.jobstart", "--ckpt-dir", str(d), "--",
                        sys.executable, "-c", code, str(out), "{ckpt}", "$(id);`x`\n"],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "SLURM_RESTART_COUNT": "2"})
    assert p.returncode == 0, p.stderr
    assert "resuming from" in p.stderr
    assert json.loads(out.read_text()) == [[str(out), str(d / "step_000003"), "$(id);`x`\n"], "3"]
    start = json.loads((d / "slurm-ft-starts.jsonl").read_text().splitlines()[-1])
    assert start["restart"] == 2 and start["step"] == 3 and start["skipped"] == []


@pytest.mark.parametrize("version,expedite_on,requeue,plugin", [
    ("22.05", True, "--requeue", False), ("24.11", True, "--requeue", False),
    ("26.05", True, "--requeue=expedite", False), ("26.05", False, "--requeue", False),
    ("22.05", True, "--requeue", True), ("26.05", True, "--requeue=expedite", True)])
def test_cli_submits_the_starter_with_the_users_argv_and_removes_it(tmp_path, monkeypatch, version, expedite_on,
                                                                     requeue, plugin):
    """The command end to end minus Slurm: what reaches SlurmClient.submit, and the starter's text.
    Slurm's answers are those captured from each version's lab (26.05's runs enable_expedited_requeue;
    without it, as slurmctld's default, 26.05 gets plain --requeue). plugin: slurmctld runs
    JobSubmitPlugins=lua, so the tag goes as the SPANK plugin's --ft-* options (AdminComment), not --comment."""
    from click.testing import CliRunner

    from slurm_ft.cli.group import cli
    from slurm_ft.cli import sbatch as sbatch_cli
    from slurm_ft.runner import Result
    from slurm_ft.slurm.client import SlurmClient

    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 2\n#SBATCH --gres=gpu:8\nsrun x \"$@\"\n")
    seen = {"asked": []}
    captured = Path(__file__).parent.parent / "data" / "slurm" / version
    config = (captured / "scontrol_show_config.txt").read_text()
    if not expedite_on:
        config = config.replace("enable_expedited_requeue", "(null)")
    if plugin:
        config = re.sub(r"(?m)^(JobSubmitPlugins\s*=) \(null\)$", r"\1 lua", config)
        assert "= lua" in config

    class Client(SlurmClient):
        def _run(self, argv, **kw):
            seen["asked"].append(" ".join(argv))
            text = {"scontrol --version": (captured / "scontrol_version.txt").read_text(),
                    "scontrol show config": config}[" ".join(argv)]
            return Result(list(argv), 0, text, "", 0.0)

        def submit(self, argv):
            starter = [a for a in argv if "slurm-ft-start-" in a][0]
            seen["argv"] = list(argv)
            seen["starter"] = starter
            seen["text"] = open(starter).read()
            seen["mode"] = os.stat(starter).st_mode & 0o777
            return 4242

    monkeypatch.setattr(sbatch_cli, "_client", lambda ctx: Client())
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["sbatch", "--ckpt-dir", "ck", "--max-restarts", "3", "-p", "train", "train.sh",
                                 "--resume", "{ckpt}"])
    assert r.exit_code == 0, r.output
    assert r.stdout == "Submitted batch job 4242\n"
    assert ("through the slurm-ft plugin" if plugin else "without the slurm-ft plugin") in r.stderr
    assert not os.path.exists(seen["starter"])                     # sbatch keeps its own copy
    assert seen["mode"] == 0o700
    assert seen["text"].splitlines()[2:4] == ["#SBATCH -N 2", "#SBATCH --gres=gpu:8"]
    i = seen["argv"].index(seen["starter"])
    ck = str(tmp_path / "ck")
    if plugin:      # the plugin resolves {ckpt}; the policy writes the tag
        assert seen["argv"][i + 1:] == ["--", str(script), "--resume", "{ckpt}"]
        assert [a for a in seen["argv"][:i] if a.startswith(("--ft-", "--comment"))] == [
            f"--ft-ckpt-dir={ck}", "--ft-max-restarts=3"]
    else:
        assert seen["argv"][i + 1:] == ["--ckpt-dir", ck, "--", str(script), "--resume", "{ckpt}"]
        assert [a for a in seen["argv"][:i] if a.startswith(("--ft-", "--comment"))] == [
            f"--comment=slurm-ft:v1 ckpt={ck} max_restarts=3"]
    assert requeue in seen["argv"][:i] and "--job-name=train.sh" in seen["argv"][:i]
    assert [a for a in seen["argv"] if a.startswith("--requeue")] == [requeue]
    assert seen["asked"].count("scontrol --version") == 1       # the version is learnt once
    assert seen["asked"].count("scontrol show config") == 1     # JobSubmitPlugins (and expedite), once
    r = CliRunner().invoke(cli, ["sbatch", "--parsable", "train.sh"])
    assert r.stdout == "4242\n"


def test_through_the_plugin_a_supervised_jobs_arguments_travel_inside_the_starter():
    """The SPANK plugin replaces {ckpt} in the batch step's arguments once, at the start; a supervisor
    resolves it at every launch, so it must get the placeholder: the starter carries the arguments."""
    import ast
    req = parse(["--ckpt-dir", "/ck", "--hang-timeout", "60", "-N", "2", "/bin/train", "--resume", "{ckpt}", "é x"],
                file_exists=lambda p: True)
    assert sub.supervised(req.spec)
    argv = sub.sbatch_argv(req, "/tmp/start.py", via="admin_comment")
    assert argv[-1] == "/tmp/start.py" and "--ft-hang-timeout=60" in argv      # nothing after the starter
    text = sub.starter_script(argv=sub.starter_argv(req))
    compile(text, "starter", "exec")
    call = text.splitlines()[-1]
    assert call.startswith("sys.exit(main(") and ast.literal_eval(call[len("sys.exit(main("):-2]) == [
        "--ckpt-dir", "/ck", "--hang-timeout", "60", "--max-restarts", "5", "--train-nodes", "2", "--",
        "/bin/train", "--resume", "{ckpt}", "é x"]
    plain = parse(["--ckpt-dir", "/ck", "/bin/train", "{ckpt}"], file_exists=lambda p: True)
    assert sub.sbatch_argv(plain, "/s.py", via="admin_comment")[-4:] == ["/s.py", "--", "/bin/train", "{ckpt}"]


@pytest.mark.parametrize("opts,warns", [
    (["--min-nodes", "2", "-N", "4", "--ntasks-per-node=1"], True),
    (["--min-nodes", "2", "-N", "4", "-n4"], True),
    (["--min-nodes", "2", "-N", "4", "--ntasks", "4"], True),
    (["--min-nodes", "2", "-N", "4"], False),
    (["-N", "4", "--ntasks-per-node=1"], False),          # not elastic: a fixed task count is fine
])
def test_elastic_job_with_fixed_task_count_is_warned(opts, warns):
    r = parse(opts + ["x"], file_exists=NOFILE)
    assert bool(r.warnings()) == warns


@pytest.mark.parametrize("words,opts,n", [
    (["--hot-spares", "2", "-N", "4"], ("-N", "6"), 4),
    (["--hot-spares=1", "-N4"], ("-N", "5"), 4),
    (["--hot-spares", "1", "--nodes", "8"], ("--nodes", "9"), 8),
    (["--hot-spares", "1", "--nodes=8", "-J", "-N"], ("--nodes=9", "-J", "-N"), 8),   # a job named -N stays
])
def test_hot_spares_ask_for_n_plus_k_nodes_and_tag_n_and_k(words, opts, n):
    req = parse([*words, "--ntasks-per-node=1", "train.py"], file_exists=lambda p: False)
    assert req.sbatch_options == (*opts, "--ntasks-per-node=1")
    assert req.spec.train_nodes == n
    argv = sbatch_argv(req, "/tmp/start.py")
    tag = next(a for a in argv if a.startswith("--comment="))[len("--comment="):]
    assert decode(tag) == req.spec
    i = argv.index("/tmp/start.py")
    assert argv[i + 1:i + 7] == ["--ckpt-dir", "", "--hot-spares", str(req.spec.hot_spares),
                                 "--train-nodes", str(n)]
    assert argv[:i].count("--no-kill") == 1      # a node going DOWN shrinks the job, never kills it


def test_only_hot_spare_jobs_are_submitted_no_kill():
    plain = parse(["-N", "4", "train.py"], file_exists=lambda p: False)
    assert "--no-kill" not in sbatch_argv(plain, "/tmp/start.py")
    given = parse(["--hot-spares", "1", "-N", "4", "--no-kill", "train.py"], file_exists=lambda p: False)
    assert sbatch_argv(given, "/tmp/start.py").count("--no-kill") == 1


@pytest.mark.parametrize("words,msg", [
    (["--hot-spares", "1", "x"], "-N N"),
    (["--hot-spares", "1", "-N", "2-4", "x"], "-N N"),
    (["--hot-spares", "1", "-N", "4", "--min-nodes", "2", "x"], "cannot be combined"),
    (["--hot-spares", "1", "-N", "4", "-n", "8", "x"], "--ntasks-per-node"),
    (["--hot-spares", "-1", "-N", "4", "x"], ">= 0"),
])
def test_hot_spares_bad_input(words, msg):
    with pytest.raises(UsageError, match=msg):
        parse(words, file_exists=lambda p: False)


def test_hot_spare_starter_hands_over_to_the_supervisor(monkeypatch):
    from slurm_ft.job import supervisor
    calls = []
    monkeypatch.setattr(supervisor, "main", lambda *a, **kw: calls.append((a, kw)) or 0)
    assert jobstart.main(["--ckpt-dir", "/ck", "--hot-spares", "2", "--train-nodes", "4", "--", "t", "{ckpt}"]) == 0
    assert calls[-1] == (("/ck", 4, ["t", "{ckpt}"]), {"hang_timeout": 0, "max_restarts": 5, "ckpt_fails": 3})
    assert jobstart.main(["--ckpt-dir", "/ck", "--hot-spares", "2", "--", "t"]) == 2
    # no hot spares but a hang timeout: the supervisor runs too, on every node of the allocation
    assert jobstart.main(["--ckpt-dir", "/ck", "--hang-timeout", "30", "--max-restarts", "2", "--ckpt-fails", "4",
                          "--", "t"]) == 0
    assert calls[-1] == (("/ck", None, ["t"]), {"hang_timeout": 30, "max_restarts": 2, "ckpt_fails": 4})
    assert jobstart.main(["--ckpt-dir", "/ck", "--hang-timeout", "x", "--", "t"]) == 2
    assert jobstart.main(["--ckpt-dir", "/ck", "--hang-timeout", "3", "--hang-timeout", "3", "--", "t"]) == 2


def test_hang_timeout_and_ckpt_fails_reach_the_starter():
    req = parse(["--ckpt-dir", "/ck", "--hang-timeout", "15", "--max-restarts", "2", "--ckpt-fails", "2", "-N", "2",
                 "train.sh"], file_exists=lambda p: True)
    argv = sbatch_argv(req, "/s/starter")
    tail = argv[argv.index("/s/starter") + 1:]
    assert tail == ["--ckpt-dir", "/ck", "--hang-timeout", "15", "--max-restarts", "2", "--train-nodes", "2",
                    "--ckpt-fails", "2", "--", "train.sh"]
    assert "hang_timeout=15" in next(a for a in argv if a.startswith("--comment="))
    with pytest.raises(UsageError, match="--ckpt-fails"):
        parse(["--ckpt-fails", "-1", "train.sh"], file_exists=lambda p: True)


def test_a_starter_written_before_the_move_still_finds_its_start_code():
    # jobs pending or requeued across an upgrade run the starter they were submitted with
    import subprocess
    import sys
    import tempfile
    old = "import sys\nfrom slurm_ft.recovery.jobstart import main\nprint(main.__module__)\n"
    p = subprocess.run([sys.executable, "-c", old], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "slurm_ft.job.jobstart", p.stderr
    with tempfile.TemporaryDirectory() as d:        # an old SPANK plugin's call
        p = subprocess.run([sys.executable, "-m", "slurm_ft.recovery.jobstart", "--resolve", "--ckpt-dir", d],
                           capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "no complete checkpoint" in p.stderr, p.stderr
