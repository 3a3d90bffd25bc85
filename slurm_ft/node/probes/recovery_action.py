"""The driver's own verdict (NVML field 230, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, R565+): what the GPU
needs after a fault, which Xid 154 announces. Anything but "none" takes the node out with the action the
driver asked for; a driver without the field says nothing (None)."""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from slurm_ft.finding import Action, Finding, Severity
from slurm_ft.gpu.nvml import RECOVERY_ACTIONS
from slurm_ft.gpu.sample import NodeSample

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "recovery_action"
# field value -> (fault code, what slurm-ft does about it)
NEEDS = {
    1: ("GPU_RECOVERY_RESET", Action.RESET_GPU),
    2: ("GPU_RECOVERY_REBOOT", Action.REBOOT),
    3: ("GPU_RECOVERY_DRAIN_P2P", Action.DRAIN),
    4: ("GPU_RECOVERY_DRAIN_RESET", Action.RESET_GPU),    # drain the node's work, then reset the GPU
    5: ("GPU_RECOVERY_IMEX", Action.DRAIN),               # recover the IMEX domain: no per-node fix
    6: ("GPU_RECOVERY_BUS_RESET", Action.REBOOT),
    7: ("GPU_RECOVERY_SYSTEM_REBOOT", Action.REBOOT),
}


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    out: List[Finding] = []
    for g in sample.gpus:
        value = g.recovery_action
        if g.lost or not value:
            continue
        name = RECOVERY_ACTIONS.get(value, f"unknown action {value}")
        if value in NEEDS:
            code, action = NEEDS[value]
            out.append(Finding(CHECK, Severity.FAIL, f"the driver asks for recovery: {name}", code, g.index, action))
        else:
            out.append(Finding(CHECK, Severity.WARN, f"the driver reports recovery action {value}, unknown here",
                               "GPU_RECOVERY_UNKNOWN", g.index))
    return out
