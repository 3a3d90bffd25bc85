"""One read of a node's GPUs (NVML) and kernel log (Xid events), handed to the pure probes. None in a
field means "not supported" or "not read"."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple


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
    # written where only the kernel writes (gpu/kmsg.py); False: a syslog line, which anyone's
    # `logger -t kernel` can write: reported, drains only when NVML reports the same Xid
    trusted: bool = True


@dataclass(frozen=True)
class NodeSample:
    """Everything one health-check run read from the node, handed to pure probes."""
    node: str
    gpus: Tuple[GpuSample, ...] = ()
    driver_version: str = ""
    nvml_error: str = ""            # library missing / driver not loaded: one clear message
    xids: Tuple[XidEvent, ...] = ()
    extra: Dict[str, Any] = field(default_factory=dict)  # host readings keyed by probe name

