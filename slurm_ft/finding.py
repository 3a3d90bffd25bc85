"""What a health check says about a node: a Finding (check, severity, code, GPU) and the Action it asks for.
Shared by the node's checks, the Xid catalog, the node state file and the fleet's reports."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Dict, Optional


class Severity(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    ERROR = "error"   # the check itself could not run (a crashed probe): reported, never a drain


class Action(str, Enum):
    NONE = "none"
    DRAIN = "drain"
    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    RMA = "rma"


@dataclass(frozen=True)
class Finding:
    check: str                      # probe name: "xid", "ecc", "nvlink", ...
    severity: Severity
    reason: str                     # short, human: "double-bit ECC errors (volatile 2)"
    code: str = ""                  # stable fault code: "XID79", "ECC_DBE", "NVLINK_DOWN"
    gpu: Optional[int] = None
    action: Action = Action.NONE

    def to_dict(self) -> Dict[str, Any]:
        return {
            "check": self.check,
            "severity": self.severity.value,
            "gpu": self.gpu,
            "code": self.code,
            "reason": self.reason,
            "action": self.action.value,
        }

