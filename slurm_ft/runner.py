"""The one place slurm-ft starts outside programs: argv lists, a timeout on every call, no shell."""
from __future__ import annotations

import logging
import subprocess
import time
from dataclasses import dataclass
from typing import Mapping, Sequence, Tuple

from slurm_ft.errors import CommandError, CommandTimeout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    argv: Tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    cwd: str | None = None,
) -> Result:
    """Run argv (never through a shell) and return its output; raise CommandError when check is set."""
    argv = [str(a) for a in argv]
    start = time.monotonic()
    try:
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandTimeout(argv, timeout) from exc
    except OSError as exc:  # not found, not executable
        raise CommandError(argv, None, str(exc), f"cannot run `{argv[0]}`") from exc
    elapsed = time.monotonic() - start
    log.debug("ran %s rc=%s in %.3fs", argv, proc.returncode, elapsed)
    result = Result(tuple(argv), proc.returncode, proc.stdout, proc.stderr, elapsed)
    if check and proc.returncode != 0:
        raise CommandError(argv, proc.returncode, proc.stderr or proc.stdout)
    return result


def start(argv: Sequence[str]) -> "subprocess.Popen[bytes]":
    """Start a program that runs until its caller stops it (`journalctl --follow`): an argv list, never a
    shell, stdin closed, stdout and stderr piped. No timeout: the caller bounds each read and ends it."""
    argv = [str(a) for a in argv]
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:  # not found, not executable
        raise CommandError(argv, None, str(exc), f"cannot run `{argv[0]}`") from exc
