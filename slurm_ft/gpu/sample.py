"""One read of a node: its GPUs (NVML), kernel log (Xid events) and host (the readers its checks name),
handed to the pure probes. None in a field means "not supported" or "not read"."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple, Type, TypeVar


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


R = TypeVar("R")


@dataclass(frozen=True)
class HostReadings:
    """What the host readers a run's checks name returned (node/host.py READERS), by reader name. Each
    reading is a typed value its reader defines; a probe asks for the type it expects."""
    by_reader: Mapping[str, object] = field(default_factory=dict)

    def of(self, reader: str, kind: Type[R]) -> Optional[R]:
        got = self.by_reader.get(reader)
        return got if isinstance(got, kind) else None


@dataclass(frozen=True)
class NodeSample:
    """Everything one health-check run read from the node, handed to pure probes."""
    node: str
    gpus: Tuple[GpuSample, ...] = ()
    driver_version: str = ""
    nvml_error: str = ""            # library missing / driver not loaded: one clear message
    install_error: str = ""         # slurm-ft's own install is broken (a package missing): never a drain
    xids: Tuple[XidEvent, ...] = ()
    host: HostReadings = field(default_factory=HostReadings)
    # check -> why a source it needs could not be read: an `error` finding for that check, never a drain
    unread: Mapping[str, str] = field(default_factory=dict)
