"""An admin's hold on the drain-rate breaker: open (no drains at all) or closed (no limit) for a bounded time.

At 3 a.m. after rolling back a bad driver, the breaker is open on drains that were the driver's fault and
real faults wait; during a roll-out an admin wants no drains at all. `slurm-ft breaker hold open|closed
--for 2h --reason ...` writes one small file in the state directory; every reader of the breaker (the
guard's `may_take_out` and `settle`, the controller's count, remediation's reboots, `status`) applies it
over its own decision until it expires by itself, at most MAX_HOLD_S after it was set. Who set it, why and
until when is in the file, in the log and in an append-only audit file beside it.

The hold binds the processes that read this state directory: the controller's host, and the nodes too
where state_dir is shared (as in the lab). A file writable by others is refused like any other state.
"""
from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

from slurm_ft.errors import ConfigError, UsageError
from slurm_ft.fsutil import atomic_write, refuse_unsafe
from slurm_ft.breaker import rules as brk

if TYPE_CHECKING:
    from slurm_ft.config import Config

log = logging.getLogger(__name__)

FILE = "breaker-hold.json"
AUDIT = "breaker-holds.log"       # one JSON line per hold and release, never rewritten
MAX_HOLD_S = 24 * 3600.0          # a forgotten hold must not outlive a working day
STATES = ("open", "closed")
_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_PART_RE = re.compile(r"(\d+(?:\.\d+)?)(s|min|m|h|d)")


@dataclass(frozen=True)
class Hold:
    state: str          # open | closed
    until: float
    reason: str
    who: str            # the user (the sudo user when there is one)
    uid: int
    since: float

    def in_force(self, now: float) -> bool:
        return self.since <= now < self.until

    def describe(self) -> str:
        return (f"held {self.state} by {self.who} (uid {self.uid}) until {_stamp(self.until)}: {self.reason}")


def parse_duration(text: str) -> float:
    """Seconds of `90s`, `30m`, `2h`, `1h30m`, `1d`; within MAX_HOLD_S. Else UsageError (exit 2)."""
    t = text.strip().lower()
    parts = _PART_RE.findall(t)
    if not t or "".join(n + u for n, u in parts) != t:
        raise UsageError(f"--for {text!r}: not a duration (write 90s, 30m, 2h, 1h30m or 1d)")
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError(f"--for {text!r}: a hold lasts more than 0 seconds")
    if seconds > MAX_HOLD_S:
        raise UsageError(f"--for {text!r}: at most {MAX_HOLD_S / 3600:g} h (set it again when it runs out)")
    return seconds


def override(hold: Optional[Hold], nodes: Iterable[str], now: float) -> Optional[brk.Decision]:
    """The decision a hold in force imposes on taking `nodes` out, or None (the breaker decides). Pure."""
    if hold is None or not hold.in_force(now):
        return None
    what = ", ".join(nodes) or "no node"
    if hold.state == "open":
        return brk.Decision(False, f"drain-rate breaker {hold.describe()}; not taking out {what}", 0, 0)
    return brk.Decision(True, f"drain-rate breaker {hold.describe()}; taking out {what}", 0, 1 << 30)


# --- the file ------------------------------------------------------------------------------------

def path(config: Config) -> Path:
    return Path(config.state_dir) / FILE


def current(config: Config, now: Optional[float] = None) -> Optional[Hold]:
    """The hold in force now, or None (none set, expired, or refused: unsafe or unreadable, logged)."""
    p = path(config)
    try:
        if not p.exists():          # the common case: one stat, no open
            return None
        refuse_unsafe(p.parent, "state directory")
        refuse_unsafe(p, "breaker hold file")
        hold = _load(p)
    except (ConfigError, OSError, ValueError, TypeError, KeyError) as exc:
        log.error("breaker hold in %s ignored (the breaker decides by itself): %s", p, exc)
        return None
    now = time.time() if now is None else now
    return hold if hold.in_force(now) else None


def _load(p: Path) -> Hold:
    d = json.loads(p.read_text())
    hold = Hold(state=str(d["state"]), until=float(d["until"]), reason=str(d["reason"]), who=str(d["who"]),
                uid=int(d["uid"]), since=float(d["since"]))
    if hold.state not in STATES or hold.until - hold.since > MAX_HOLD_S:
        raise ValueError(f"not a hold slurm-ft wrote (state {hold.state!r}, {hold.until - hold.since:.0f} s)")
    return hold


def set_hold(config: Config, state: str, seconds: float, reason: str, who: str, now: Optional[float] = None) -> Hold:
    """Write the hold (replacing one in force) and log it; UsageError for a bad state or reason."""
    if state not in STATES:
        raise UsageError(f"hold the breaker open or closed, not {state!r}")
    if not reason.strip() or not reason.isprintable():
        raise UsageError("--reason: say why, on one line (it is logged and shown by `breaker status`)")
    if not 0 < seconds <= MAX_HOLD_S:
        raise UsageError(f"a hold lasts more than 0 s and at most {MAX_HOLD_S / 3600:g} h")
    now = time.time() if now is None else now
    hold = Hold(state, now + seconds, reason.strip(), who, os.getuid(), now)
    _write(config, FILE, json.dumps(asdict(hold)) + "\n")
    _audit(config, {"event": "hold", **asdict(hold)})
    log.warning("drain-rate breaker %s", hold.describe())
    return hold


def release(config: Config, who: str, now: Optional[float] = None) -> Optional[Hold]:
    """Remove the hold; the one that was in force (None: there was none)."""
    was = current(config, now)
    try:
        path(config).unlink()
    except FileNotFoundError:
        pass
    if was is not None:
        _audit(config, {"event": "release", "who": who, "uid": os.getuid(), "since": time.time(),
                        "released": asdict(was)})
        log.warning("drain-rate breaker hold released by %s (uid %d): was %s", who, os.getuid(), was.describe())
    return was


def _write(config: Config, name: str, text: str) -> None:
    d = Path(config.state_dir)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    refuse_unsafe(d, "state directory")
    atomic_write(d / name, text, mode=0o600)


def _audit(config: Config, entry: dict[str, object]) -> None:
    p = Path(config.state_dir) / AUDIT
    refuse_unsafe(p, "breaker hold log")
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as fh:
        fh.write(json.dumps(entry) + "\n")


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
