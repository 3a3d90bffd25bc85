"""`slurm-ft sbatch` against the real lab: the job is tagged and requeueable, its strings arrive as data,
and `{ckpt}` is resolved again at every start."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from slurm_ft.job import ckpt
from slurm_ft.job.tag import FtSpec, decode
from slurm_ft_lab.waits import start_now

pytestmark = pytest.mark.lab

PY = sys.executable
EVIL = ["it's", 'say "hi"', "$(touch {canary})", "a;b && touch {canary}", "`touch {canary}`", "two\nlines",
        "tab\there", "*", "~", "$HOME", "back\\slash", "--comment=not-ours", "-N", "{ckpt"]
DUMP = ("import json, os, sys; json.dump({'argv': sys.argv[2:], 'ckpt': os.environ.get('SLURM_FT_CKPT'), "
        "'restart': os.environ.get('SLURM_RESTART_COUNT')}, open(sys.argv[1], 'w'))")


def slurm_ft(lab, *args, cwd=None, check=True):
    """`slurm-ft ARGS` as the lab's job user: a user submits their job."""
    p = lab.run_as([PY, "-m", "slurm_ft", *args], cwd=cwd, timeout=60)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def wait_file(path: Path, timeout: float = 180.0, where=lambda: "") -> dict:  # job starts are slow on a shared lab
    """The JSON `path` holds once it appears; `where()` says where the job stood when it did not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            time.sleep(0.1)
    raise AssertionError(f"{path} did not appear within {timeout} s; {where()}")


def job_said(lab, job_id: int, out: Path):
    """Where a job stands (Slurm's record, its output's last lines): a wait's explanation."""
    def where() -> str:
        said = out.read_text(errors="replace").splitlines()[-20:] if out.exists() else ["(no output)"]
        return f"{lab.client.job(job_id)}\n" + "\n".join(said)
    return where


def test_strings_reach_the_job_unchanged_and_are_never_evaluated(lab, work):
    canary = work / "canary"
    evil = [s.replace("{canary}", str(canary)) for s in EVIL]
    name = "n'a\"me $(touch %s);`x`" % canary
    out = work / "argv.json"
    p = slurm_ft(lab, "sbatch", "--ckpt-dir", str(work / "my ckpts"), "--max-restarts", "2", "-N", "1",
                 f"--job-name={name}", "-o", str(work / "job.out"), PY, "-c", DUMP, str(out), *evil, cwd=work)
    assert p.stdout.startswith("Submitted batch job ")
    job_id = int(p.stdout.split()[-1])
    got = wait_file(out)
    assert got["argv"] == evil
    assert got["ckpt"] == ""                               # first start: no checkpoint
    assert not canary.exists()
    job = lab.client.job(job_id)
    assert job.name == name
    assert job.requeue
    assert decode(job.comment) == FtSpec(ckpt_dir=str(work / "my ckpts"), max_restarts=2)


def test_parsable_prints_the_id_only(lab, work):
    p = slurm_ft(lab, "sbatch", "--parsable", "-N", "1", "-o", "/dev/null", "/bin/true", cwd=work)
    job_id = int(p.stdout.strip())
    assert lab.client.job(job_id).job_id == job_id


def test_script_with_sbatch_directives_and_placeholder_resolved_at_every_start(lab, work):
    ck = work / "ck"
    out = work / "start.json"
    script = work / "job.sh"
    script.write_text(f"""#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
rm -f {out}.tmp
{PY} -c "$DUMP" {out}.tmp "$@"
mv {out}.tmp {out}
sleep 300
""")
    os.chmod(script, 0o644)                            # not executable: run through its #! like sbatch
    p = lab.run_as([PY, "-m", "slurm_ft", "sbatch", "--parsable", "--ckpt-dir", str(ck), "-o",
                    str(work / "job.out"), "job.sh", "--resume", "{ckpt}", "--x={ckpt}/rank0"],
                   env={"DUMP": DUMP}, cwd=work, timeout=60)
    assert p.returncode == 0, p.stderr
    job_id = int(p.stdout)
    first = wait_file(out, where=job_said(lab, job_id, work / "job.out"))
    assert first["argv"] == ["--resume", "", "--x=/rank0"] and first["restart"] in (None, "0")  # unset before a requeue
    assert len(lab.client.job(job_id).nodes) == 2      # the script's #SBATCH --nodes=2 was honoured
    done = ckpt.write_checkpoint(str(ck), 40, {"w": b"weights"})
    os.makedirs(ck / "step_000050")                     # a newer, half-written one: never resumed from
    out.unlink()
    lab.client.requeue(job_id)
    start_now(lab.client, job_id)
    second = wait_file(out, where=job_said(lab, job_id, work / "job.out"))
    assert second["restart"] == "1"
    assert second["argv"] == ["--resume", done, f"--x={done}/rank0"]
    assert second["ckpt"] == done
    starts = [json.loads(line) for line in (ck / "slurm-ft-starts.jsonl").read_text().splitlines()]
    assert [(s["restart"], s["step"]) for s in starts] == [(0, None), (1, 40)]


@pytest.mark.parametrize("args,msg", [
    (["--comment=mine", "/bin/true"], "--comment"),
    (["--no-requeue", "/bin/true"], "requeueable"),
    (["--wrap=echo hi"], "shell"),
    (["/bin/true", "{ckpt}"], "needs --ckpt-dir"),
])
def test_refused_options_exit_2_and_submit_nothing(lab, work, args, msg):
    before = {j.job_id for j in lab.client.jobs()}
    p = slurm_ft(lab, "sbatch", *args, cwd=work, check=False)
    assert p.returncode == 2 and msg in p.stderr and "Traceback" not in p.stderr
    # no new job (finished jobs of earlier tests may age out of the queue meanwhile)
    assert not {j.job_id for j in lab.client.jobs()} - before
