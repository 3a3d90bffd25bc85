"""Kernel-log parsing: every driver line format and every wrapper (kmsg record, dmesg, syslog, journal)."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from slurm_ft.gpu import kmsg
from slurm_ft.gpu.sample import GpuSample

DATA = Path(__file__).resolve().parent.parent / "data" / "kmsg"
BOOT = 1_700_000_000.0


def events(name, **kw):
    return kmsg.read_xids(str(DATA / name), boot_time=BOOT, **kw)


def test_driver_formats():
    ev = events("driver-formats.log", sxid=True)
    got = [(e.kind, e.xid, e.pci_bus_id, e.gpu_instance, e.compute_instance) for e in ev]
    assert got == [
        ("xid", 79, "0000:18:00", None, None),          # the fallen-off line right after it is folded in
        ("xid", 48, "0000:2a:00", None, None),
        ("xid", 31, "0000:3a:00", 1, None),             # MIG GPU-I
        ("xid", 13, "0000:5d:00", 2, 0),                # MIG GPU-I + GPU-CI
        ("xid", 31, "0000:01:00", None, None),          # old form without PCI: and pid/name
        ("xid", 149, "0018:01:00", None, None),         # NVLink5 Fatal
        ("xid", 149, "0018:01:00", None, None),         # NVLink5 Nonfatal
        ("xid", 94, "0000:9a:00", None, None),          # pid= without name=
        ("xid", 119, "0000:ab:00", None, None),
        ("fallen_off_bus", 79, "0000:ba:00", None, None),  # three-line "The NVIDIA GPU ... fallen off"
        ("sxid", 20034, "0000:06:00", None, None),
        ("xid", 200, "0000:db:00", None, None),
    ]
    assert ev[0].detail.endswith("GPU has fallen off the bus.")
    assert "Fatal XC0" in ev[5].detail and "Nonfatal" in ev[6].detail


def test_sxid_left_out_by_default():
    assert all(e.kind != "sxid" for e in events("driver-formats.log"))


def test_dev_kmsg_records_give_boot_relative_time():
    ev = events("dev-kmsg.txt")
    assert [(e.xid, e.pci_bus_id) for e in ev] == [(79, "0000:18:00"), (13, "0000:2a:00")]
    assert ev[0].timestamp == pytest.approx(BOOT + 812.345678)
    assert ev[1].gpu_instance == 3


def test_dmesg_monotonic_prefix():
    ev = events("dmesg-mono.txt")
    assert [e.xid for e in ev] == [74, 45]
    assert ev[0].timestamp == pytest.approx(BOOT + 8123.456789)
    assert "link 3" in ev[0].detail


def test_dmesg_ctime_prefix():
    ev = events("dmesg-ctime.txt")
    assert [e.xid for e in ev] == [64, 63]
    assert time.localtime(ev[0].timestamp).tm_hour == 3


def test_syslog_and_journal_prefixes():
    ev = events("syslog.txt")
    assert [(e.xid, e.pci_bus_id) for e in ev] == [(95, "0000:db:00"), (79, "0000:db:00")]
    assert ev[1].timestamp - ev[0].timestamp == pytest.approx(3.25)   # journalctl short-precise fraction
    ev = events("journal-iso.txt")
    assert [e.xid for e in ev] == [68, 43]
    assert ev[0].timestamp == pytest.approx(ev[1].timestamp - 5 + 0.123456, abs=1e-3)


def test_lookback_keeps_recent_only():
    ev = events("dev-kmsg.txt", lookback_s=50, now=BOOT + 900)
    assert [e.xid for e in ev] == [13]


@pytest.mark.parametrize("text,want", [
    ("00000000:18:00.0", "0000:18:00"), ("0000:18:00", "0000:18:00"), ("PCI:0000:9B:00", "0000:9b:00"),
    ("0018:01:00", "0018:01:00"), ("00000001:0a:1f.3", "0001:0a:1f"),
])
def test_normalize_pci(text, want):
    assert kmsg.normalize_pci(text) == want


def test_map_to_nvml_index():
    gpus = [GpuSample(index=0, pci_bus_id="00000000:18:00.0"), GpuSample(index=5, pci_bus_id="00000000:2A:00.0")]
    ev = kmsg.map_to_gpus(events("dev-kmsg.txt"), gpus)
    assert [e.gpu for e in ev] == [0, 5]


def test_map_lost_gpu_without_pci_id():
    # NVML cannot say where a lost GPU sits; the one unexplained PCI id in the log is that GPU
    gpus = [GpuSample(index=0, pci_bus_id="00000000:2a:00.0"), GpuSample(index=1, lost=True)]
    ev = kmsg.map_to_gpus(events("dev-kmsg.txt"), gpus)
    assert [(e.xid, e.gpu) for e in ev] == [(79, 1), (13, 0)]
    two_lost = gpus + [GpuSample(index=2, lost=True)]
    assert [e.gpu for e in kmsg.map_to_gpus(events("dev-kmsg.txt"), two_lost)] == [None, 0]


def test_rotated_gzip_log(tmp_path):
    import gzip
    p = tmp_path / "kern.log.2.gz"
    with gzip.open(p, "wt") as fh:
        fh.write((DATA / "syslog.txt").read_text())
    assert [e.xid for e in kmsg.read_xids(str(p))] == [95, 79]


def test_unreadable_file_is_a_usage_error(tmp_path):
    from slurm_ft.errors import UsageError
    with pytest.raises(UsageError, match="cannot read"):
        kmsg.read_xids(str(tmp_path / "missing"))
    assert kmsg.read_xids(str(tmp_path / "missing"), missing_ok=True) == []


def test_follow_file_sees_appends_and_truncation(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text("4,1,10,-;NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=a, old line\n")
    seen, done = [], threading.Event()

    def reader():
        for e in kmsg.follow(str(log), poll_s=0.01, stop=done.is_set, boot_time=BOOT):
            seen.append(e.xid)

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.1)
    with open(log, "a") as fh:                       # appended: seen
        fh.write("4,2,20,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=a, GPU has fallen off the bus.\n")
    time.sleep(0.1)
    log.write_text("")                               # emptied (the lab's heal = a reboot)
    time.sleep(0.1)
    with open(log, "a") as fh:
        fh.write("4,1,5,-;NVRM: Xid (PCI:0000:2a:00): 48, pid=1, name=a, DBE\n")
    deadline = time.time() + 2
    while len(seen) < 2 and time.time() < deadline:
        time.sleep(0.01)
    done.set()
    t.join(2)
    assert seen == [79, 48]                          # the line present before follow() started is not replayed


def _kmsg_readable():
    try:
        os.close(os.open(kmsg.DEV_KMSG, os.O_RDONLY | os.O_NONBLOCK))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _kmsg_readable(), reason="/dev/kmsg not readable here (not root, or restricted)")
def test_real_dev_kmsg_reads_and_follows_without_error():
    lines = kmsg.read_lines(kmsg.DEV_KMSG)
    assert lines and all(kmsg.KMSG_RECORD_RE.match(line) for line in lines[:50])
    kmsg.read_xids(kmsg.DEV_KMSG, lookback_s=3600)          # this machine's own log parses
    deadline = time.time() + 0.3
    start = time.time()
    assert list(kmsg.follow(kmsg.DEV_KMSG, poll_s=0.05, stop=lambda: time.time() > deadline)) == []
    assert time.time() - start < 30                          # starts at the end, stops when asked (not a hang)
