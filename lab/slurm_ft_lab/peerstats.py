"""What one fault cost a job, read from its event log (slurm_ft_lab.torchjob): pure, so every contender of
bench/peers.py is measured by the same rules.

A job is `groups` groups of `slots` rank slots (one node each, `gpus` GPUs): a synchronous DDP gang is one
group; torchft's replica groups are several, which step on without a failed one.

* fault -> first step after: the first step the job completes in a configuration formed after the fault
  (a run started after it; for replica groups also a quorum without the failed group);
* fault -> full strength: every group stepping again (replica groups: a quorum of all of them again);
* steps redone: the steps done before the fault that the job did again (it resumed from an older state);
* GPU-seconds lost: for each group, from its last step before the fault to the end of the window (full
  strength, and `tail` steps past the newest step done before the fault), the time its slots did no new work: the window less `useful steps x P`, where
  P is the step period before the fault and a useful step is one past the newest step done before the
  fault, once per group. A job that never faltered loses about 0 by this count, however long the window.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from slurm_ft_lab.recovery_summary import pct


class NotRecovered(Exception):
    """The job did not get back to full strength in what the log holds (the message says how far it got)."""


@dataclass(frozen=True)
class Shape:
    groups: int = 1
    slots: int = 1            # rank slots (nodes) per group
    gpus: int = 8             # GPUs per slot


@dataclass
class Figures:
    fault_to_first_step_s: float
    fault_to_full_s: float
    steps_redone: int
    gpu_s_lost: float
    window_s: float
    step_period_s: float
    last_step_before: int
    resumed_step: int
    bad_node_left_out: bool
    starts_on_bad_node: int     # ranks started on the failed node after the fault

    def to_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _starts(events: Iterable[dict]) -> Dict[str, List[float]]:
    out: Dict[str, List[float]] = {}
    for e in events:
        if e.get("event") == "start":
            out.setdefault(str(e.get("run")), []).append(float(e["t"]))
    for v in out.values():
        v.sort()
    return out


def _run_start(starts: Dict[str, List[float]], run: str, t: float) -> Optional[float]:
    """When the start of `run` that a step at `t` belongs to began (a run id may start more than once)."""
    before = [s for s in starts.get(run, ()) if s <= t]
    return before[-1] if before else None


def step_period(steps: List[dict], fault_t: float, n: int = 10) -> float:
    """Median step period of the steps before the fault (one group's, one run's), over the last `n`."""
    pre = sorted((e for e in steps if e["t"] <= fault_t), key=lambda e: e["t"])
    if pre:
        run = pre[-1].get("run")
        pre = [e for e in pre if e.get("run") == run]
    gaps = [b["t"] - a["t"] for a, b in zip(pre, pre[1:]) if b["step"] == a["step"] + 1][-n:]
    if not gaps:
        raise NotRecovered("fewer than two consecutive steps before the fault: no step period to compare with")
    return statistics.median(gaps)


def analyze(events: List[dict], fault_t: float, victim: str, shape: Shape, *, failed_group: int = 0,
            tail: int = 3) -> Figures:
    """The figures of one fault at `fault_t` on node `victim` (in group `failed_group`), from the job's events."""
    steps = [e for e in events if e.get("event") == "step" and isinstance(e.get("step"), int)
             and isinstance(e.get("t"), (int, float))]
    starts = _starts(events)
    by_group: Dict[int, List[dict]] = {}
    for e in sorted(steps, key=lambda e: e["t"]):
        by_group.setdefault(int(e.get("group", 0)), []).append(e)
    if not by_group:
        raise NotRecovered("the job logged no step")
    period = step_period(by_group.get(0) or next(iter(by_group.values())), fault_t)

    last: Dict[int, Tuple[int, float]] = {}
    for g, evs in by_group.items():
        pre = [e for e in evs if e["t"] <= fault_t]
        if pre:
            last[g] = (max(e["step"] for e in pre), max(e["t"] for e in pre))
    if not last:
        raise NotRecovered("no step before the fault")
    s_star = max(s for s, _ in last.values())

    def new_run(e: dict) -> bool:
        began = _run_start(starts, str(e.get("run")), e["t"])
        return began is not None and began > fault_t

    def after(e: dict) -> bool:
        if e["t"] <= fault_t:
            return False
        if shape.groups > 1 and int(e.get("participants", shape.groups)) < shape.groups:
            return True               # a quorum that left the failed group out
        return new_run(e)

    afters = [e for e in steps if after(e)]
    if not afters:
        raise NotRecovered("no step after the fault")
    first = min(afters, key=lambda e: e["t"])

    if shape.groups > 1:
        back = [t for run, ts in starts.items() for t in ts
                if t > fault_t and run.endswith(f".g{failed_group}")]
        if not back:
            raise NotRecovered(f"group {failed_group} was not started again")
        full_cands = [e for e in steps if e["t"] > min(back)
                      and int(e.get("participants", 0)) == shape.groups]
        if not full_cands:
            raise NotRecovered(f"group {failed_group} was started again but never back in a full quorum")
        full_t = min(e["t"] for e in full_cands)
    else:
        full_t = first["t"]

    end = 0.0                       # every group at full strength and `tail` steps past where the job was
    for g in range(shape.groups):
        tail_steps = [e for e in by_group.get(g, []) if e["t"] > full_t and e["step"] > s_star]
        if len(tail_steps) < tail:
            raise NotRecovered(f"group {g}: {len(tail_steps)} of {tail} steps at full strength past step {s_star}")
        end = max(end, tail_steps[tail - 1]["t"])

    lost = 0.0
    for g in range(shape.groups):
        t0 = last.get(g, (s_star, min(t for _, t in last.values())))[1]
        useful = {e["step"] for e in by_group.get(g, []) if t0 < e["t"] <= end and e["step"] > s_star}
        lost += max(0.0, (end - t0) - len(useful) * period) * shape.slots * shape.gpus

    starts_ev = sorted((e for e in events if e.get("event") == "start"), key=lambda e: e["t"])
    if shape.groups > 1:
        resumed = first["step"] - 1          # the healthy groups carry on from where they were
    else:
        own = [e for e in starts_ev if e.get("run") == first.get("run") and fault_t < e["t"] <= first["t"]]
        resumed = int(own[-1].get("step", 0)) if own else first["step"] - 1

    # the nodes of the runs that step at full strength: each run's latest start before its first such step
    live_nodes = set()
    for run in {str(e.get("run")) for e in steps if e["t"] > full_t}:
        t_first = min(e["t"] for e in steps if str(e.get("run")) == run and e["t"] > full_t)
        own = [e for e in starts_ev if str(e.get("run")) == run and e["t"] <= t_first]
        if own:
            live_nodes.update(own[-1].get("nodes") or [])
    bad_ups = [e for e in events if e.get("event") == "up" and e.get("node") == victim and e["t"] > fault_t]
    return Figures(
        fault_to_first_step_s=first["t"] - fault_t,
        fault_to_full_s=full_t - fault_t,
        steps_redone=max(0, s_star - resumed),
        gpu_s_lost=lost,
        window_s=end - fault_t,
        step_period_s=period,
        last_step_before=s_star,
        resumed_step=resumed,
        bad_node_left_out=bool(live_nodes) and victim not in live_nodes,
        starts_on_bad_node=len(bad_ups),
    )


# --- the table: one row per contender -------------------------------------------------------------

@dataclass
class Row:
    key: str
    label: str
    kind: str                       # measured | computed | absent | failed
    note: str = ""                  # how it was deployed, or computed; why it is absent or failed
    faults: int = 0
    nodes: int = 0                  # nodes the job holds (training + held beside them)
    first_p50: Optional[float] = None
    first_p95: Optional[float] = None
    full_p50: Optional[float] = None
    redone: Tuple[int, ...] = ()
    lost_p50: Optional[float] = None
    lost_p95: Optional[float] = None
    left_out: Optional[bool] = None
    healthy_drained: Tuple[str, ...] = ()
    starts_on_bad_node: int = 0

    def to_dict(self) -> dict:
        d = asdict(self)
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items()}


def summarize(key: str, label: str, runs: List[Tuple[Optional[Figures], str, List[str]]], nodes: int,
              note: str = "") -> Row:
    """One contender's row from its faults: (figures or None, error, healthy nodes drained) each. A contender
    that did not recover from every fault gets no figures: the row says which fault and why."""
    for i, (fig, err, _) in enumerate(runs):
        if fig is None:
            return Row(key, label, "failed", f"did not recover from fault {i + 1} of {len(runs)}: {err or 'no figures'}",
                       faults=len(runs), nodes=nodes)
    figs = [f for f, _, _ in runs if f is not None]
    if not figs:
        return Row(key, label, "failed", "no fault was run", nodes=nodes)
    first = [f.fault_to_first_step_s for f in figs]
    lost = [f.gpu_s_lost for f in figs]
    return Row(key, label, "measured", note, faults=len(figs), nodes=nodes,
               first_p50=pct(first, 50), first_p95=pct(first, 95),
               full_p50=pct([f.fault_to_full_s for f in figs], 50),
               redone=tuple(f.steps_redone for f in figs),
               lost_p50=pct(lost, 50), lost_p95=pct(lost, 95),
               left_out=all(f.bad_node_left_out for f in figs),
               healthy_drained=tuple(sorted({n for _, _, d in runs for n in d})),
               starts_on_bad_node=sum(f.starts_on_bad_node for f in figs))


def _num(x: Optional[float], fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _ratio(x: Optional[float], ref: Optional[float]) -> str:
    return "-" if x is None or not ref else f"{x / ref:.2f}x"


def table(rows: List[Row], reference: str) -> str:
    """The rows side by side, with each contender's figure over the reference's (above 1: slurm-ft ahead).
    Rows without figures (absent, failed) say why instead of printing numbers."""
    ref = next((r for r in rows if r.key == reference and r.kind == "measured"), None)
    head = (f"{'contender':<24}{'nodes':>6}{'first step p50':>16}{'p95':>8}{'ratio':>8}{'full p50':>10}"
            f"{'redone':>9}{'GPU-s lost p50':>16}{'p95':>8}{'ratio':>8}  {'bad node out':<13}healthy drained")
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.kind not in ("measured", "computed"):
            lines.append(f"{r.label:<24}{r.nodes or '':>6}  {r.kind}: {r.note}")
            continue
        redone = "/".join(map(str, sorted(set(r.redone)))) or "-"
        left = "-" if r.left_out is None else ("yes" if r.left_out else "NO")
        lines.append(
            f"{r.label:<24}{r.nodes:>6}{_num(r.first_p50) + ' s':>16}{_num(r.first_p95):>8}"
            f"{_ratio(r.first_p50, ref.first_p50 if ref else None):>8}{_num(r.full_p50):>10}{redone:>9}"
            f"{_num(r.lost_p50, '{:.0f}'):>16}{_num(r.lost_p95, '{:.0f}'):>8}"
            f"{_ratio(r.lost_p50, ref.lost_p50 if ref else None):>8}  {left:<13}"
            f"{', '.join(r.healthy_drained) or 'none'}" + (f"   ({r.kind})" if r.kind == "computed" else ""))
    return "\n".join(lines)
