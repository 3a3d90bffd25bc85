"""`slurm-ft status`: one screen for people: the pool, open incidents, quarantined nodes, the breaker."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

import json
import time
from contextlib import ExitStack
from pathlib import Path

import click

from slurm_ft.cli.breaker import describe
from slurm_ft.errors import EXIT_NEGATIVE, EnvironmentProblem, UsageError
from slurm_ft.filelock import FileLock

if TYPE_CHECKING:
    from slurm_ft.config import Config
    from slurm_ft.slurm.api import SlurmApi


@click.command("status")
@click.option("--job", "job_id", type=click.IntRange(min=1), default=None,
              help="One fault-tolerant job's goodput: GPU-hours that made progress, and what the rest went to.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--write-metrics", is_flag=True, help="Also write the Prometheus textfile (lifecycle.metrics_path); "
              "exit 5 at once when another `status --write-metrics` is still writing.")
@click.pass_context
def status(ctx: click.Context, job_id: Optional[int], as_json: bool, write_metrics: bool) -> None:
    """The fleet at a glance (the same figures as the metrics file), or one job's goodput (--job)."""
    from slurm_ft.cli.node import setup, stamp  # lazy: config (yaml) and the Slurm backend; not for --help
    from slurm_ft.fleet.report.fleet_view import view  # lazy: the fleet view is heavy (~35 ms); not for --help
    from slurm_ft.fleet.lifecycle.node_history import Store  # lazy: the sqlite3 store, loaded with the fleet view anyway
    config, client = setup(ctx)
    if job_id is not None:
        if write_metrics:
            raise UsageError("--write-metrics writes every job's figures: leave out --job")
        _job_goodput(config, client, job_id, as_json)
        return
    with ExitStack() as held:
        if write_metrics:   # the every-minute cron: a run still reading slow directories is not joined by more
            held.enter_context(FileLock(Path(config.state_dir) / "metrics.lock", "metrics write"))
        with Store(config.state_dir) as store:
            v = view(config, client, store)
            if write_metrics and config.lifecycle.metrics_path:
                from slurm_ft.fleet.report import fleet_view, metrics  # lazy: the fleet view is heavy; only --write-metrics
                try:
                    metrics.write(config.lifecycle.metrics_path,
                                  fleet_view.snapshot(v, fleet_view.goodput_rows(config, client, store, nodes=v.nodes)))
                except OSError as exc:
                    raise EnvironmentProblem(f"cannot write {config.lifecycle.metrics_path}: {exc.strerror} "
                                             f"(lifecycle.metrics_path)") from None
    d = v.to_dict()
    d["slurm_backend"] = {"name": client.backend, "reason": client.backend_reason}
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    counts = ", ".join(f"{k} {v}" for k, v in d["nodes_by_state"].items() if v)
    p = d["pool"]
    short = f"  SHORT by {p['short']}" if p["short"] else ""
    click.echo(f"nodes: {counts}")
    click.echo(f"slurm backend: {client.backend} ({client.backend_reason})")
    click.echo(f"spare pool ({p['partition']}): {p['healthy']} healthy of target {p['target']}{short}"
               f"  [{', '.join(p['nodes']) or 'empty'}]")
    click.echo(f"  target from {p['target_source']}")
    inc = d["incidents"]
    click.echo(f"incidents: {len(inc['open'])} open, {inc['total']} total")
    for i in inc["open"]:
        click.echo(f"  #{i['id']} job {i['job_id']} {i['status']}: {','.join(i['nodes'])}"
                   f"{' -> ' + ','.join(i['spares']) if i['spares'] else ''}  last step {i['last_step']}"
                   f"{'  ' + i['note'] if i['note'] else ''}")
    for title, key in (("quarantined / failed", "quarantined"), ("remediating (reboot)", "remediating"),
                       ("repaired / validating", "validating"), ("RMA list", "rma")):
        rows = d[key]
        click.echo(f"{title}: {len(rows)}")
        for r in rows:
            click.echo(f"  {r['node']:<10} {r['state']:<11} since {stamp(r['since'])}  {r['cause'] or r['slurm_reason']}")
    if d["keep_off"]:
        from slurm_ft.slurm.hostlist import compress  # lazy: only a config with keep_off
        click.echo(f"keep_off (slurm-ft leaves alone): {compress(d['keep_off'])}")
    click.echo(describe(d["breaker"]))
    last = d["last_sweep"]
    click.echo(f"last sweep: {stamp(last['time'])} ({last['elapsed_s']:.1f} s, {last['changes']} change(s))"
               if last else "last sweep: never")


def _job_goodput(config: Config, client: SlurmApi, job_id: int, as_json: bool) -> None:
    """`status --job J`: the job's goodput (fleet/report/goodput.py), from Slurm, the journal and its checkpoint dir."""
    from slurm_ft.fleet.report import goodput, job_progress  # lazy: job progress stack (~10 ms), only --job
    from slurm_ft.fleet.lifecycle.node_history import Store  # lazy: the sqlite3 store, only when the command runs
    jobs = job_progress.ft_jobs(config, client, [job_id])
    if not jobs:
        client.job(job_id)              # unknown: JobNotFound says so
        raise UsageError(f"job {job_id} is not a fault-tolerant job with a checkpoint dir (no slurm-ft tag)")
    job, spec = jobs[0]
    with Store(config.state_dir) as store:
        try:
            g = job_progress.goodput_of(store.db, client, job, spec, time.time())
        except job_progress.Unreadable as exc:
            click.echo(f"slurm-ft: job {job_id}: goodput not known: {exc}", err=True)
            raise SystemExit(EXIT_NEGATIVE) from None
    groups: List[Dict[str, Any]] = []
    if spec.replica_groups:
        try:
            groups = job_progress.groups_of(job_progress.read_dir(spec.ckpt_dir).starts_text, str(job_id))
        except job_progress.Unreadable as exc:
            click.echo(f"slurm-ft: job {job_id}: replica groups not known: {exc}", err=True)
    if as_json:
        click.echo(json.dumps({**g.to_dict(), **({"replica_groups": groups} if spec.replica_groups else {})}, indent=2))
        return
    click.echo("\n".join(goodput.render(g)))
    if spec.replica_groups:
        click.echo(f"replica groups: {spec.replica_groups} of {(spec.train_nodes or 0) // spec.replica_groups} node(s), "
                   f"{spec.hot_spares} hot spare(s)")
        for r in groups:
            fault = f"; last fault: {r['last_fault']}" if r["last_fault"] else ""
            click.echo(f"  group {r['group']}: {r['state']:<7} {r['nodes'] or '-'}  launches {r['launches']}, "
                       f"faults {r['faults']}{fault}")
