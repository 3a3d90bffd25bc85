"""`slurm-ft status`: one screen for people: the pool, open incidents, quarantined nodes, the breaker."""
from __future__ import annotations

import json

import click


@click.command("status")
@click.option("--json", "as_json", is_flag=True)
@click.option("--write-metrics", is_flag=True, help="Also write the Prometheus textfile (lifecycle.metrics_path).")
@click.pass_context
def status(ctx: click.Context, as_json: bool, write_metrics: bool) -> None:
    """The fleet at a glance (the same figures as the metrics file)."""
    from slurm_ft.cli.breaker import describe
    from slurm_ft.cli.node import setup, stamp
    from slurm_ft.lifecycle.collect import view
    from slurm_ft.lifecycle.store import Store
    config, client = setup(ctx)
    with Store(config.state_dir) as store:
        v = view(config, client, store)
        if write_metrics and config.lifecycle.metrics_path:
            from slurm_ft.errors import EnvironmentProblem
            from slurm_ft.lifecycle import collect, metrics
            try:
                metrics.write(config.lifecycle.metrics_path, collect.snapshot(v))
            except OSError as exc:
                raise EnvironmentProblem(f"cannot write {config.lifecycle.metrics_path}: {exc.strerror} "
                                         f"(lifecycle.metrics_path)") from None
    d = v.to_dict()
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    counts = ", ".join(f"{k} {v}" for k, v in d["nodes_by_state"].items() if v)
    p = d["pool"]
    short = f"  SHORT by {p['short']}" if p["short"] else ""
    click.echo(f"nodes: {counts}")
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
    click.echo(describe(d["breaker"]))
    last = d["last_sweep"]
    click.echo(f"last sweep: {stamp(last['time'])} ({last['elapsed_s']:.1f} s, {last['changes']} change(s))"
               if last else "last sweep: never")
