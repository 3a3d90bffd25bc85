"""What one sweep did, for people (the changes, the alerts) and for scripts (`sweep --json`): built by the
sweep (fleet/lifecycle/sweep.py) and the helpers it hands it to (fleet_view, remedy_act)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List


@dataclass
class SweepReport:
    started: float
    finished: float = 0.0
    changes: List[str] = field(default_factory=list)     # one line per change, for people and cron mail
    alerts: List[str] = field(default_factory=list)
    pool_size: int = 0
    pool_target: int = 0
    pool_target_source: str = ""
    pending: List[str] = field(default_factory=list)     # validations still running when the sweep ended
    errors: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"started": self.started, "finished": self.finished, "elapsed_s": round(self.finished - self.started, 3),
                "changes": self.changes, "alerts": self.alerts, "pool": {"size": self.pool_size,
                "target": self.pool_target, "target_source": self.pool_target_source},
                "pending_validations": self.pending, "errors": self.errors}
