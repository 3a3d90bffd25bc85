"""`slurm-ft incidents [--json]`: every recovery with its job, nodes, fault, spare, step times and total."""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

import click

from slurm_ft.config import load_config
from slurm_ft.fleet.recovery.records import Incident
from slurm_ft.fleet.recovery import journal as jn
from slurm_ft.fleet import db
from slurm_ft.fleet.lifecycle.node_history import repair_history
from slurm_ft.job.paths import is_planned

if TYPE_CHECKING:
    from slurm_ft.fleet.lifecycle.transitions import HistoryEntry


def incident_dict(inc: Incident, aftermath: Sequence[HistoryEntry] = ()) -> Dict[str, Any]:
    total = (inc.closed_at - inc.opened_at) if inc.closed_at else None
    return {
        "id": inc.id,
        "job_id": inc.job_id,
        "status": inc.status,
        "nodes": list(inc.nodes),
        "faults": list(inc.faults),
        "partition": inc.partition,
        "path": inc.path,
        "spares": list(inc.spares),
        "shrink_to": inc.shrink_to,
        "ckpt_step": inc.ckpt_step,
        "fault_at": inc.fault_at,
        "opened_at": inc.opened_at,
        "closed_at": inc.closed_at,
        "total_s": round(total, 3) if total is not None else None,
        "note": inc.note,
        "steps": [{"name": s.name, "intent_at": s.intent_at, "done_at": s.done_at,
                   "since_open_s": round((s.done_at or s.intent_at) - inc.opened_at, 3),
                   "outcome": s.outcome or "intent", "detail": s.detail} for s in inc.steps],
        "failed_nodes_after": [e.to_dict() for e in aftermath],   # remediation, repair, validation
    }


def _clock(t: Optional[float]) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int((t % 1) * 1000):03d}"


def render(inc: Incident, aftermath: Sequence[HistoryEntry] = ()) -> str:
    spare = ",".join(inc.spares) or ("none (shrunk to %d)" % inc.shrink_to if inc.shrink_to else "none")
    total = f"{inc.closed_at - inc.opened_at:.2f} s" if inc.closed_at else "open"
    what = "degraded" if is_planned(inc.path) else "failed"     # a planned swap's nodes did not fail
    lines = [f"incident {inc.id}  job {inc.job_id}  {inc.status.upper()}  {what} {','.join(inc.nodes)}  "
             f"spare {spare}  total {total}  path {inc.path}"]
    for fault in inc.faults:
        lines.append(f"  fault  {fault}")
    if inc.note:
        lines.append(f"  note   {inc.note}")
    for s in inc.steps:
        at = s.done_at or s.intent_at
        lines.append(f"  {_clock(at)}  +{at - inc.opened_at:7.3f} s  {s.name:<10} {s.outcome or 'intent':<7} {s.detail}")
    for e in aftermath:   # the failed node's way back, from the lifecycle history
        lines.append(f"  {_clock(e.time)}  {e.node} {e.event.value} -> {e.to_state.value}: {e.cause}"
                     f"{'  [' + e.actor + ']' if e.actor else ''}")
    return "\n".join(lines)


@click.command("incidents")
@click.option("--json", "as_json", is_flag=True, help="One JSON list.")
@click.option("--open", "open_only", is_flag=True, help="Only incidents not closed yet.")
@click.option("--job", "job_id", type=int, default=None, help="Only this job's incidents.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="The last N incidents.")
@click.pass_context
def incidents(ctx: click.Context, as_json: bool, open_only: bool, job_id: Optional[int], limit: Optional[int]) -> None:
    """List the controller's incidents: job, failed node(s), fault, spare used, each step's time, total."""
    config = load_config(ctx.obj.get("config_path") if ctx.obj else None)
    path = db.path_in(config.state_dir)
    found, after = [], {}
    if path.exists():
        conn = jn.connect(path)
        found = jn.incidents(conn, open_only=open_only, job_id=job_id, limit=limit)
        after = {i.id: repair_history(conn, i.nodes, i.opened_at) for i in found}
        conn.close()
    if as_json:
        click.echo(json.dumps([incident_dict(i, after.get(i.id, ())) for i in found], indent=2))
        return
    if not found:
        click.echo(f"no incidents in {path}")
        return
    click.echo("\n\n".join(render(i, after.get(i.id, ())) for i in found))
