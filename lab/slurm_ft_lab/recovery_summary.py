"""The phases of a lab recovery (`Scenario.fault` results) summed up as `bench/recovery.py --json` prints
them, for the bench and for whatever feeds its figures to the planning simulator (bench/figures.py)."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from slurm_ft_lab.scenario import FaultResult

PHASES = ["drain", "incident", "quarantine", "swap", "requeue", "pending, exclude", "start now", "running", "resumed",
          "first step after"]
HOT_PHASES = ["drain", "step fault seen", "step stopped", "relaunched", "incident", "resumed", "first step after",
              "quarantine", "swap", "incident closed"]
PLANNED_PHASES = ["signal", "degraded notice", "incident", "quarantine", "checkpoint asked", "checkpoint saved",
                  "planned swap", "step stopped", "relaunched", "resumed", "first step after", "incident closed"]
PLANNED_SEGMENTS = [
    ("detect: errors begin -> drained PLANNED (slurm-ft watch)", "fault", "signal"),
    ("tell: drained -> the supervisor hears it (notice)", "signal", "degraded notice"),
    ("wait for the quarantine (controller) -> checkpoint asked", "degraded notice", "checkpoint asked"),
    ("checkpoint: asked -> saved at the next step (trainer)", "checkpoint asked", "checkpoint saved"),
    ("stop: saved -> the step ended (trainer exits 0)", "checkpoint saved", "step stopped"),
    ("relaunch: srun on N nodes -> ranks load the checkpoint", "step stopped", "resumed"),
    ("first step (trainer)", "resumed", "first step after"),
]
HOT_SEGMENTS = [
    ("detect: fault -> drained (slurm-ft watch)", "fault", "drain"),
    ("see: drained -> supervisor sees it (poll)", "drain", "step fault seen"),
    ("stop the training step (srun)", "step fault seen", "step stopped"),
    ("relaunch: srun on N nodes -> ranks load the checkpoint", "step stopped", "resumed"),
    ("first step (trainer)", "resumed", "first step after"),
]
# the labels name 64 nodes (the bench's default); bench/figures.py reads them whatever the size
SEGMENTS = [
    ("detect: fault -> drained (slurm-ft watch)", "fault", "drain"),
    ("decide: drained -> incident open (controller)", "drain", "incident"),
    ("quarantine + swap -> requeue issued (controller)", "incident", "requeue"),
    ("kill + 64 epilogs -> PENDING (Slurm)", "requeue", "pending, exclude"),
    ("exclude + StartTime=now (controller)", "pending, exclude", "start now"),
    ("schedule + 64 prologs -> RUNNING (Slurm)", "start now", "running"),
    ("srun + 64 ranks load the checkpoint (trainer)", "running", "resumed"),
    ("first step (trainer)", "resumed", "first step after"),
]


def pct(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    k = (len(xs) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _p(vals: List[float]) -> dict:
    return {"p50_s": round(pct(vals, 50), 3), "p95_s": round(pct(vals, 95), 3)}


def summary(results: Sequence[FaultResult], hot: bool, planned: bool = False) -> dict:
    """Each phase's and each segment's p50/p95 over the faults, the totals and the step's launch.

    hot: the hot-spare path (the supervisor relaunches in the allocation), else the controller's requeue;
    planned (with hot): planned swaps, a soft signal instead of a fault."""
    per_phase: Dict[str, dict] = {}
    for name in (PLANNED_PHASES if planned else HOT_PHASES if hot else PHASES):
        vals = [t for t in (r.at(name) for r in results) if t is not None]
        if vals:
            per_phase[name] = {**_p(vals), "n": len(vals)}
    segments: Dict[str, dict] = {}            # where the time goes: consecutive segments of the timeline
    for label, a, b in (PLANNED_SEGMENTS if planned else HOT_SEGMENTS if hot else SEGMENTS):
        vals = [r.at(b) - r.at(a) for r in results if r.at(a) is not None and r.at(b) is not None]
        if vals:
            segments[label] = {**_p(vals), "from": a, "to": b}
    totals = [r.fault_to_resume_s for r in results if r.fault_to_resume_s is not None]

    # the step's (re)launch -> first step: from the hot-spare supervisor's stop, or from StartTime=now; where
    # Slurm started the job before any start step (expedited requeue, >= 25.11), from the requeue (it
    # includes the old run's kill and epilogs)
    def launched(r: FaultResult) -> Optional[float]:
        for phase in (("step stopped",) if hot else ("start now", "requeue")):
            if r.at(phase) is not None:
                return r.at(phase)
        return None
    launch = [r.at("first step after") - launched(r) for r in results
              if launched(r) is not None and r.at("first step after") is not None]
    return {
        "fault_to_first_step_p50_s": round(pct(totals, 50), 3) if totals else None,
        "fault_to_first_step_p95_s": round(pct(totals, 95), 3) if totals else None,
        "fault_to_running_p50_s": per_phase.get("running", {}).get("p50_s"),
        "launch_to_first_step_p50_s": round(pct(launch, 50), 3) if launch else 0.0,
        "steps_lost": [r.steps_lost for r in results],
        "phases": per_phase,
        "segments": segments,
        "runs": [r.to_dict() for r in results],
    }
