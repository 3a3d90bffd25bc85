"""Kernel-log seam: find NVIDIA Xid lines in /dev/kmsg, dmesg output, syslog/journal lines or a file.

Line formats the driver prints (open-gpu-kernel-modules `kernel_rc.c`, and older drivers):

    NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:18:00 GPU-I:01): 31, pid=..., name=..., MMU Fault ...          (MIG)
    NVRM: Xid (PCI:0000:18:00 GPU-I:01 GPU-CI:00): 13, pid=..., ...                    (MIG)
    NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000              (old)
    NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 ...)  (NVLink5)
    NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.                        (no code: read as 79)
    NVRM: The NVIDIA GPU 0000:18:00.0 / (PCI ID: ...) installed in this system has /
          fallen off the bus and is not responding to commands.     (one or three lines; read as 79)
    nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up  (NVSwitch, kind sxid)

Each may come wrapped in a /dev/kmsg record (`6,1234,5140900,-;...`), a dmesg prefix (`[ 123.456]`,
`[Sun Nov 29 16:25:19 2026]`, ISO time), or a syslog/journal prefix (`Nov 29 16:25:19 host kernel:`,
`journalctl -k -o short-precise`: `Nov 29 16:25:19.123456 host kernel:`).
The NVRM pattern is searched anywhere in the line, so any other wrapper works too; the prefix only
gives the timestamp.
"""
from __future__ import annotations

import errno
import gzip
import logging
import os
import re
import select
import stat
import sys
import time
from dataclasses import replace
from datetime import datetime
from typing import Callable, Iterable, Iterator, List, Optional, Sequence

from slurm_ft.errors import EnvironmentProblem, UsageError
from slurm_ft.model import GpuSample, XidEvent

log = logging.getLogger(__name__)

DEV_KMSG = "/dev/kmsg"

_PCI = r"(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?" + _PCI + r"(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?\): "
    r"(?P<xid>\d+)(?:,\s*(?P<detail>.*?))?\s*$")
FALLEN_RE = re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?" + _PCI + r": GPU has fallen off the bus")
THE_GPU_RE = re.compile(r"NVRM: The NVIDIA GPU " + _PCI)
SXID_RE = re.compile(r"(?P<dev>nvidia-nvswitch\d*): SXid \((?:PCI:)?" + _PCI + r"\): (?P<xid>\d+)(?:,\s*(?P<detail>.*?))?\s*$")

KMSG_RECORD_RE = re.compile(r"^(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),(?P<flags>[^;]*);(?P<msg>.*)$")
DMESG_MONO_RE = re.compile(r"^\[\s*(?P<sec>\d+\.\d+)\]\s?")
DMESG_CTIME_RE = re.compile(r"^\[(?P<t>\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?")
ISO_RE = re.compile(r"^(?P<t>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s")
SYSLOG_RE = re.compile(r"^(?P<t>\w{3} [ \d]\d \d\d:\d\d:\d\d)(?P<frac>\.\d+)? \S+ ")


def normalize_pci(text: str) -> str:
    """`00000000:18:00.0`, `0000:18:00`, `PCI:0000:18:00` -> `0000:18:00` (domain:bus:device, lower-case)."""
    m = re.search(r"([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.[0-7])?", text)
    if not m:
        return text.strip().lower()
    dom, bus, dev = (int(g, 16) for g in m.groups())
    return f"{dom:04x}:{bus:02x}:{dev:02x}"


def _boot_time() -> float:
    import psutil
    return psutil.boot_time()


def _strip_prefix(line: str, boot_time: Optional[float]) -> "tuple[str, Optional[float]]":
    """Remove a kmsg/dmesg/syslog prefix; return the message and its wall-clock time when known."""
    m = KMSG_RECORD_RE.match(line)
    if m:
        bt = _boot_time() if boot_time is None else boot_time
        return m.group("msg"), bt + int(m.group("usec")) / 1e6
    m = DMESG_MONO_RE.match(line)
    if m:
        bt = _boot_time() if boot_time is None else boot_time
        return line[m.end():], bt + float(m.group("sec"))
    m = DMESG_CTIME_RE.match(line)
    if m:
        try:
            return line[m.end():], time.mktime(time.strptime(m.group("t"), "%a %b %d %H:%M:%S %Y"))
        except ValueError:
            return line[m.end():], None
    m = ISO_RE.match(line)
    if m:
        t = m.group("t").replace(",", ".").replace(" ", "T")
        if t.endswith("Z"):
            t = t[:-1] + "+00:00"
        elif re.search(r"[+-]\d{4}$", t):
            t = t[:-2] + ":" + t[-2:]
        try:
            return line[m.end():], datetime.fromisoformat(t).timestamp()
        except ValueError:
            return line[m.end():], None
    m = SYSLOG_RE.match(line)
    if m:  # no year in classic syslog: assume this year
        try:
            t = time.strptime(f"{time.localtime().tm_year} {m.group('t')}", "%Y %b %d %H:%M:%S")
            return line[m.end():], time.mktime(t) + float(m.group("frac") or 0)
        except ValueError:
            return line[m.end():], None
    return line, None


class Parser:
    """Turns log lines into XidEvents; keeps the little state the three-line fallen-off-bus message needs."""

    def __init__(self, *, source: str = "kmsg", boot_time: Optional[float] = None, sxid: bool = True):
        self.source = source
        self.boot_time = boot_time
        self.sxid = sxid
        self._pending_the_gpu: Optional[str] = None   # PCI id from "The NVIDIA GPU <pci>", awaiting "fallen off"
        self._pending_left = 0

    def feed(self, line: str) -> List[XidEvent]:
        line = line.rstrip("\r\n")
        if "NVRM" not in line and "SXid" not in line:
            return []
        if self.boot_time is None and (line[:1].isdigit() or line.startswith("[")):
            self.boot_time = _boot_time()      # once: boot-relative prefixes need it
        msg, ts = _strip_prefix(line, self.boot_time)
        m = XID_RE.search(msg)
        if m:
            return [XidEvent(
                xid=int(m.group("xid")), pci_bus_id=normalize_pci(m.group("pci")),
                detail=(m.group("detail") or "").strip(), source=self.source, timestamp=ts,
                gpu_instance=int(m.group("gi")) if m.group("gi") is not None else None,
                compute_instance=int(m.group("ci")) if m.group("ci") is not None else None)]
        m = FALLEN_RE.search(msg)
        if m:
            return [self._fallen(m.group("pci"), ts)]
        m = THE_GPU_RE.search(msg)
        if m:
            if "fallen off the bus" in msg:
                return [self._fallen(m.group("pci"), ts)]
            self._pending_the_gpu, self._pending_left = m.group("pci"), 2
            return []
        if self._pending_the_gpu and "NVRM:" in msg:
            if "fallen off the bus" in msg:
                pci, self._pending_the_gpu = self._pending_the_gpu, None
                return [self._fallen(pci, ts)]
            self._pending_left -= 1
            if self._pending_left <= 0:
                self._pending_the_gpu = None
            return []
        if self.sxid:
            m = SXID_RE.search(msg)
            if m:
                return [XidEvent(xid=int(m.group("xid")), pci_bus_id=normalize_pci(m.group("pci")),
                                 detail=f"{m.group('dev')}: {(m.group('detail') or '').strip()}",
                                 source=self.source, timestamp=ts, kind="sxid")]
        return []

    def _fallen(self, pci: str, ts: Optional[float]) -> XidEvent:
        return XidEvent(xid=79, pci_bus_id=normalize_pci(pci), detail="GPU has fallen off the bus",
                        source=self.source, timestamp=ts, kind="fallen_off_bus")


def parse_lines(lines: Iterable[str], *, source: str = "file", boot_time: Optional[float] = None,
                sxid: bool = True) -> List[XidEvent]:
    """Every Xid (and SXid, fallen-off-the-bus) event in these lines, in order."""
    parser = Parser(source=source, boot_time=boot_time, sxid=sxid)
    out: List[XidEvent] = []
    for line in lines:
        out.extend(parser.feed(line))
    return out


def parse_line(line: str, *, boot_time: Optional[float] = None) -> Optional[XidEvent]:
    events = Parser(source="file", boot_time=boot_time).feed(line)
    return events[0] if events else None


def map_to_gpus(events: Sequence[XidEvent], gpus: Sequence[GpuSample]) -> List[XidEvent]:
    """Fill each event's NVML index from the GPUs' PCI bus ids (the log prints domain:bus:device).

    A GPU that fell off the bus often answers nothing, not even its PCI id. When exactly one GPU has
    no PCI id and the log names exactly one PCI id that no other GPU has, they are the same GPU.
    """
    by_pci = {normalize_pci(g.pci_bus_id): g.index for g in gpus if g.pci_bus_id}
    anonymous = [g.index for g in gpus if not g.pci_bus_id]
    strangers = {e.pci_bus_id for e in events if e.kind != "sxid" and e.pci_bus_id not in by_pci}
    if len(anonymous) == 1 and len(strangers) == 1:
        by_pci[strangers.pop()] = anonymous[0]
    return [replace(e, gpu=by_pci.get(e.pci_bus_id, e.gpu)) if e.kind != "sxid" else e for e in events]


def dedupe_fallen(events: Sequence[XidEvent]) -> List[XidEvent]:
    """Drop a code-less fallen-off-the-bus line when the same GPU also logged Xid 79."""
    with_79 = {e.pci_bus_id for e in events if e.kind == "xid" and e.xid == 79}
    seen_fallen = set()
    out = []
    for e in events:
        if e.kind == "fallen_off_bus":
            if e.pci_bus_id in with_79 or e.pci_bus_id in seen_fallen:
                continue
            seen_fallen.add(e.pci_bus_id)
        out.append(e)
    return out


# --- reading ---------------------------------------------------------------------------------------

def _is_char_device(path: str) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def _kmsg_records(fd: int) -> Iterator[str]:
    """Records available now on an open non-blocking /dev/kmsg (one per read)."""
    while True:
        try:
            data = os.read(fd, 8192)
        except BlockingIOError:
            return
        except BrokenPipeError:   # EPIPE: the ring buffer overwrote records we had not read; go on
            log.warning("kernel log records were overwritten before they were read")
            continue
        except OSError as exc:
            if exc.errno == errno.EINVAL:   # record longer than the buffer; skip it
                continue
            raise
        if not data:
            return
        yield data.decode("utf-8", "replace")


def _open_error(path: str, exc: OSError) -> Exception:
    if isinstance(exc, PermissionError) and path == DEV_KMSG:
        return EnvironmentProblem(f"cannot read {path}: permission denied (run as root, or pass a file / `dmesg` output)")
    return UsageError(f"cannot read {path}: {exc.strerror or exc}")


def iter_lines(path: str) -> Iterator[str]:
    """Lines of a file, `-` (stdin) or the current records of /dev/kmsg, streamed (a big kern.log
    is never held in memory). Opening errors are raised before the first line."""
    if path == "-":
        return (line.rstrip("\n") for line in sys.stdin)
    if _is_char_device(path):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise _open_error(path, exc) from exc
        return _records_then_close(fd)
    try:
        if path.endswith(".gz"):    # rotated logs: kern.log.2.gz
            fh = gzip.open(path, "rt", encoding="utf-8", errors="replace")
        else:
            fh = open(path, encoding="utf-8", errors="replace")
    except OSError as exc:
        raise _open_error(path, exc) from exc
    return _lines_then_close(fh, path)


def _records_then_close(fd: int) -> Iterator[str]:
    try:
        for rec in _kmsg_records(fd):
            yield rec.rstrip("\n")
    finally:
        os.close(fd)


def _lines_then_close(fh, path: str) -> Iterator[str]:
    with fh:
        try:
            for line in fh:
                yield line.rstrip("\n")
        except OSError as exc:      # e.g. a directory, or an I/O error mid-file
            raise _open_error(path, exc) from exc


def read_lines(path: str) -> List[str]:
    """All lines of a file, `-` (stdin) or the current records of /dev/kmsg."""
    return list(iter_lines(path))


def read_xids(path: str = DEV_KMSG, *, lookback_s: Optional[float] = None, now: Optional[float] = None,
              boot_time: Optional[float] = None, gpus: Sequence[GpuSample] = (), sxid: bool = False,
              missing_ok: bool = False) -> List[XidEvent]:
    """Xid events in a kernel log, oldest first.

    lookback_s keeps only events newer than `now - lookback_s` (events without a time are kept);
    /dev/kmsg holds this boot only, and its record times are boot-relative (psutil.boot_time()).
    gpus maps PCI ids to NVML indexes. A missing file is an error unless missing_ok.
    """
    if missing_ok and path != "-" and not os.path.exists(path):
        return []
    source = "kmsg" if (path == DEV_KMSG or path.endswith("kmsg")) else "file"
    events = parse_lines(iter_lines(path), source=source, boot_time=boot_time, sxid=sxid)
    if lookback_s is not None:
        cutoff = (time.time() if now is None else now) - lookback_s
        events = [e for e in events if e.timestamp is None or e.timestamp >= cutoff]
    events = dedupe_fallen(events)
    return map_to_gpus(events, gpus) if gpus else events


def follow(path: str = DEV_KMSG, *, poll_s: float = 0.05, stop: Optional[Callable[[], bool]] = None,
           boot_time: Optional[float] = None, from_start: bool = False, sxid: bool = False) -> Iterator[XidEvent]:
    """Yield Xid events as the kernel (or the lab) appends them; starts at the end unless from_start.

    /dev/kmsg: one record per read, poll() for new ones, EPIPE (overwritten records) is skipped.
    A regular file: read what was appended; a truncated or replaced file is read again from its start
    (the lab's `heal` empties a node's log, as a reboot would).
    `stop` is called every poll_s; the generator ends when it returns true.
    """
    parser = Parser(source="kmsg", boot_time=boot_time, sxid=sxid)
    should_stop = stop or (lambda: False)
    if _is_char_device(path):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise _open_error(path, exc) from exc
        try:
            if not from_start:
                os.lseek(fd, 0, os.SEEK_END)
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            while not should_stop():
                if poller.poll(int(poll_s * 1000)):
                    for rec in _kmsg_records(fd):
                        yield from parser.feed(rec)
        finally:
            os.close(fd)
        return
    yield from _follow_file(path, parser, poll_s, should_stop, from_start)


def _follow_file(path: str, parser: Parser, poll_s: float, should_stop: Callable[[], bool],
                 from_start: bool) -> Iterator[XidEvent]:
    fh = None
    ino = None
    buf = ""
    try:
        while not should_stop():
            if fh is None:
                try:
                    fh = open(path, encoding="utf-8", errors="replace")
                except FileNotFoundError:
                    time.sleep(poll_s)
                    from_start = True   # a file that appears later is new: read it all
                    continue
                ino = os.fstat(fh.fileno()).st_ino
                if not from_start:
                    fh.seek(0, os.SEEK_END)
            chunk = fh.read()
            if chunk:
                buf += chunk
                *lines, buf = buf.split("\n")
                for line in lines:
                    yield from parser.feed(line)
                continue
            try:
                st = os.stat(path)
                replaced = st.st_ino != ino or st.st_size < fh.tell()
            except FileNotFoundError:
                replaced = True
            if replaced:
                fh.close()
                fh, buf, from_start = None, "", True
                continue
            time.sleep(poll_s)
    finally:
        if fh is not None:
            fh.close()
