"""`slurm-ft controller run|once`: the requeue controller (systemd runs `run`; `once` for cron or a test)."""
from __future__ import annotations

import json
import logging
import signal
from typing import TYPE_CHECKING, Callable, Optional, Tuple

import click

from slurm_ft.config import load_config
from slurm_ft.fleet.recovery import daemon

if TYPE_CHECKING:
    from types import FrameType

    from slurm_ft.config import Config
    from slurm_ft.fleet.recovery.controller import Controller
    from slurm_ft.filelock import FileLock

log = logging.getLogger("slurm_ft.controller")


def _setup(ctx: click.Context) -> Tuple[Config, FileLock, Callable[[], Controller]]:
    from slurm_ft.fleet.recovery import journal as jn  # lazy: the sqlite3 journal stack; not for --help
    from slurm_ft.fleet import db  # lazy: as the journal
    from slurm_ft.fleet.recovery.controller import Controller, controller_lock  # lazy: heavy (~30 ms); not for --help
    from slurm_ft.slurm.backend import client_from_config  # lazy: the Slurm backend; not for --help
    config = load_config(ctx.obj.get("config_path") if ctx.obj else None)
    lock = controller_lock(config.state_dir)
    return config, lock, lambda: Controller(client_from_config(config), jn.connect(db.path_in(config.state_dir)), config)


@click.group("controller")
def controller() -> None:
    """Recover fault-tolerant jobs: quarantine the failed node, swap a spare in, requeue at once."""


@controller.command("once")
@click.option("--budget", type=click.FloatRange(min=0), default=None,
              help="Seconds to keep polling an incident in progress (default: controller.cycle_budget_s).")
@click.option("--json", "as_json", is_flag=True, help="Print the steps taken as JSON.")
@click.pass_context
def once(ctx: click.Context, budget: Optional[float], as_json: bool) -> None:
    """Run one cycle: observe, plan, act, until nothing is left to do now."""
    config, lock, build = _setup(ctx)
    with lock:
        result = build().cycle(budget)
    steps = [{"kind": s.kind, "job_id": s.job_id, "incident": s.incident_id, "nodes": list(s.nodes),
              "spares": list(s.spares), "reason": s.reason} for s in result.steps]
    if as_json:
        click.echo(json.dumps({"steps": steps, "open_incidents": result.open_incidents,
                               "elapsed_s": round(result.elapsed_s, 3)}, indent=2))
        return
    for st in result.steps:
        click.echo(f"job {st.job_id}: {st.kind} {','.join(st.nodes)}"
                   f"{' -> ' + ','.join(st.spares) if st.spares else ''}  {st.reason}")
    click.echo(f"{len(steps)} step(s), {result.open_incidents} incident(s) open, {result.elapsed_s:.2f} s")


@controller.command("run")
@click.option("--interval", type=click.FloatRange(min=0.05), default=None,
              help="Seconds between idle cycles (default: controller.interval_s); a node's wake starts one at once.")
@click.pass_context
def run(ctx: click.Context, interval: Optional[float]) -> None:
    """Run cycles until SIGTERM/SIGINT (the systemd service)."""
    config, lock, build = _setup(ctx)
    every = interval if interval is not None else config.controller.interval_s
    stop = {"now": False}

    def _stop(signum: int, frame: Optional[FrameType]) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    from slurm_ft.fleet.recovery.liveness import Writer  # lazy: only the daemon writes its liveness textfile
    with lock:
        ctl = build()
        listener = daemon.listen(ctl, config)
        log.warning("controller started (every %.2f s%s, journal in %s)", every,
                    f", woken by nodes on UDP port {listener.port}" if listener else "", config.state_dir)
        daemon.serve(ctl, every, listener, lambda: stop["now"], liveness=Writer(config.controller.metrics_path))
        log.warning("controller stopped")
