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
What a start does before its exec, a supervisor's launches too, is job/startprep.py. Kept to the standard
library plus ckpt.py and heartbeat.py: it runs on the batch host at every restart.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from slurm_ft.job import ckpt, ckptfallback
from slurm_ft.job.startprep import PLACEHOLDER, ckpt_env, exec_argv, last_progress, log_event, prepare
from slurm_ft.job.tag import DEFAULT_MAX_RESTARTS

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
        # lazy: a plain start (no supervisor) loads the standard library and the checkpoint readers alone
        from slurm_ft.job import groups
        return groups.main(ckpt_dir, opts["train_nodes"], opts["replica_groups"], argv,
                           hang_timeout=opts.get("hang_timeout") or 0,
                           max_restarts=opts.get("max_restarts", DEFAULT_MAX_RESTARTS), ckpt_fails=m)
    if opts.get("hot_spares") or opts.get("hang_timeout"):
        # the batch step supervises the training step (--hot-spares/--hang-timeout starts only)
        # lazy: as groups above
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
