"""Prometheus text exposition for node_exporter's textfile collector, written atomically.

`render` is pure (a snapshot in, text out); `write` renames a finished file into place, which is what
the textfile collector needs to never read half a file. Names follow Prometheus conventions: base
units (seconds), `_total` for counters, one `state` label for the lifecycle gauge.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.fsutil import atomic_write
from slurm_ft.promtext import labels as _labels, num as _num
from slurm_ft.fleet.lifecycle.transitions import State

# Recovery phases take from a fraction of a second (StartTime=now) to minutes (an empty pool).
BUCKETS: Tuple[float, ...] = (0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)


@dataclass(frozen=True)
class Readings:
    nodes_by_state: Mapping[str, int] = field(default_factory=dict)
    pool_size: int = 0                  # spares that are known good and schedulable
    pool_target: int = 0
    incidents_total: int = 0
    incidents_open: int = 0
    phase_seconds: Mapping[str, Sequence[float]] = field(default_factory=dict)   # phase -> observations
    breaker_open: bool = False
    breaker_drains_in_window: int = 0
    breaker_limit: int = 0
    last_sweep_time: Optional[float] = None
    last_sweep_duration_s: Optional[float] = None
    drains: Sequence[Tuple[str, str, Mapping[str, float]]] = ()   # ("check"|"xid", its value, drain_stats row)
    jobs: Sequence[Tuple[int, Mapping[str, Any]]] = ()   # (job id, fleet/report/goodput.py Goodput.to_dict())


def render(s: Readings) -> str:
    out: List[str] = []

    def metric(name: str, kind: str, help_: str, samples: Iterable[Tuple[str, float]]) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            out.append(f"{name}{labels} {_num(value)}")

    states = [st.value for st in State] + sorted(set(s.nodes_by_state) - {st.value for st in State})
    metric("slurm_ft_nodes", "gauge", "Nodes by slurm-ft lifecycle state.",
           [(_labels(state=st), s.nodes_by_state.get(st, 0)) for st in states])
    metric("slurm_ft_spare_pool_nodes", "gauge", "Known-good idle spares in the spare partition.",
           [("", s.pool_size)])
    metric("slurm_ft_spare_pool_target_nodes", "gauge", "Spares the plan asks for.", [("", s.pool_target)])
    metric("slurm_ft_spare_pool_short", "gauge", "1 when the pool holds fewer spares than the target.",
           [("", 1 if s.pool_size < s.pool_target else 0)])
    metric("slurm_ft_incidents_total", "counter", "Recovery incidents opened.", [("", s.incidents_total)])
    metric("slurm_ft_incidents_open", "gauge", "Recovery incidents not closed yet.", [("", s.incidents_open)])

    name = "slurm_ft_recovery_phase_seconds"
    out.append(f"# HELP {name} Seconds from the fault to the end of each recovery phase.")
    out.append(f"# TYPE {name} histogram")
    for phase in sorted(s.phase_seconds):
        values = [float(v) for v in s.phase_seconds[phase] if v is not None and not math.isnan(float(v))]
        for le in BUCKETS:
            out.append(f"{name}_bucket{_labels(phase=phase, le=_num(le))} {sum(1 for v in values if v <= le)}")
        out.append(f"{name}_bucket{_labels(phase=phase, le='+Inf')} {len(values)}")
        out.append(f"{name}_sum{_labels(phase=phase)} {_num(sum(values))}")
        out.append(f"{name}_count{_labels(phase=phase)} {len(values)}")

    metric("slurm_ft_breaker_open", "gauge", "1 while the drain-rate breaker refuses drains (Slurm shows the limit reached within the window).",
           [("", 1 if s.breaker_open else 0)])
    metric("slurm_ft_breaker_drains_in_window", "gauge", "Nodes drained by slurm-ft within the breaker window.",
           [("", s.breaker_drains_in_window)])
    metric("slurm_ft_breaker_limit_nodes", "gauge", "Drains the breaker allows per window.", [("", s.breaker_limit)])
    if s.last_sweep_time is not None:
        metric("slurm_ft_last_sweep_timestamp_seconds", "gauge", "Unix time the last sweep finished.",
               [("", s.last_sweep_time)])
    if s.last_sweep_duration_s is not None:
        metric("slurm_ft_last_sweep_duration_seconds", "gauge", "Wall time of the last sweep.",
               [("", s.last_sweep_duration_s)])
    # One label set per family, so sum() counts each drain once: by check, and the xid check's drains
    # again by Xid under a family of their own (slurm_ft_xid_*). Node-hours go out in node-seconds (base units).
    for name, key, scale, help_ in (
            ("drains_total", "drains", 1, "Drains by slurm-ft"),
            ("drains_confirmed_total", "confirmed", 1, "Drains whose node needed a repair (or went to RMA)"),
            ("drains_probable_false_positive_total", "probable_false_positives", 1,
             "Drains whose node passed validation after no repair or only a GPU reset"),
            ("drain_out_of_service_node_seconds_total", "node_hours_out", 3600,
             "Node-seconds out of service after drains (open drains up to now)"),
            ("drain_spare_node_seconds_total", "spare_node_hours", 3600,
             "Node-seconds of spares consumed by drains (a spare was swapped in meanwhile)")):
        for label, prefix, per in (("check", "slurm_ft_", "per check"), ("xid", "slurm_ft_xid_", "the xid check's, per Xid")):
            rows = [(_labels(**{label: value}), round(row[key] * scale, 3)) for kind, value, row in s.drains
                    if kind == label]
            if rows:
                metric(prefix + name, "counter", f"{help_}, {per}.", rows)
    _goodput(s.jobs, metric)
    return "\n".join(out) + "\n"


def _goodput(jobs: Sequence[Tuple[int, Mapping[str, Any]]],
             metric: Callable[[str, str, str, Iterable[Tuple[str, float]]], None]) -> None:
    """Per fault-tolerant job: goodput and GPU time by where it went, in GPU-seconds (a part not measured
    is left out)."""
    if not jobs:
        return
    metric("slurm_ft_job_goodput_ratio", "gauge",
           "Share of the job's GPU-hours since its first start that made progress (not lost to startup, recovery or redone steps).",
           [(_labels(job=j), d["goodput_ratio"]) for j, d in jobs if d.get("goodput_ratio") is not None])
    metric("slurm_ft_job_elapsed_gpu_seconds", "gauge", "GPU-seconds since the job's first start.",
           [(_labels(job=j), _seconds(d["elapsed_gpu_hours"])) for j, d in jobs])
    metric("slurm_ft_job_lost_gpu_seconds", "gauge",
           "GPU-seconds the job lost, by cause: startup (first start to the first step), recovery (fault to the "
           "first step after), redone_steps.",
           [(_labels(job=j, cause=c), _seconds(d["lost_gpu_hours"][c])) for j, d in jobs
            for c in ("startup", "recovery", "redone_steps") if d["lost_gpu_hours"].get(c) is not None])
    metric("slurm_ft_job_redone_steps", "gauge", "Training steps the job did twice after restarts.",
           [(_labels(job=j), d["redone_steps"]) for j, d in jobs])


def _seconds(hours: float) -> float:
    return round(hours * 3600, 3)      # to the millisecond: no 800.0000000000001 from an hour's fraction


def write(path: str, s: Readings) -> None:
    """Atomically replace the .prom file (mode 0644: node_exporter runs as its own user)."""
    atomic_write(path, render(s), 0o644)
