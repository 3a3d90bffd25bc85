"""Soft signals, pure: a GPU that announces its failure. Trends over readings the watcher keeps -> warn findings.

A soft signal is not a fault: the GPU still works, so nothing kills its jobs. Each one found asks for a
planned swap (node/planned.py: the node is drained gracefully, within a fleet-wide hourly budget, and its
jobs move at their next checkpoint) and never fails a health check. Per GPU, with the node type's
thresholds (config.SoftSignals, 0 = off) and sources (docs/health.md, "Soft signals"):

  ECC_SBE_RATE       corrected ECC errors added within the window (NVIDIA: single-bit errors precede
                     row remaps; Xid 92 is the driver's own "high single-bit ECC error rate")
  XID_CONTAINED      hardware Xids of the catalog's warn class within the window (94 contained ECC, 63 a
                     row remap recorded, 92, ...: each alone leaves the GPU working)
  NVLINK_ERROR_RATE  NVLink replay + recovery, or CRC, errors added within the window (DCGM's NVLink
                     health watch fails replay/recovery growth and CRC at 100/s)
  CLOCK_EVENT_HELD   HW slowdown, HW thermal slowdown or power brake in most readings of the clock window
                     (GPUD: HW slowdown in 60 % of a 10-minute window)
  CLOCK_SLOW         the SM clock far below its max with no clock-event reason at all (a GPU stuck slow
                     for no stated cause: the straggler every synchronous step waits for)
  planned codes      fail findings the node type takes by planned swap instead (planned_codes: the
                     driver's recovery actions drain_p2p and drain_and_reset ask to drain the work first)

The history is one JSON-able dict (kept by softpass.py beside the node state file, root-only): the
counter readings of each pass and the warn-class Xids, both trimmed to the longest window and capped.
Counters are cumulative since the driver loaded: an increase is the sum of the rises between consecutive
readings (a drop is a driver reload: counted from zero), and a pair further apart than the window (the
watcher was down) counts nothing. No clock, no NVML, no file here: readings and `now` come in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.config import SoftSignals
from slurm_ft.finding import Finding, Severity
from slurm_ft.gpu.sample import NodeSample

CHECK = "soft"
VERSION = 1
MAX_SAMPLES = 720            # readings kept (12 h at the default 60 s period: more than any window needs)
MAX_XIDS = 512
HW_EVENTS = ((0x8, "HW slowdown"), (0x40, "HW thermal slowdown"), (0x80, "power brake"))
MIN_CLOCK_READINGS = 3       # one or two readings are a blip, not a held state
# the planned reason names the first of these a node has (then "(+K more)")
ORDER = ("XID_CONTAINED", "ECC_SBE_RATE", "NVLINK_ERROR_RATE", "CLOCK_EVENT_HELD", "CLOCK_SLOW", "STRAGGLER")


@dataclass(frozen=True)
class GpuReading:
    """One GPU's counters in one pass; None: not read or not supported."""
    sbe: Optional[int] = None              # volatile corrected ECC errors
    replay: Optional[int] = None           # NVLink replay + recovery errors, all links
    crc: Optional[int] = None              # NVLink CRC (flit + data) errors, all links
    reasons: Optional[int] = None          # clock event reasons (bit mask)
    clock: Optional[float] = None          # SM clock / its max

    def to_list(self) -> List[Any]:
        return [self.sbe, self.replay, self.crc, self.reasons, self.clock]

    @classmethod
    def from_list(cls, v: Sequence[Any]) -> "GpuReading":
        v = list(v[:5]) + [None] * (5 - len(v[:5]))
        return cls(_count(v[0]), _count(v[1]), _count(v[2]), _count(v[3]), _share(v[4]))


def _count(x: Any) -> Optional[int]:
    return int(x) if type(x) in (int, float) and x == x and 0 <= x < 1e18 else None


def _share(x: Any) -> Optional[float]:
    return float(x) if type(x) in (int, float) and x == x and 0 <= x < 1e6 else None


def readings(sample: NodeSample) -> Dict[int, GpuReading]:
    """What the soft signals need of one NVML read (lost GPUs: the fault path has them)."""
    out: Dict[int, GpuReading] = {}
    for g in sample.gpus:
        if g.lost:
            continue
        counted = [l for l in g.nvlinks if l.replay_errors is not None or l.recovery_errors is not None]
        replay = sum((l.replay_errors or 0) + (l.recovery_errors or 0) for l in counted) if counted else None
        crcs = [l.crc_errors for l in g.nvlinks if l.crc_errors is not None]
        clock = (g.sm_clock_mhz / g.sm_clock_max_mhz if g.sm_clock_mhz is not None and g.sm_clock_max_mhz
                 else None)
        out[g.index] = GpuReading(g.ecc.volatile_corrected if g.ecc else None, replay, sum(crcs) if crcs else None,
                                  g.clock_event_reasons, round(clock, 4) if clock is not None else None)
    return out


def empty(node: str) -> Dict[str, Any]:
    return {"version": VERSION, "node": node, "samples": [], "xids": []}


def valid(history: Any) -> bool:
    """A history we wrote (anything else is started afresh)."""
    return (isinstance(history, dict) and history.get("version") == VERSION
            and isinstance(history.get("samples"), list) and isinstance(history.get("xids"), list))


def keep_s(soft: SoftSignals) -> float:
    """How far back the history must reach for this node type's windows."""
    return max(soft.window_s, soft.clock_window_s)


def record(history: Dict[str, Any], now: float, gpus: Mapping[int, GpuReading], keep: float) -> None:
    """Add one pass's readings; forget what is older than `keep` seconds (and past MAX_SAMPLES)."""
    samples = [s for s in history["samples"] if _sample_ok(s) and now - s[0] <= keep]
    samples.append([now, {str(i): r.to_list() for i, r in sorted(gpus.items())}])
    history["samples"] = samples[-MAX_SAMPLES:]


def record_xids(history: Dict[str, Any], events: Iterable[Tuple[float, int, int]], now: float, keep: float) -> None:
    """Add warn-class hardware Xids as (time, gpu, code)."""
    xids = [x for x in history["xids"] if _xid_ok(x) and now - x[0] <= keep]
    xids += [[float(t), int(gpu), int(code)] for t, gpu, code in events]
    history["xids"] = sorted(xids)[-MAX_XIDS:]


def _sample_ok(s: Any) -> bool:
    return (isinstance(s, list) and len(s) == 2 and isinstance(s[0], (int, float)) and not isinstance(s[0], bool)
            and isinstance(s[1], dict))


def _xid_ok(x: Any) -> bool:
    return (isinstance(x, list) and len(x) == 3 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                       for v in x))


def series(history: Mapping[str, Any]) -> Dict[int, List[Tuple[float, GpuReading]]]:
    """gpu -> its readings in time order (malformed entries skipped: the file is ours, but a disk fills)."""
    out: Dict[int, List[Tuple[float, GpuReading]]] = {}
    for s in sorted((s for s in history.get("samples", []) if _sample_ok(s)), key=lambda s: s[0]):
        for key, values in s[1].items():
            if str(key).isdigit() and isinstance(values, list):
                out.setdefault(int(key), []).append((float(s[0]), GpuReading.from_list(values)))
    return out


def increase(points: Sequence[Tuple[float, Optional[int]]], start: float, max_gap: float) -> Tuple[int, float]:
    """(rise, seconds it spans) of a cumulative counter over the pairs of readings that end at or after
    `start`. A drop is a reset (the rise counts from zero); a pair further apart than `max_gap`, or with a
    missing value, counts nothing."""
    rise, first = 0, None
    for (ta, a), (tb, b) in zip(points, points[1:]):
        if tb < start or a is None or b is None or tb - ta > max_gap:
            continue
        rise += b - a if b >= a else b
        first = ta if first is None else first
    return rise, (points[-1][0] - first) if first is not None else 0.0


def judge(history: Mapping[str, Any], soft: SoftSignals, now: float) -> List[Finding]:
    """The soft findings the history shows now, per GPU (warn, with the figure in the reason)."""
    out: List[Finding] = []
    start, w = now - soft.window_s, soft.window_s
    for gpu, points in sorted(series(history).items()):
        if soft.ecc_corrected:
            n, span = increase([(t, r.sbe) for t, r in points], start, w)
            if n >= soft.ecc_corrected:
                out.append(_warn("ECC_SBE_RATE", gpu, f"corrected ECC errors +{n} in {_span(span)} (limit "
                                                      f"{soft.ecc_corrected} within {_span(w)})"))
        for attr, name, limit in (("replay", "replay/recovery", soft.nvlink_replay), ("crc", "CRC", soft.nvlink_crc)):
            if limit:
                n, span = increase([(t, getattr(r, attr)) for t, r in points], start, w)
                if n >= limit:
                    out.append(_warn("NVLINK_ERROR_RATE", gpu, f"NVLink {name} errors +{n} in {_span(span)} "
                                                           f"(limit {limit} within {_span(w)})"))
                    break
        out += _clocks(gpu, [(t, r) for t, r in points if t >= now - soft.clock_window_s], soft)
    if soft.xid_contained:
        by_gpu: Dict[int, List[int]] = {}
        for t, gpu, code in (x for x in history.get("xids", []) if _xid_ok(x)):
            if t >= start:
                by_gpu.setdefault(int(gpu), []).append(int(code))
        for gpu, codes in sorted(by_gpu.items()):
            if len(codes) >= soft.xid_contained:
                what = ", ".join(f"{c}" + (f" x{codes.count(c)}" if codes.count(c) > 1 else "")
                                 for c in sorted(set(codes)))
                out.append(_warn("XID_CONTAINED", gpu, f"Xid {what} in {_span(w)} (limit {soft.xid_contained})"))
    return out


def _clocks(gpu: int, points: Sequence[Tuple[float, GpuReading]], soft: SoftSignals) -> List[Finding]:
    known = [r for _, r in points if r.reasons is not None]
    if len(known) < MIN_CLOCK_READINGS:
        return []
    span = _span(points[-1][0] - points[0][0])
    if soft.clock_event_share:
        held = [(text, sum(1 for r in known if r.reasons is not None and r.reasons & bit)) for bit, text in HW_EVENTS]
        held = [(text, n) for text, n in held if n and n >= soft.clock_event_share * len(known)]
        if held:
            text, n = max(held, key=lambda h: h[1])
            return [_warn("CLOCK_EVENT_HELD", gpu, f"{text} in {n}/{len(known)} readings over {span}")]
    if soft.clock_slow_ratio and soft.clock_event_share:
        slow = [r.clock for r in known if r.reasons == 0 and r.clock is not None and r.clock < soft.clock_slow_ratio]
        if slow and len(slow) >= soft.clock_event_share * len(known):
            return [_warn("CLOCK_SLOW", gpu, f"SM clock at {100 * max(slow):.0f}% of max with no clock-event reason "
                                             f"in {len(slow)}/{len(known)} readings over {span}")]
    return []


def planned(findings: Iterable[Finding], soft: SoftSignals) -> List[Finding]:
    """Fail findings whose code the node type takes by planned swap (planned_codes), as warn findings."""
    return [Finding(f.check, Severity.WARN, f"{f.reason} (planned swap)", f.code, f.gpu)
            for f in findings if f.severity is Severity.FAIL and f.code in soft.planned_codes]


def downgrade(findings: Sequence[Finding], soft: SoftSignals) -> List[Finding]:
    """A health run's findings with planned_codes' fail findings turned into warnings (never a fault drain)."""
    if not soft.planned_codes:
        return list(findings)
    keep = planned(findings, soft)
    moved = iter(keep)
    return [next(moved) if f.severity is Severity.FAIL and f.code in soft.planned_codes else f for f in findings]


def first(findings: Sequence[Finding], planned_codes: Sequence[str] = ()) -> Optional[Finding]:
    """The finding a planned reason names: a planned code first, then ORDER, then the lowest GPU."""
    if not findings:
        return None

    def rank(f: Finding) -> Tuple[int, int]:
        at = 0 if f.code in planned_codes else 1 + (ORDER.index(f.code) if f.code in ORDER else len(ORDER))
        return at, f.gpu if f.gpu is not None else -1
    return min(findings, key=rank)


def _warn(code: str, gpu: Optional[int], reason: str) -> Finding:
    return Finding(CHECK, Severity.WARN, reason, code, gpu)


def _span(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
