"""One line per error and its documented exit code, for every face of the `slurm-ft` command."""
from __future__ import annotations

import logging
import os
import sys
from typing import Callable, Mapping, Optional, TextIO

from slurm_ft.errors import SlurmFTError

EXIT_INTERNAL = 70          # a bug of ours (EX_SOFTWARE)
EXIT_INTERRUPTED = 130


LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
JOURNAL_FORMAT = "%(name)s %(levelname)s %(message)s"      # journald stamps each line itself


def setup_logging(verbose: int, env: Optional[Mapping[str, str]] = None) -> None:
    """Log to stderr at WARNING (-v INFO, -vv DEBUG). Under systemd (the controller, the watcher) stderr is
    the journal: no timestamp of our own, and a `<N>` syslog priority prefix, so `journalctl -p err` finds
    the errors."""
    level = logging.WARNING - 10 * min(verbose, 2)
    if not stderr_is_journal(os.environ if env is None else env):
        logging.basicConfig(level=level, format=LOG_FORMAT)
        return
    handler = logging.StreamHandler()
    handler.setFormatter(JournalFormatter(JOURNAL_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])


def stderr_is_journal(env: Mapping[str, str]) -> bool:
    """systemd sets JOURNAL_STREAM to "device:inode" of the stream it connects to the journal (systemd.exec(5));
    a process started from a unit with stderr sent elsewhere inherits the variable, hence the comparison."""
    try:
        dev, ino = (int(x) for x in env.get("JOURNAL_STREAM", "").split(":"))
        st = os.fstat(sys.stderr.fileno())
    except (ValueError, OSError, AttributeError):     # unset, malformed, or no real stderr (a test's capture)
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


class JournalFormatter(logging.Formatter):
    """Each line led by its syslog priority (sd-daemon(3)): journald reads it as the entry's PRIORITY."""

    PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}

    def format(self, record: logging.LogRecord) -> str:
        prio = next((p for lv, p in sorted(self.PRIORITY.items(), reverse=True) if record.levelno >= lv), 7)
        return f"<{prio}>" + super().format(record)


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
