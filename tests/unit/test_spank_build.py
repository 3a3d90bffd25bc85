"""`slurm-ft config check` says when the slurm-ft SPANK plugin in plugstack.conf was built for another Slurm
release (slurm_ft/slurm/spank_build.py): Slurm refuses such a plugin, and with `optional` the only sign is
a log line on each node and users' "unrecognized option '--ft-ckpt-dir'"."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from slurm_ft.config_check import check_file
from slurm_ft.slurm import spank_build

ROOT = Path(__file__).resolve().parents[2]
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a shared object")


def _so(tmp_path: Path, number: int, name: str = "slurm_ft.so") -> Path:
    """A shared object with the `plugin_version` symbol SPANK_PLUGIN() defines (SLURM_VERSION_NUMBER)."""
    src = tmp_path / "v.c"
    src.write_text(f"const unsigned int plugin_version = {number:#x};\nconst char plugin_name[] = \"x\";\n")
    out = tmp_path / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True, timeout=60)
    return out


def _site(tmp_path: Path, so: Path, *, include: bool = False) -> Path:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\n")      # enough for `scontrol --version`
    line = f"optional {so} python=/usr/bin/python3   # slurm-ft\n"
    if include:
        (tmp_path / "plugstack.conf.d").mkdir()
        (tmp_path / "plugstack.conf.d" / "ft.conf").write_text(line)
        (tmp_path / "plugstack.conf").write_text("include plugstack.conf.d/*.conf\n")
    else:
        (tmp_path / "plugstack.conf").write_text(line)
    return conf


@needs_gcc
def test_the_release_a_plugin_was_built_for_is_read_off_the_file(tmp_path):
    so = _so(tmp_path, 0x180B03)                         # SLURM_VERSION_NUM(24, 11, 3)
    assert spank_build.plugin_version(str(so)) == 0x180B03
    assert spank_build.major_minor(0x180B03) == (24, 11)


@needs_gcc
@pytest.mark.parametrize("include", [False, True])
def test_a_plugin_of_another_release_is_named_with_both_releases_and_the_fix(tmp_path, include):
    conf = _site(tmp_path, _so(tmp_path, 0x160508), include=include)       # built on 22.05.8
    assert spank_build.mismatches(str(conf), (22, 5, 11)) == []            # a micro release loads it
    assert spank_build.mismatches(str(conf), (24, 11, 1)) == [
        f"{tmp_path}/slurm_ft.so was built for Slurm 22.05, this is 24.11: Slurm refuses to load it and sbatch "
        f"--ft-* fails; rebuild it (`make -C spank install`, docs/plugin.md)"]


def test_a_missing_or_foreign_file_is_no_plugin(tmp_path):
    (tmp_path / "slurm_ft.so").write_text("not ELF")
    conf = _site(tmp_path, tmp_path / "slurm_ft.so")
    assert [line.split(" (")[0] for line in spank_build.mismatches(str(conf), (24, 11, 1))] == [
        f"{tmp_path}/slurm_ft.so"]
    assert spank_build.plugin_version(str(tmp_path / "absent.so")) is None
    assert spank_build.plugin_version(sys.executable) is None              # an ELF file without the symbol


def test_other_plugins_and_no_plugstack_are_left_alone(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("PlugStackConfig=/nonexistent/plugstack.conf\n")
    assert spank_build.plugins_named(str(conf)) == []
    (tmp_path / "p.conf").write_text("required /usr/lib/other.so\n# optional /x/slurm_ft.so\n")
    conf.write_text(f"PlugStackConfig={tmp_path / 'p.conf'}\n")
    assert spank_build.plugins_named(str(conf)) == []


@settings(max_examples=300)
@given(st.binary(max_size=512))
def test_any_bytes_read_as_a_plugin_give_a_number_or_none(data):
    import tempfile
    with tempfile.NamedTemporaryFile() as f:
        f.write(b"\x7fELF\x02\x01" + data)
        f.flush()
        got = spank_build.plugin_version(f.name)
    assert got is None or 0 <= got < 2 ** 32


@needs_gcc
@pytest.mark.skipif(shutil.which("scontrol") is None, reason="needs Slurm's scontrol (the version config check reads)")
def test_config_check_reports_a_plugin_this_slurm_refuses(tmp_path, monkeypatch):
    conf = _site(tmp_path, _so(tmp_path, 0x010100))      # "1.01": no Slurm release loads it
    cfg = tmp_path / "slurm-ft.yaml"
    cfg.write_text(f"slurm:\n  conf: {conf}\nhealth:\n  kmsg_path: {tmp_path / 'kmsg'}\n")
    (tmp_path / "kmsg").write_text("")
    cfg.chmod(0o644)
    result = check_file(str(cfg), node="n1")
    assert [e for e in result.errors if "slurm_ft.so was built for Slurm 1.01" in e], result.errors


@pytest.mark.skipif(not Path("/usr/include/slurm/spank.h").exists() or shutil.which("make") is None
                    or shutil.which("scontrol") is None, reason="needs spank.h, make and scontrol")
def test_the_plugin_built_here_matches_this_slurm(tmp_path):
    from slurm_ft.slurm.client import SlurmClient
    subprocess.run(["make", "-s", "-C", str(ROOT / "spank"), f"O={tmp_path}"], check=True, timeout=120)
    conf = _site(tmp_path, tmp_path / "slurm_ft.so")
    assert spank_build.mismatches(str(conf), SlurmClient(conf=str(conf)).version()) == []
