"""`slurm-ft xid explain`: what the Xids in a kernel log mean and what to do, the 3 a.m. command."""
from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import click

from slurm_ft.errors import UsageError
from slurm_ft.gpu import kmsg, xid as catalog
from slurm_ft.gpu.sample import GpuSample, XidEvent


@click.group("xid")
def xid_group() -> None:
    """Xid codes from the NVIDIA driver: meaning, severity and action."""


def _gpus_from_nvml() -> Sequence[GpuSample]:
    """The node's GPUs for PCI -> index mapping; empty when NVML is not available here."""
    try:
        from slurm_ft.gpu import nvml  # lazy: NVML (pynvml, the driver) is optional; only to map PCI ids
        sample = nvml.read_node("", include=("identity",))
    except Exception:   # no driver, no pynvml: explain without indexes
        return ()
    return sample.gpus


def _event_dict(e: XidEvent) -> Dict[str, object]:
    v = catalog.verdict(e)
    d: Dict[str, object] = {"xid": e.xid, "kind": e.kind, "pci_bus_id": e.pci_bus_id, "gpu": e.gpu,
                             "gpu_instance": e.gpu_instance, "compute_instance": e.compute_instance,
                             "timestamp": e.timestamp, "detail": e.detail}
    d.update({k: val for k, val in v.to_dict().items() if k != "xid"})
    return d


def _format_event(e: XidEvent) -> List[str]:
    v = catalog.verdict(e)
    where = f"gpu{e.gpu}" if e.gpu is not None else "gpu?"
    mig = ""
    if e.gpu_instance is not None:
        mig = f" GPU-I {e.gpu_instance}" + (f" GPU-CI {e.compute_instance}" if e.compute_instance is not None else "")
    label = "SXid" if e.kind == "sxid" else "Xid"
    drain = "DRAINS node" if v.drains else "does not drain"
    head = f"{where} PCI {e.pci_bus_id}{mig}  {label} {e.xid}: {v.name}"
    lines = [head, f"    {v.severity.upper()} [{v.category}] action {v.action} ({drain}): {v.advice}"]
    if e.detail:
        lines.append(f"    log: {e.detail}")
    return lines


def _format_code(v: catalog.XidInfo) -> List[str]:
    lines = [
        f"Xid {v.xid}: {v.name}",
        f"  category   {v.category}" + ("  (caused by the application: never drains)" if v.user_caused else ""),
        f"  severity   {v.severity}",
        f"  action     {v.action}  ({'drains the node' if v.drains else 'does not drain'})",
        f"  what to do {v.advice}",
    ]
    if v.tokens:
        rules = ", ".join(f"{t.word} -> {t.severity}/{t.action}" for t in v.tokens)
        lines.append(f"  note       a word of the log line decides: {rules}")
    lines.append(f"  source     {v.source}")
    return lines


def _summary(events: Sequence[XidEvent]) -> List[Dict[str, Any]]:
    """One row per (GPU, Xid, verdict): how often, first and last time; draining rows first."""
    rows: Dict[Tuple[Optional[int], str, str, int, str], Dict[str, Any]] = {}
    for e in events:
        v = catalog.verdict(e)
        key = (e.gpu, e.pci_bus_id, e.kind, e.xid, v.severity)
        row = rows.setdefault(key, {"gpu": e.gpu, "pci_bus_id": e.pci_bus_id, "kind": e.kind, "xid": e.xid,
                                    "name": v.name, "severity": v.severity, "action": v.action,
                                    "drains": v.drains, "count": 0, "first": e.timestamp, "last": e.timestamp})
        row["count"] += 1
        if e.timestamp is not None:
            row["first"] = e.timestamp if row["first"] is None else min(row["first"], e.timestamp)
            row["last"] = e.timestamp if row["last"] is None else max(row["last"], e.timestamp)
    return sorted(rows.values(), key=lambda r: (not r["drains"], r["gpu"] if r["gpu"] is not None else 99,
                                                r["pci_bus_id"], r["xid"]))


def _format_summary(rows: Sequence[Dict[str, Any]]) -> List[str]:
    def when(t: Optional[float]) -> str:
        return time.strftime("%m-%d %H:%M:%S", time.localtime(t)) if t is not None else "?"
    out = []
    for r in rows:
        where = f"gpu{r['gpu']}" if r["gpu"] is not None else "gpu?"
        label = "SXid" if r["kind"] == "sxid" else "Xid"
        span = f"{when(r['first'])} .. {when(r['last'])}" if r["count"] > 1 else when(r["first"])
        out.append(f"{where:5} PCI {r['pci_bus_id']}  {label} {r['xid']:>5} x{r['count']:<4} {r['severity']:6} "
                   f"{'DRAIN ' + r['action'] if r['drains'] else 'no drain':16} {span}  {r['name']}")
    return out


@xid_group.command("explain")
@click.argument("what", required=False, metavar="[CODE|FILE|-]")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--since", "lookback", type=float, metavar="SECONDS",
              help="Only Xids logged in the last SECONDS (needs timestamps in the log).")
@click.option("--sxid/--no-sxid", default=True, show_default=True, help="Also list NVSwitch SXid lines.")
@click.option("--summary", is_flag=True, help="One line per GPU and Xid with a count, instead of every line.")
@click.option("--max-mb", type=click.IntRange(min=1), default=kmsg.MAX_BYTES >> 20, show_default=True,
              help="Read at most the last MB megabytes of a FILE (a warning says when that cut it).")
def explain(what: Optional[str], as_json: bool, lookback: Optional[float], sxid: bool, summary: bool,
            max_mb: int) -> None:
    """Explain one Xid CODE, or every Xid in FILE (plain or .gz) / stdin (-) / this boot's kernel log.

    \b
    Examples:
      slurm-ft xid explain 79
      dmesg | slurm-ft xid explain -
      slurm-ft xid explain /var/log/kern.log --summary
    Exit status: 0 nothing that drains, 1 at least one Xid that drains a node, 2 bad input.
    """
    if what is not None and what.isdigit():
        code = int(what)
        if not catalog.is_known(code):
            raise UsageError(f"Xid {code} is not in the catalog ({catalog.CATALOG_PATH}); "
                             f"slurm-ft treats unknown codes as: {catalog.unknown_policy(code).action}")
        info = catalog.lookup(code)
        click.echo(json.dumps(info.to_dict(), indent=2) if as_json else "\n".join(_format_code(info)))
        return
    path = what or kmsg.DEV_KMSG
    events = kmsg.read_xids(path, lookback_s=lookback, sxid=sxid, max_bytes=max_mb << 20)
    if events:
        gpus = _gpus_from_nvml()
        if gpus:
            events = kmsg.map_to_gpus(events, gpus)
    draining = [e for e in events if catalog.verdict(e).drains]
    if as_json:
        click.echo(json.dumps({"source": path, "count": len(events), "drains": bool(draining),
                               "summary": _summary(events), "events": [_event_dict(e) for e in events]}, indent=2))
    elif not events:
        click.echo(f"no Xid lines in {'stdin' if path == '-' else path}")
    elif summary:
        click.echo("\n".join(_format_summary(_summary(events))))
        click.echo(f"{len(events)} event(s); {len(draining)} drain the node")
    else:
        for e in events:
            click.echo("\n".join(_format_event(e)))
        click.echo(f"{len(events)} event(s); {len(draining)} drain the node")
    if draining:
        click.get_current_context().exit(1)
