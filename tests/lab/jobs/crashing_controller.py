"""`slurm-ft controller once` that SIGKILLs itself right after one journal write: the crash-consistency
tests' controller. The product has no crash switch; this passes the controller an `on_journal` observer.

    python crashing_controller.py STEP:intent|result [BUDGET_S]     (config: $SLURM_FT_CONFIG)
"""
from __future__ import annotations

import os
import signal
import sys

from slurm_ft.config import load_config
from slurm_ft.fleet.recovery import journal as jn
from slurm_ft.fleet import db
from slurm_ft.fleet.recovery.controller import Controller, controller_lock
from slurm_ft.slurm.backend import client_from_config


def main(point: str, budget: str = "120") -> None:
    kind, _, when = point.partition(":")
    config = load_config()

    def crash(k: str, w: str) -> None:
        if (k, w) == (kind, when or "result"):
            os.kill(os.getpid(), signal.SIGKILL)

    with controller_lock(config.state_dir):
        ctl = Controller(client_from_config(config), jn.connect(db.path_in(config.state_dir)), config,
                         on_journal=crash)
        ctl.cycle(float(budget))


if __name__ == "__main__":
    main(*sys.argv[1:])
