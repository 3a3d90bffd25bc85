"""Kernel logs are data we do not control: only the kernel reports an Xid, times are read honestly,
and a huge log costs bounded work (issue 10, items 4, 8, 9)."""
from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest

from slurm_ft.config import Config, HealthConfig, NodeType
from slurm_ft.gpu import kmsg
from slurm_ft.gpu import xid as catalog
from slurm_ft.node import run
from slurm_ft.node.probes import ProbeContext
from slurm_ft.node.probes import xid as xid_probe
from slurm_ft.finding import Severity
from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path
from slurm_ft.gpu.sample import NodeSample, XidEvent

from test_health_run import config, gpus, reader_for   # noqa: E402 - the healthy 8-GPU sample, a node config

BT = 1_764_400_000.0     # a boot time


def test_logger_line_in_syslog_is_suspicious_and_never_drains():
    forged = "Nov 30 01:02:03 node01 someuser: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    (e,) = kmsg.parse_lines([forged], boot_time=BT)
    assert e.kind == "forged" and e.xid == 79 and e.pci_bus_id == "0000:3b:00"
    assert not catalog.verdict(e).drains
    (f,) = xid_probe.probe(NodeSample("n", xids=(e,)), ProbeContext())
    assert f.severity is Severity.WARN and f.code == "FORGED_XID79"


def test_kernel_tagged_syslog_line_is_read_but_not_believed_alone():
    # `logger -t kernel` writes the same line (issue 22): read, reported, drains only with NVML's word
    # (test_kmsg_sources.py)
    real = "Nov 30 01:02:03 node01 kernel: [ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    (e,) = kmsg.parse_lines([real], boot_time=BT)
    assert (e.kind, e.trusted) == ("xid", False) and not catalog.verdict(e).drains
    assert catalog.verdict(replace(e, trusted=True)).drains


@pytest.mark.parametrize("line", [
    "12,77,5000000,-;NVRM: Xid (PCI:0000:3b:00): 79, written to /dev/kmsg by a user-space program",  # facility 1
    "4,77,5000000,-;python[12]: NVRM: Xid (PCI:0000:3b:00): 79, in the middle of a kernel message",
    "2026-11-30T01:02:03+00:00 node01 sudo[9]: NVRM: Xid (PCI:0000:3b:00): 79, journal, not the kernel",
    "Nov 30 01:02:03 node01 kernel: usb 1-1: NVRM: Xid (PCI:0000:3b:00): 79, not at the message start",
    "Nov 30 01:02:03 node01 someuser: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
])
def test_xid_text_outside_a_kernel_message_start_is_forged(line):
    events = kmsg.parse_lines([line], boot_time=BT)
    assert [e.kind for e in events] == ["forged"] and not any(catalog.verdict(e).drains for e in events)


def test_kernel_facility_kmsg_record_is_believed():
    (e,) = kmsg.parse_lines(["4,77,5000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, off the bus"], boot_time=BT)
    assert e.kind == "xid" and e.timestamp == BT + 5


def test_yearless_syslog_date_is_never_in_the_future():
    now = time.mktime(time.strptime("2026 Nov 30 03:00:00", "%Y %b %d %H:%M:%S"))
    line = "Dec 31 23:59:00 node01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, off the bus"
    (e,) = kmsg.parse_lines([line], boot_time=BT, now=now)
    assert e.timestamp == time.mktime(time.strptime("2025 Dec 31 23:59:00", "%Y %b %d %H:%M:%S"))
    recent_line = "Nov 30 02:59:00 node01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, off the bus"
    (e,) = kmsg.parse_lines([recent_line], boot_time=BT, now=now)
    assert now - 61 <= e.timestamp <= now


def test_last_years_line_is_outside_the_lookback_and_does_not_drain(tmp_path):
    log = tmp_path / "syslog"
    log.write_text("Dec 31 23:59:00 node01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, off the bus\n")
    now = time.mktime(time.strptime("2026 Nov 30 03:00:00", "%Y %b %d %H:%M:%S"))
    assert kmsg.read_xids(str(log), lookback_s=7200, now=now, boot_time=BT) == []


def test_untimed_xid_counts_until_a_resume_then_never():
    e = XidEvent(xid=79, pci_bus_id="0000:3b:00", timestamp=None)
    sample = NodeSample("n", xids=(e,))
    assert [f.code for f in xid_probe.probe(sample, ProbeContext(xid_since=100.0))] == ["XID79"]
    assert xid_probe.probe(sample, ProbeContext(xid_since=100.0, xid_untimed=False)) == []


def test_timestampless_xid_does_not_drain_again_after_an_admin_resume(tmp_path):
    cfg = config(tmp_path)
    (tmp_path / "gpu001.kmsg").write_text("NVRM: Xid (PCI:0000:1b:00): 79, pid=1, GPU has fallen off the bus.\n")
    c = FakeSlurm(train=("gpu001",), spares=())
    reader = reader_for(gpus())
    now = time.time()
    assert run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader,
                          now=now - 50).drain["action"] == "drained"
    c.n["gpu001"] = replace(c.n["gpu001"], flags=frozenset(), reason="")      # an admin reset the GPU and resumed it
    for t in (now - 40, now - 30):
        rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader, now=t)
        assert rep.healthy and not c.node("gpu001").drained, rep.findings


def _mono(sec: float, code: int, pci: str = "0000:3b:00") -> str:
    return f"[{sec:12.6f}] NVRM: Xid (PCI:{pci}): {code}, pid=4242, name=python, Graphics Exception\n"


def test_a_huge_log_is_read_from_its_end_and_the_last_xid_79_is_seen(tmp_path):
    log = tmp_path / "kern.log"
    line = _mono(100.0, 13)
    with open(log, "w") as fh:
        fh.write(line * ((8 << 20) // len(line)))           # 8 MiB of Xid 13 lines
        fh.write(_mono(101.0, 79))
    events = kmsg.read_xids(str(log), boot_time=BT, max_bytes=1 << 20)
    assert events[-1].xid == 79 and catalog.verdict(events[-1]).drains
    assert len(events) <= (1 << 20) // len(line) + 1         # no more than the byte cap holds


def test_tail_read_stops_at_the_lookback_window(tmp_path):
    log = tmp_path / "kern.log"
    line = _mono(100.0, 13)
    with open(log, "w") as fh:
        fh.write(line * ((4 << 20) // len(line)))            # old lines, 4 MiB
        fh.write(_mono(5000.0, 79) * 10)                      # recent ones
    lines, cut = kmsg.tail_lines(str(log), cutoff=BT + 4000, boot_time=BT, block=64 << 10)
    assert cut and len(lines) * len(line) < 200 << 10       # a couple of blocks, not the whole file
    events = kmsg.read_xids(str(log), lookback_s=1000, now=BT + 5000, boot_time=BT)
    assert [e.xid for e in events] == [79] * 10


def test_tail_read_of_a_small_file_keeps_every_line(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(_mono(1.0, 79, "0000:18:00") + _mono(2.0, 48, "0000:2a:00"))
    lines, cut = kmsg.tail_lines(str(log), block=7)
    assert not cut and [ln for ln in lines if ln] == log.read_text().splitlines()


# --- state that must not wedge a node (item 10) -----------------------------------------------------

def _watch(cfg, seen):
    from slurm_ft.node.watch import Watcher
    return Watcher("gpu001", cfg, use_nvml=False, poll_s=0.02,
                   check=lambda level, node, c, **kw: seen.append([e.xid for e in kw["extra_xids"]])
                   or run.Report(node, level, [], 0))


def _wait_for(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.02)


def test_restarted_watcher_handles_an_xid_logged_while_it_was_down(tmp_path):
    hc = HealthConfig(kmsg_path=str(tmp_path / "{node}.kmsg"), state_file=str(tmp_path / "st" / "{node}.json"))
    cfg = Config(health=hc)
    log = tmp_path / "gpu001.kmsg"
    log.write_text("4,1,1000,-;NVRM: Xid (PCI:0000:1a:00): 79, pid=1, old, before any watcher\n")
    seen: list = []
    w = _watch(cfg, seen)
    w.start()
    try:
        _wait_for(lambda: w.run(timeout=0.1) == 0 and (tmp_path / "st" / "gpu001.json.watch").exists())
    finally:
        w.stop()
    with open(log, "a") as fh:                      # the watcher is down (a restart, an upgrade)
        fh.write("4,2,2000,-;NVRM: Xid (PCI:0000:1a:00): 74, pid=1, NVLink error while nobody watched\n")
    w = _watch(cfg, seen)
    w.start()
    try:
        assert w.run(once=True, timeout=10.0) == 1
    finally:
        w.stop()
    assert seen == [[74]]                           # the new one, once; not the old one


def test_truncated_state_file_is_moved_aside_and_the_check_goes_on(tmp_path):
    from slurm_ft.node import state as st
    hc = HealthConfig(kmsg_path=str(tmp_path / "{node}.kmsg"), state_file=str(tmp_path / "st" / "{node}.json"),
                      disk_paths=(str(tmp_path),), node_types={"default": NodeType(nvlinks_per_gpu=0)})
    path = tmp_path / "st" / "gpu001.json"
    path.parent.mkdir(mode=0o700)
    path.write_text('{"version": 1, "node": "gpu001", "act')
    os.chmod(path, 0o600)
    rep = run.check_node("quick", "gpu001", Config(health=hc), reader=reader_for(gpus()))
    assert rep.healthy
    aside = list(path.parent.glob("gpu001.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_text().endswith('"act')
    assert st.load(path, "gpu001")["version"] == 1


@pytest.mark.parametrize("text", ['[]', '{"version": 1, "active": "x"}', '{"version": 1, "active": [{"check": 1}]}',
                                  '{"version": 1, "last": {"quick": 3}}', '{"version": 2}', '{"version": 1, "xid_ack": "x"}'])
def test_state_files_of_the_wrong_shape_are_rebuilt(tmp_path, text):
    from slurm_ft.node import state as st
    path = tmp_path / "s.json"
    path.write_text(text)
    os.chmod(path, 0o600)
    assert st.load(path, "n") == st.empty("n") and not path.exists()


def test_a_compressed_log_keeps_only_its_end_in_memory(tmp_path):
    import gzip
    log = tmp_path / "kern.log.1.gz"
    with gzip.open(log, "wt") as fh:
        fh.write(_mono(100.0, 13) * 20000 + _mono(101.0, 79))
    events = kmsg.read_xids(str(log), boot_time=BT, max_bytes=64 << 10)
    assert events[-1].xid == 79 and len(events) < 1000
