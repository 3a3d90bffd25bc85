"""The node-local state file (`health.state_file`): what the last checks found, for those who cannot ask.

A prolog or epilog must not call Slurm, so on a fail finding it only exits non-zero (Slurm drains the
node as "Prolog error") and records the finding here; the next health check, which may call Slurm, puts
the exact reason on the node, and the controller reads it too. The file is JSON, written atomically,
root-only (0600 in a 0700 directory), and refused when others can write it.

    {"version": 1, "node": "gpu001", "updated": 1764430000.0,
     "active": [finding + {"level", "time"}],      # fail findings not yet cleared by a re-check
     "last": {"quick": {"since", "healthy", "codes"}, ...},  # "since": when that result last changed
     "job": {"id": "1234", "start": 1764429000.0},  # written by the prolog, read by the epilog
     "running": {"1234": 1764429000.0},             # jobs whose prolog ran here and epilog not yet: who
                                                    # to tell when slurm-ft drains the node (node/tell.py)
     "xid_history": {"3:13": ["1201", "1234"]}}     # app-class Xids per GPU:code, the jobs they hit

A run whose result did not change writes nothing (no fsync per health check on a healthy node).
A fail finding stays "active" until a run of a level that includes its check comes back without it:
a quick run cannot clear what only the epilog can see.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

from slurm_ft.fsutil import atomic_write, refuse_unsafe
from slurm_ft.finding import Action, Finding, Severity

if TYPE_CHECKING:
    from slurm_ft.config import HealthConfig

log = logging.getLogger(__name__)

VERSION = 1
HISTORY_JOBS = 20          # app-class Xid history kept per GPU:code
MAX_RUNNING = 64           # jobs remembered as running here (a node whose epilogs never ran keeps no more)


def path_for(hc: HealthConfig, node: str) -> Path:
    """The node's state file (health.state_file with {node} filled in)."""
    return Path(hc.on(node, hc.state_file))


def empty(node: str) -> Dict[str, Any]:
    return {"version": VERSION, "node": node, "updated": None, "active": [], "last": {}, "job": None,
            "xid_history": {}}


def load(path: Path, node: str = "") -> Dict[str, Any]:
    """The state, or an empty one when the file does not exist. A corrupt file (cut short by a full
    disk, edited by hand) is moved aside with a warning and the state starts afresh: it must not keep
    every check of the node failing until somebody deletes it. An unsafe one is still refused."""
    if not path.exists():
        return empty(node)
    refuse_unsafe(path, "state file")
    refuse_unsafe(path.parent, "state directory")
    try:
        data = json.loads(path.read_text() or "{}")
        problem = _shape_problem(data)
    except (OSError, ValueError) as exc:
        problem = f"unreadable ({exc})"
    if problem:
        _move_aside(path, problem)
        return empty(node)
    base = empty(node or data.get("node", ""))
    base.update(data)
    return base


def _shape_problem(data: Any) -> str:
    """Why this JSON is not a state file we wrote, or ""."""
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return f"not a slurm-ft v{VERSION} state file"
    types: Dict[str, Union[type, Tuple[type, ...]]] = {"active": list, "last": dict, "xid_history": dict,
                                                       "job": (dict, type(None)), "running": dict}
    for key, tp in types.items():
        if key in data and not isinstance(data[key], tp):
            return f"{key} is a {type(data[key]).__name__}"
    if not all(isinstance(v, dict) for v in data.get("last", {}).values()):
        return "a last result is not a mapping"
    if not all(isinstance(v, list) for v in data.get("xid_history", {}).values()):
        return "an Xid history is not a list"
    for d in data.get("active", []):
        try:
            finding_from_dict(d)
        except (TypeError, KeyError, ValueError, AttributeError):
            return "an active finding cannot be read"
    for key in ("updated", "xid_ack", "drained_seen"):
        if data.get(key) is not None and (isinstance(data[key], bool) or not isinstance(data[key], (int, float))):
            return f"{key} is not a time"
    return ""


def _move_aside(path: Path, problem: str) -> None:
    aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
    try:
        os.replace(path, aside)
        log.warning("%s: %s; moved to %s, starting afresh", path, problem, aside)
    except OSError as exc:     # cannot move it (read-only dir): read as empty all the same
        log.warning("%s: %s; not moved aside (%s), starting afresh", path, problem, exc)


def save(path: Path, state: Mapping[str, Any]) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    refuse_unsafe(path.parent, "state directory")
    atomic_write(path, json.dumps(state, indent=1, sort_keys=True) + "\n", mode=0o600)


@contextmanager
def locked(path: Path, node: str = "") -> Iterator[Dict[str, Any]]:
    """Read-modify-write under an exclusive lock (a prolog and a health check may overlap)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    refuse_unsafe(path.parent, "state directory")
    fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        state = load(path, node)
        before = json.dumps(state, sort_keys=True)
        yield state
        if json.dumps(state, sort_keys=True) != before:   # a healthy node's routine run writes nothing
            save(path, state)
    finally:
        os.close(fd)


@contextmanager
def drain_lock(path: Path) -> Iterator[bool]:
    """Serialise the drain decisions of overlapping checks on one node (yields whether it is held).

    A check decides from its own sample and the state file, then drains or resumes through Slurm and
    notes it here; two checks interleaving those steps undo each other (a run whose sample predates a
    fault resumed the drain a newer run had just made, which then looked like an admin's resume).
    A separate lock file: the prolog's quick state update never waits for a Slurm call. Without a
    writable state directory the check goes on unlocked (a warning), as its state writes do.
    """
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        refuse_unsafe(path.parent, "state directory")
        fd = os.open(str(path) + ".drain.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        log.warning("drain lock next to %s not taken: %s", path, exc)
        yield False
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield True
    finally:
        os.close(fd)


def finding_to_dict(f: Finding, level: str, t: float) -> Dict[str, Any]:
    return {**f.to_dict(), "level": level, "time": t}


def finding_from_dict(d: Mapping[str, Any]) -> Finding:
    return Finding(check=d["check"], severity=Severity(d["severity"]), reason=d.get("reason", ""),
                   code=d.get("code", ""), gpu=d.get("gpu"), action=Action(d.get("action", "none")))


def active(state: Mapping[str, Any]) -> List[Finding]:
    """Fail findings not cleared yet (for the controller and the next health check)."""
    return [finding_from_dict(d) for d in state.get("active", [])]


def record(state: Dict[str, Any], level: str, checks: Iterable[str], findings: Iterable[Finding], now: float,
           job_id: Optional[str] = None) -> Dict[str, Any]:
    """Fold one run into the state: clear what it re-checked, add its fail findings, note app Xids."""
    checks = set(checks)
    findings = list(findings)
    before_active = list(state.get("active", []))
    kept = [d for d in before_active if d.get("check") not in checks]
    fresh = [finding_to_dict(f, level, now) for f in findings if f.severity is Severity.FAIL]
    # a finding already active keeps its first time: the state shows since when it has been failing
    first_seen = {(d["check"], d.get("code"), d.get("gpu")): d for d in before_active}
    fresh = [first_seen.get((d["check"], d["code"], d["gpu"]), d) if first_seen.get(
        (d["check"], d["code"], d["gpu"]), {}).get("reason") == d["reason"] else d for d in fresh]
    state["active"] = kept + fresh
    last = {"healthy": not fresh,
            "codes": sorted({f.code for f in findings if f.severity is not Severity.OK and f.code})}
    prev = state["last"].get(level) or {}
    if {k: prev.get(k) for k in last} != last or [d for d in kept + fresh] != before_active:
        last["since"] = now            # when this level's result last changed
        state["last"][level] = last
        state["updated"] = now
    if job_id:
        hist = state.setdefault("xid_history", {})
        for f in findings:
            if f.check == "xid" and f.gpu is not None and f.action is Action.NONE and f.code.startswith("XID"):
                key = f"{f.gpu}:{f.code[3:]}"
                jobs = hist.setdefault(key, [])
                if job_id not in jobs:
                    jobs.append(job_id)
                    del jobs[:-HISTORY_JOBS]
    return state


def job_started(state: Dict[str, Any], job_id: str, now: float) -> None:
    """The prolog ran for `job_id` here: it runs on this node until its epilog (`job_ended`)."""
    running = state.setdefault("running", {})
    running[str(job_id)] = now
    for old in sorted(running, key=lambda j: running[j])[:-MAX_RUNNING]:
        del running[old]


def job_ended(state: Dict[str, Any], job_id: str) -> None:
    (state.get("running") or {}).pop(str(job_id), None)


def job_start(state: Mapping[str, Any], job_id: str) -> Optional[float]:
    """When `job_id`'s prolog ran here (the running jobs; else the last prolog's own record), or None."""
    start = (state.get("running") or {}).get(str(job_id))
    if start is None:
        last = state.get("job") or {}
        start = last.get("start") if str(last.get("id")) == str(job_id) else None
    try:
        return float(start) if start is not None else None
    except (TypeError, ValueError):
        return None


def running_jobs(state: Mapping[str, Any]) -> List[int]:
    """The jobs whose prolog ran on this node and whose epilog has not (yet)."""
    return sorted(int(j) for j in (state.get("running") or {}) if str(j).isdigit())


def xid_history(state: Mapping[str, Any]) -> Dict[Tuple[int, int], int]:
    """{(gpu, xid): number of distinct jobs} for the Xid probe's recurrence heuristic."""
    out: Dict[Tuple[int, int], int] = {}
    for key, jobs in (state.get("xid_history") or {}).items():
        try:
            gpu, code = key.split(":")
            out[(int(gpu), int(code))] = len(jobs)
        except ValueError:
            continue
    return out
