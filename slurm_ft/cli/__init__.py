"""The `slurm-ft` command: the only place that sets up logging and turns errors into exit codes.

`slurm-ft check ...` is what slurmd runs on every node (HealthCheckProgram, prolog, epilog): it parses
its own arguments and never imports click, whose import was a third of a hook's start-up. Every other
command goes through the click group (group.py); `slurm-ft [OPTIONS] check` too, handed on to check.run.
"""
from __future__ import annotations

import sys
from typing import Callable

from slurm_ft.errors import SlurmFTError

EXIT_INTERNAL = 70          # a bug of ours (EX_SOFTWARE)
EXIT_INTERRUPTED = 130


def setup_logging(verbose: int) -> None:
    import logging
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")


def guarded(body: Callable[[], int]) -> int:
    """body's exit status; our errors as one line on stderr and their documented exit code."""
    try:
        return body()
    except SlurmFTError as exc:
        print(f"slurm-ft: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug of ours: one line, the traceback only with -vv
        import logging
        logging.getLogger("slurm_ft").debug("internal error", exc_info=True)
        print(f"slurm-ft: internal error: {type(exc).__name__}: {exc} (run with -vv for details)", file=sys.stderr)
        return EXIT_INTERNAL


def main(argv=None, prog_name: str = "slurm-ft") -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["check"]:
        from slurm_ft.cli.check import run
        setup_logging(0)
        sys.exit(guarded(lambda: run(args[1:])))
    from slurm_ft.cli.group import main as group_main
    group_main(args, prog_name)
