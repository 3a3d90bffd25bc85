"""The `slurm-ft` command: the only place that sets up logging and turns errors into exit codes.

`slurm-ft check ...` is what slurmd runs on every node (HealthCheckProgram, prolog, epilog). Where the
node's `slurm-ft watch` serves checks, the watcher answers it (node/check_socket.py; a user's check, as
the hot-spare supervisor's, over node/query_socket.py) and this process imports nothing else; otherwise it parses its own arguments and never imports click, whose import was a
third of a hook's start-up. Every other command goes through the click group (group.py);
`slurm-ft [OPTIONS] check` too, handed on to check.run.
"""
from __future__ import annotations

import os
import sys

TYPE_CHECKING = False          # typing's import is a tenth of a served check's
if TYPE_CHECKING:
    from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None, prog_name: str = "slurm-ft") -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["check"]:
        from slurm_ft.node.check_socket import ask  # lazy: the hook path; other commands never ask the watcher
        served = ask(args[1:], os.environ, warn=sys.stderr)
        unanswered = ""
        if served is None and os.geteuid() != 0:
            # a job's user (the supervisor's checks): the kernel log is root's, the watcher answers users
            unanswered = "not asked: --local" if "--local" in args else ""
            if not unanswered:
                from slurm_ft.node.query_socket import ask as ask_watcher  # lazy: users' checks only
                served, unanswered = ask_watcher(args[1:], os.environ)
        if served is not None:
            sys.stdout.write(served.out)
            sys.stderr.write(served.err)
            sys.exit(served.code)
        from slurm_ft.cli.check import run  # lazy: the hook path, only when the watcher did not answer
        from slurm_ft.cli.guard import guarded, setup_logging  # lazy: same, only when the watcher did not answer
        setup_logging(0)
        sys.exit(guarded(lambda: run(args[1:], unanswered=unanswered)))
    from slurm_ft.cli.group import main as group_main  # lazy: click, which a hook's check never imports
    group_main(args, prog_name)
