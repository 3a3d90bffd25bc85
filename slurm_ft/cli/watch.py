"""`slurm-ft watch`: the node-local Xid watcher (run it as a systemd service on every GPU node)."""
from __future__ import annotations

import functools
import json
import logging
import signal
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, TextIO, Tuple

import click

from slurm_ft.cli.check import answer, answer_user, node_name
from slurm_ft.cli.guard import LOG_FORMAT, guarded

if TYPE_CHECKING:
    from types import FrameType

    from slurm_ft.config import Config, ConfigCache
    from slurm_ft.node.query_socket import Query
    from slurm_ft.node.run import Report
    from slurm_ft.node.softpass import PassResult
    from slurm_ft.node.watch import Handled


@click.command("watch")
@click.option("--node", metavar="NAME", help="Node name (default $SLURMD_NODENAME, else the hostname).")
@click.option("--once", is_flag=True, help="Exit after the first fatal Xid has been handled.")
@click.option("--timeout", type=float, metavar="S", help="Exit after S seconds.")
@click.option("--no-nvml", is_flag=True, help="Only follow the kernel log (no NVML event listener).")
@click.option("--no-drain", is_flag=True, help="Report only: run the quick check but leave Slurm alone.")
@click.option("--no-serve", is_flag=True,
              help="Do not answer this node's `slurm-ft check` runs (the hooks) over the check socket.")
@click.option("--no-serve-users", is_flag=True,
              help="Do not answer local users' checks (the in-job checks of a job's supervisor) over the query socket.")
@click.option("--no-soft", is_flag=True,
              help="Read no soft signals (health.soft_period_s 0 does the same): no planned swaps from here.")
@click.option("--json", "as_json", is_flag=True,
              help='One JSON object per handled event batch ("kind": "xid") and per change in the soft signals '
                   '("kind": "soft").')
@click.pass_context
def watch(ctx: click.Context, node: Optional[str], once: bool, timeout: Optional[float], no_nvml: bool,
          no_drain: bool, no_serve: bool, no_serve_users: bool, no_soft: bool, as_json: bool) -> None:
    """Follow the kernel log and NVML Xid events; on a fatal Xid drain this node at once.

    User-caused Xids (13, 31, 43, 45, 68, ...) are logged and change nothing. SIGTERM stops it cleanly.
    Every health.soft_period_s it also reads the soft signals (corrected-ECC rate, contained Xids, NVLink
    error rates, held clock events, the node type's planned codes): one found drains the node gracefully
    for a planned swap (no job killed; lifecycle.planned_swaps_per_hour, the breaker) and tells its jobs.
    Unless --no-serve, it also answers the node's quick, prolog and epilog checks (HealthCheckProgram,
    the hooks) over a root-only socket ($SLURM_FT_CHECK_SOCKET, default /run/slurm-ft/check.sock):
    same check, same output, without a Python start-up and NVML initialisation per hook.
    Unless --no-serve-users, it answers any local user's quick or prolog check over a second socket
    ($SLURM_FT_QUERY_SOCKET, default /run/slurm-ft-query/query.sock): what root sees (the kernel log
    included), rate-limited per user; a user's --drain takes the node out only for evidence no user can
    write (docs/security.md).
    """
    from slurm_ft.config import ConfigCache, load_config  # lazy: config loads yaml; not for --help
    from slurm_ft.node.check_server import CheckServer  # lazy: the socket server (and config/yaml); not for --help
    from slurm_ft.node.liveness import NodeLiveness  # lazy: the node's textfile; not for --help
    from slurm_ft.node.query_server import QueryServer  # lazy: the users' socket server; not for --help
    from slurm_ft.node.watch import Watcher  # lazy: ctypes NVML and the probes; not for --help

    config_path = ctx.obj.get("config_path") if ctx.obj else None
    config = load_config(config_path)
    name = node_name(node)
    client = None
    if not no_drain:
        from slurm_ft.slurm.backend import client_from_config  # lazy: the Slurm backend, not with --no-drain
        client = client_from_config(config)
    def check(level: str, node_: str, config_: Config, **kw: Any) -> Report:
        from slurm_ft.node.run import check_node  # lazy: the probes; node.watch has loaded them by now
        kw["drain"] = kw.get("drain") and not no_drain
        return check_node(level, node_, config_, **kw)

    soft = None
    if not no_soft and config.health.soft_period_s > 0:
        from slurm_ft.node.softpass import SoftPass  # lazy: the soft-signal pass; not for --help
        soft = SoftPass(name, config, client)

    said: Dict[str, Any] = {"key": []}        # a node with nothing to say says nothing

    def show_soft(res: PassResult) -> None:
        # news only: the findings (their codes and GPUs) changed, a planned drain was tried, a read failed
        key = sorted((f.code, f.gpu if f.gpu is not None else -1) for f in res.findings)
        acted = res.outcome is not None and res.outcome.action not in ("waiting", "none", "already")
        if key == said["key"] and not acted and not res.error:
            return
        said["key"] = key
        if as_json:
            click.echo(json.dumps(res.to_dict()), nl=True)
            return
        if res.error:
            click.echo(f"{name}: soft signals not read: {res.error}", err=True)
        for f in res.findings:
            click.echo(f"{name}: soft signal {f.code}{' gpu%s' % f.gpu if f.gpu is not None else ''}: {f.reason}")
        if res.outcome is not None and res.outcome.action not in ("waiting", "none"):
            click.echo(f"{name}: planned swap: {res.outcome.action}: {res.outcome.message}")

    liveness = NodeLiveness(name, config)
    w = Watcher(name, config, client=client, use_nvml=not no_nvml, check=check, soft=soft, on_soft=show_soft,
                liveness=liveness)

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

    server = None if no_serve else CheckServer(
        name, functools.partial(serve_check, configs=ConfigCache(), on_report=lambda r: liveness.checked(r.level)),
        w.check_lock)
    users = None if no_serve_users else QueryServer(
        name, functools.partial(serve_user_check, configs=ConfigCache(), config_path=config.path, no_drain=no_drain),
        w.check_lock)
    w.start()
    if server is not None and server.start():
        w.sources.append(f"serving checks on {server.path}")
    if users is not None and users.start():
        w.sources.append(f"answering users on {users.path}")
    click.echo(f"slurm-ft watch on {name}: {'; '.join(w.sources) or 'no sources'}", err=True)
    try:
        w.run(once=once, timeout=timeout, on_handled=show)
    finally:
        for s in (server, users):
            if s is not None:
                s.stop()
        w.stop()


def serve_user_check(query: Query, out: TextIO, err: TextIO, configs: ConfigCache, config_path: Optional[str],
                     no_drain: bool) -> Tuple[int, bool]:
    """A local user's question (query_server.py), answered in the watcher: check.answer_user under the
    same error handling as a check of the user's own (one line on their stderr, the exit code), and
    whether an NVML call hung. None of the watcher's log lines go to the user."""
    hung = False

    def body() -> int:
        nonlocal hung
        code, hung = answer_user(query, out, err, configs.load(config_path), may_drain=not no_drain)
        return code

    return guarded(body, err), hung


def serve_check(argv: List[str], env: Dict[str, str], out: TextIO, err: TextIO, configs: ConfigCache,
                on_report: Optional[Callable[[Report], None]] = None) -> Tuple[int, bool]:
    """One hook's `slurm-ft check ARGV`, answered in the watcher: what its own process would print and
    exit with (check.answer under the same error handling, its warnings on its stderr), and whether an
    NVML call hung. `configs`: the config file is parsed again only when it changed (13 ms a parse of
    etc/slurm-ft.yaml, on every hook otherwise)."""
    hung = False

    def body() -> int:
        nonlocal hung
        code, hung = answer(argv, out, err, env, env.get("SLURM_FT_CONFIG"), configs.load, on_report=on_report)
        return code

    serving = threading.current_thread().name
    to_hook = logging.StreamHandler(err)
    to_hook.setLevel(logging.WARNING)                 # what the hook's own process logs (setup_logging(0))
    to_hook.setFormatter(logging.Formatter(LOG_FORMAT))
    to_hook.addFilter(lambda r: r.threadName == serving or (r.threadName or "").startswith("gather-"))
    root = logging.getLogger()
    root.addHandler(to_hook)
    try:
        return guarded(body, err), hung
    finally:
        root.removeHandler(to_hook)
