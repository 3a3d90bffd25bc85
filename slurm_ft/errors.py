"""The exception types every layer raises; the CLI maps them to exit codes.

Exit codes (documented in the README, stable for scripts):
  0  success / healthy
  1  a negative answer: a fail finding, no complete checkpoint, ...
  2  bad input: usage, config, an unknown node, a malformed hostlist
  3  an outside command failed (Slurm, munge, ...) or timed out
  4  the environment is missing something (not root, Slurm not installed)
  5  busy: another instance holds the lock
"""
from __future__ import annotations

from typing import Sequence

EXIT_NEGATIVE = 1
EXIT_USAGE = 2
EXIT_COMMAND = 3
EXIT_ENVIRONMENT = 4
EXIT_BUSY = 5


class SlurmFTError(Exception):
    """Base class: a message fit for one line on stderr and an exit code."""

    exit_code = EXIT_USAGE


class UsageError(SlurmFTError):
    """Bad input from a person or a script: wrong value, unknown name."""

    exit_code = EXIT_USAGE


class ConfigError(UsageError):
    """A config or state file that cannot be used; the message names file and key."""


class EnvironmentProblem(SlurmFTError):
    """Something the machine lacks; the message says how to fix it."""

    exit_code = EXIT_ENVIRONMENT


class Busy(SlurmFTError):
    exit_code = EXIT_BUSY


class CommandError(SlurmFTError):
    """An outside command exited non-zero or could not start."""

    exit_code = EXIT_COMMAND

    def __init__(self, argv: Sequence[str], returncode: int | None, stderr: str, message: str = ""):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        detail = " ".join(stderr.strip().splitlines()[-3:]) if stderr else ""
        text = message or f"`{' '.join(self.argv)}` exited {returncode}"
        super().__init__(f"{text}: {detail}" if detail else text)


class CommandTimeout(CommandError):
    def __init__(self, argv: Sequence[str], timeout: float):
        self.timeout = timeout
        super().__init__(argv, None, "", f"`{' '.join(argv)}` timed out after {timeout:g} s")
