"""The journal as the kernel log (`health.kmsg_path: journal`): journald's records of the kernel transport.

Why a site picks it: the kernel's ring buffer (/dev/kmsg) is small, and on a chatty node an epilog's
look-back can reach records the ring no longer holds; journald keeps them. A syslog file keeps them too,
but cannot tell the kernel's lines from `logger -t kernel`'s (gpu/kmsg.py: they never drain alone). The
journal can: `_TRANSPORT` is a field journald sets itself, and a user's `logger -t kernel` is stored as
`_TRANSPORT=syslog` (even with `-p kern.crit`: SYSLOG_FACILITY=1), as a capture of journald 252 shows
(tests/data/kmsg/journal-export.json). A record is believed when its transport is `kernel` and its
facility 0 (what root writes into /dev/kmsg gets facility 1); any other record with an Xid in it is a
forgery (reported, never a drain).

Reads go through journalctl: `journalctl -k -o json` (this boot's kernel records) with only the fields
needed, at most MAX_RECORDS of them, within a timeout; the watcher follows `journalctl -k -f`, one child
process it stops with itself, and resumes after the journal cursor it saved.
"""
from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import time
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from slurm_ft.gpu.kmsg import JOURNAL, Parser, Position, dedupe_fallen
from slurm_ft.gpu.sample import XidEvent
from slurm_ft import runner

log = logging.getLogger(__name__)

SOURCE = JOURNAL               # the value of health.kmsg_path that names the journal

FIELDS = ("MESSAGE", "_TRANSPORT", "SYSLOG_FACILITY")   # journalctl adds the cursor and the time itself
MAX_RECORDS = 50_000           # ~10 MiB of JSON: a look-back on a node logging that much is cut (logged)
MAX_LINE = 64 << 10            # a longer record (a kernel message is at most ~1 KiB) is skipped
READ_TIMEOUT_S = 10.0
RESTART_S = (1.0, 60.0)        # a follow whose journalctl ended starts again after 1 s, doubling to 60 s


def _base() -> List[str]:
    return ["journalctl", "--dmesg", "--output=json", f"--output-fields={','.join(FIELDS)}", "--no-pager", "--quiet"]


def read_argv(since: Optional[float]) -> List[str]:
    argv = _base() + [f"--lines={MAX_RECORDS}"]
    return argv + [f"--since=@{int(since)}"] if since is not None else argv


def follow_argv(cursor: Optional[str]) -> List[str]:
    return _base() + ["--follow"] + ([f"--after-cursor={cursor}"] if cursor else ["--lines=0"])


def record(line: str) -> Optional[Tuple[str, Optional[float], bool, str]]:
    """One line of `journalctl -o json`: (message, time, written by the kernel, cursor); None for a
    line that is not such a record. MESSAGE is a string, or a list of bytes when it is not UTF-8."""
    if len(line) > MAX_LINE:
        return None
    try:
        r = json.loads(line)
    except ValueError:
        return None
    if not isinstance(r, dict):
        return None
    msg = r.get("MESSAGE")
    if isinstance(msg, list) and all(isinstance(b, int) and 0 <= b < 256 for b in msg):
        msg = bytes(msg).decode("utf-8", "replace")
    if not isinstance(msg, str):
        return None
    usec = r.get("__REALTIME_TIMESTAMP")
    ts = int(usec) / 1e6 if isinstance(usec, str) and usec.isdigit() and len(usec) < 20 else None
    kernel = r.get("_TRANSPORT") == "kernel" and r.get("SYSLOG_FACILITY", "0") == "0"
    cursor = r.get("__CURSOR")
    return msg, ts, kernel, cursor if isinstance(cursor, str) and len(cursor) < 512 else ""


def parse(lines: Iterable[str], *, sxid: bool = True) -> List[XidEvent]:
    """Every Xid event in these `journalctl -o json` lines, in order."""
    parser = Parser(source="journal", sxid=sxid)
    out: List[XidEvent] = []
    for line in lines:
        out += _events(parser, record(line))
    return out


def _events(parser: Parser, rec: Optional[Tuple[str, Optional[float], bool, str]]) -> List[XidEvent]:
    if rec is None or ("NVRM" not in rec[0] and "SXid" not in rec[0]):
        return []
    msg, ts, kernel, _ = rec
    return parser.judged(msg, ts, "kernel" if kernel else "other")


def read(*, lookback_s: Optional[float] = None, now: Optional[float] = None, sxid: bool = False) -> List[XidEvent]:
    """This boot's Xids in the journal, oldest first (those within `lookback_s` of `now`, when given).
    CommandError when journalctl fails (no journal of this boot, not installed): the caller reports it."""
    since = None if lookback_s is None else (time.time() if now is None else now) - lookback_s
    lines = runner.run(read_argv(since), timeout=READ_TIMEOUT_S).stdout.splitlines()
    if len(lines) >= MAX_RECORDS:
        log.warning("journal: read only the last %d kernel records of the look-back window", MAX_RECORDS)
    events = parse(lines, sxid=sxid)
    return dedupe_fallen([e for e in events if since is None or e.timestamp is None or e.timestamp >= since])


def follow(*, poll_s: float, stop: Callable[[], bool], sxid: bool = False, start: Optional[Position] = None,
           on_position: Callable[[Position], None] = lambda pos: None) -> Iterator[XidEvent]:
    """Yield Xid events as journald stores them (kmsg.follow's contract): from the end, or just after
    the cursor of `start` (a position an earlier follow reported: {"path": "journal", "cursor": C})."""
    cursor = start.get("cursor") if start and start.get("path") == SOURCE else None
    cursor = cursor if isinstance(cursor, str) and cursor else None
    parser = Parser(source="journal", sxid=sxid)
    delay = RESTART_S[0]
    while not stop():
        started = time.monotonic()
        proc = runner.start(follow_argv(cursor))
        try:
            on_position(_position(cursor))          # following: an Xid from now on is seen
            for batch in _lines(proc, poll_s, stop):
                for line in batch:
                    rec = record(line)
                    yield from _events(parser, rec)
                    cursor = rec[3] if rec is not None and rec[3] else cursor
                on_position(_position(cursor))
        finally:
            err = _stop(proc)
        if not stop():
            delay = RESTART_S[0] if time.monotonic() - started > RESTART_S[1] else delay
            log.warning("journalctl --follow ended (exit %s: %s); following again in %g s", proc.returncode,
                        err.strip()[:300] or "no message", delay)
            _sleep(delay, stop)
            delay = min(delay * 2, RESTART_S[1])


def _position(cursor: Optional[str]) -> Position:
    where: Dict[str, object] = {"path": SOURCE, "cursor": cursor}
    return where


def _lines(proc: "subprocess.Popen[bytes]", poll_s: float, stop: Callable[[], bool]) -> Iterator[List[str]]:
    """The whole lines journalctl prints, a batch per read, until it exits or `stop` says so."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    while not stop():
        ready, _, _ = select.select([fd], [], [], poll_s)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        *lines, buf = (buf + chunk).split(b"\n")
        if len(buf) > MAX_LINE:
            buf = b""                               # an endless record: skipped (record() would refuse it)
        yield [ln.decode("utf-8", "replace") for ln in lines]


def _stop(proc: "subprocess.Popen[bytes]") -> str:
    """End journalctl (ours: started above) and return what it said on stderr."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    err = proc.stderr.read(4096) if proc.stderr is not None else b""
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()
    return err.decode("utf-8", "replace")


def _sleep(seconds: float, stop: Callable[[], bool]) -> None:
    end = time.monotonic() + seconds
    while not stop() and time.monotonic() < end:
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))
