"""The watcher's soft-signal pass: every `health.soft_period_s`, one NVML read, the trend history, the
judgement (node/soft.py, pure) and, for a new soft finding, a planned swap (node/planned.py).

Cost on a healthy node: NVML reads only (ECC counters, row remaps, clocks, the recovery-action field;
NVLink error counters only where the node type watches them: 4 calls per link) and no Slurm call; the
history lives in memory and reaches disk (`<state_file>.soft`, root-only, 0600 in the 0700 state
directory, bounded by soft.MAX_SAMPLES) every SAVE_S, when a finding appears and when the watcher stops,
so a restarted watcher keeps its trends. `bench/soft.py` prints a pass's time and the file's size.
A read that hangs (a wedged GPU) is abandoned after the quick level's deadline: the fault path (the quick
check) reports NVML_HUNG; this pass skips its turn.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, FrozenSet, List, Optional, Sequence

from slurm_ft.config import Config
from slurm_ft.errors import SlurmFTError
from slurm_ft.finding import Finding
from slurm_ft.fsutil import atomic_write, refuse_unsafe
from slurm_ft.gpu import kmsg
from slurm_ft.gpu.sample import NodeSample, XidEvent
from slurm_ft.node import planned, soft, state as st
from slurm_ft.node.gather import Reader, nvml_reader
from slurm_ft.node.probes import ProbeContext
from slurm_ft.node.run import judge, node_type_for

if TYPE_CHECKING:
    from slurm_ft.slurm.api import SlurmApi

log = logging.getLogger(__name__)

SAVE_S = 600.0
PLANNED_CHECKS = ("remap", "recovery_action")     # fail findings a node type may take by planned swap
BASE_PARTS = frozenset({"identity", "ecc", "remap", "clocks", "recovery"})


@dataclass
class PassResult:
    time: float
    findings: List[Finding] = field(default_factory=list)
    outcome: Optional[planned.Outcome] = None
    read_s: float = 0.0
    error: str = ""

    def to_dict(self) -> Dict[str, object]:
        d: Dict[str, object] = {"kind": "soft", "time": round(self.time, 3), "soft": [f.to_dict() for f in self.findings],
                                "read_s": round(self.read_s, 4)}
        if self.outcome is not None:
            d["planned"] = self.outcome.to_dict()
        if self.error:
            d["error"] = self.error
        return d


def history_path(config: Config, node: str) -> Path:
    p = st.path_for(config.health, node)
    return p.with_name(p.name + ".soft")


class SoftPass:
    def __init__(self, node: str, config: Config, client: Optional[SlurmApi] = None, *,
                 reader: Optional[Reader] = None, clock: Callable[[], float] = time.time) -> None:
        self.node = node
        self.config = config
        self.client = client
        self.reader = reader or nvml_reader
        self.clock = clock
        self.period_s = config.health.soft_period_s
        _, self.node_type = node_type_for(node, config.health)
        self.signals = self.node_type.soft
        self.path = history_path(config, node)
        self.history: Optional[Dict[str, Any]] = None
        self.next_at = 0.0
        self.saved_at = clock()
        self._xids: List[XidEvent] = []
        self._lock = threading.Lock()
        self.acted: Optional[str] = None     # the planned reason of this watcher's last drain

    @property
    def parts(self) -> FrozenSet[str]:
        s = self.signals
        return BASE_PARTS | ({"nvlink", "nvlink_errors"} if (s.nvlink_replay or s.nvlink_crc) else frozenset())

    def note_xids(self, events: Sequence[XidEvent]) -> None:
        """Warn-class hardware Xids the watcher saw (they count toward XID_CONTAINED)."""
        with self._lock:
            self._xids.extend(events)

    def due(self, now: float) -> bool:
        return self.period_s > 0 and now >= self.next_at

    # --- the pass --------------------------------------------------------------------------------
    def run(self, now: Optional[float] = None) -> PassResult:
        now = self.clock() if now is None else now
        self.next_at = now + self.period_s
        res = PassResult(now)
        t0 = time.monotonic()
        sample = self._read()
        res.read_s = time.monotonic() - t0
        if sample is None:
            res.error = f"NVML read took over {self._deadline():g} s: skipped (the quick check reports it)"
            return res
        if sample.nvml_error:
            res.error = sample.nvml_error
            return res
        history = self._history()
        keep = soft.keep_s(self.signals)
        soft.record(history, now, soft.readings(sample), keep)
        with self._lock:
            xids, self._xids = self._xids, []
        soft.record_xids(history, [(e.timestamp or now, e.gpu, e.xid) for e in kmsg.map_to_gpus(xids, sample.gpus)
                                   if e.gpu is not None], now, keep)
        ctx = ProbeContext(node_type=self.node_type, thresholds=self.config.health.thresholds, level="quick", now=now)
        res.findings = soft.judge(history, self.signals, now) + soft.planned(judge(sample, PLANNED_CHECKS, ctx),
                                                                             self.signals)
        if res.findings:
            res.outcome = self._act(res.findings, now)
        if res.findings or now - self.saved_at >= SAVE_S:
            self.save(now)
        return res

    def _act(self, findings: List[Finding], now: float) -> Optional[planned.Outcome]:
        if self.client is None:
            return planned.Outcome("none", "report only (no Slurm client: watch --no-drain)")
        outcome = planned.act(self.client, self.config, self.node, findings, now, self.signals.planned_codes)
        if outcome.action in ("drained", "already") and self.acted != outcome.reason:
            # out of service now: a trend must build up again from here once the node returns validated
            self.acted = outcome.reason
            assert self.history is not None
            self.history.update(samples=self.history["samples"][-1:], xids=[])
        return outcome

    def _deadline(self) -> float:
        return self.config.health.deadline_s.get("quick", 5.0)

    def _read(self) -> Optional[NodeSample]:
        box: Dict[str, Any] = {}

        def work() -> None:
            try:
                box["sample"] = self.reader(self.node, self.parts)
            except Exception as exc:  # noqa: BLE001 - reported as this pass's error, never raised into the watcher
                box["sample"] = NodeSample(node=self.node, nvml_error=f"{type(exc).__name__}: {exc}")

        worker = threading.Thread(target=work, name="soft-read", daemon=True)
        worker.start()
        worker.join(self._deadline())
        sample: Optional[NodeSample] = box.get("sample")
        return sample

    # --- the history file ----------------------------------------------------------------------
    def _history(self) -> Dict[str, Any]:
        if self.history is None:
            self.history = self.load()
        return self.history

    def load(self) -> Dict[str, Any]:
        """The saved history, or an empty one (missing, unreadable or not ours: started afresh, said once)."""
        try:
            refuse_unsafe(self.path.parent, "state directory")
            refuse_unsafe(self.path, "soft-signal history")
            data = json.loads(self.path.read_text()[: 8 << 20])
        except FileNotFoundError:
            return soft.empty(self.node)
        except (OSError, ValueError, SlurmFTError) as exc:
            log.warning("%s: %s; soft-signal trends start afresh", self.path, exc)
            return soft.empty(self.node)
        if not soft.valid(data) or data.get("node") != self.node:
            log.warning("%s: not a soft-signal history of %s; trends start afresh", self.path, self.node)
            return soft.empty(self.node)
        return {"version": soft.VERSION, "node": self.node, "samples": data["samples"], "xids": data["xids"]}

    def save(self, now: Optional[float] = None) -> None:
        if self.history is None:
            return
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            refuse_unsafe(self.path.parent, "state directory")
            atomic_write(self.path, json.dumps(self.history, separators=(",", ":")) + "\n", mode=0o600)
            self.saved_at = self.clock() if now is None else now
        except (OSError, SlurmFTError) as exc:   # the trends live on in memory; a restart starts afresh
            log.warning("soft-signal history not saved in %s: %s", self.path, exc)
