"""SlurmClient's input checks: refused before any Slurm command runs (no daemons needed)."""
from __future__ import annotations

import pytest

from slurm_ft.errors import EnvironmentProblem, UsageError
from slurm_ft.slurm import client as client_mod
from slurm_ft.slurm.backend import client_from_config, get_client
from slurm_ft.slurm.client import SlurmClient, check_reason


class NoSlurm(SlurmClient):
    """Fails the test if a command would run: every check here must happen first."""

    def _run(self, argv, **kwargs):
        raise AssertionError(f"ran {argv}")


@pytest.mark.parametrize("reason", [
    'slurm-ft: XID79 gpu3 "fell off" a=b; c', "ünïcode €", "$HOME \\ back", "x" * 1024,
])
def test_reasons_slurm_keeps(reason):
    assert check_reason(reason) == reason


@pytest.mark.parametrize("reason, why", [
    ("a\nb", "newline"), ("a\rb", "control"), ("a\x00b", "control"), ("", "required"), ("   ", "required"),
    ("x ", "whitespace"), ("x" * 1025, "at most 1024"),
])
def test_reasons_refused(reason, why):
    with pytest.raises(UsageError, match=why):
        check_reason(reason)


def test_bad_input_never_reaches_slurm():
    c = NoSlurm()
    with pytest.raises(UsageError, match="malformed hostlist"):
        c.drain("gpu[1-", "x")
    with pytest.raises(UsageError, match="newline"):
        c.drain(["gpu001"], "a\nb")
    with pytest.raises(UsageError, match="bad node name"):
        c.drain(["gpu 1"], "x")
    with pytest.raises(UsageError, match="no nodes"):
        c.drain([], "x")
    with pytest.raises(UsageError, match="bad job id"):
        c.requeue("1;2")
    with pytest.raises(UsageError, match="bad job id"):
        c.cancel(0)
    with pytest.raises(UsageError, match="bad Slurm field name"):
        c.update_job(5, **{"Start Time": "now"})
    with pytest.raises(UsageError, match="newline"):
        c.update_job(5, Comment="a\nb")
    with pytest.raises(UsageError, match="nothing to update"):
        c.update_job(5)
    with pytest.raises(UsageError, match="argv list, or a whole batch script"):
        c.submit("sleep 10")
    with pytest.raises(UsageError, match="does not exist"):
        c.submit(["--wrap", "true"], cwd="/nonexistent/dir")


def test_update_job_fields_are_argv_elements():
    seen = []

    class Recorder(SlurmClient):
        def _run(self, argv, **kwargs):
            seen.append(list(argv))

    Recorder().update_job(7, StartTime="now", ExcNodeList=["gpu003", "gpu001", "gpu002"],
                          Comment='a "b" c=d')
    assert seen == [["scontrol", "update", "JobId=7", "StartTime=now", "ExcNodeList=gpu[001-003]",
                     'Comment=a "b" c=d']]


def test_backend_choice(monkeypatch):
    with pytest.raises(UsageError, match="unknown Slurm backend"):
        get_client("slurmrestd")
    c = get_client("commands")
    assert (c.backend, c.backend_reason) == ("commands", "slurm.backend: commands in the config")
    from slurm_ft.slurm import pyslurm_backend
    monkeypatch.setattr(pyslurm_backend, "unusable_reason", lambda c: "pyslurm not importable")
    c = get_client("auto")
    assert (c.backend, c.backend_reason) == ("commands", "pyslurm not importable")   # what `slurm-ft status` says
    with pytest.raises(EnvironmentProblem, match="pyslurm not importable"):
        get_client("pyslurm")


def test_from_config_uses_the_slurm_section(tmp_path):
    from slurm_ft.config import load_config
    cfg = tmp_path / "c.yaml"
    cfg.write_text("slurm:\n  conf: /etc/lab/slurm.conf\n  timeout_s: 7\n  backend: commands\n")
    c = client_from_config(load_config(str(cfg)))
    assert c.env == {"SLURM_CONF": "/etc/lab/slurm.conf"} and c.timeout == 7.0


def test_missing_slurm_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(client_mod.SlurmError, match="is Slurm installed"):
        SlurmClient().partitions()


def test_node_lists_are_one_light_read_on_any_version():
    """Several nodes (or all): one `scontrol show node -o` (the lightest read of the fleet, no JSON to
    render), parsed only for the records asked for; the same call on every version."""
    from pathlib import Path
    from slurm_ft.runner import Result
    data = Path(__file__).resolve().parents[1] / "data" / "slurm"
    calls = []

    class OldSlurm(SlurmClient):
        def _run(self, argv, check=True, **kwargs):
            calls.append(list(argv))
            if argv == ["scontrol", "--version"]:
                return Result(tuple(argv), 0, "slurm 20.11.9\n", "", 0.0)
            return Result(tuple(argv), 0, (data / "scontrol_show_node.txt").read_text(), "", 0.0)

    c = OldSlurm()
    got = c.nodes(["gpu003", "gpu002"])
    assert [n.name for n in got] == ["gpu003", "gpu002"]
    assert got[0].reason.startswith("slurm-ft: XID79") and got[1].flags == {"DRAIN"}
    assert calls == [["scontrol", "show", "node", "-o"]]
