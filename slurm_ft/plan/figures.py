"""The times a recovery is made of, as measured on a machine (or configured, or stated), in one JSON file.

The simulator's slurm-ft policy is built from these (plan/levers.py), never from constants in code: the
product's own steps as `bench/recovery.py --json` and `bench/hang.py --json` measured them on the lab,
Slurm's settings as configured, and what nobody measured as stated assumptions, each with its source.
A site replaces any of them with its own measurements (`slurm-ft sim --figures FILE`); what its file
leaves out comes from the file shipped with slurm-ft (slurm_ft/data/figures-lab.json), and the output
says which file each figure came from.

Format `slurm-ft-figures/1` (docs/planning.md, "The measurement file"):

    {"format": "slurm-ft-figures/1",
     "measured": {"date": "...", "machine": "...", "slurm": "22.05.8", ...},     # free-form, printed
     "figures": {NAME: {"s": 0.26, "kind": "measured|configured|stated", "source": "..."}, ...},
     "curves":  {NAME: {"points": [[8, 1.09], [16, 1.31], ...], "kind": ..., "source": ...,
                        "use": [8, 16, 32]}, ...},                 # seconds against training nodes
     "job":     {NAME: {"value": 30, "kind": "stated", "source": "..."}, ...},     # the job's own
     "levers":  {NAME: {"value": 2, "kind": "stated", "source": "..."}, ...}}      # settings tried

Pure: text in, a checked `Figures` out; every bad entry is one UsageError naming the file and the key.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.errors import UsageError

FORMAT = "slurm-ft-figures/1"
KINDS = ("measured", "configured", "stated")

# name -> what it is. Seconds. (measured: by the benches on the lab; the shipped file says which run)
FIGURES: Dict[str, str] = {
    "detect_drain_s": "fatal Xid -> the node drained by `slurm-ft watch`",
    "supervisor_sees_s": "drained -> the hot-spare supervisor sees it (its poll of Slurm)",
    "stop_step_s": "the supervisor stops the training step (srun ends)",
    "controller_requeue_s": "drained -> the controller has quarantined, swapped a spare and requeued the job",
    "start_now_s": "PENDING -> the controller excluded the node and set StartTime=now",
    "requeue_delay_s": "Slurm's delay before a requeued job may start again (cred_expire + 1; 0 with expedite)",
    "hang_check_s": "hang detected -> the supervisor's checks on every node of the step done",
    "health_check_interval_s": "Slurm's HealthCheckInterval (a health check sees a fault after half of it)",
    "collective_timeout_s": "the job's collective timeout: ranks left waiting on a dead or stalled peer fail",
    "slurmd_timeout_s": "SlurmdTimeout: a host that stopped answering is marked DOWN",
    "message_timeout_s": "MessageTimeout: how long slurmctld's ping of a dead host waits",
    "unresponsive_grace_s": "slurm-ft's controller takes a NOT_RESPONDING node for a fault after this",
    "exit_grace_s": "a step that failed with no node to blame: the supervisor waits this long, then ends the job",
    "manual_swap_s": "a person moves a spare node into the job's partition",
}
CURVES: Dict[str, str] = {
    "relaunch_s": "hot spare: srun of the step on N nodes -> every rank has loaded the checkpoint",
    "requeue_to_pending_s": "requeue -> the job PENDING again (Slurm kills it, the epilogs run on its N nodes)",
    "schedule_to_running_s": "StartTime=now -> RUNNING (Slurm schedules it, the prologs run on its N nodes)",
    "restart_launch_s": "requeue: the job RUNNING -> every rank has loaded the checkpoint",
}
JOB: Dict[str, str] = {
    "init_s": "the job's own start in each rank before the checkpoint load (imports, CUDA context, NCCL "
              "communicators): the lab's trainer has none of it",
    "async_blocking_ratio": "an asynchronous save's blocking time over a synchronous one's (same job, same storage)",
}
LEVERS: Dict[str, str] = {
    "hot_spares": "hot spare nodes per job (slurm-ft sbatch --hot-spares K)",
    "hang_timeout_s": "the job's hang timeout (slurm-ft sbatch --hang-timeout S)",
    "planned_swap_share": "share of node-taking GPU faults announced early enough to swap at a checkpoint",
    "replica_groups": "replica groups the job trains as (a fault stops one group, not the job)",
}


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    kind: str
    source: str
    origin: str = ""            # the file it was read from

    def to_dict(self) -> Dict[str, Any]:
        return {"value": self.value, "kind": self.kind, "source": self.source, "file": self.origin}


@dataclass(frozen=True)
class Curve:
    """Seconds against training nodes, measured at a few sizes; `at(n)` is the least-squares fit
    a + b * log2(n) over the points in `use` (Slurm fans a step's launch out as a tree: log of the nodes)."""
    name: str
    points: Tuple[Tuple[int, float], ...]
    use: Tuple[int, ...]
    kind: str
    source: str
    origin: str = ""

    def fit(self) -> Tuple[float, float]:
        pts = [(math.log2(n), s) for n, s in self.points if n in self.use]
        if len(pts) == 1:
            return pts[0][1], 0.0
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        b = sum((x - mx) * (y - my) for x, y in pts) / sxx
        return my - b * mx, b

    def at(self, nodes: int) -> float:
        """The fit at `nodes`; below the smallest size measured, the fit there (no faster than measured)."""
        a, b = self.fit()
        return max(0.0, a + b * math.log2(max(nodes, min(self.use))))

    def to_dict(self) -> Dict[str, Any]:
        a, b = self.fit()
        return {"points": [list(p) for p in self.points], "use": list(self.use), "fit": {"a": a, "b_per_doubling": b},
                "kind": self.kind, "source": self.source, "file": self.origin}


@dataclass
class Figures:
    figures: Dict[str, Figure] = field(default_factory=dict)
    curves: Dict[str, Curve] = field(default_factory=dict)
    job: Dict[str, Figure] = field(default_factory=dict)
    levers: Dict[str, Figure] = field(default_factory=dict)
    measured: Dict[str, Any] = field(default_factory=dict)      # when, where, which Slurm (printed as given)
    files: List[str] = field(default_factory=list)
    measured_by: Dict[str, Dict[str, Any]] = field(default_factory=dict)    # file -> its measured section

    def s(self, name: str) -> float:
        return self.get(name).value

    def get(self, name: str) -> Figure:
        for table in (self.figures, self.job, self.levers):
            if name in table:
                return table[name]
        raise UsageError(f"figures ({', '.join(self.files) or 'none'}): no figure {name}")

    def curve(self, name: str) -> Curve:
        try:
            return self.curves[name]
        except KeyError:
            raise UsageError(f"figures ({', '.join(self.files) or 'none'}): no curve {name}") from None

    def over(self, other: "Figures") -> "Figures":
        """These figures, with `other`'s wherever it has one (a site's file over the shipped one)."""
        return Figures({**self.figures, **other.figures}, {**self.curves, **other.curves}, {**self.job, **other.job},
                       {**self.levers, **other.levers}, dict(self.measured), self.files + other.files,
                       {**self.measured_by, **other.measured_by})

    def with_figure(self, name: str, value: float, kind: str, source: str) -> "Figures":
        """A copy with one figure replaced (a flag given on the command line)."""
        out = Figures(dict(self.figures), dict(self.curves), dict(self.job), dict(self.levers), dict(self.measured),
                      list(self.files), dict(self.measured_by))
        table = out.job if name in JOB else out.levers if name in LEVERS else out.figures
        table[name] = Figure(name, value, kind, source, "command line")
        return out

    def to_dict(self) -> Dict[str, Any]:
        return {"files": self.files, "measured": self.measured, "measured_by_file": self.measured_by,
                "figures": {k: v.to_dict() for k, v in sorted(self.figures.items())},
                "curves": {k: v.to_dict() for k, v in sorted(self.curves.items())},
                "job": {k: v.to_dict() for k, v in sorted(self.job.items())},
                "levers": {k: v.to_dict() for k, v in sorted(self.levers.items())}}


def _where(origin: str, *keys: str) -> str:
    return f"{origin}: " + ".".join(keys)


def _seconds(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise UsageError(f"{where} must be a number of zero or more, not {v!r}")
    return float(v)


def _entry(name: str, data: Any, origin: str, section: str, key: str) -> Figure:
    where = _where(origin, section, name)
    if not isinstance(data, dict):
        raise UsageError(f"{where}: must be a mapping with {key}, kind and source")
    extra = sorted(set(data) - {key, "kind", "source", "note"})
    if extra:
        raise UsageError(f"{where}: unknown key {extra[0]} (valid: {key}, kind, source, note)")
    if key not in data:
        raise UsageError(f"{where}: missing key {key}")
    kind = data.get("kind")
    if kind not in KINDS:
        raise UsageError(f"{where}.kind must be one of {', '.join(KINDS)}, not {kind!r}")
    source = data.get("source")
    if not isinstance(source, str) or not source.strip():
        raise UsageError(f"{where}.source must say where the figure comes from")
    return Figure(name, _seconds(data[key], f"{where}.{key}"), kind, source.strip()[:500], origin)


def _curve(name: str, data: Any, origin: str) -> Curve:
    where = _where(origin, "curves", name)
    if not isinstance(data, dict):
        raise UsageError(f"{where}: must be a mapping with points, kind and source")
    extra = sorted(set(data) - {"points", "use", "kind", "source", "note"})
    if extra:
        raise UsageError(f"{where}: unknown key {extra[0]} (valid: points, use, kind, source, note)")
    base = _entry(name, {"s": 0, **{k: data[k] for k in ("kind", "source") if k in data}}, origin, "curves", "s")
    raw = data.get("points")
    if not isinstance(raw, list) or not raw:
        raise UsageError(f"{where}.points must be a non-empty list of [nodes, seconds]")
    points: List[Tuple[int, float]] = []
    for i, p in enumerate(raw):
        if (not isinstance(p, list) or len(p) != 2 or isinstance(p[0], bool) or not isinstance(p[0], int)
                or p[0] < 1):
            raise UsageError(f"{where}.points[{i}] must be [nodes (a whole number >= 1), seconds], not {p!r}")
        points.append((p[0], _seconds(p[1], f"{where}.points[{i}]")))
    nodes = [n for n, _ in points]
    if len(set(nodes)) != len(nodes):
        raise UsageError(f"{where}.points: each node count once")
    use = data.get("use", nodes)
    if not isinstance(use, list) or not use or any(u not in nodes for u in use):
        raise UsageError(f"{where}.use must list node counts of its points, not {use!r}")
    return Curve(name, tuple(sorted(points)), tuple(sorted(set(use))), base.kind, base.source, origin)


def _table(data: Mapping[str, Any], section: str, known: Mapping[str, str], key: str, origin: str) -> Dict[str, Figure]:
    raw = data.get(section, {})
    if not isinstance(raw, dict):
        raise UsageError(f"{_where(origin, section)}: must be a mapping")
    out = {}
    for name, entry in raw.items():
        if name not in known:
            raise UsageError(f"{_where(origin, section, str(name))}: unknown figure (valid: {', '.join(sorted(known))})")
        out[name] = _entry(name, entry, origin, section, key)
    return out


def parse(text: str, origin: str) -> Figures:
    """A figures file (see module doc); `origin` names it in errors and in the output."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{origin}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{origin}: expected a JSON object")
    if data.get("format") != FORMAT:
        raise UsageError(f"{origin}: format must be {FORMAT!r}, not {data.get('format')!r}")
    extra = sorted(set(data) - {"format", "measured", "figures", "curves", "job", "levers", "note"})
    if extra:
        raise UsageError(f"{origin}: unknown key {extra[0]} (valid: format, measured, figures, curves, job, levers, note)")
    measured = data.get("measured", {})
    if not isinstance(measured, dict):
        raise UsageError(f"{origin}: measured must be a mapping (date, machine, slurm, ...)")
    curves_raw = data.get("curves", {})
    if not isinstance(curves_raw, dict):
        raise UsageError(f"{_where(origin, 'curves')}: must be a mapping")
    curves = {}
    for name, c in curves_raw.items():
        if name not in CURVES:
            raise UsageError(f"{_where(origin, 'curves', str(name))}: unknown curve (valid: {', '.join(sorted(CURVES))})")
        curves[name] = _curve(name, c, origin)
    levers = _table(data, "levers", LEVERS, "value", origin)
    for name in ("hot_spares", "replica_groups"):
        if name in levers and (levers[name].value != int(levers[name].value) or
                               (name == "replica_groups" and levers[name].value < 1)):
            raise UsageError(f"{_where(origin, 'levers', name)}.value must be a whole number"
                             + (" >= 1" if name == "replica_groups" else ""))
    if "planned_swap_share" in levers and levers["planned_swap_share"].value > 1:
        raise UsageError(f"{_where(origin, 'levers', 'planned_swap_share')}.value must be a share between 0 and 1")
    return Figures(_table(data, "figures", FIGURES, "s", origin), curves, _table(data, "job", JOB, "value", origin),
                   levers, {str(k): v for k, v in measured.items()}, [origin],
                   {origin: {str(k): v for k, v in measured.items()}} if measured else {})


def missing(f: Figures) -> List[str]:
    """Names a complete set needs and `f` lacks (the shipped file has them all)."""
    return ([n for n in FIGURES if n not in f.figures] + [n for n in CURVES if n not in f.curves]
            + [n for n in JOB if n not in f.job] + [n for n in LEVERS if n not in f.levers])


# --- from the benches' own output -------------------------------------------------------------------

# bench/recovery.py's segment labels -> figure names (the requeue path and the hot-spare path)
_REQUEUE_SEGMENTS = {
    "detect: fault -> drained (slurm-ft watch)": "detect_drain_s",
    "decide: drained -> incident open (controller)": None,          # summed into controller_requeue_s
    "quarantine + swap -> requeue issued (controller)": None,
    "exclude + StartTime=now (controller)": "start_now_s",
}
# ... and those that run on each of the job's nodes: a point of a curve against the training nodes
_REQUEUE_CURVES = {
    "kill + 64 epilogs -> PENDING (Slurm)": "requeue_to_pending_s",
    "schedule + 64 prologs -> RUNNING (Slurm)": "schedule_to_running_s",
    "srun + 64 ranks load the checkpoint (trainer)": "restart_launch_s",
}
_HOT_SEGMENTS = {
    "detect: fault -> drained (slurm-ft watch)": "detect_drain_s",
    "see: drained -> supervisor sees it (poll)": "supervisor_sees_s",
    "stop the training step (srun)": "stop_step_s",
}


def _seg(segments: Mapping[str, Any], label: str) -> Optional[float]:
    v = segments.get(label)
    if isinstance(v, dict) and isinstance(v.get("p50_s"), (int, float)) and not isinstance(v.get("p50_s"), bool):
        return float(v["p50_s"])
    return None


def from_recovery_bench(data: Mapping[str, Any], origin: str) -> Tuple[Dict[str, float], Dict[str, Tuple[int, float]]]:
    """(figures, curve points) from one `bench/recovery.py --json` output: p50s of its segments, named as
    the figures file names them; the launch segment as a point (training nodes, seconds) of its curve."""
    path = data.get("path")
    sft = data.get("slurm_ft")
    lab = data.get("lab")
    if path not in ("requeue", "hot-spare") or not isinstance(sft, dict) or not isinstance(lab, dict):
        raise UsageError(f"{origin}: not the output of bench/recovery.py --path requeue|hot-spare --json")
    segs = sft.get("segments")
    if not isinstance(segs, dict):
        raise UsageError(f"{origin}: no segments")
    out: Dict[str, float] = {}
    curves: Dict[str, Tuple[int, float]] = {}
    train = int(lab.get("nodes", 0)) - int(lab.get("hot_spares", 0))
    # the segment labels name 64 nodes; other sizes print the same labels (the bench's text is fixed)
    table = _HOT_SEGMENTS if path == "hot-spare" else _REQUEUE_SEGMENTS
    for label, name in table.items():
        v = _seg(segs, label)
        if v is not None and name:
            out[name] = v
    if path == "requeue":
        parts = [_seg(segs, lab_) for lab_ in ("decide: drained -> incident open (controller)",
                                              "quarantine + swap -> requeue issued (controller)")]
        if all(p is not None for p in parts):
            out["controller_requeue_s"] = sum(p for p in parts if p is not None)
        for label, name in _REQUEUE_CURVES.items():
            v = _seg(segs, label)
            if v is not None and train > 0:
                curves[name] = (train, v)
    else:
        launch = _seg(segs, "relaunch: srun on N nodes -> ranks load the checkpoint")
        if launch is not None and train > 0:
            curves["relaunch_s"] = (train, launch)
    alone = data.get("slurm_alone", {})
    for comp in (alone.get("components", []) if isinstance(alone, dict) else []):
        if isinstance(comp, dict) and comp.get("name") == "Slurm's requeue delay" and comp.get("kind") == "measured":
            out["requeue_delay_s"] = _seconds(comp.get("s"), f"{origin}: slurm_alone requeue delay")
    return out, curves


def from_hang_bench(data: Mapping[str, Any], origin: str) -> Dict[str, float]:
    """hang_check_s from one `bench/hang.py --json` output: checks done - hang detected, p50."""
    phases = data.get("phases_since_stall_s")
    try:
        det = float(phases["hang detected"]["p50"])          # type: ignore[index]
        done = float(phases["checks done"]["p50"])           # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"{origin}: not the output of bench/hang.py --json") from None
    return {"hang_check_s": max(0.0, done - det)}


def curve_points(named: Sequence[Tuple[int, float]]) -> List[List[float]]:
    return [[n, round(s, 3)] for n, s in sorted(named)]
