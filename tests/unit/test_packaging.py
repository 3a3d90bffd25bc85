"""What `pip install slurm-ft` puts on a node: the product, its data, and nothing of the lab (lab/ is its own
project, installed beside it only for development: setup.sh). The wheels are built for real, from a copy of
the source tree, as pip would build them."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict:
    # a copy without what a build or a run leaves (a clean room has no git): a stale build/ would be packed too
    src = tmp_path_factory.mktemp("src") / "slurm-ft"
    out = tmp_path_factory.mktemp("wheels")
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info",
                                                             "__pycache__", ".pytest_cache", ".hypothesis"))
    names: dict = {}
    for project in (src, src / "lab"):
        p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
                            "-w", str(out), str(project)], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
    for whl in out.glob("*.whl"):
        with zipfile.ZipFile(whl) as z:
            names[whl.name.split("-")[0]] = {n: z.read(n).decode() if n.endswith(".txt") else "" for n in z.namelist()}
    return names


def test_the_product_wheel_holds_no_lab_code(wheels):
    product = wheels["slurm_ft"]
    assert "slurm_ft/cli/check.py" in product and "slurm_ft/data/xid_catalog.csv" in product
    assert {"slurm_ft/data/job_submit.lua", "slurm_ft/data/slurm_ft_policy.lua"} <= set(product)
    assert not [n for n in product if "lab" in n.split("/")[0] or "fake_nvml" in n or n.startswith("tests/")]
    assert all(n.startswith(("slurm_ft/", "slurm_ft-")) for n in product), product


def test_the_product_wheel_carries_its_license_and_notice(wheels):
    """A site's review reads the license off what it installs (setup.cfg's license_files)."""
    meta = [n for n in wheels["slurm_ft"] if n.startswith("slurm_ft-") and ".dist-info/" in n]
    assert [n for n in meta if n.endswith("/LICENSE")] and [n for n in meta if n.endswith("/NOTICE")], meta


def test_the_lab_wheel_brings_the_fake_driver_source_and_its_commands(wheels):
    lab = wheels["slurm_ft_lab"]
    assert "slurm_ft_lab/fake_nvml/fake_nvml.c" in lab and "slurm_ft_lab/cli/demo.py" in lab
    points = next(text for n, text in lab.items() if n.endswith("entry_points.txt"))
    assert "[slurm_ft.commands]\nlab = slurm_ft_lab.cli:lab" in points
    assert "[slurm_ft.burnin]\nlab = slurm_ft_lab.burnin:lab" in points


def test_the_product_never_imports_the_lab():
    import ast
    offenders = []
    for p in (ROOT / "slurm_ft").rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                [n.module or ""] if isinstance(n, ast.ImportFrom) else []
            offenders += [f"{p.relative_to(ROOT)}: {m}" for m in mods if m.split(".")[0] == "slurm_ft_lab"]
    assert not offenders
