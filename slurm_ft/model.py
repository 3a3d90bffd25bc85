"""Small frozen dataclasses shared by every layer: what Slurm, NVML and the host look like to slurm-ft."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Optional, Tuple


# --- Slurm ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    name: str
    state: str                      # base state as Slurm prints it: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: frozenset = frozenset()  # DRAIN, NOT_RESPONDING, COMPLETING, MAINTENANCE, RESERVED, ...
    reason: str = ""
    reason_user: str = ""
    reason_time: str = ""
    partitions: Tuple[str, ...] = ()
    gres: str = ""
    cpus: int = 0
    real_memory_mb: int = 0
    comment: str = ""
    addr: str = ""                  # NodeAddr: where the node is reached (Slurm defaults it to the host name)

    @property
    def drained(self) -> bool:
        """DRAIN flag set (DRAINING while jobs run, DRAINED once idle)."""
        return "DRAIN" in self.flags

    @property
    def down(self) -> bool:
        return self.state in ("DOWN", "FAIL") or "NOT_RESPONDING" in self.flags or "FAIL" in self.flags

    @property
    def available(self) -> bool:
        """Healthy and schedulable: nothing an admin or a fault put on it."""
        return not (self.drained or self.down or "MAINTENANCE" in self.flags)


@dataclass(frozen=True)
class Job:
    job_id: int
    name: str
    state: str                      # PENDING, RUNNING, COMPLETED, FAILED, NODE_FAIL, CANCELLED, REQUEUED, ...
    reason: str = ""
    user: str = ""
    partition: str = ""
    nodes: Tuple[str, ...] = ()     # allocated nodes (expanded)
    num_nodes: int = 0
    excluded_nodes: Tuple[str, ...] = ()
    comment: str = ""
    admin_comment: str = ""         # only admins (and the job_submit policy) can set it
    restart_count: int = 0
    requeue: bool = False
    held: bool = False
    command: str = ""
    work_dir: str = ""
    std_out: str = ""
    submit_time: str = ""
    start_time: str = ""
    eligible_time: str = ""
    tres_per_node: str = ""
    batch_host: str = ""            # the node running the batch script
    exit_code: str = ""             # "exit:signal" as scontrol prints it
    priority: int = 0               # 0 while held


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: Tuple[str, ...] = ()     # expanded
    state: str = "UP"
    default: bool = False


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: Tuple[str, ...] = ()
    flags: frozenset = frozenset()
    start_time: str = ""
    end_time: str = ""
    state: str = ""


# --- health findings ------------------------------------------------------------------------------

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

    def to_dict(self) -> dict:
        return {
            "check": self.check,
            "severity": self.severity.value,
            "gpu": self.gpu,
            "code": self.code,
            "reason": self.reason,
            "action": self.action.value,
        }


# --- GPU telemetry (one sample per GPU, read through NVML; None means "not supported") -----------

@dataclass(frozen=True)
class EccCounts:
    volatile_corrected: Optional[int] = None
    volatile_uncorrected: Optional[int] = None
    aggregate_corrected: Optional[int] = None
    aggregate_uncorrected: Optional[int] = None


@dataclass(frozen=True)
class RowRemap:
    corrected: int = 0
    uncorrected: int = 0
    pending: bool = False
    failure: bool = False


@dataclass(frozen=True)
class RetiredPages:
    single_bit: int = 0
    double_bit: int = 0
    pending: bool = False


@dataclass(frozen=True)
class NvLink:
    link: int
    active: bool
    crc_errors: Optional[int] = None
    replay_errors: Optional[int] = None
    recovery_errors: Optional[int] = None


@dataclass(frozen=True)
class Pcie:
    gen: Optional[int] = None
    max_gen: Optional[int] = None
    width: Optional[int] = None
    max_width: Optional[int] = None


@dataclass(frozen=True)
class GpuSample:
    index: int
    uuid: str = ""
    pci_bus_id: str = ""            # as NVML prints it: 00000000:18:00.0
    name: str = ""
    lost: bool = False              # NVML said GPU_IS_LOST / UNKNOWN for this GPU
    error: str = ""                 # the NVML error text when lost
    ecc: Optional[EccCounts] = None
    remap: Optional[RowRemap] = None
    retired: Optional[RetiredPages] = None
    nvlinks: Tuple[NvLink, ...] = ()
    pcie: Optional[Pcie] = None
    clock_event_reasons: Optional[int] = None
    temperature_c: Optional[int] = None
    power_w: Optional[float] = None
    processes: Tuple[int, ...] = ()  # pids with a context on this GPU
    unsupported: Tuple[str, ...] = ()  # NVML queries that answered NOT_SUPPORTED
    sm_clock_mhz: Optional[int] = None
    sm_clock_max_mhz: Optional[int] = None
    errors: Tuple[str, ...] = ()    # "query: NVML error" for failures other than not-supported / lost
    recovery_action: Optional[int] = None  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (R565+): 0 none, 1 GPU reset,
                                           # 2 node reboot, 3 drain P2P, 4 drain and reset


@dataclass(frozen=True)
class XidEvent:
    xid: int
    pci_bus_id: str = ""            # normalised 0000:18:00 form, from the log line
    gpu: Optional[int] = None       # NVML index once mapped
    detail: str = ""                # rest of the line: pid, name, message
    source: str = "kmsg"            # kmsg | nvml | file
    timestamp: Optional[float] = None
    gpu_instance: Optional[int] = None
    compute_instance: Optional[int] = None
    kind: str = "xid"               # xid | fallen_off_bus (NVRM line without a code, read as 79) | sxid (NVSwitch)


@dataclass(frozen=True)
class NodeSample:
    """Everything one health-check run read from the node, handed to pure probes."""
    node: str
    gpus: Tuple[GpuSample, ...] = ()
    driver_version: str = ""
    nvml_error: str = ""            # library missing / driver not loaded: one clear message
    xids: Tuple[XidEvent, ...] = ()
    extra: dict = field(default_factory=dict)  # host readings keyed by probe name


# --- recovery (the controller's plan and journal) -------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One thing the controller will do, decided by the pure plan: `kind` names the act.

    kinds: open, requeue, quarantine, swap, wait, hold, exclude, start, confirm, give_up, poll
    """
    kind: str
    job_id: int
    incident_id: Optional[int] = None   # None only for `open`
    nodes: Tuple[str, ...] = ()         # the failed nodes
    spares: Tuple[str, ...] = ()        # spares taken (swap)
    partition: str = ""
    hold: bool = False                  # requeue held (waiting for a spare, or giving up)
    num_nodes: Optional[int] = None     # shrink to this size (elastic job, short pool)
    reason: str = ""                    # why, for people (journal detail, logs)
    restart_count: Optional[int] = None  # open: the run the fault hit, when Slurm has restarted the job since


@dataclass(frozen=True)
class Placement:
    """Where one run of a job (its restart count) was seen RUNNING, and when first (the controller's journal)."""
    job_id: int
    restart_count: int
    nodes: Tuple[str, ...]
    seen_at: float


@dataclass(frozen=True)
class StepRecord:
    """A step as the journal holds it: intent written before acting, result after."""
    name: str
    intent_at: float
    done_at: Optional[float] = None
    outcome: str = ""                   # "" = intent only (crashed or in progress), ok, skipped, failed
    detail: str = ""


@dataclass(frozen=True)
class Incident:
    """One fault of one fault-tolerant job, from detection to the job running again."""
    id: int
    job_id: int
    status: str                         # open, waiting, recovered, gave_up, abandoned
    nodes: Tuple[str, ...]              # failed nodes
    faults: Tuple[str, ...] = ()        # the node reasons (drain reason or state) at detection
    partition: str = ""
    spares: Tuple[str, ...] = ()
    restart_count: int = 0              # the job's restart count when the incident opened
    job_nodes: int = 0                  # the job's node count when the incident opened
    shrink_to: Optional[int] = None
    ckpt_step: Optional[int] = None     # latest complete checkpoint step when opened (progress check)
    opened_at: float = 0.0
    fault_at: Optional[float] = None    # when the node was marked failed (drain time), if known
    closed_at: Optional[float] = None
    note: str = ""
    steps: Tuple[StepRecord, ...] = ()

    @property
    def open(self) -> bool:
        return self.closed_at is None

    def done(self, name: str) -> bool:
        return any(s.name == name and s.outcome in ("ok", "skipped") for s in self.steps)

    def step(self, name: str) -> Optional[StepRecord]:
        found = [s for s in self.steps if s.name == name]
        return found[-1] if found else None
