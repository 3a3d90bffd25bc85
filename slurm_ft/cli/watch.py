"""`slurm-ft watch`: the node-local Xid watcher (run it as a systemd service on every GPU node)."""
from __future__ import annotations

import json
import signal
from typing import TYPE_CHECKING, Any, Optional

import click

if TYPE_CHECKING:
    from types import FrameType

    from slurm_ft.config import Config
    from slurm_ft.node.run import Report
    from slurm_ft.node.watch import Handled


@click.command("watch")
@click.option("--node", metavar="NAME", help="Node name (default $SLURMD_NODENAME, else the hostname).")
@click.option("--once", is_flag=True, help="Exit after the first fatal Xid has been handled.")
@click.option("--timeout", type=float, metavar="S", help="Exit after S seconds.")
@click.option("--no-nvml", is_flag=True, help="Only follow the kernel log (no NVML event listener).")
@click.option("--no-drain", is_flag=True, help="Report only: run the quick check but leave Slurm alone.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per handled event batch.")
@click.pass_context
def watch(ctx: click.Context, node: Optional[str], once: bool, timeout: Optional[float], no_nvml: bool,
          no_drain: bool, as_json: bool) -> None:
    """Follow the kernel log and NVML Xid events; on a fatal Xid drain this node at once.

    User-caused Xids (13, 31, 43, 45, 68, ...) are logged and change nothing. SIGTERM stops it cleanly.
    """
    from slurm_ft.cli.check import node_name
    from slurm_ft.config import load_config
    from slurm_ft.node.watch import Watcher

    config = load_config(ctx.obj.get("config_path") if ctx.obj else None)
    name = node_name(node)
    client = None
    if not no_drain:
        from slurm_ft.slurm.backend import client_from_config
        client = client_from_config(config)
    def check(level: str, node_: str, config_: Config, **kw: Any) -> Report:
        from slurm_ft.node.run import check_node
        kw["drain"] = kw.get("drain") and not no_drain
        return check_node(level, node_, config_, **kw)

    w = Watcher(name, config, client=client, use_nvml=not no_nvml, check=check)

    def on_term(signum: int, frame: Optional[FrameType]) -> None:
        w.stop_event.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    def show(h: Handled) -> None:
        if as_json:
            click.echo(json.dumps(h.to_dict()), nl=True)
            return
        what = ", ".join(f"Xid {e.xid} {('gpu%s' % e.gpu) if e.gpu is not None else e.pci_bus_id} ({e.source})"
                         for e in h.events)
        if not h.fatal:
            click.echo(f"{name}: {what}: not a node fault, nothing done")
            return
        assert h.report is not None     # a fatal batch always ran the quick check (Watcher.handle)
        d = h.report.drain or {}
        click.echo(f"{name}: {what}: quick check {'healthy' if h.report.healthy else 'UNHEALTHY'}; "
                   f"{d.get('action', 'no drain')}: {d.get('message', '')} ({h.done_at - h.detected_at:.3f} s)")

    w.start()
    click.echo(f"slurm-ft watch on {name}: {'; '.join(w.sources) or 'no sources'}", err=True)
    try:
        w.run(once=once, timeout=timeout, on_handled=show)
    finally:
        w.stop()
