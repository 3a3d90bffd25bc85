"""The hot-spare supervisor's planned swaps, pure: a degraded node of the step -> a checkpoint asked for
now -> the step relaunched without that node from that checkpoint, so that no step is done twice.

A node is degraded when its side told the job so (a `degraded` notice: a soft signal drained it
gracefully, node/planned.py), when Slurm shows it drained PLANNED (the supervisor's backstop read), or when
the job's own progress reports show it far slower than the others for a while (`Stragglers`: a job's
judgement of its own nodes, which only ever moves this job; the node's own checks decide about the node).
A degraded node is no fault: the step runs on while the checkpoint is written. `decide`:

  none     no degraded node in the step; or no healthy node to take its place (then the node moves at
           the job's next restart: the controller swaps a spare in); or the batch host itself (the
           supervisor runs there: it moves at the next restart too)
  request  ask the job for a checkpoint now (job/ckptrequest.py) and note how far it got
  wait     asked, no checkpoint yet, within wait_s (lifecycle.planned_wait_s)
  swap     the step ended after a checkpoint newer than the ask found (a trainer that honours the ask
           saves it at the step it reached and exits 0); or HONOUR_S after the ask, a complete checkpoint
           at or after the step reached then (a trainer that ignores it: its next periodic one); or
           wait_s passed: stop the step if it still runs, relaunch on `nodes` from the latest complete
           checkpoint, give `release` back to Slurm

No clock and no file here: times, the progress reports and the newest checkpoint step come in.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from slurm_ft.job import hotplan as hp

STALE_S = 60.0           # a rank's report older than this says nothing about its speed now
HONOUR_S = 10.0          # after the ask, a trainer that honours it saves and stops by itself within this (it
                         # hears the ask within a second): until then a periodic checkpoint is not taken for it


@dataclass(frozen=True)
class Ask:
    """A checkpoint asked for: when (monotonic), the furthest step reported then, the newest checkpoint then."""
    t: float
    step: Optional[int]
    ckpt: Optional[int]
    nodes: Tuple[str, ...]


@dataclass(frozen=True)
class View:
    allocation: Tuple[str, ...]
    faults: Mapping[str, str]            # failed nodes (hotplan's): they take the fault path, not this one
    degraded: Mapping[str, str]          # node -> why it is degraded
    batch_host: str
    train_nodes: int
    step_nodes: Tuple[str, ...]
    step_rc: Optional[int] = None        # None while the step runs
    asked: Optional[Ask] = None
    newest_ckpt: Optional[int] = None    # the latest complete checkpoint's step now (None: none, or not read)
    now: float = 0.0                     # monotonic, as Ask.t
    wait_s: float = 1800.0


def movable(v: View) -> Tuple[str, ...]:
    """Degraded nodes of the step that a planned swap can move off: not failed, not the batch host."""
    return tuple(x for x in v.step_nodes if x in v.degraded and x not in v.faults and x != v.batch_host)


def avoid(degraded: Mapping[str, str], step_nodes: Sequence[str]) -> Dict[str, str]:
    """Degraded nodes the next launch must not use without that being a reason to relaunch (hotplan's
    View.avoid): those not in the running step (a degraded idle spare, a node already moved off)."""
    return {x: why for x, why in degraded.items() if x not in step_nodes}


def decide(v: View) -> hp.Action:
    moving = movable(v)
    if not moving:
        return hp.Action("none")
    nodes = hp.pick(v.allocation, {**v.faults, **v.degraded}, v.train_nodes, prefer=v.step_nodes)
    why = "; ".join(f"{x}: {v.degraded[x]}" for x in moving)
    if nodes is None:
        return hp.Action("none", failed=moving, reason=f"no healthy node in the allocation to take the place of "
                                                       f"{', '.join(moving)}: it moves at the job's next restart ({why})")
    release = tuple(x for x in v.allocation if (x in v.degraded or x in v.faults) and x != v.batch_host)
    if v.asked is None:
        return hp.Action("request", nodes=nodes, failed=moving, release=release,
                         reason=f"degraded: {why}; a checkpoint asked for, then a relaunch without "
                                f"{', '.join(moving)}")
    ckpt = v.newest_ckpt
    fresh = ckpt is not None and ckpt > (v.asked.ckpt if v.asked.ckpt is not None else -1)
    if v.step_rc is not None and fresh:
        return hp.Action("swap", nodes=nodes, failed=moving, release=release,
                         reason=f"planned swap from checkpoint step {ckpt} (asked at step {v.asked.step}; the "
                                f"step stopped, {v.step_rc}): {why}")
    if fresh and (v.asked.step is None or (ckpt is not None and ckpt >= v.asked.step)) \
            and v.now - v.asked.t >= HONOUR_S:
        return hp.Action("swap", nodes=nodes, failed=moving, release=release,
                         reason=f"planned swap from checkpoint step {ckpt} (asked at step {v.asked.step}; the "
                                f"step did not stop by itself): {why}")
    if v.now - v.asked.t >= v.wait_s:
        return hp.Action("swap", nodes=nodes, failed=moving, release=release,
                         reason=f"no checkpoint within {v.wait_s:g} s of the ask: planned swap from the latest "
                                f"(step {ckpt}): {why}")
    return hp.Action("wait", failed=moving, reason=f"waiting for the checkpoint asked for {v.now - v.asked.t:.0f} s ago")


# --- stragglers ----------------------------------------------------------------------------------------

def node_busy(records: Mapping[int, Mapping[str, Any]], now: float) -> Dict[str, float]:
    """node -> seconds a step its slowest rank computed (busy_s of recent reports; a node is as slow as
    its slowest rank)."""
    out: Dict[str, float] = {}
    for rec in records.values():
        busy, node = rec.get("busy_s"), str(rec.get("node") or rec.get("host") or "")[:100]
        if node and isinstance(busy, (int, float)) and busy > 0 and now - float(rec.get("t", 0)) <= STALE_S:
            out[node] = max(out.get(node, 0.0), float(busy))
    return out


def slow_nodes(busy: Mapping[str, float], ratio: float) -> Dict[str, float]:
    """node -> its speed as a share of the median of the other nodes', for those below `ratio`."""
    out: Dict[str, float] = {}
    if len(busy) < 2 or not ratio:
        return out
    for node, b in busy.items():
        others = statistics.median(v for x, v in busy.items() if x != node)
        share = others / b
        if share < ratio:
            out[node] = share
    return out


class Stragglers:
    """Since when each node has run below `ratio` of the others' median speed; `update` returns those
    below it for `window_s` or longer, with why (a sample that is not slow resets the node's time)."""

    def __init__(self, ratio: float, window_s: float) -> None:
        self.ratio = ratio
        self.window_s = window_s
        self.since: Dict[str, float] = {}

    def update(self, records: Mapping[int, Mapping[str, Any]], now: float) -> Dict[str, str]:
        busy = node_busy(records, now)
        slow = slow_nodes(busy, self.ratio)
        self.since = {x: self.since.get(x, now) for x in slow}
        out = {}
        for x, share in slow.items():
            held = now - self.since[x]
            if held >= self.window_s:
                others = statistics.median(v for y, v in busy.items() if y != x)
                out[x] = (f"STRAGGLER: {share:.2f} of the other nodes' median speed ({busy[x]:.3f} s a step vs "
                          f"{others:.3f} s) for {held:.0f} s (limit {self.ratio:g} for {self.window_s:g} s)")
        return out
