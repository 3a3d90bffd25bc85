"""Hangs without an XID, pure: the job's progress reports (slurm_ft.heartbeat) -> hung, straggling, culprits.

The supervisor (supervisor.py) reads the reports of the running launch and asks `stalled`; on a hang it
runs the prolog-level checks on every node of the step (one srun of `slurm-ft check --json`) and reads
the culprits off their output with `culprits`. No clock and no file here: times and texts come in.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional

from slurm_ft.vocab import hang_code, hang_culprit

if TYPE_CHECKING:
    from slurm_ft.heartbeat import Report

# A rank whose last report is this much older than the newest one (and at a lower step) straggles;
# at least this, or a quarter of hang_timeout (a healthy rank reports about once a second).
STRAGGLER_MIN_S = 10.0
CHECK_OUTPUT_MAX = 64 << 20      # bytes of the checks' output read: a report per node, ~2 KiB (10,000 nodes: 20 MiB)


@dataclass(frozen=True)
class Launch:
    job: str
    restart: int
    launch: int
    started_t: float                  # wall clock of the launch (the reports carry wall-clock times)


def current(records: Mapping[int, Report], at: Launch) -> Dict[int, Report]:
    """The reports of this launch only: earlier launches' files stay until their rank reports again."""
    return {r: x for r, x in records.items()
            if str(x.get("job", "")) == at.job and x.get("restart") == at.restart and x.get("launch") == at.launch}


def stalled(records: Mapping[int, Report], at: Launch, now: float, timeout_s: float,
            grace_s: Optional[float] = None) -> Optional[str]:
    """Why the launch counts as hung (no report from any rank for timeout_s), or None. Before the launch's
    first report, start-up (imports, rendezvous, loading the checkpoint) gets grace_s more: by default
    timeout_s again (the job's own scale)."""
    grace_s = timeout_s if grace_s is None else grace_s
    mine = current(records, at)
    if not mine:
        quiet = now - at.started_t
        if quiet > timeout_s + grace_s:
            return f"no progress report {quiet:.0f} s after the launch (hang timeout {timeout_s:g} s + {grace_s:g} s start-up)"
        return None
    newest = max(mine.values(), key=lambda x: x["t"])
    quiet = now - max(newest["t"], at.started_t)
    if quiet > timeout_s:
        return (f"no progress for {quiet:.0f} s (hang timeout {timeout_s:g} s); last step {newest['step']} "
                f"reported by rank {newest['rank']}")
    return None


def stragglers(records: Mapping[int, Report], at: Launch, timeout_s: float) -> List[Dict[str, Any]]:
    """Ranks far behind the others: a lower step than the newest, and a last report older than the
    newest by the straggler window. Reported, not acted on."""
    mine = current(records, at)
    if len(mine) < 2:
        return []
    window = max(STRAGGLER_MIN_S, timeout_s / 4)
    top = max(x["step"] for x in mine.values())
    newest_t = max(x["t"] for x in mine.values())
    return [{"rank": r, "host": str(x.get("host", ""))[:100], "step": x["step"], "ahead_step": top,
             "behind_s": round(newest_t - x["t"], 1)}
            for r, x in sorted(mine.items()) if x["step"] < top and newest_t - x["t"] > window]


def culprits(output: str) -> Dict[str, str]:
    """node -> why, from the `slurm-ft check --json` reports in the output of the checks' step (srun
    --label, one task per node): the nodes with a fail finding. Anything else (srun's own lines, a
    crashed check) names no culprit."""
    out: Dict[str, str] = {}
    for rep in _reports(output[:CHECK_OUTPUT_MAX]):
        bad = [f for f in rep["findings"] if isinstance(f, dict) and f.get("severity") == "fail"]
        if bad:
            out[rep["node"]] = hang_culprit((str(f.get("code", "?")), f.get("gpu"), str(f.get("reason", "")))
                                            for f in bad)
    return out


_LABEL = re.compile(r" *(\d+): ")
_REPORT_START = '{"node":'


def _reports(output: str) -> Iterator[Dict[str, Any]]:
    """The check reports in srun's labelled output. slurmstepd forwards a task's output in pieces of at
    most 1 KiB, and a report is longer: with two nodes or more the pieces of their lines interleave
    (seen on a 2-node step). srun --label names the task of each piece, so each task's pieces are
    joined again in order before the reports are read from them."""
    tasks: Dict[str, List[str]] = {}
    for line in output.split("\n"):
        m = _LABEL.match(line)
        tasks.setdefault(m.group(1) if m else "", []).append(line[m.end():] if m else line)
    decoder = json.JSONDecoder()
    for pieces in tasks.values():
        text = "".join(pieces)
        at = text.find(_REPORT_START)
        while at >= 0:
            try:
                rep, end = decoder.raw_decode(text, at)
            except ValueError:
                end = at + 1
            else:
                if isinstance(rep.get("node"), str) and isinstance(rep.get("findings"), list):
                    yield rep
            at = text.find(_REPORT_START, end)


def systemic(culprits: Mapping[str, str], checked: int) -> Optional[str]:
    """Why the checks' culprits are not to be believed, or None. Most of a step (more than half of 3 or
    more nodes), or every node of a smaller one with the same finding, failing at once is not that many
    faults: it is the checks' own trouble or the job's environment (seen: a job without the driver library
    on its path failed every node's NVML check), or an outage, which no relaunch inside the job gets around."""
    codes = {hang_code(why) for why in culprits.values()}
    if (checked >= 3 and 2 * len(culprits) > checked) or (checked >= 2 and len(culprits) == checked and len(codes) == 1):
        first = next(iter(culprits.values()), "")
        return f"the checks failed {len(culprits)} of {checked} nodes at once (first: {first[:200]})"
    return None


def restarts_left(max_restarts: int, slurm_restarts: int, in_place: int) -> bool:
    """May the job restart once more: Slurm's requeues plus the supervisor's restarts in place."""
    return slurm_restarts + in_place < max_restarts
