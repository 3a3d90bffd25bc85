"""Restart loops on a bad checkpoint end, pure: the starts log -> the checkpoints not to start from.

Every start of the job (the starter's `jobstart`) and every launch of its training step (the
supervisor's `launch`) is one line in CKPT/slurm-ft-starts.jsonl with the checkpoint step it loaded
(`step`), the newest complete checkpoint at that moment (`newest`) and how far the start before it got
(`prev_reached`: the highest step its ranks reported through slurm_ft.progress, None without reports).

A start from checkpoint S failed when it reported no step past S, or, without reports, when no
checkpoint newer than both S and the newest one at its own start (a passed-over one) was complete by
the next start. The failures at the end of the log, back to the
last start that got somewhere, are counted per checkpoint; one that failed `m` times (DEFAULT_M, or
`slurm-ft sbatch --ckpt-fails M`) is passed over: the next start uses the previous complete checkpoint
(Megatron-LM #5281: 44 identical cycles on a bad checkpoint). A start that gets past its checkpoint
clears them all: a checkpoint the job wrote again since is a new one.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

DEFAULT_M = 3
START_EVENTS = ("jobstart", "launch")


def _int(x: object) -> Optional[int]:
    return x if type(x) is int else None


def starts_of(records: Sequence[Mapping[str, Any]], job: str, restart: Optional[int] = None
              ) -> List[Mapping[str, Any]]:
    """The job's starts and launches, in log order. Where the SPANK plugin resolved {ckpt} as the batch
    step started (a "jobstart") and a supervisor then launched the training step (launch 0 of the same
    restart), the two are one start: the launch stands. `restart`: the start a supervisor is launching
    now, whose plugin record has no launch after it yet."""
    mine = [r for r in records if r.get("event") in START_EVENTS and str(r.get("job", "")) == job]
    supervised = {_int(r.get("restart")) for r in mine if r.get("event") == "launch" and _int(r.get("launch")) == 0}
    supervised.add(restart)
    supervised.discard(None)
    return [r for r in mine if not (r.get("event") == "jobstart" and _int(r.get("restart")) in supervised)]


def failed_streak(starts: Sequence[Mapping[str, Any]], reached_now: Optional[int], newest_now: Optional[int]
                  ) -> Dict[int, int]:
    """checkpoint step -> failed starts from it since the last start that got past its checkpoint.
    reached_now / newest_now: the last start's progress and the newest complete checkpoint, read now."""
    counts: Dict[int, int] = {}
    for i in range(len(starts) - 1, -1, -1):
        step = _int(starts[i].get("step"))
        if i + 1 < len(starts):
            reached, newest = _int(starts[i + 1].get("prev_reached")), _int(starts[i + 1].get("newest"))
        else:
            reached, newest = reached_now, newest_now
        if step is None:                      # from scratch: nothing to fall back from
            break
        own = _int(starts[i].get("newest"))
        failed = reached <= step if reached is not None else (newest is None or newest <= max(step, own or step))
        if not failed:
            break
        counts[step] = counts.get(step, 0) + 1
    return counts


def passed_over(starts: Sequence[Mapping[str, Any]], reached_now: Optional[int], newest_now: Optional[int],
                m: int = DEFAULT_M) -> Dict[int, int]:
    """The checkpoints (step -> failures) the next start must not use."""
    if m < 1:
        return {}
    return {s: n for s, n in failed_streak(starts, reached_now, newest_now).items() if n >= m}


def reached(records: Mapping[int, Mapping[str, Any]], job: str, restart: int, launch: int) -> Optional[int]:
    """The highest step the ranks of (restart, launch) reported (slurm_ft.heartbeat.read_all), or None."""
    steps = [x["step"] for x in records.values() if str(x.get("job", "")) == job
             and x.get("restart") == restart and x.get("launch", 0) == launch]
    return max(steps) if steps else None
