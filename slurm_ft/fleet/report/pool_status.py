"""The live spare pool against the plan: pure, over a snapshot of nodes and partitions read elsewhere."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from slurm_ft.errors import UsageError
from slurm_ft.slurm.types import Node, Partition

_GRES_GPU = re.compile(r"^gpu(?::[^:(,]+)?:(\d+)")


def gpus_in_gres(gres: str) -> int:
    """GPUs in a Slurm Gres string: 'gpu:8', 'gpu:h100:8(S:0-1)', 'gpu:a100:4,gpu:h100:4' -> 8."""
    total = 0
    for part in re.split(r",(?![^()]*\))", gres or ""):
        m = _GRES_GPU.match(part.strip())
        if m:
            total += int(m.group(1))
    return total


@dataclass
class PoolStatus:
    spare_partition: str
    job_partitions: Tuple[str, ...]
    cluster_nodes: int
    cluster_gpus: int
    gpus_per_node: int
    healthy_idle: List[str] = field(default_factory=list)
    busy: List[str] = field(default_factory=list)         # healthy but running something
    unhealthy: List[Tuple[str, str, str]] = field(default_factory=list)   # name, state, reason

    @property
    def pool_size(self) -> int:
        return len(self.healthy_idle) + len(self.busy) + len(self.unhealthy)

    def to_dict(self) -> Dict[str, Any]:
        return {"spare_partition": self.spare_partition, "job_partitions": list(self.job_partitions),
                "cluster_nodes": self.cluster_nodes, "cluster_gpus": self.cluster_gpus,
                "gpus_per_node": self.gpus_per_node, "pool_size": self.pool_size,
                "healthy_idle": self.healthy_idle, "busy": self.busy,
                "unhealthy": [{"node": n, "state": s, "reason": r} for n, s, r in self.unhealthy]}


def _state_text(node: Node) -> str:
    flags = "+".join(sorted(node.flags))
    return f"{node.state}+{flags}" if flags else node.state


def pool_status(nodes: Sequence[Node], partitions: Sequence[Partition], spare_partition: str,
                job_partitions: Sequence[str] = (), gpus_per_node: Optional[int] = None) -> PoolStatus:
    """Count the cluster the spares protect (nodes of the job partitions, or of every partition but the
    pool, not counting spares) and sort the pool's nodes into healthy-idle, busy and unhealthy."""
    by_name = {n.name: n for n in nodes}
    parts = {p.name: p for p in partitions}
    if spare_partition not in parts:
        raise UsageError(f"no partition {spare_partition!r} (partitions: {', '.join(sorted(parts)) or 'none'})")
    spare_names = list(parts[spare_partition].nodes)
    spare_set = set(spare_names)
    chosen = tuple(job_partitions) or tuple(sorted(p for p in parts if p != spare_partition))
    cluster = sorted({n for p in chosen if p in parts for n in parts[p].nodes} - spare_set)
    counts = Counter(gpus_in_gres(by_name[n].gres) for n in cluster if n in by_name)
    gpn = gpus_per_node or (counts.most_common(1)[0][0] if counts else 0)
    gpus = sum(gpus_in_gres(by_name[n].gres) for n in cluster if n in by_name)
    st = PoolStatus(spare_partition, chosen, len(cluster), gpus, gpn)
    for name in spare_names:
        node = by_name.get(name)
        if node is None:
            st.unhealthy.append((name, "UNKNOWN", "not reported by Slurm"))
        elif not node.available:
            st.unhealthy.append((name, _state_text(node), node.reason))
        elif node.state in ("ALLOCATED", "MIXED", "COMPLETING") or "COMPLETING" in node.flags:
            st.busy.append(name)
        else:
            st.healthy_idle.append(name)
    return st
