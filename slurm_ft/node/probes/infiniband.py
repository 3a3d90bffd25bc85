"""InfiniBand ports from sysfs: at least `node_type.ib_ports` ports ACTIVE / LinkUp at `ib_rate_gbps`.

Same rule as NHC's check_hw_ib and GPUD's port count (H100/H200 nodes: 8 ports at 400 Gb/s).
Readings: `extra["infiniband"]` = [{device, port, state, phys_state, rate_gbps, link_layer}], or
[{error}] when sysfs could not be read.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List

from slurm_ft.finding import Action, Finding, Severity

from slurm_ft.gpu.sample import NodeSample

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "infiniband"


def _up(p: Dict[str, Any], rate: int) -> bool:
    return ("ACTIVE" in str(p.get("state", "")).upper() and "LINKUP" in str(p.get("phys_state", "")).upper()
            and (not rate or (p.get("rate_gbps") or 0) >= rate))


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    want, rate = ctx.node_type.ib_ports, ctx.node_type.ib_rate_gbps
    if not want:
        return [Finding(CHECK, Severity.OK, "not checked: node type expects no InfiniBand ports (ib_ports: 0)")]
    ports = [p for p in sample.extra.get("infiniband", ()) or () if not p.get("error")]
    errors = [p["error"] for p in sample.extra.get("infiniband", ()) or () if p.get("error")]
    ports = [p for p in ports if str(p.get("link_layer", "InfiniBand")).lower() == "infiniband"]
    up = [p for p in ports if _up(p, rate)]
    if len(up) >= want:
        return []
    bad = [f"{p.get('device')}:{p.get('port')} {str(p.get('state', '?')).split(':')[-1].strip()}"
           f"/{str(p.get('phys_state', '?')).split(':')[-1].strip()} {p.get('rate_gbps') or 0}G"
           for p in ports if not _up(p, rate)]
    detail = "; ".join(bad[:4]) or (errors[0] if errors else "no IB ports found")
    at = f" at {rate} Gb/s" if rate else ""
    return [Finding(CHECK, Severity.FAIL, f"{len(up)} of {want} IB ports up{at} ({detail})", "IB_DOWN",
                    None, Action.DRAIN)]
