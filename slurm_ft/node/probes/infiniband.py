"""InfiniBand ports from sysfs: at least `node_type.ib_ports` ports ACTIVE / LinkUp at `ib_rate_gbps`.

Same rule as NHC's check_hw_ib and GPUD's port count (H100/H200 nodes: 8 ports at 400 Gb/s).
Reading: `host.IbPorts` (reader "infiniband"), with an error when sysfs could not be listed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from slurm_ft.finding import Action, Finding, Severity
from slurm_ft.gpu.sample import NodeSample
from slurm_ft.node.host import IbPort, IbPorts

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "infiniband"


def _up(p: IbPort, rate: int) -> bool:
    return "ACTIVE" in p.state.upper() and "LINKUP" in p.phys_state.upper() and (not rate or p.rate_gbps >= rate)


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    want, rate = ctx.node_type.ib_ports, ctx.node_type.ib_rate_gbps
    if not want:
        return [Finding(CHECK, Severity.OK, "not checked: node type expects no InfiniBand ports (ib_ports: 0)")]
    read = sample.host.of("infiniband", IbPorts) or IbPorts()
    ports = [p for p in read.ports if p.link_layer.lower() == "infiniband"]
    up = [p for p in ports if _up(p, rate)]
    if len(up) >= want:
        return []
    bad = [f"{p.device}:{p.port} {(p.state or '?').split(':')[-1].strip()}"
           f"/{(p.phys_state or '?').split(':')[-1].strip()} {p.rate_gbps:g}G"
           for p in ports if not _up(p, rate)]
    detail = "; ".join(bad[:4]) or read.error or "no IB ports found"
    at = f" at {rate} Gb/s" if rate else ""
    return [Finding(CHECK, Severity.FAIL, f"{len(up)} of {want} IB ports up{at} ({detail})", "IB_DOWN",
                    None, Action.DRAIN)]
