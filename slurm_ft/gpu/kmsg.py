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
`journalctl -k -o short-precise`: `Nov 29 16:25:19.123456 host kernel:`); the journal itself is read
through journalctl (`health.kmsg_path: journal`, gpu/journal.py).
Only the kernel can report an Xid, and its message starts with `NVRM:` (`nvidia-nvswitchN:` for SXid):
* believed (`trusted`, may drain): a /dev/kmsg record of facility 0, the journal's kernel transport,
  and kmsg records, dmesg output or bare driver lines in a file that only root may write;
* reported, never a drain on its own (`trusted=False`): a syslog line tagged `kernel:`, since
  `logger -t kernel` writes the same tag (it drains when NVML reports the same Xid: node/gather.py),
  and any line of a file that others may write;
* `forged` (suspicious, never a drain): another tag or facility (`someuser: NVRM: Xid ...`), a
  pid-tagged `kernel[4242]:` (the kernel has no pid), NVRM in the middle of a message.
Classic syslog has no year: a date that would lie in the future is last year's. Regular files are read
from their end, back to the look-back window or a byte cap, whichever comes first, so a huge log costs
a bounded time.
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
from collections import deque
from dataclasses import replace
from datetime import datetime
from functools import lru_cache
from typing import IO, Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Sequence

from slurm_ft.errors import EnvironmentProblem, UsageError
from slurm_ft.gpu.sample import GpuSample, XidEvent

log = logging.getLogger(__name__)

Position = Dict[str, Any]    # where a follow stopped reading: path plus boot/seq or inode/offset

DEV_KMSG = "/dev/kmsg"
JOURNAL = "journal"          # health.kmsg_path naming the journal: read by gpu/journal.py, not here

_PCI = r"(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?" + _PCI + r"(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?\): "
    r"(?P<xid>\d+)(?:,\s*(?P<detail>.*))?$")      # detail: greedy, stripped later (a lazy one is quadratic)
FALLEN_RE = re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?" + _PCI + r": GPU has fallen off the bus")
THE_GPU_RE = re.compile(r"NVRM: The NVIDIA GPU " + _PCI)
SXID_RE = re.compile(r"(?P<dev>nvidia-nvswitch\d*): SXid \((?:PCI:)?" + _PCI + r"\): (?P<xid>\d+)(?:,\s*(?P<detail>.*))?$")

KMSG_RECORD_RE = re.compile(r"^(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),(?P<flags>[^;]*);(?P<msg>.*)$")
DMESG_MONO_RE = re.compile(r"^\[\s*(?P<sec>\d+\.\d+)\]\s?")
DMESG_CTIME_RE = re.compile(r"^\[(?P<t>\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?")
ISO_RE = re.compile(r"^(?P<t>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s")
SYSLOG_RE = re.compile(r"^(?P<t>\w{3} [ \d]\d \d\d:\d\d:\d\d)(?P<frac>\.\d+)? ")
# after a syslog/journal time: `host tag[pid]: message`; only the tag `kernel`, without a pid, may be the kernel
HOST_TAG_RE = re.compile(r"^\S+ (?P<tag>[^\s:\[]+)(?P<pid>\[\d+\])?: ?")
KERNEL_FACILITY = 0
FUTURE_SKEW_S = 86400.0     # a clock or time-zone skew this large still reads as this year
MAX_BYTES = 4 << 20         # read at most the last 4 MiB of a kernel log file (~40k lines, ~1 s)
_TRUSTED_START = ("NVRM: ", "nvidia-nvswitch")


@lru_cache(maxsize=4096)     # a node has a few GPUs; a big log names them over and over
def normalize_pci(text: str) -> str:
    """`00000000:18:00.0`, `0000:18:00`, `PCI:0000:18:00` -> `0000:18:00` (domain:bus:device, lower-case)."""
    m = re.search(r"([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.[0-7])?", text)
    if not m:
        return text.strip().lower()
    dom, bus, dev = (int(g, 16) for g in m.groups())
    return f"{dom:04x}:{bus:02x}:{dev:02x}"


def _boot_time() -> float:
    import psutil   # lazy: only a caller that gave no boot time (gather and watch pass /proc's) loads psutil
    return float(psutil.boot_time())


def _syslog_time(text: str, frac: Optional[str], now: Optional[float]) -> Optional[float]:
    """A yearless syslog time: this year, or last year when this year's date lies in the future."""
    ref = time.time() if now is None else now
    year = time.localtime(ref).tm_year
    for y in (year, year - 1):
        try:
            t = time.mktime(time.strptime(f"{y} {text}", "%Y %b %d %H:%M:%S")) + float(frac or 0)
        except ValueError:      # Feb 29 in a year without one
            continue
        if t <= ref + FUTURE_SKEW_S:
            return t
    return None


def _tagged(rest: str) -> "tuple[str, str]":
    """`host kernel: [ 1.2] msg` -> (msg, "syslog"); another tag, or `kernel[pid]:` -> (its message, "other")."""
    m = HOST_TAG_RE.match(rest)
    if not m:
        return rest, "other"
    msg = rest[m.end():]
    if m.group("tag") != "kernel" or m.group("pid"):
        return msg, "other"
    inner = DMESG_MONO_RE.match(msg)       # syslog keeps the kernel's own boot-relative stamp
    return (msg[inner.end():] if inner else msg), "syslog"


def _strip_prefix(line: str, boot_time: Optional[float],
                  now: Optional[float] = None) -> "tuple[str, Optional[float], str]":
    """Remove a kmsg/dmesg/syslog prefix: (message, wall-clock time when known, origin).

    origin: "kernel" (kmsg facility 0, dmesg), "syslog" (a `kernel:` tag: the kernel's, or logger's),
    "other" (another facility or tag, or a pid: not the kernel) or "bare" (no prefix: a plain file,
    trusted as far as who may write it).
    """
    m = KMSG_RECORD_RE.match(line)
    if m:
        bt = _boot_time() if boot_time is None else boot_time
        origin = "kernel" if int(m.group("prio")) >> 3 == KERNEL_FACILITY else "other"
        return m.group("msg"), bt + int(m.group("usec")) / 1e6, origin
    m = DMESG_MONO_RE.match(line)
    if m:
        bt = _boot_time() if boot_time is None else boot_time
        return line[m.end():], bt + float(m.group("sec")), "kernel"
    m = DMESG_CTIME_RE.match(line)
    if m:
        try:
            return line[m.end():], time.mktime(time.strptime(m.group("t"), "%a %b %d %H:%M:%S %Y")), "kernel"
        except (ValueError, OverflowError):
            return line[m.end():], None, "kernel"
    m = ISO_RE.match(line)
    if m:
        t = m.group("t").replace(",", ".").replace(" ", "T")
        if t.endswith("Z"):
            t = t[:-1] + "+00:00"
        elif re.search(r"[+-]\d{4}$", t):
            t = t[:-2] + ":" + t[-2:]
        msg, origin = _tagged(line[m.end():])
        try:
            ts: Optional[float] = datetime.fromisoformat(t).timestamp()
        except (ValueError, OverflowError):
            ts = None
        if ts is not None and ts > (time.time() if now is None else now) + FUTURE_SKEW_S:
            ts = None               # a future date is not believed (and then counts as old, see probes)
        return msg, ts, origin
    m = SYSLOG_RE.match(line)
    if m:
        msg, origin = _tagged(line[m.end():])
        return msg, _syslog_time(m.group("t"), m.group("frac"), now), origin
    return line, None, "bare"


class Parser:
    """Turns log lines into XidEvents; keeps the little state the three-line fallen-off-bus message needs."""

    def __init__(self, *, source: str = "kmsg", boot_time: Optional[float] = None, sxid: bool = True,
                 now: Optional[float] = None, trusted: bool = True):
        self.source = source
        self.trusted = trusted          # False: a file others may write; nothing in it is believed
        self.boot_time = boot_time
        self.now = now                  # the reading time (for yearless syslog dates); None: the clock
        self.sxid = sxid
        self._pending_the_gpu: Optional[str] = None   # PCI id from "The NVIDIA GPU <pci>", awaiting "fallen off"
        self._pending_left = 0

    def feed(self, line: str) -> List[XidEvent]:
        line = line.rstrip("\r\n")
        if "NVRM" not in line and "SXid" not in line:
            return []
        if self.boot_time is None and (line[:1].isdigit() or line.startswith("[")):
            self.boot_time = _boot_time()      # once: boot-relative prefixes need it
        msg, ts, origin = _strip_prefix(line, self.boot_time, self.now)
        return self.judged(msg, ts, origin)

    def judged(self, msg: str, ts: Optional[float], origin: str) -> List[XidEvent]:
        """The events of one message whose prefix said `origin` (see _strip_prefix)."""
        if origin == "other" or not msg.startswith(_TRUSTED_START):
            return self._forged(msg, ts)
        events = self.message(msg, ts)
        if origin == "syslog" or not self.trusted:
            return [replace(e, trusted=False) for e in events]
        return events

    def message(self, msg: str, ts: Optional[float]) -> List[XidEvent]:
        """The events of one kernel message (its prefix already taken off and judged)."""
        m = XID_RE.match(msg)
        if m:
            return [XidEvent(
                xid=int(m.group("xid")), pci_bus_id=normalize_pci(m.group("pci")),
                detail=(m.group("detail") or "").strip(), source=self.source, timestamp=ts,
                gpu_instance=int(m.group("gi")) if m.group("gi") is not None else None,
                compute_instance=int(m.group("ci")) if m.group("ci") is not None else None)]
        m = FALLEN_RE.match(msg)
        if m:
            return [self._fallen(m.group("pci"), ts)]
        m = THE_GPU_RE.match(msg)
        if m:
            if "fallen off the bus" in msg:
                return [self._fallen(m.group("pci"), ts)]
            self._pending_the_gpu, self._pending_left = m.group("pci"), 2
            return []
        if self._pending_the_gpu and msg.startswith("NVRM:"):
            if "fallen off the bus" in msg:
                pci, self._pending_the_gpu = self._pending_the_gpu, None
                return [self._fallen(pci, ts)]
            self._pending_left -= 1
            if self._pending_left <= 0:
                self._pending_the_gpu = None
            return []
        if self.sxid:
            m = SXID_RE.match(msg)
            if m:
                return [XidEvent(xid=int(m.group("xid")), pci_bus_id=normalize_pci(m.group("pci")),
                                 detail=f"{m.group('dev')}: {(m.group('detail') or '').strip()}",
                                 source=self.source, timestamp=ts, kind="sxid")]
        return []

    def _forged(self, msg: str, ts: Optional[float]) -> List[XidEvent]:
        """An Xid-looking line the kernel did not write (another syslog tag or facility, or NVRM in
        the middle of a message): reported as suspicious, never a drain."""
        m = XID_RE.search(msg) or FALLEN_RE.search(msg)
        if not m:
            return []
        xid = int(m.group("xid")) if "xid" in m.groupdict() else 79
        log.warning("Xid-looking line not written by the kernel (ignored): %.200s", msg)
        return [XidEvent(xid=xid, pci_bus_id=normalize_pci(m.group("pci")), detail=msg[:200],
                         source=self.source, timestamp=ts, kind="forged")]

    def _fallen(self, pci: str, ts: Optional[float]) -> XidEvent:
        return XidEvent(xid=79, pci_bus_id=normalize_pci(pci), detail="GPU has fallen off the bus",
                        source=self.source, timestamp=ts, kind="fallen_off_bus")


def parse_lines(lines: Iterable[str], *, source: str = "file", boot_time: Optional[float] = None,
                sxid: bool = True, now: Optional[float] = None, trusted: bool = True) -> List[XidEvent]:
    """Every Xid (and SXid, fallen-off-the-bus, forged) event in these lines, in order."""
    parser = Parser(source=source, boot_time=boot_time, sxid=sxid, now=now, trusted=trusted)
    out: List[XidEvent] = []
    for line in lines:
        out.extend(parser.feed(line))
    return out


def map_to_gpus(events: Sequence[XidEvent], gpus: Sequence[GpuSample]) -> List[XidEvent]:
    """Fill each event's NVML index from the GPUs' PCI bus ids (the log prints domain:bus:device).

    A GPU that fell off the bus often answers nothing, not even its PCI id. When exactly one GPU has
    no PCI id and the log names exactly one PCI id that no other GPU has, they are the same GPU.
    """
    by_pci = {normalize_pci(g.pci_bus_id): g.index for g in gpus if g.pci_bus_id}
    anonymous = [g.index for g in gpus if not g.pci_bus_id]
    strangers = {e.pci_bus_id for e in events if e.kind in ("xid", "fallen_off_bus") and e.pci_bus_id not in by_pci}
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


def _lines_then_close(fh: IO[str], path: str) -> Iterator[str]:
    with fh:
        try:
            for line in fh:
                yield line.rstrip("\n")
        except OSError as exc:      # e.g. a directory, or an I/O error mid-file
            raise _open_error(path, exc) from exc


def read_lines(path: str) -> List[str]:
    """All lines of a file, `-` (stdin) or the current records of /dev/kmsg."""
    return list(iter_lines(path))


def tail_lines(path: str, *, max_bytes: int = MAX_BYTES, cutoff: Optional[float] = None,
               boot_time: Optional[float] = None, now: Optional[float] = None,
               block: int = 1 << 20) -> "tuple[List[str], bool]":
    """The last lines of a regular file, read backwards in blocks until a block starts with a line
    older than `cutoff` or `max_bytes` are read: (lines oldest first, whether older lines were left)."""
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise _open_error(path, exc) from exc
    with fh:
        return _tail(fh, max_bytes=max_bytes, cutoff=cutoff, boot_time=boot_time, now=now, block=block)


def only_root_writes(st: os.stat_result) -> bool:
    """May only root (or this process's own user) write this file? Then its kernel records are the
    kernel's word; a file others may write holds whatever they wrote (fsutil.refuse_unsafe's rule)."""
    return not (st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != 0)
                or st.st_uid not in (0, os.geteuid()))


def _tail(fh: IO[bytes], *, max_bytes: int, cutoff: Optional[float], boot_time: Optional[float],
          now: Optional[float], block: int) -> "tuple[List[str], bool]":
    pos = end = os.fstat(fh.fileno()).st_size
    blocks: List[bytes] = []
    while pos > 0 and end - pos < max_bytes:
        step = min(block, pos, max_bytes - (end - pos))
        pos -= step
        fh.seek(pos)
        data = fh.read(step)
        blocks.append(data)
        if cutoff is not None and pos > 0:
            ts = _first_time(data, boot_time, now)
            if ts is not None and ts < cutoff:
                break
    data = b"".join(reversed(blocks))
    if pos > 0:                        # the first line is cut: drop it
        data = data[data.find(b"\n") + 1:] if b"\n" in data else b""
    return data.decode("utf-8", "replace").split("\n"), pos > 0


def _last_bytes(lines: Iterable[str], max_bytes: int) -> "tuple[List[str], bool]":
    """The last lines of a stream that fit in max_bytes (memory stays bounded, the time cannot)."""
    kept: Deque[str] = deque()
    size, cut = 0, False
    for line in lines:
        kept.append(line)
        size += len(line) + 1
        while size > max_bytes:
            size -= len(kept.popleft()) + 1
            cut = True
    return list(kept), cut


def _first_time(data: bytes, boot_time: Optional[float], now: Optional[float]) -> Optional[float]:
    """The time of the first whole line in a block (None when it has none)."""
    lines = data.split(b"\n", 2)
    if len(lines) < 3:
        return None
    line = lines[1].decode("utf-8", "replace")
    if boot_time is None and (line[:1].isdigit() or line.startswith("[")):
        boot_time = _boot_time()
    return _strip_prefix(line, boot_time, now)[1]


def read_xids(path: str = DEV_KMSG, *, lookback_s: Optional[float] = None, now: Optional[float] = None,
              boot_time: Optional[float] = None, gpus: Sequence[GpuSample] = (), sxid: bool = False,
              missing_ok: bool = False, max_bytes: int = MAX_BYTES) -> List[XidEvent]:
    """Xid events in a kernel log, oldest first.

    lookback_s keeps only events newer than `now - lookback_s` (events without a time are kept);
    /dev/kmsg holds this boot only, and its record times are boot-relative (psutil.boot_time()).
    A regular file is read from its end, at most max_bytes of it (a warning says when that cut the
    look-back window short). gpus maps PCI ids to NVML indexes. A missing file is an error unless missing_ok.
    """
    if missing_ok and path != "-" and not os.path.exists(path):
        return []
    source = "kmsg" if (path == DEV_KMSG or path.endswith("kmsg")) else "file"
    cutoff = None if lookback_s is None else (time.time() if now is None else now) - lookback_s
    trusted = True                     # /dev/kmsg and stdin (a person's pipe); a file: who may write it
    if path != "-" and not path.endswith(".gz") and os.path.isfile(path):
        if boot_time is None:
            boot_time = _boot_time()
        try:
            fh = open(path, "rb")
        except OSError as exc:
            raise _open_error(path, exc) from exc
        with fh:
            trusted = only_root_writes(os.fstat(fh.fileno()))
            lines, cut = _tail(fh, max_bytes=max_bytes, cutoff=cutoff, boot_time=boot_time, now=now, block=1 << 20)
        first = _strip_prefix(lines[0], boot_time, now)[1] if cut and lines else None
        if cut and (cutoff is None or first is None or first > cutoff):
            log.warning("%s: read only its last %d MiB", path, max_bytes >> 20)
    else:                              # a stream (stdin, .gz, /dev/kmsg): read on, keep only its end
        if path != "-" and not _is_char_device(path):
            try:
                trusted = only_root_writes(os.stat(path))
            except OSError:
                trusted = False
        lines, cut = _last_bytes(iter_lines(path), max_bytes)
        if cut:
            log.warning("%s: read only its last %d MiB", path, max_bytes >> 20)
    if not trusted:
        log.warning("%s may be written by others than root: its Xid lines are reported, never a drain", path)
    events = parse_lines(lines, source=source, boot_time=boot_time, sxid=sxid, now=now, trusted=trusted)
    if cutoff is not None:
        events = [e for e in events if e.timestamp is None or e.timestamp >= cutoff]
    events = dedupe_fallen(events)
    return map_to_gpus(events, gpus) if gpus else events


def follow(path: str = DEV_KMSG, *, poll_s: float = 0.05, stop: Optional[Callable[[], bool]] = None,
           boot_time: Optional[float] = None, from_start: bool = False, sxid: bool = False,
           start: Optional[Position] = None, on_position: Optional[Callable[[Position], None]] = None) -> Iterator[XidEvent]:
    """Yield Xid events as the kernel (or the lab) appends them; starts at the end unless from_start,
    or just after `start`, a position an earlier follow reported through on_position.

    /dev/kmsg: one record per read, poll() for new ones, EPIPE (overwritten records) is skipped; a
    position is the boot and the last record's sequence number.
    A regular file: read what was appended; a truncated or replaced file is read again from its start
    (the lab's `heal` empties a node's log, as a reboot would); a position is its inode and offset.
    on_position is called after the events of what was read so far were yielded.
    `stop` is called every poll_s; the generator ends when it returns true.
    """
    should_stop = stop or (lambda: False)
    report = on_position or (lambda pos: None)
    parser = Parser(source="kmsg", boot_time=boot_time, sxid=sxid)
    if _is_char_device(path):
        yield from _follow_kmsg(path, parser, poll_s, should_stop, from_start, start, report)
        return
    yield from _follow_file(path, parser, poll_s, should_stop, from_start, start, report)


def _follow_kmsg(path: str, parser: Parser, poll_s: float, should_stop: Callable[[], bool], from_start: bool,
                 start: Optional[Position], report: Callable[[Position], None]) -> Iterator[XidEvent]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise _open_error(path, exc) from exc
    boot = round(parser.boot_time or _boot_time())
    after = -1
    if start and start.get("boot") == boot and isinstance(start.get("seq"), int):
        after = start["seq"]            # same boot: resume after the last record read
    elif start and start.get("path") == path:
        from_start = True               # a saved place from an earlier boot: all of this boot is new
    try:
        if not from_start and after < 0:      # start at the end: skip what is there, note its last record
            for rec in _kmsg_records(fd):
                m = KMSG_RECORD_RE.match(rec)
                after = int(m.group("seq")) if m else after
            report({"path": path, "boot": boot, "seq": after})
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        first = True
        while not should_stop():
            if first or poller.poll(int(poll_s * 1000)):
                first = False
                seq = after
                for rec in _kmsg_records(fd):
                    m = KMSG_RECORD_RE.match(rec)
                    if m and int(m.group("seq")) <= after:
                        continue
                    seq = int(m.group("seq")) if m else seq
                    yield from parser.feed(rec)
                if seq != after:
                    after = seq
                    report({"path": path, "boot": boot, "seq": seq})
    finally:
        os.close(fd)


def _follow_file(path: str, parser: Parser, poll_s: float, should_stop: Callable[[], bool],
                 from_start: bool, start: Optional[Position] = None,
                 report: Callable[[Position], None] = lambda pos: None) -> Iterator[XidEvent]:
    fh = None
    ino = None
    buf = b""
    try:
        while not should_stop():
            if fh is None:
                try:
                    fh = open(path, "rb")
                except FileNotFoundError:
                    time.sleep(poll_s)
                    from_start = True   # a file that appears later is new: read it all
                    continue
                st = os.fstat(fh.fileno())
                ino = st.st_ino
                parser.trusted = only_root_writes(st)     # a file others may write: nothing in it drains
                if not parser.trusted:
                    log.warning("%s may be written by others than root: its Xid lines never drain", path)
                if start and start.get("ino") == ino and isinstance(start.get("offset"), int) \
                        and 0 <= start["offset"] <= st.st_size:
                    fh.seek(start["offset"])      # resume where an earlier watcher stopped
                elif start and start.get("path") == path:
                    pass                          # replaced or cut since: all of it is new
                elif not from_start:
                    fh.seek(0, os.SEEK_END)
                start = None
                report({"path": path, "ino": ino, "offset": fh.tell()})
            chunk = fh.read(1 << 20)
            if chunk:
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    yield from parser.feed(line.decode("utf-8", "replace"))
                report({"path": path, "ino": ino, "offset": fh.tell() - len(buf)})
                continue
            try:
                st = os.stat(path)
                replaced = st.st_ino != ino or st.st_size < fh.tell()
            except FileNotFoundError:
                replaced = True
            if replaced:
                fh.close()
                fh, buf, from_start = None, b"", True
                continue
            time.sleep(poll_s)
    finally:
        if fh is not None:
            fh.close()
