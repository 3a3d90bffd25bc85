"""The job starter `slurm-ft sbatch` submits: runs at every (re)start of the batch step.

    python -m slurm_ft.job.jobstart --ckpt-dir DIR -- SCRIPT [ARGS...]
    python -m slurm_ft.job.jobstart --resolve --ckpt-dir DIR     (the SPANK plugin's batch step)

Replaces ``{ckpt}`` in SCRIPT/ARGS with the newest complete checkpoint in DIR ("" when there is none),
exports SLURM_FT_CKPT / SLURM_FT_CKPT_STEP / SLURM_FT_CKPT_DIR for scripts that prefer the environment,
appends one JSON line to DIR/slurm-ft-starts.jsonl, and execs SCRIPT. Nothing here goes through a shell.
It does not start SCRIPT (exit 4) when DIR cannot be read, or holds checkpoint data none of which is
complete: a start from scratch there would overwrite the checkpoints we failed to read.
The start line also carries `before`: the most advanced progress report (slurm_ft.progress) the previous
run left, read before this run replaces it, so goodput knows the last step reached before a restart.
Kept to the standard library plus ckpt.py and heartbeat.py: it runs on the batch host at every restart.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurm_ft import heartbeat
from slurm_ft.job import ckpt, ckptfallback, startlog
from slurm_ft.job.tag import DEFAULT_MAX_RESTARTS

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


STARTER_OPTIONS = ("--ckpt-dir", "--hot-spares", "--train-nodes", "--hang-timeout", "--max-restarts", "--ckpt-fails",
                   "--replica-groups")


def _options(argv: List[str]) -> Tuple[Optional[Dict[str, Any]], List[str]]:
    """The starter's own options (`slurm-ft sbatch` writes them, in any order, before `--`), and the rest;
    None when one is repeated, lacks a value, or a number is not one."""
    opts: Dict[str, Any] = {}                          # ckpt_dir: str, the others: int
    while len(argv) >= 2 and argv[0] in STARTER_OPTIONS:
        name = argv[0][2:].replace("-", "_")
        if name in opts or (name != "ckpt_dir" and not argv[1].isdigit()):
            return None, argv
        opts[name] = argv[1] if name == "ckpt_dir" else int(argv[1])
        argv = argv[2:]
    return opts, argv


def _start(ckpt_dir: str, argv: Sequence[str], m: int = ckptfallback.DEFAULT_M
           ) -> Tuple[Optional[List[str]], Optional[ckpt.Latest]]:
    """Resolve {ckpt}, say where the job resumes from, log the start: argv resolved, or None when the
    job must not start (checkpoints that cannot be read, or none of them complete)."""
    t0 = time.time()
    job = os.environ.get("SLURM_JOB_ID", "")
    resolved, found, rc, fields = prepare(argv, ckpt_dir, job=job, m=m)
    if rc is not None:
        return None, found
    restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    env = ckpt_env(found, ckpt_dir)
    env_ckpt = env["SLURM_FT_CKPT"]
    if ckpt_dir:    # without one, SLURM_FT_* stay as they are (the SPANK plugin's, when it resolved them)
        assert found is not None                        # resolve scans whenever ckpt_dir is set
        os.environ.update(env)
        if env_ckpt:
            print(f"slurm-ft: job {job} start {restart}: resuming from {env_ckpt} "
                  f"(step {found.step}, {found.layout})", file=sys.stderr)
        else:
            print(f"slurm-ft: job {job} start {restart}: no complete checkpoint ({found.reason}); "
                  f"starting from scratch", file=sys.stderr)
        for s in (found.skipped if found else ()):
            print(f"slurm-ft: skipped {s.path}: {s.reason}", file=sys.stderr)
        log_event(ckpt_dir, {
            "event": "jobstart", "t": t0, "job": job, "restart": restart, "before": last_progress(ckpt_dir),
            "nodes": os.environ.get("SLURM_JOB_NODELIST", ""), "ckpt": env_ckpt,
            "step": found.step if found else None,
            "skipped": [{"path": x.path, "reason": x.reason} for x in (found.skipped[:5] if found else ())],
            **fields,
        })
    sys.stderr.flush()
    return resolved, found


def resolve_only(ckpt_dir: str) -> int:
    """`jobstart --resolve --ckpt-dir DIR`, for the SPANK plugin's batch step (spank/slurm_ft.c): the same
    start as `slurm-ft sbatch`'s, printed as two lines (checkpoint path, step; "" when none) instead of
    exec'ing; exit 4 when the job must not start. A path with a newline cannot be printed so: refused."""
    resolved, found = _start(ckpt_dir, [PLACEHOLDER])
    if resolved is None:
        return 4
    if "\n" in resolved[0]:
        print(f"slurm-ft: checkpoint path {resolved[0]!r} has a newline; not starting", file=sys.stderr)
        return 4
    step = found.step if found is not None and found.step is not None and resolved[0] else ""
    sys.stdout.write(f"{resolved[0]}\n{step}\n")
    return 0


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if len(argv) == 3 and argv[0] == "--resolve" and argv[1] == "--ckpt-dir":
        return resolve_only(argv[2])
    opts, argv = _options(argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if opts is None or not argv or ((opts.get("hot_spares") or opts.get("replica_groups")) and not opts.get("train_nodes")):
        print("slurm-ft jobstart: usage: jobstart --ckpt-dir DIR [--hot-spares K --train-nodes N] [--replica-groups R] "
              "[--hang-timeout S] "
              "[--max-restarts R] [--ckpt-fails M] -- SCRIPT [ARGS...] | --resolve --ckpt-dir DIR", file=sys.stderr)
        return 2
    ckpt_dir, m = opts.get("ckpt_dir", ""), opts.get("ckpt_fails", ckptfallback.DEFAULT_M)
    if opts.get("replica_groups"):
        # lazy: the replica-group supervisor imports this module at its top (as supervisor.py does)
        from slurm_ft.job import groups
        return groups.main(ckpt_dir, opts["train_nodes"], opts["replica_groups"], argv,
                           hang_timeout=opts.get("hang_timeout") or 0,
                           max_restarts=opts.get("max_restarts", DEFAULT_MAX_RESTARTS), ckpt_fails=m)
    if opts.get("hot_spares") or opts.get("hang_timeout"):
        # the batch step supervises the training step (--hot-spares/--hang-timeout starts only)
        # lazy: breaks the import cycle with slurm_ft.job.supervisor, which imports this module at its top
        from slurm_ft.job import supervisor
        return supervisor.main(ckpt_dir, opts.get("train_nodes"), argv, hang_timeout=opts.get("hang_timeout") or 0,
                               max_restarts=opts.get("max_restarts", DEFAULT_MAX_RESTARTS), ckpt_fails=m)
    resolved, _ = _start(ckpt_dir, argv, m)
    if resolved is None:
        return 4
    try:
        target = exec_argv(resolved[0], resolved[1:])
        os.execvp(target[0], target)
    except OSError as exc:
        print(f"slurm-ft jobstart: cannot run {resolved[0]}: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
