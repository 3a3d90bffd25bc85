"""One line per error and its documented exit code, for every face of the `slurm-ft` command."""
from __future__ import annotations

import logging
import sys
from typing import Callable, Optional, TextIO

from slurm_ft.errors import SlurmFTError

EXIT_INTERNAL = 70          # a bug of ours (EX_SOFTWARE)
EXIT_INTERRUPTED = 130


LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def setup_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format=LOG_FORMAT)


def guarded(body: Callable[[], int], err: Optional[TextIO] = None) -> int:
    """body's exit status; our errors as one line on `err` (stderr) and their documented exit code."""
    err = sys.stderr if err is None else err
    try:
        return body()
    except SlurmFTError as exc:
        print(f"slurm-ft: error: {exc}", file=err)
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug of ours: one line, the traceback only with -vv
        logging.getLogger("slurm_ft").debug("internal error", exc_info=True)
        print(f"slurm-ft: internal error: {type(exc).__name__}: {exc} (run with -vv for details)", file=err)
        return EXIT_INTERNAL
