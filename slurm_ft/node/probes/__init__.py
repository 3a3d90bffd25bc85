"""Probes: pure functions `probe(sample, ctx) -> list[Finding]`, one module per signal.

Reading and judging are separate (NHC's "gather, then check"): `slurm_ft.node.gather` fills a
NodeSample once (the NVML groups and host readers each check names below), and every probe here only
looks at it. No NVML, no subprocess, no clock reads: the time a probe needs comes in `ctx.now`. A
probe is tested by handing it a hand-built sample.

A probe returns only what is worth saying (warn/fail, or an informational ok such as a user-caused
Xid); run.py adds one "ok" line for a check that found nothing.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, List, Mapping, Optional, Tuple

from slurm_ft.config import NodeType, Thresholds
from slurm_ft.finding import Finding
from slurm_ft.gpu.sample import NodeSample
from slurm_ft.node.jobscope import JobScope
from slurm_ft.vocab import LEVELS

Probe = Callable[[NodeSample, "ProbeContext"], List[Finding]]

LEVEL_ORDER = LEVELS            # each level runs the checks of those before it


@dataclass(frozen=True)
class Check:
    """One check: everything slurm-ft knows of it. Levels, the NVML and host reads a level needs, which
    drain reasons a check may resume and which NVML errors it reports are all derived from CHECKS."""
    name: str
    level: str                                   # the first level that runs it (LEVEL_ORDER)
    codes: str                                   # regex (matched at the start) of the fault codes it reports
    nvml: FrozenSet[str] = frozenset()           # NVML groups to read for it (gpu/nvml.py GROUPS)
    queries: Tuple[str, ...] = ()                # NVML query names whose errors are this check's to report
    host: Tuple[str, ...] = ()                   # host readers it judges (node/host.py READERS)

    @property
    def module(self) -> str:
        return f"{__name__}.{self.name}"         # the probe: probes/<name>.py, imported when a level runs it


# Adding a check: its probe module probes/<name>.py and one line here (order = report order); a new
# kind of reading, an NVML group (gpu/nvml.py) or a host reader (node/host.py), first.
CHECKS: Tuple[Check, ...] = (
    Check("inventory", "quick", r"(GPU_COUNT|GPU_LOST|NVML_INIT|NVML_HUNG)", frozenset({"identity"}),
          ("handle", "name", "uuid", "pci_info")),
    Check("xid", "quick", r"S?XID\d+$", frozenset({"identity"})),   # PCI ids map log lines to GPU indexes
    Check("ecc", "quick", r"ECC_", frozenset({"ecc"}), ("ecc",)),
    Check("remap", "quick", r"REMAP_", frozenset({"remap"}), ("remapped_rows",)),   # or retired pages
    Check("retired", "quick", r"RETIRE", frozenset({"remap"}), ("retired",)),
    Check("pcie", "quick", r"PCIE_", frozenset({"pcie"}), ("pcie",)),
    Check("recovery_action", "quick", r"GPU_RECOVERY_", frozenset({"recovery"}), ("recovery_action",)),
    Check("nvlink", "prolog", r"NVLINK_", frozenset({"nvlink"}), ("nvlink",)),
    Check("temperature", "prolog", r"TEMP_", frozenset({"thermal"}), ("temperature",)),
    Check("clocks", "prolog", r"(HW_SLOWDOWN|HW_THERMAL|POWER_BRAKE)$", frozenset({"clocks"}), ("clock_event",),
          ("clocks",)),
    Check("disk", "prolog", r"DISK_", host=("disk",)),
    Check("processes", "epilog", r"GPU_PROC_LEFT$", frozenset({"processes"}), ("processes",), ("processes",)),
    Check("infiniband", "full", r"IB_", host=("infiniband",)),
    Check("burnin", "burnin", r"BURNIN_", frozenset({"identity", "clocks"}), host=("burnin",)),
)
BY_NAME: Dict[str, Check] = {c.name: c for c in CHECKS}


@dataclass(frozen=True)
class ProbeContext:
    """What a probe may know besides the sample: expectations, thresholds, the level and the time."""
    node_type: NodeType = field(default_factory=NodeType)
    thresholds: Thresholds = field(default_factory=Thresholds)
    level: str = "quick"
    now: float = 0.0
    xid_since: Optional[float] = None           # Xids logged before this time are history, not findings
    xid_untimed: bool = True                    # count Xid lines without a time (not after a resume)
    ignore_processes: Tuple[str, ...] = ()      # programs allowed to hold a GPU between jobs (processes.py)
    job: JobScope = field(default_factory=JobScope)   # the epilog's job: whose leftover processes count
    # (gpu index, xid) -> number of distinct jobs in which that app-class Xid was seen (node state file)
    xid_history: Mapping[Tuple[int, int], int] = field(default_factory=dict)


def get(name: str) -> Probe:
    """The probe function for a check name; KeyError for an unknown one."""
    probe: Probe = importlib.import_module(BY_NAME[name].module).probe
    return probe


def check_of(code: str) -> Optional[str]:
    """The check that reports fault code `code` (a drain reason's CODE), None for none of them."""
    return next((c.name for c in CHECKS if re.match(c.codes, code)), None)


def query_check(query: str) -> Optional[str]:
    """The check whose NVML query `query` is (an NVML error names its query), None for none."""
    return next((c.name for c in CHECKS for q in c.queries if query.startswith(q)), None)
