"""When a node counts as failed, read off Slurm's node state alone. Shared by the controller's plan and
the hot-spare supervisor inside the job (which must not import the controller)."""
from __future__ import annotations

from typing import Iterable, Optional

from slurm_ft.slurm.types import Node
from slurm_ft.vocab import SLURM_FAULT_REASONS, owned, planned


def node_fault(node: Optional[Node], fault_reasons: Iterable[str] = SLURM_FAULT_REASONS) -> Optional[str]:
    """Why the node counts as failed, or None: a slurm-ft fail drain, a Slurm fault drain, DOWN, NOT_RESPONDING.

    An admin's drain with any other reason is not a fault: the jobs on it run to their end. Nor is a
    planned-swap drain (vocab.planned): the node still works; its jobs move at their next checkpoint.
    """
    if node is None:
        return None
    if node.down:
        state = "+".join([node.state, *sorted(f for f in node.flags if f in ("NOT_RESPONDING", "FAIL"))])
        return f"{state}: {node.reason}" if node.reason else state
    if node.drained:
        if planned(node.reason):
            return None
        if owned(node.reason):
            return node.reason
        if any(node.reason.startswith(r) for r in fault_reasons):
            return node.reason
    return None
