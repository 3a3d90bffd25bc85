"""The tree passes `ruff check` (pyproject.toml: pyflakes' findings, syntax errors): unused imports, names
used before they exist and dead assignments fail the unit tests, not a reader. The seams (slurm/, gpu/
and the modules they stand on) pass `mypy --strict`: both Slurm backends are checked against SlurmApi."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STRICT = ("slurm_ft/slurm", "slurm_ft/gpu", "slurm_ft/vocab.py", "slurm_ft/runner.py", "slurm_ft/heartbeat.py")


def test_ruff_finds_nothing():
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr


def test_mypy_strict_on_the_seams(tmp_path):
    # the modules they import are read, not judged (--follow-imports=silent): strict is the seams' bar so far
    p = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir",
                        str(tmp_path), *STRICT], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_unit_tests_fake_slurm_is_a_slurm_api():
    # tests/unit/fakeslurm.py stands in for SlurmApi wherever a unit test needs Slurm: same methods, same parameters
    import inspect
    from fakeslurm import FakeSlurm
    from slurm_ft.slurm.api import SlurmApi
    members = [m for m in vars(SlurmApi) if not m.startswith("_") and callable(getattr(SlurmApi, m))]
    assert len(members) > 20
    for m in members:
        want = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(SlurmApi, m)).parameters.values()]
        got = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(FakeSlurm, m)).parameters.values()]
        assert got == want, m
