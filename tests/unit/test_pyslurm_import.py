"""Importing pyslurm reads the Slurm config in libslurm, which ends the process (exit 1, Slurm 25.11.7 in
the bookworm-25.11 room) where there is none: the backend never imports it without a config file it
can read, and never for a second config. A stand-in `pyslurm` module records whether it was imported."""
from __future__ import annotations

import sys

import pytest

from slurm_ft.slurm import pyslurm_backend as pb


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    (tmp_path / "pyslurm.py").write_text("import os\nIMPORTED_WITH = os.environ.get('SLURM_CONF')\n"
                                         "__version__ = '25.11.2'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pyslurm", raising=False)
    monkeypatch.setattr(pb, "_imported_with", None)
    monkeypatch.setenv("SLURM_CONF", "")     # recorded, so that what _import sets is undone after
    monkeypatch.delenv("SLURM_CONF")
    yield tmp_path
    sys.modules.pop("pyslurm", None)


def test_no_config_file_no_import(stand_in):
    with pytest.raises(pb.Unreadable, match="no Slurm config at .*missing.conf"):
        pb._import(str(stand_in / "missing.conf"))
    assert "pyslurm" not in sys.modules


def test_the_config_asked_for_is_the_one_read_and_no_other_after_it(stand_in):
    conf = stand_in / "slurm.conf"
    conf.write_text("ClusterName=lab\n")
    assert pb._import(str(conf)).IMPORTED_WITH == str(conf)
    assert pb._import(str(conf)) is sys.modules["pyslurm"]            # the same config again: fine
    other = stand_in / "other.conf"
    other.write_text("ClusterName=other\n")
    with pytest.raises(pb.Unreadable, match="already read"):
        pb._import(str(other))


def test_without_pyslurm_it_is_a_plain_import_error(monkeypatch):
    monkeypatch.setattr(pb, "_imported_with", None)
    monkeypatch.setattr(pb.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError) as err:
        pb._import("/nonexistent/slurm.conf")
    assert not isinstance(err.value, pb.Unreadable)
