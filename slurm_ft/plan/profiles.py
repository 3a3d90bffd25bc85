"""Failure profiles (what breaks, how often, what it takes out) and recovery policies (how long each
step of getting the job back takes). Built-ins are data here, with their sources; custom ones come from
YAML mappings checked strictly by `profile_from_dict` / `policy_from_dict`.

Kinds of interruption, which decide how a fault is noticed:
  crash  the fault leaves a signal on the node (XID, ECC/row-remap, CUDA error, a dead process):
         a node-side check sees it
  node   the host itself goes away (power, CPU, board, maintenance): nothing on the node reports it,
         Slurm notices when slurmd stops answering (SlurmdTimeout, 300 s by default)
  hang   the job stalls without an error (link, switch, NIC, silent corruption): only a timeout
         (NCCL's collective timeout, 600 s in PyTorch by default, or a watchdog) catches it
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import AbstractSet, Any, Dict, Mapping, Optional, Tuple

from slurm_ft.errors import UsageError

KINDS = ("crash", "node", "hang")


@dataclass(frozen=True)
class FailureClass:
    name: str
    count: int          # interruptions of this class seen over the profile's window
    replace: float      # share of these faults after which the job needs a different node (this one goes
                        # to repair): true (1) or false (0) for the built-in profile, any 0..1 from YAML
    kind: str           # crash | node | hang (see module doc)
    note: str = ""


@dataclass(frozen=True)
class Profile:
    name: str
    days: float         # observation window
    gpus: int           # GPUs the job ran on during the window
    gpus_per_node: int
    classes: Tuple[FailureClass, ...]
    source: str = ""

    @property
    def total(self) -> int:
        return sum(c.count for c in self.classes)

    @property
    def replace_count(self) -> float:
        """Faults that take a node out (whole when every class is true/false)."""
        total = sum(c.count * c.replace for c in self.classes)
        return int(total) if float(total).is_integer() else total

    @property
    def replace_fraction(self) -> float:
        return self.replace_count / self.total

    @property
    def per_day(self) -> float:
        """Interruptions per day at the profile's own size."""
        return self.total / self.days

    def rate_per_gpu_s(self) -> float:
        return self.total / (self.days * 86400.0 * self.gpus)


# Llama 3 405B, 54-day snapshot on up to 16,384 H100 (8 per server): Table 5 of arXiv 2407.21783,
# 419 unexpected interruptions. The `replace` and `kind` columns are our reading, not Meta's:
# a class needs a node swap when the fault lives in the node's hardware (GPU, HBM, SRAM, GSP, thermal
# parts, NIC, host parts, and the hosts behind a bad switch port or cable until it is fixed); a
# software bug, a dependency failure or an unexplained NCCL watchdog timeout restarts on the same nodes.
LLAMA3 = Profile(
    name="llama3",
    days=54.0,
    gpus=16384,
    gpus_per_node=8,
    source="Llama 3 paper (arXiv 2407.21783) Table 5: 419 unexpected interruptions in 54 days on 16,384 H100",
    classes=(
        FailureClass("Faulty GPU", 148, True, "crash", "XID 79/48 class: the GPU is gone or unusable"),
        FailureClass("GPU HBM3 Memory", 72, True, "crash", "uncorrectable ECC / row-remap failure"),
        FailureClass("Software Bug", 54, False, "crash", "restart on the same nodes"),
        FailureClass("Network Switch/Cable", 35, True, "hang",
                     "the hosts behind the bad port are out until it is fixed; the job stalls in a collective"),
        FailureClass("Host Maintenance", 32, True, "node", "unplanned: the host is taken away"),
        FailureClass("GPU SRAM Memory", 19, True, "crash", "SRAM ECC"),
        FailureClass("GPU System Processor", 17, True, "crash", "GSP errors (XID 119/120)"),
        FailureClass("NIC", 7, True, "hang", "RDMA traffic stops: the job stalls"),
        FailureClass("NCCL Watchdog Timeouts", 7, False, "hang", "cause unknown: restart in place"),
        FailureClass("Silent Data Corruption", 6, True, "hang", "no error raised; found by loss/numerics checks"),
        FailureClass("GPU Thermal Interface + Sensor", 6, True, "crash", "thermal faults are reported"),
        FailureClass("SSD", 3, True, "crash", "local disk errors"),
        FailureClass("Power Supply", 3, True, "node", "the host goes down"),
        FailureClass("Server Chassis", 2, True, "node", ""),
        FailureClass("IO Expansion Board", 2, True, "node", ""),
        FailureClass("Dependency", 2, False, "crash", "an outside service failed: restart in place"),
        FailureClass("CPU", 2, True, "node", ""),
        FailureClass("System Memory", 2, True, "crash", "host DIMM errors are logged"),
    ),
)

PROFILES: Dict[str, Profile] = {"llama3": LLAMA3}


@dataclass(frozen=True)
class Route:
    """One way from a fault back to training, in seconds (means; the simulator uses them as given).

    detect_s:  from the fault to the decision that the job (or its step) must start again
    sched_s:   from that decision to the job's nodes ready (requeue delay, kill and epilogs, scheduling,
               prologs; or, in the allocation, stopping the step)
    swap_s:    to put a healthy node in place of the failed one, side by side with sched_s (a fault that
               needs no node never waits for it)
    restart_s: launch of every rank, its own start and the checkpoint load; None = the job's --restart-s
    requeue:   the job is requeued (its hot spares are refilled, it asks for every node again); False:
               the step restarts inside the allocation the job holds
    """
    detect_s: float
    sched_s: float
    swap_s: float = 0.0
    restart_s: Optional[float] = None
    requeue: bool = True
    name: str = ""

    def total(self, restart: float) -> float:
        return self.detect_s + max(self.sched_s, self.swap_s) + (self.restart_s if self.restart_s is not None
                                                                  else restart)


@dataclass(frozen=True)
class Policy:
    """How long each step of one recovery takes, in seconds (means; the simulator uses them as given).

    detect_*:  from the fault to a decision that the job must restart, by kind
    requeue_s: from that decision to the job being allowed to start again (scheduler delay)
    swap_s:    to put a healthy node in place of the failed one (only for faults that need one)
    restart_s: relaunch of all ranks plus loading the checkpoint; None = the job's own value
    requeue and swap run side by side: the job starts when both are done.

    A policy built from a product's features (plan/levers.py) gives a Route per kind of fault and per
    need of a node instead (`routes`, keys `crash/swap`, `crash/keep`, `node/swap`, ...), and a second
    one for a fault the job's hot spares absorb (`in_allocation`); the flat figures above then only
    describe it.
    """
    name: str
    detect_crash_s: float
    detect_node_s: float
    detect_hang_s: float
    requeue_s: float
    swap_s: float
    restart_s: Optional[float] = None
    source: str = ""
    routes: Optional[Mapping[str, Route]] = None
    in_allocation: Optional[Mapping[str, Route]] = None     # keys as routes; a missing key: not absorbed
    hot_spares: int = 0                 # K per job
    planned_share: float = 0.0          # share of node-taking crash faults swapped ahead, at a checkpoint
    replica_groups: int = 1             # R: a fault stops one of R groups, the others train on
    levers: Tuple[str, ...] = ()        # what the policy was built with, for the output

    def detect_s(self, kind: str) -> float:
        return {"crash": self.detect_crash_s, "node": self.detect_node_s, "hang": self.detect_hang_s}[kind]

    def route(self, kind: str, swap: bool) -> Route:
        """The way back for a fault of this kind that needs (swap) or keeps its node."""
        key = f"{kind}/{'swap' if swap else 'keep'}"
        if self.routes is not None and key in self.routes:
            return self.routes[key]
        return Route(self.detect_s(kind), self.requeue_s, self.swap_s if swap else 0.0, self.restart_s, True, key)

    def absorbed(self, kind: str, swap: bool) -> Optional[Route]:
        """The in-allocation way back for this fault while the job has a hot spare, or None."""
        if self.in_allocation is None or not self.hot_spares:
            return None
        return self.in_allocation.get(f"{kind}/{'swap' if swap else 'keep'}")


# Slurm alone, set up well: a HealthCheckProgram every 300 s (a crash is seen after 150 s on average),
# SlurmdTimeout 300 s for a lost host, PyTorch's 600 s NCCL timeout for a hang, the job requeued
# automatically (RequeueExit) but only eligible 121 s later (cred_expire 120 s + 1, Slurm <= 25.05),
# and a person swapping a spare into the partition (30 min mean response, our assumption).
SLURM = Policy("slurm", detect_crash_s=150.0, detect_node_s=300.0, detect_hang_s=600.0,
               requeue_s=121.0, swap_s=1800.0,
               source="health check every 300 s (mean wait 150 s), SlurmdTimeout 300 s, NCCL timeout 600 s, "
                      "requeue delay 121 s, manual node swap 30 min (assumed)")

# Meta-style automation (Llama 3 text: fast diagnosis tools, automatic timeouts in NCCLX, jobs placed
# again by the scheduler): our estimate for "minutes to restart", giving their ">90%" effective time.
LLAMA3_LIKE = Policy("llama3-like", detect_crash_s=30.0, detect_node_s=60.0, detect_hang_s=300.0,
                     requeue_s=0.0, swap_s=60.0,
                     source="our estimate of Llama-3-style automation: detect 30 s (crash) / 60 s (host) / "
                            "300 s (hang, NCCLX watchdog), automatic re-placement 60 s")

# slurm-ft defaults when no measured figures are given: detection of a node-side signal ~1 s (the XID
# watcher), recovery (quarantine, spare swap, requeue with the hold cleared) p50 ~5 s; a lost host still
# waits for SlurmdTimeout and a hang for the job's collective timeout, which slurm-ft does not shorten.
SLURM_FT_DETECT_S = 1.0
SLURM_FT_RECOVERY_S = 5.0


def slurm_ft_policy(detect_s: float = SLURM_FT_DETECT_S, recovery_s: float = SLURM_FT_RECOVERY_S,
                    source: str = "documented defaults: detection 1 s, recovery p50 5 s") -> Policy:
    return Policy("slurm-ft", detect_crash_s=detect_s, detect_node_s=300.0, detect_hang_s=600.0,
                  requeue_s=recovery_s, swap_s=0.0,
                  source=f"{source}; a lost host waits for SlurmdTimeout 300 s, a hang for the 600 s "
                         f"collective timeout; the spare swap is part of the measured recovery")


POLICIES = ("slurm", "slurm-ft", "llama3-like", "custom")


def builtin_policy(name: str) -> Policy:
    if name == "slurm":
        return SLURM
    if name == "llama3-like":
        return LLAMA3_LIKE
    if name == "slurm-ft":
        return slurm_ft_policy()
    raise UsageError(f"unknown policy {name!r} (known: {', '.join(POLICIES)}; 'custom' needs --policy-file)")


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise UsageError(f"unknown profile {name!r} (known: {', '.join(sorted(PROFILES))}; "
                         f"or give --profile-file FILE)") from None


# --- custom profiles and policies from YAML mappings -------------------------------------------------

def _number(data: Mapping[str, Any], key: str, where: str, *, positive: bool = False, integer: bool = False,
            default: Any = None) -> Any:
    if key not in data:
        if default is not None:
            return default
        raise UsageError(f"{where}: missing key {key}")
    v = data[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise UsageError(f"{where}: {key} must be a{'n integer' if integer else ' number'}, not {v!r}")
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise UsageError(f"{where}: {key} must be {'positive' if positive else 'zero or more'}, got {v!r}")
    return v


def _check_keys(data: Any, allowed: AbstractSet[str], where: str) -> None:
    if not isinstance(data, dict):
        raise UsageError(f"{where}: must be a mapping")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise UsageError(f"{where}: unknown key {unknown[0]} (valid: {', '.join(sorted(allowed))})")


def profile_from_dict(data: Any, where: str) -> Profile:
    """A profile from YAML: name, days, gpus, gpus_per_node, classes: [{name, count, replace, kind}];
    replace is true/false or the share (0..1) of the class's faults that need a node swap."""
    _check_keys(data, {"name", "days", "gpus", "gpus_per_node", "classes", "source"}, where)
    classes = data.get("classes")
    if not isinstance(classes, list) or not classes:
        raise UsageError(f"{where}: classes must be a non-empty list")
    out = []
    for i, c in enumerate(classes):
        cw = f"{where}: classes[{i}]"
        _check_keys(c, {"name", "count", "replace", "kind", "note"}, cw)
        rep = c.get("replace", False)
        if isinstance(rep, bool):
            rep = 1.0 if rep else 0.0
        elif not isinstance(rep, (int, float)) or not 0 <= rep <= 1:
            raise UsageError(f"{cw}: replace must be true, false or a share between 0 and 1, not {rep!r}")
        kind = c.get("kind", "crash")
        if kind not in KINDS:
            raise UsageError(f"{cw}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
        out.append(FailureClass(str(c.get("name", f"class {i}")), _number(c, "count", cw, integer=True),
                                float(rep), kind, str(c.get("note", ""))))
    if sum(c.count for c in out) == 0:
        raise UsageError(f"{where}: the class counts add up to zero")
    gpus = _number(data, "gpus", where, positive=True, integer=True)
    gpn = _number(data, "gpus_per_node", where, positive=True, integer=True, default=8)
    return Profile(str(data.get("name", "custom")), float(_number(data, "days", where, positive=True)),
                   gpus, gpn, tuple(out), str(data.get("source", where)))


def policy_from_dict(data: Any, where: str) -> Policy:
    """A policy from YAML: detect_s: {crash, node, hang}, requeue_s, swap_s, optional restart_s."""
    _check_keys(data, {"name", "detect_s", "requeue_s", "swap_s", "restart_s", "source"}, where)
    det = data.get("detect_s")
    _check_keys(det, set(KINDS), f"{where}: detect_s")
    for k in KINDS:
        _number(det, k, f"{where}: detect_s")
    restart = _number(data, "restart_s", where) if "restart_s" in data else None
    return Policy(str(data.get("name", "custom")), float(det["crash"]), float(det["node"]), float(det["hang"]),
                  float(_number(data, "requeue_s", where)), float(_number(data, "swap_s", where)),
                  None if restart is None else float(restart), str(data.get("source", where)))


# --- figures measured by bench/recovery.py --json ------------------------------------------------------

_DETECT_KEYS = ("detect_s", "detection_s", "detect", "detection")
_RECOVERY_KEYS = ("recovery_s", "recover_s", "recovery", "total_s")


def _p50(obj: Any) -> Optional[float]:
    if isinstance(obj, bool):
        return None
    if isinstance(obj, (int, float)):
        return float(obj)
    if isinstance(obj, dict):
        for k in ("p50", "median", "p50_s", "median_s"):
            if isinstance(obj.get(k), (int, float)) and not isinstance(obj.get(k), bool):
                return float(obj[k])
    return None


def _find(data: Any, keys: Tuple[str, ...], flat: Tuple[str, ...]) -> Optional[float]:
    """Look for keys at the top level, then one level down (e.g. {"summary": {...}})."""
    levels = [data] + [v for v in data.values() if isinstance(v, dict)]
    for level in levels:
        for k in flat:
            v = _p50(level.get(k))
            if v is not None:
                return v
        for k in keys:
            if k in level:
                v = _p50(level[k])
                if v is not None:
                    return v
    return None


def recovery_figures(text: str, where: str) -> Tuple[float, float, str]:
    """(detection p50 s, recovery p50 s, what was read) from the JSON `bench/recovery.py --json` writes.

    Accepted shapes: {"detect_s": {"p50": 0.8}, "recovery_s": {"p50": 4.9}}, flat keys
    detect_p50_s / recovery_p50_s, or the same one level down. A file with only the whole
    fault-to-resume time ({"fault_to_resume_s": {"p50": 6.1}}) gives detection 0 and that time as the
    recovery, so that detection is counted once, inside it."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{where}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a JSON object")
    det = _find(data, _DETECT_KEYS, ("detect_p50_s", "detection_p50_s"))
    rec = _find(data, _RECOVERY_KEYS, ("recovery_p50_s", "recover_p50_s", "total_p50_s"))
    if det is not None and rec is not None:
        what = f"detection p50 {det:g} s, recovery p50 {rec:g} s"
    else:
        total = _find(data, ("fault_to_resume_s", "fault_to_resume"), ("fault_to_resume_p50_s",))
        if total is None:
            missing = "detect_s.p50" if det is None else "recovery_s.p50"
            raise UsageError(f"{where}: no {missing} figure (expected keys detect_s and recovery_s with a p50, "
                             f"or fault_to_resume_s with a p50)")
        det, rec = 0.0, total
        what = f"fault-to-resume p50 {total:g} s taken as the recovery, detection included"
    if det < 0 or rec < 0:
        raise UsageError(f"{where}: negative figures")
    return det, rec, what
