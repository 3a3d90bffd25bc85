"""What every start of a fault-tolerant job's training does before its exec: the starter's
(job/jobstart.py, at each start of the batch step) and a supervisor's launches inside the allocation
(job/supervisor.py, job/groups.py) alike: {ckpt} resolved to the newest complete checkpoint that has not
failed too many starts, the environment that names it, the line in DIR/slurm-ft-starts.jsonl, the argv
to exec. Kept to the standard library plus ckpt.py and heartbeat.py: it runs on the batch host.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurm_ft import heartbeat
from slurm_ft.job import ckpt, ckptfallback, startlog

PLACEHOLDER = "{ckpt}"
STARTS_LOG = "slurm-ft-starts.jsonl"


def resolve(argv: Sequence[str], ckpt_dir: str, exclude: Iterable[int] = ()
            ) -> Tuple[List[str], Optional[ckpt.Latest]]:
    """argv with every {ckpt} replaced by the latest complete checkpoint not in `exclude` (or "")."""
    found = ckpt.latest(ckpt_dir, exclude=exclude) if ckpt_dir else None
    value = found.path if found is not None and found.path else ""
    return [a.replace(PLACEHOLDER, value) for a in argv], found


def exec_argv(script: str, args: Sequence[str], access: Callable[[str, int], bool] = os.access,
              read_head: Optional[Callable[[str], str]] = None) -> List[str]:
    """What to exec for SCRIPT: itself when executable, else its #! interpreter (as sbatch would run it)."""
    if "/" not in script or access(script, os.X_OK):
        return [script, *args]
    head = (read_head or _read_head)(script)
    if not head.startswith("#!"):
        raise OSError(f"{script} is not executable and has no #! line")
    interp = head[2:].strip().split(None, 1)            # like the kernel: interpreter + at most one argument
    if not interp:
        raise OSError(f"{script}: empty #! line")
    return [*interp, script, *args]


def _read_head(path: str) -> str:
    with open(path, "rb") as fh:
        return fh.readline(4096).decode("utf-8", "replace")


def log_event(ckpt_dir: str, record: Mapping[str, object]) -> None:
    try:
        os.makedirs(ckpt_dir, exist_ok=True)
        fd = os.open(os.path.join(ckpt_dir, STARTS_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (json.dumps(record, sort_keys=True) + "\n").encode())
        finally:
            os.close(fd)
    except OSError as exc:                              # a log line is not worth failing the job for
        print(f"slurm-ft: cannot write {STARTS_LOG}: {exc}", file=sys.stderr)


def last_progress(ckpt_dir: str) -> Optional[Dict[str, Any]]:
    """The most advanced progress report left by the run before this start (slurm_ft.progress), read before
    this run replaces them: the last step reached before the restart, for goodput's redone steps."""
    reports = heartbeat.read_all(ckpt_dir).values()
    if not reports:
        return None
    r = max(reports, key=lambda r: (r["step"], r["t"]))
    return {k: r.get(k) for k in ("step", "t", "job", "restart", "launch")}


def prepare(argv: Sequence[str], ckpt_dir: str, say: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
            job: str = "", m: int = ckptfallback.DEFAULT_M, restart: Optional[int] = None
            ) -> Tuple[List[str], Optional[ckpt.Latest], Optional[int], Dict[str, Any]]:
    """(argv with {ckpt} resolved, the checkpoint found, None, fields for the start's log line) -- or
    (.., .., 4, ..) when the job must not start: never from scratch over checkpoints we could not read
    (it would overwrite them), nor because the checkpoint filesystem is unreachable, nor when every
    complete checkpoint failed `m` starts in a row (ckptfallback)."""
    resolved, found = resolve(argv, ckpt_dir)
    fields: Dict[str, Any] = {"newest": found.step if found is not None and found.path else None, "prev_reached": None}
    if ckpt_dir and job and found is not None and not found.must_not_start:
        bad, fields["prev_reached"] = passed_over(ckpt_dir, job, fields["newest"], m, restart)
        if fields["newest"] is not None and fields["newest"] in bad:
            resolved, found = resolve(argv, ckpt_dir, exclude=bad)
            assert found is not None                    # resolve scans whenever ckpt_dir is set
            fields["passed_over"] = {str(k): v for k, v in sorted(bad.items())}
            to = f"the previous complete checkpoint, step {found.step}" if found.path else "none left"
            say(f"slurm-ft: checkpoint step {fields['newest']} failed {bad[fields['newest']]} starts in a row "
                f"(--ckpt-fails {m}): passed over; {to}")
    if found is not None and found.must_not_start:
        for s in found.skipped[:10]:
            say(f"slurm-ft: skipped {s.path}: {s.reason}")
        say(f"slurm-ft: {found.reason}; not starting")
        return resolved, found, 4, fields
    return resolved, found, None, fields


def passed_over(ckpt_dir: str, job: str, newest: Optional[int], m: int, restart: Optional[int] = None
                ) -> Tuple[Dict[int, int], Optional[int]]:
    """(checkpoint step -> failed starts, for those to pass over; how far the last start got). `restart`:
    a supervisor's, whose start the plugin may have logged already (ckptfallback.starts_of)."""
    starts = ckptfallback.starts_of(startlog.read(os.path.join(ckpt_dir, STARTS_LOG)), job, restart)
    if not starts:
        return {}, None
    last = starts[-1]
    got = ckptfallback.reached(heartbeat.read_all(ckpt_dir), job, _num(last.get("restart")), _num(last.get("launch")))
    return ckptfallback.passed_over(starts, got, newest, m), got


def _num(x: object) -> int:
    return x if type(x) is int else 0


def ckpt_env(found: Optional[ckpt.Latest], ckpt_dir: str) -> Dict[str, str]:
    """SLURM_FT_CKPT / SLURM_FT_CKPT_DIR / SLURM_FT_CKPT_STEP for scripts that prefer the environment."""
    return {"SLURM_FT_CKPT": found.path if found is not None and found.path else "",
            "SLURM_FT_CKPT_DIR": ckpt_dir,
            "SLURM_FT_CKPT_STEP": "" if found is None or found.step is None else str(found.step)}
