"""`slurm-ft xid explain` as an admin runs it: exit codes, text, JSON."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "kmsg"


def run(*args, stdin=None, env=None):
    import os
    e = dict(os.environ)
    e.pop("LD_LIBRARY_PATH", None)   # no fake NVML: explain must work on a machine without a driver
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "slurm_ft", "xid", "explain", *args], input=stdin,
                          capture_output=True, text=True, timeout=30, env=e)


def test_explain_one_code():
    r = run("79")
    assert r.returncode == 0
    assert "fallen off the bus" in r.stdout and "reboot" in r.stdout


def test_explain_code_json():
    r = run("31", "--json")
    d = json.loads(r.stdout)
    assert d["xid"] == 31 and d["user_caused"] and d["drains"] is False


def test_unknown_code_is_usage_error():
    r = run("999")
    assert r.returncode == 2
    assert r.stderr.startswith("slurm-ft: error:") and "999" in r.stderr and len(r.stderr.splitlines()) == 1


def test_unreadable_file():
    r = run("/nonexistent/kern.log")
    assert r.returncode == 2 and "cannot read" in r.stderr and "Traceback" not in r.stderr


def test_file_with_draining_xid_exits_1():
    r = run(str(DATA / "dmesg-mono.txt"))
    assert r.returncode == 1
    assert "Xid 74" in r.stdout and "Xid 45" in r.stdout and "1 drain" in r.stdout


def test_stdin_user_xids_only_exit_0_json():
    r = run("-", "--json", stdin=(DATA / "journal-iso.txt").read_text())
    assert r.returncode == 0
    d = json.loads(r.stdout)
    assert [e["xid"] for e in d["events"]] == [68, 43] and d["drains"] is False
    assert all(e["pci_bus_id"] == "0000:18:00" for e in d["events"])


def test_nvml_index_shown_when_nvml_is_available(tmp_path):
    from slurm_ft_lab import fake_nvml
    fake_nvml.build(tmp_path)
    r = run(str(DATA / "dev-kmsg.txt"), "--json",
            env={"LD_LIBRARY_PATH": str(tmp_path), "SLURM_FT_FAKE_NODE": "gpu001"})
    d = json.loads(r.stdout)
    assert [(e["xid"], e["gpu"]) for e in d["events"]] == [(79, 0), (13, 1)]   # 18:00 is GPU 0, 2a:00 GPU 1
    r = run(str(DATA / "dev-kmsg.txt"), env={"LD_LIBRARY_PATH": str(tmp_path), "SLURM_FT_FAKE_NODE": "gpu001"})
    assert "gpu0 PCI 0000:18:00  Xid 79" in r.stdout


def test_summary_counts_repeats_and_puts_draining_first():
    line = "[ {t}.000000] NVRM: Xid (PCI:0000:18:00): 13, pid=9, name=python, Graphics Exception\n"
    text = "".join(line.format(t=100 + i) for i in range(3))
    text += "[ 200.000000] NVRM: Xid (PCI:0000:2a:00): 48, pid=9, name=python, DBE\n"
    r = run("-", "--summary", stdin=text)
    assert r.returncode == 1
    rows = r.stdout.splitlines()
    assert "Xid    48 x1" in rows[0] and "DRAIN reset_gpu" in rows[0]
    assert "Xid    13 x3" in rows[1] and "no drain" in rows[1]
    d = json.loads(run("-", "--json", stdin=text).stdout)
    assert [(s["xid"], s["count"], s["drains"]) for s in d["summary"]] == [(48, 1, True), (13, 3, False)]
    assert d["summary"][1]["last"] - d["summary"][1]["first"] == 2
