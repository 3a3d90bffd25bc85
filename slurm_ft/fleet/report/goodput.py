"""Live goodput of one fault-tolerant job: the share of its GPU-hours that made progress (pure).

Inputs (a snapshot; fleet/report/job_progress.py reads them, bounded):
- the job's GPUs and when it first started (Slurm's record; the first `jobstart` in the starts log);
- its runs: each `jobstart` event of CKPT/slurm-ft-starts.jsonl gives the run's start, the step it
  resumed from and (`before`) the last progress report of the run before it, read as the new run started;
- progress points: (restart, launch, step, t) of each run, from `slurm_ft.progress(step)` reports as
  slurm-ft saw them (the journal keeps the first and last seen of each run) and as they are now;
- the journal's incidents of the job: when each fault was.

Elapsed GPU-hours run from the first start to now (the job's GPUs, held or waited for). Lost:
- startup: from the first start to the start of the first step (loading, rendezvous; all of it while
  no step has been seen yet);
- recovery: from the fault (the incident's fault time; without an incident, the last progress of the
  run that stopped) to the start of the first step of the next run: that step's report (the run's first
  point moved back by the steps between it and the resumed step) less one step time;
- redone steps: the steps between the checkpoint resumed from and the last step reported before the
  fault, times the step time (a rank reports at most once a second, so a second's steps at most go
  uncounted);
- checkpoint writes: not measured (progress reports steps only; a blocking save is inside the step time).
The step time is the median over runs of (time between two points) / (steps between them).
Without one, seconds that need it are None ("not measured"), never guessed.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple


@dataclass(frozen=True, order=True)
class Point:
    restart: int
    launch: int
    step: int
    t: float


@dataclass(frozen=True)
class Start:
    t: float
    restart: int
    launch: int
    resumed_step: Optional[int]         # None: from scratch
    before: Optional[Point] = None      # the last report of the run before, as this one started


@dataclass
class Loss:
    """One restart of the job: what it cost."""
    restart: int
    launch: int
    fault_at: float
    from_incident: Optional[int]        # the incident's id; None: a restart without one
    first_step_at: Optional[float]      # the first step after began; None: no step yet, or no step time
    recovery_s: Optional[float]
    resumed_step: int
    last_step_before: Optional[int]
    redone_steps: Optional[int]
    redone_s: Optional[float]

    def to_dict(self) -> Dict[str, Any]:
        return {"restart": self.restart, "launch": self.launch, "fault_at": self.fault_at,
                "incident": self.from_incident, "first_step_at": self.first_step_at, "recovery_s": self.recovery_s,
                "resumed_step": self.resumed_step, "last_step_before": self.last_step_before,
                "redone_steps": self.redone_steps, "redone_s": self.redone_s}


@dataclass
class Goodput:
    job_id: int
    gpus: int
    first_start: float
    now: float
    step_time_s: Optional[float]
    current_step: Optional[int]
    losses: List[Loss] = field(default_factory=list)
    recovering: bool = False            # a restart with no step yet: its recovery counts up to now
    startup_s: Optional[float] = 0.0    # first start -> its first step began; None: not measured

    @property
    def elapsed_s(self) -> float:
        return max(0.0, self.now - self.first_start)

    @property
    def recovery_s(self) -> Optional[float]:
        if any(x.recovery_s is None for x in self.losses):
            return None
        return sum(x.recovery_s for x in self.losses if x.recovery_s is not None)

    @property
    def redone_s(self) -> Optional[float]:
        if any(x.redone_steps and x.redone_s is None for x in self.losses):
            return None
        return sum(x.redone_s or 0.0 for x in self.losses)

    @property
    def measured(self) -> bool:
        """Every loss has its seconds (a restart whose first step or redone steps could not be timed: not)."""
        return (all(x.recovery_s is not None for x in self.losses) and self.redone_s is not None
                and self.startup_s is not None)

    @property
    def ratio(self) -> Optional[float]:
        """Share of the elapsed GPU-hours not lost to recovery or redone steps; None before any time, or
        when a loss could not be measured (no step time yet)."""
        startup, recovery, redone = self.startup_s, self.recovery_s, self.redone_s
        if self.elapsed_s <= 0 or startup is None or recovery is None or redone is None:   # not self.measured
            return None
        return max(0.0, 1.0 - (startup + recovery + redone) / self.elapsed_s)

    def gpu_hours(self, seconds: Optional[float]) -> Optional[float]:
        return None if seconds is None else seconds * self.gpus / 3600.0

    def to_dict(self) -> Dict[str, Any]:
        redone = self.redone_s
        return {"job_id": self.job_id, "gpus": self.gpus, "first_start": self.first_start, "now": self.now,
                "elapsed_gpu_hours": self.gpu_hours(self.elapsed_s), "goodput_ratio": self.ratio,
                "step_time_s": self.step_time_s, "current_step": self.current_step, "recovering": self.recovering,
                "lost_gpu_hours": {"startup": self.gpu_hours(self.startup_s), "recovery": self.gpu_hours(self.recovery_s),
                                   "redone_steps": self.gpu_hours(redone), "checkpoint_writes": None},
                "lost_seconds": {"startup": self.startup_s, "recovery": self.recovery_s, "redone_steps": redone,
                                 "checkpoint_writes": None},
                "redone_steps": sum(x.redone_steps or 0 for x in self.losses),
                "checkpoint_writes": "not measured: progress reports steps only (a blocking save is inside the "
                                     "step time)",
                "restarts": [x.to_dict() for x in self.losses]}


def step_time(points: Sequence[Point]) -> Optional[float]:
    """Median over runs of (last - first point time) / (steps between), for runs with two distinct steps."""
    runs: Dict[Tuple[int, int], List[Point]] = {}
    for p in points:
        runs.setdefault((p.restart, p.launch), []).append(p)
    per_run = []
    for pts in runs.values():
        lo, hi = min(pts, key=lambda p: p.step), max(pts, key=lambda p: p.step)
        if hi.step > lo.step and hi.t > lo.t:
            per_run.append((hi.t - lo.t) / (hi.step - lo.step))
    return statistics.median(per_run) if per_run else None


def compute(job_id: int, *, gpus: int, now: float, starts: Sequence[Start], points: Sequence[Point],
            faults: Sequence[Tuple[int, float]] = (), first_start: Optional[float] = None) -> Goodput:
    """Goodput of the job from its starts, progress points and (incident id, fault time) pairs."""
    starts = sorted(starts, key=lambda s: (s.restart, s.launch, s.t))
    pts = list(points) + [s.before for s in starts if s.before is not None]
    first = first_start if first_start is not None else (starts[0].t if starts else now)
    tau = step_time(pts)
    by_run: Dict[Tuple[int, int], List[Point]] = {}
    for p in pts:
        by_run.setdefault((p.restart, p.launch), []).append(p)
    g = Goodput(job_id, gpus, first, now, tau, max((p.step for p in pts), default=None))
    if starts:
        g.startup_s = _startup(starts[0], by_run.get((starts[0].restart, starts[0].launch), []), tau, first, now)
    used = set()
    for prev, cur in zip(starts, starts[1:]):
        before = by_run.get((prev.restart, prev.launch), [])
        last = max(before, key=lambda p: p.step) if before else None
        # the fault: the incident of this job opened between the two starts (the latest such), else the
        # last report of the run that stopped
        cands = [(iid, f) for iid, f in faults if prev.t <= f <= cur.t and iid not in used]
        if cands:
            iid, fault_at = max(cands, key=lambda c: c[1])
            used.add(iid)
        elif last is not None:
            iid, fault_at = None, last.t
        else:
            continue                    # nothing tells when the previous run stopped: not charged
        resumed = cur.resumed_step or 0
        mine = by_run.get((cur.restart, cur.launch), [])
        first_step_at = None            # when the first step after the restart began
        if mine and tau is not None:
            p0 = min(mine, key=lambda p: p.step)
            first_step_at = p0.t - (p0.step - resumed) * tau
        recovery = None
        if first_step_at is not None:
            recovery = max(0.0, first_step_at - fault_at)
        elif not mine and cur is starts[-1]:
            g.recovering = True
            recovery = max(0.0, now - fault_at)
        redone = None if last is None else max(0, last.step - resumed)
        g.losses.append(Loss(cur.restart, cur.launch, fault_at, iid, first_step_at, recovery, resumed,
                             None if last is None else last.step, redone,
                             None if redone is None or tau is None else redone * tau))
    return g


def _startup(s0: Start, mine: List[Point], tau: Optional[float], first: float, now: float) -> Optional[float]:
    """First start -> the first step began: all the time so far while no step is seen; None without a step time."""
    if not mine:
        return max(0.0, now - first)
    if tau is None:
        return None
    p0 = min(mine, key=lambda p: p.step)
    return max(0.0, p0.t - (p0.step - (s0.resumed_step or 0)) * tau - first)


def render(g: Goodput) -> List[str]:
    def h(s: Optional[float]) -> str:
        return "not measured" if s is None else f"{g.gpu_hours(s):.3f} GPU-h ({s:.1f} s)"
    ratio = "-" if g.ratio is None else f"{100 * g.ratio:.2f}%"
    redone = sum(x.redone_steps or 0 for x in g.losses)
    rows = [("startup (first start -> first step)", h(g.startup_s)),
            ("recovery (fault -> first step after)", h(g.recovery_s)),
            (f"redone steps ({redone} steps)", h(g.redone_s)),
            ("checkpoint writes", "not measured (inside the step time)")]
    out = [f"job {g.job_id}: goodput {ratio} of {g.gpu_hours(g.elapsed_s):.3f} GPU-hours "
           f"({g.gpus} GPUs x {g.elapsed_s:.0f} s since the first start)"
           + ("; recovering now" if g.recovering else ""),
           f"  step time: {'not measured' if g.step_time_s is None else f'{g.step_time_s:.3f} s'}; "
           f"last step seen: {'-' if g.current_step is None else g.current_step}"]
    out += [f"  lost to {label + ':':<40} {value}" for label, value in rows]
    for x in g.losses:
        rec = "-" if x.recovery_s is None else f"{x.recovery_s:.1f} s"
        out.append(f"  restart {x.restart}{'.' + str(x.launch) if x.launch else ''}: "
                   f"{'incident ' + str(x.from_incident) if x.from_incident else 'no incident'}, recovery {rec}, "
                   f"resumed from step {x.resumed_step} after reaching "
                   f"{'-' if x.last_step_before is None else x.last_step_before}: "
                   f"{'-' if x.redone_steps is None else x.redone_steps} step(s) redone")
    return out
