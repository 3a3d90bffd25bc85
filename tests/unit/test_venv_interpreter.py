"""What slurm-ft starts from a virtualenv stays in that virtualenv (issue 9).

A venv made with --without-pip from the base interpreter, which lacks pynvml; slurm-ft and its
dependencies are visible in the venv only (a .pth file). Whatever resolves the interpreter to its real
path (the realpath of sys.executable) leaves the venv for the base interpreter, where the import fails.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ft_lab import fake_nvml, inject

REPO = Path(__file__).resolve().parents[2]
NODE = "gpu001"


def _base_python() -> str:
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    base = _base_python()
    probe = subprocess.run([base, "-I", "-c", "import pynvml"], capture_output=True, timeout=30,
                           cwd=tmp_path_factory.getbasetemp())
    if probe.returncode == 0:
        pytest.skip(f"the base interpreter {base} has pynvml: a venv over it would not show a leak")
    v = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([base, "-m", "venv", "--without-pip", str(v)], check=True, timeout=120)
    py = v / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    import click, psutil, pynvml, yaml        # noqa: E401  where this test's own interpreter finds them
    dirs = {str(REPO), str(REPO / "lab")} | {str(Path(m.__file__).resolve().parent.parent) for m in (click, yaml, psutil)}
    dirs.add(str(Path(pynvml.__file__).resolve().parent))
    Path(purelib, "slurm_ft_test.pth").write_text("\n".join(sorted(dirs)) + "\n")
    exe = v / "bin" / "slurm-ft"                # what pip's console-script entry point would write
    exe.write_text(f"#!{py}\nimport sys\nfrom slurm_ft.cli import main\nsys.exit(main())\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return v


@pytest.fixture
def lab(tmp_path) -> Path:
    inject.init_node(tmp_path, NODE, gpus=8)
    fake_nvml.build(tmp_path / "lib")
    (tmp_path / "slurm-ft.yaml").write_text(
        f"state_dir: {tmp_path}/state\n"
        f"health:\n  kmsg_path: {tmp_path}/nodes/{{node}}/kmsg\n  state_file: {tmp_path}/nodes/{{node}}/state.json\n"
        "lifecycle:\n  breaker_max_share: 0\n")      # no breaker: a failing prolog asks no Slurm (none here)
    (tmp_path / "state").mkdir(mode=0o700)
    return tmp_path


def node_env(venv: Path, lab: Path, **extra) -> dict:
    """What slurmd gives a hook or a task: no VIRTUAL_ENV, no PYTHONPATH, the venv's bin/ first on PATH."""
    return {"PATH": f"{venv}/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SLURMD_NODENAME": NODE, "SLURM_JOB_ID": "7",
            "SLURM_FT_LAB_DIR": str(lab), "SLURM_FT_CONFIG": str(lab / "slurm-ft.yaml"),
            "LD_LIBRARY_PATH": str(lab / "lib"), "LANG": "C.UTF-8", **extra}


def test_prolog_hook_from_a_venv_reads_the_gpus_through_pynvml(venv, lab):
    hook = [str(REPO / "prolog.d" / "50-slurm-ft")]
    ok = subprocess.run(hook, env=node_env(venv, lab), capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    # a fault only NVML sees (no kernel-log line): the hook fails the job only if pynvml ran
    inject.inject(lab, NODE, "ecc_dbe", gpu=2, log=False)
    bad = subprocess.run(hook, env=node_env(venv, lab), capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1, bad.stderr
    found = json.loads((lab / "nodes" / NODE / "state.json").read_text())["active"]
    assert [(f["code"], f["gpu"]) for f in found] == [("ECC_DBE", 2)]


def test_lab_trainer_from_a_venv_watches_the_gpus_and_checkpoints(venv, lab):
    ck = lab / "ck"
    env = node_env(venv, lab, SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_RESTART_COUNT="0")
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "slurm_ft_lab.trainer", "--ckpt-dir", str(ck),
                        "--steps", "3", "--step-time", "0.01", "--ckpt-every", "2", "--gpu-check", "on"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr          # --gpu-check on: exit 4 if pynvml cannot be imported
    assert (ck / "step_00000002" / "COMPLETE").exists() or any(ck.glob("step_*2/COMPLETE")), os.listdir(ck)


def test_job_starter_written_from_a_venv_runs_in_it(venv, tmp_path):
    py = venv / "bin" / "python"
    text = subprocess.run([str(py), "-c", "from slurm_ft.job.submit import starter_script as s; "
                                          "print(s(), end='')"],
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True,
                          timeout=60).stdout
    assert text.splitlines()[0] == f"#!{py}"
    starter = tmp_path / "starter"
    starter.write_text(text)
    starter.chmod(0o755)
    r = subprocess.run([str(starter), "--ckpt-dir", str(tmp_path / "none"), "--", "/bin/echo", "resume={ckpt}"],
                       env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "resume="
