"""Which kernel-log sources may drain a node (issue 22, review 2026-12-01 R8).

`logger -t kernel "NVRM: Xid (...): 79, ..."` is open to every user and writes a syslog line that a
file cannot tell from the kernel's. What an admin checks: a syslog line never drains a node on its own
(a pid-tagged `kernel[N]:` is a forgery outright: the kernel has no pid); it is reported, and it
drains when NVML reports the same Xid on that GPU. A log file others may write is no better. The
journal's kernel transport, which users cannot write, is a source that drains.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from slurm_ft.config import Config, HealthConfig
from slurm_ft.finding import Severity
from slurm_ft.gpu import kmsg
from slurm_ft.gpu import xid as catalog
from slurm_ft.gpu.sample import XidEvent
from slurm_ft.node import run

from test_health_run import config, gpus, reader_for   # noqa: E402 - the healthy 8-GPU sample, a node config

BT = 1_764_400_000.0
GPU3 = "0000:1b:00"          # PCI id of GPU 3 in test_health_run.gpus()


def syslog(t: float, tag: str = "kernel", code: int = 79, pci: str = GPU3) -> str:
    """A line as rsyslog writes it to /var/log/syslog or kern.log (RSYSLOG_TraditionalFileFormat)."""
    stamp = time.strftime("%b %e %H:%M:%S", time.localtime(t))
    return f"{stamp} gpu001 {tag}: NVRM: Xid (PCI:{pci}): {code}, pid=1234, name=python, GPU has fallen off the bus.\n"


def fails(rep):
    return [(f.code, f.gpu) for f in rep.findings if f.severity is Severity.FAIL]


def warns(rep):
    return [(f.code, f.gpu) for f in rep.findings if f.severity is Severity.WARN]


def test_a_pid_tagged_kernel_line_is_a_forgery():
    (e,) = kmsg.parse_lines([syslog(BT, tag="kernel[4242]")], boot_time=BT, now=BT + 10)
    assert e.kind == "forged" and not catalog.verdict(e).drains


def test_a_kernel_tagged_syslog_line_never_drains_alone(tmp_path):
    (e,) = kmsg.parse_lines([syslog(BT)], boot_time=BT, now=BT + 10)
    assert (e.kind, e.xid, e.pci_bus_id) == ("xid", 79, GPU3)
    assert not catalog.verdict(e).drains and "unverified" in catalog.verdict(e).name
    cfg = config(tmp_path)
    (tmp_path / "gpu001.kmsg").write_text(syslog(time.time() - 30))
    rep = run.run_level("quick", "gpu001", cfg, reader=reader_for(gpus()))
    assert rep.healthy and warns(rep) == [("UNVERIFIED_XID79", 3)], rep.findings


def test_a_syslog_xid_that_nvml_reports_too_drains_once(tmp_path):
    cfg = config(tmp_path)
    now = time.time()
    (tmp_path / "gpu001.kmsg").write_text(syslog(now - 1))
    nvml_event = XidEvent(xid=79, pci_bus_id=GPU3, gpu=3, source="nvml", timestamp=now)
    rep = run.run_level("quick", "gpu001", cfg, reader=reader_for(gpus()), extra_xids=[nvml_event], now=now)
    assert fails(rep) == [("XID79", 3)] and warns(rep) == [], rep.findings
    other_gpu = XidEvent(xid=79, pci_bus_id="0000:1c:00", gpu=4, source="nvml", timestamp=now)
    rep = run.run_level("quick", "gpu001", cfg, reader=reader_for(gpus()), extra_xids=[other_gpu], now=now)
    assert fails(rep) == [("XID79", 4)] and warns(rep) == [("UNVERIFIED_XID79", 3)]


@pytest.mark.parametrize("mode, drains", [(0o644, True), (0o666, False), (0o664, False)])
def test_a_kernel_record_file_others_may_write_is_unverified(tmp_path, mode, drains):
    from slurm_ft.node import host
    log = tmp_path / "kmsg"
    usec = int((time.time() - 5 - host.boot_time()) * 1e6)
    log.write_text(f"4,1,{usec},-;NVRM: Xid (PCI:{GPU3}): 79, pid=1, GPU has fallen off the bus.\n")
    os.chmod(log, mode)
    if mode & 0o020:
        os.chown(log, 0, 65534)                  # writable by a group other than root's
    (e,) = kmsg.read_xids(str(log), lookback_s=60, boot_time=host.boot_time())
    assert catalog.verdict(e).drains is drains


def test_the_watcher_does_not_check_for_a_syslog_line(tmp_path):
    from slurm_ft.node.watch import Watcher
    hc = HealthConfig(kmsg_path=str(tmp_path / "{node}.log"), state_file=str(tmp_path / "st" / "{node}.json"))
    seen: list = []
    w = Watcher("gpu001", Config(health=hc), use_nvml=False, poll_s=0.02,
                check=lambda level, node, c, **kw: seen.append(kw["extra_xids"]) or run.Report(node, level, [], 0))
    (tmp_path / "gpu001.log").write_text("")
    w.start()
    try:
        with open(tmp_path / "gpu001.log", "a") as fh:
            fh.write(syslog(time.time()))                   # `logger -t kernel ...` as rsyslog files it
        assert w.run(timeout=1.0) == 0
        with open(tmp_path / "gpu001.log", "a") as fh:
            fh.write(f"4,9,{int(1e12)},-;NVRM: Xid (PCI:{GPU3}): 79, pid=1, off the bus\n")   # a kernel record
        assert w.run(once=True, timeout=10.0) == 1
    finally:
        w.stop()
    assert [[e.xid for e in batch] for batch in seen] == [[79]]


# --- the journal: the kernel transport users cannot write ---------------------------------------------

DATA = Path(__file__).resolve().parent.parent / "data" / "kmsg"
XID79 = f"NVRM: Xid (PCI:{GPU3}): 79, pid=1234, name=python, GPU has fallen off the bus."


def _captured():
    """journald 252's records (journalctl -o json): this machine's kernel records, and a user's
    `logger -t kernel "NVRM: Xid ... 79"` (plain, with -p kern.crit, and tagged kernel[4242])."""
    return (DATA / "journal-export.json").read_text().splitlines()


def _kernel(msg, t=None):
    """A kernel-transport record of the capture carrying `msg` (no GPU here to log a real Xid)."""
    r = json.loads(_captured()[0])
    r["MESSAGE"] = msg
    if t is not None:
        r["__REALTIME_TIMESTAMP"] = str(int(t * 1e6))
    return json.dumps(r)


def test_journal_records_of_the_kernel_transport_are_believed_a_loggers_forged():
    from slurm_ft.gpu import journal
    captured = _captured()
    logger_lines = [ln for ln in captured if json.loads(ln).get("SYSLOG_IDENTIFIER") == "kernel"
                    and json.loads(ln)["_TRANSPORT"] != "kernel"]
    assert len(logger_lines) == 3 and {json.loads(ln)["SYSLOG_FACILITY"] for ln in logger_lines} == {"1"}
    events = journal.parse(captured)
    assert [e.kind for e in events] == ["forged"] * 3 and not any(catalog.verdict(e).drains for e in events)
    root_kmsg = json.loads(_kernel(XID79))
    root_kmsg["SYSLOG_FACILITY"] = "1"                         # root writing /dev/kmsg: not the kernel facility
    raw = json.loads(_kernel(XID79))
    raw["MESSAGE"] = list(XID79.replace("python", "py\xff").encode("latin-1"))   # not UTF-8: a byte list
    events = journal.parse([_kernel(XID79, t=BT + 5), json.dumps(root_kmsg), json.dumps(raw),
                            "not json", "[1, 2]", json.dumps({"MESSAGE": None})])
    assert [(e.kind, e.xid, catalog.verdict(e).drains) for e in events] == [
        ("xid", 79, True), ("forged", 79, False), ("xid", 79, True)]
    assert events[0].timestamp == pytest.approx(BT + 5) and events[0].source == "journal"


@pytest.mark.skipif(shutil.which("journalctl") is None, reason="no journalctl on this machine (systemd not installed)")
def test_the_real_journalctl_takes_our_arguments(tmp_path):
    """Our argv against this machine's journalctl, on an empty journal directory (no daemon here): only
    the missing boot is refused, never an option (an unknown one, or a time it cannot parse)."""
    from slurm_ft.gpu import journal
    for argv in (journal.read_argv(since=BT), journal.follow_argv("s=01;i=1;b=02;m=1;t=2;x=3"),
                 journal.follow_argv(None)):
        p = subprocess.run([*argv, f"--directory={tmp_path}"], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0 or "specified boot" in p.stderr, (argv, p.stderr)
    assert p.stdout == ""


FAKE_JOURNALCTL = r"""#!/usr/bin/env python3
# Stands in for journalctl in this test: prints the records of $RECORDS after --after-cursor (all
# without it, none with --lines=0), then follows (sleeps) like `journalctl -f`; logs its argv.
import json, os, sys, time
with open(os.environ["ARGV_LOG"], "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\n")
recs = open(os.environ["RECORDS"]).read().splitlines()
after = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--after-cursor=")), None)
if after is not None:
    cursors = [json.loads(r)["__CURSOR"] for r in recs]
    recs = recs[cursors.index(after) + 1:]
elif "--lines=0" in sys.argv:
    recs = []
for r in recs:
    print(r, flush=True)
if os.environ.get("EXIT_AFTER") == "1":
    sys.exit(0)
time.sleep(60)
"""


def test_following_the_journal_resumes_after_its_cursor(tmp_path, monkeypatch):
    from slurm_ft.gpu import journal
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "journalctl").write_text(FAKE_JOURNALCTL)
    (bin_ / "journalctl").chmod(0o755)
    records = tmp_path / "records"
    recs = [json.loads(_kernel(XID79.replace("79,", f"{code},"))) for code in (79, 48, 13)]
    for i, r in enumerate(recs):
        r["__CURSOR"] = f"s=1;i={i + 1}"
    records.write_text("".join(json.dumps(r) + "\n" for r in recs))
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    monkeypatch.setenv("RECORDS", str(records))
    monkeypatch.setenv("ARGV_LOG", str(tmp_path / "argv"))

    def take(start, n, at_least_s=0.0):
        got, where = [], []
        t0 = time.monotonic()

        def done():
            return (len(got) >= n and where and time.monotonic() - t0 >= at_least_s) or time.monotonic() - t0 > 10
        for e in journal.follow(poll_s=0.02, stop=done, start=start, on_position=where.append):
            got.append(e.xid)
        return got, where

    assert take({"path": "journal", "cursor": "s=1;i=1"}, 2)[0] == [48, 13]   # after the saved cursor
    got, where = take(None, 0, at_least_s=0.5)
    assert got == [] and where == [{"path": "journal", "cursor": None}]       # no place saved: from the end
    monkeypatch.setenv("EXIT_AFTER", "1")                                      # journalctl ends: started again
    got, where = take({"path": "journal", "cursor": "s=1;i=2"}, 1)
    assert got == [13] and where[-1] == {"path": "journal", "cursor": "s=1;i=3"}
    argvs = [json.loads(a) for a in (tmp_path / "argv").read_text().splitlines()]
    assert all(a[:2] == ["--dmesg", "--output=json"] and "--follow" in a for a in argvs)


@given(st.text(max_size=300) | st.dictionaries(
    st.sampled_from(["MESSAGE", "_TRANSPORT", "SYSLOG_FACILITY", "__REALTIME_TIMESTAMP", "__CURSOR"]),
    st.none() | st.integers() | st.text(max_size=80) | st.lists(st.integers(-5, 300), max_size=80)).map(json.dumps))
def test_any_journalctl_line_parses_without_error(line):
    from slurm_ft.gpu import journal
    rec = journal.record(line)
    assert rec is None or (isinstance(rec[0], str) and isinstance(rec[2], bool) and len(rec[3]) < 512)
    for e in journal.parse([line]):
        catalog.verdict(e)
