"""slurm-ft's own failure never drains a node (issue 10, item 1), on the real lab.

A broken install, run through the real Prolog/Epilog that slurmd runs for a job and the real
HealthCheckProgram, on a node with a real fault (XID79 in its kernel log): 0 drains, the job runs to
its end. The control (nothing broken) shows the same fault does fail the prolog and drain the node."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctl_helpers import skip_periodic_check, with_lines, write_hook
from slurm_ft_lab import inject as inj

pytestmark = pytest.mark.lab

PY = sys.executable
BREAKS = ["none", "pynvml_missing", "slurm_ft_broken", "config_unreadable", "state_dir_unwritable", "killed"]


def breakage(kind: str, lab, work: Path) -> str:
    """Shell lines that break slurm-ft's install the given way, for the lab's hook wrappers."""
    shadow = work / "shadow"
    shadow.mkdir(exist_ok=True)
    if kind == "pynvml_missing":
        (shadow / "pynvml.py").write_text("raise ImportError('No module named pynvml')\n")
        return f"export PYTHONPATH={shadow}\n"
    if kind == "slurm_ft_broken":           # slurm-ft's own import fails: python exits 1 before main()
        (shadow / "slurm_ft").mkdir(exist_ok=True)
        (shadow / "slurm_ft" / "__init__.py").write_text("raise ImportError('broken slurm_ft')\n")
        return f"export PYTHONPATH={shadow}\n"
    if kind == "config_unreadable":
        bad = work / "bad.yaml"
        bad.write_text("health: [not, a, mapping\n")
        os.chmod(bad, 0o644)
        return f"export SLURM_FT_CONFIG={bad}\n"
    if kind == "state_dir_unwritable":
        import yaml
        data = yaml.safe_load(Path(lab.config_path).read_text())
        data.setdefault("health", {})["state_file"] = "/dev/null/slurm-ft/{node}.json"
        cfg = work / "nostate.yaml"
        cfg.write_text(yaml.safe_dump(data))
        os.chmod(cfg, 0o644)
        return f"export SLURM_FT_CONFIG={cfg}\n"
    if kind == "killed":                    # e.g. the OOM killer: SIGKILL in the middle of the check, before
        # any verdict (at its NVML read), not after a fixed delay that a fast check can outrun
        (shadow / "pynvml.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
        return f"export PYTHONPATH={shadow}\n"
    return ""


@pytest.fixture
def hooks(lab):
    """The lab's prolog/epilog wrappers (slurmd runs them), restored after the test."""
    saved = {h: (lab.dir / "hooks" / h).read_text() for h in ("prolog", "epilog", "healthcheck")}
    lab.reset()
    yield saved
    for h, text in saved.items():
        write_hook(lab.dir / "hooks" / h, text)
    lab.reset()


def run_healthcheck(lab, node: str, wrapper: Path) -> None:
    p = subprocess.run([str(wrapper)], env=dict(lab.env, SLURMD_NODENAME=node), capture_output=True,
                       text=True, timeout=180)
    assert p.returncode == 0, p.stderr     # Slurm ignores it, but it always exits 0


def wait_job_end(lab, job_id: int, node: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        j, n = lab.client.job(job_id), lab.client.node(node)
        if j.state in ("COMPLETED", "FAILED", "CANCELLED") or n.drained:
            if j.state == "COMPLETED" and "COMPLETING" in n.flags:
                time.sleep(0.2)            # the epilog is still running
                continue
            return j, n
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not end: {lab.client.job(job_id)}, {lab.client.node(node)}")


@pytest.mark.parametrize("kind", BREAKS)
def test_broken_install_drains_nothing_through_the_real_hooks(lab, hooks, tmp_path, kind):
    node = lab.train_nodes[7]
    # slurmd's own periodic HealthCheckProgram leaves this node to the test (it drained it once in CI);
    # the `hooks` fixture restores the wrapper
    skip_periodic_check(lab, node)
    hc = tmp_path / "healthcheck-sound"
    hc.write_text(hooks["healthcheck"])
    hc.chmod(0o755)
    run_healthcheck(lab, node, hc)         # as at slurmd start: the fleet view the prolog's breaker reads
    inj.inject(lab.dir, node, "xid", gpu=1, value=79)
    lines = breakage(kind, lab, tmp_path)
    for h in ("prolog", "epilog"):
        write_hook(lab.dir / "hooks" / h, with_lines(hooks[h], lines))
    broken_hc = tmp_path / "healthcheck"
    broken_hc.write_text(with_lines(hooks["healthcheck"], lines))
    broken_hc.chmod(0o755)
    # a plain job of root's: what runs inside does not matter here, only the hooks' verdict on the node
    p = subprocess.run(["sbatch", "--parsable", "-w", node, "--no-requeue", "-o", str(tmp_path / "j.out"),
                        "--wrap", "sleep 1"], capture_output=True, text=True, timeout=30, env=lab.env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    job, n = wait_job_end(lab, int(p.stdout.strip().split(";")[0]), node)
    if kind == "none":                     # the control: a sound install fails the prolog on this fault
        assert n.drained and n.reason == "Prolog error", n
        return
    assert job.state == "COMPLETED" and not n.drained, (job, n)
    run_healthcheck(lab, node, broken_hc)  # the HealthCheckProgram, equally broken
    drained = [(x.name, x.reason) for x in lab.client.nodes() if x.drained]
    assert drained == [], drained
