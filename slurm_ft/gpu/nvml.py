"""GPU telemetry seam: one GpuSample per GPU, read through pynvml; and NVML Xid events for the watcher.

pynvml is imported inside the functions, so every command that does not read GPUs runs on a machine
without the NVIDIA driver or without nvidia-ml-py.

Error policy (the same for every query):
* NVMLError_NotSupported / FunctionNotFound -> the query name goes to `GpuSample.unsupported`,
  the field stays None; never a failure (Hopper has no retired pages, a PCIe card no NVLink, ...).
* NVMLError_GpuIsLost / Unknown -> the GPU is `lost` with the error text; nothing more is asked of it.
* any other NVMLError -> "query: error" in `GpuSample.errors`, the field stays None.
* no library / driver not loaded -> `NodeSample.nvml_error`, one clear sentence, no GPUs.

Cost: `include` picks the query groups. A quick check should leave out `nvlink_errors` (4 calls per
link: 576 on an 8 x 18-link node) and usually `nvlink`; see QUICK.
"""
from __future__ import annotations

import ctypes
import time
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple

from slurm_ft.errors import EnvironmentProblem
from slurm_ft.gpu.kmsg import normalize_pci
from slurm_ft.gpu.sample import EccCounts, GpuSample, NodeSample, NvLink, Pcie, RetiredPages, RowRemap, XidEvent

GROUPS = ("identity", "ecc", "remap", "nvlink", "nvlink_errors", "pcie", "clocks", "thermal", "power", "processes",
          "recovery")
ALL = GROUPS
QUICK = ("identity", "ecc", "remap", "pcie", "clocks", "thermal", "recovery")

# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION values: what the driver itself says the GPU needs
RECOVERY_ACTIONS = {0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset",
                    5: "recover_imex_domain", 6: "bus_reset", 7: "system_reboot"}

# NVML constants (stable across nvidia-ml-py releases; spelled out so this module imports without pynvml)
_VOLATILE, _AGGREGATE = 0, 1
_CORRECTED, _UNCORRECTED = 0, 1
_CLOCK_SM = 1
_TEMPERATURE_GPU = 0
_NVLINK_MAX_LINKS = 18          # NVLink4 (H100/H200); pynvml 13 says 36 for NVLink5, probed until refused
_DL_REPLAY, _DL_RECOVERY, _DL_CRC_FLIT, _DL_CRC_DATA = 0, 1, 2, 3
XID_EVENT = 0x8                 # nvmlEventTypeXidCriticalError
_WHOLE_GPU = 0xFFFFFFFF         # gpuInstanceId / computeInstanceId for "not a MIG instance"
_FI_RECOVERY_ACTION = 230       # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (R565+)
_NVML_SUCCESS, _NVML_NOT_SUPPORTED, _NVML_GPU_IS_LOST = 0, 3, 15


def _import_pynvml() -> Any:
    try:
        import pynvml   # lazy: nvidia-ml-py may be absent; commands that read no GPU must run without it
    except ImportError:
        return None
    return pynvml


def nvml_init_error(N: Any, exc: Exception) -> str:
    """One sentence for an admin: why NVML is not usable on this machine."""
    if isinstance(exc, N.NVMLError_LibraryNotFound):
        return ("NVML library libnvidia-ml.so.1 not found: no NVIDIA driver installed here "
                "(or its directory is not on the library path)")
    if isinstance(exc, N.NVMLError_DriverNotLoaded):
        return "NVIDIA kernel driver not loaded (`modprobe nvidia`, or check `dmesg` for why it failed)"
    if isinstance(exc, getattr(N, "NVMLError_LibRmVersionMismatch", ())):
        return "NVML library and kernel driver versions differ (driver upgraded without reboot?)"
    if isinstance(exc, getattr(N, "NVMLError_NoPermission", ())):
        return "no permission to open the NVIDIA devices (/dev/nvidia*)"
    return f"NVML initialisation failed: {exc}"


class _Lost(Exception):
    pass


class _GpuReader:
    """Asks one GPU, applying the error policy of the module docstring."""

    def __init__(self, N: Any, index: int):
        self.N = N
        self.index = index
        self.unsupported: List[str] = []
        self.errors: List[str] = []

    def call(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        N = self.N
        try:
            return fn(*args)
        except (N.NVMLError_NotSupported, N.NVMLError_FunctionNotFound):
            if name not in self.unsupported:
                self.unsupported.append(name)
        except (N.NVMLError_GpuIsLost, N.NVMLError_Unknown) as exc:
            raise _Lost(f"{name}: {exc}") from exc
        except N.NVMLLibraryMismatchError:
            if name not in self.unsupported:
                self.unsupported.append(name)
        except N.NVMLError as exc:
            self.errors.append(f"{name}: {exc}")
        return None


def _temperature(N: Any, h: Any) -> int:
    # nvmlDeviceGetTemperatureV is the current call; drivers before R535 only have the old one
    if hasattr(N, "nvmlDeviceGetTemperatureV"):
        try:
            return int(N.nvmlDeviceGetTemperatureV(h, _TEMPERATURE_GPU))
        except N.NVMLError_FunctionNotFound:
            pass
    return int(N.nvmlDeviceGetTemperature(h, _TEMPERATURE_GPU))


def _clock_events(N: Any, h: Any) -> int:
    try:
        return int(N.nvmlDeviceGetCurrentClocksEventReasons(h))
    except (N.NVMLError_FunctionNotFound, AttributeError):   # drivers before R535: the throttle name
        return int(N.nvmlDeviceGetCurrentClocksThrottleReasons(h))


def _read_gpu(N: Any, index: int, include: FrozenSet[str]) -> GpuSample:
    r = _GpuReader(N, index)
    fields: Dict[str, Any] = {}
    try:
        h = N.nvmlDeviceGetHandleByIndex(index)
    except (N.NVMLError_GpuIsLost, N.NVMLError_Unknown) as exc:
        return GpuSample(index=index, lost=True, error=f"handle: {exc}")
    except N.NVMLError as exc:
        return GpuSample(index=index, errors=(f"handle: {exc}",))
    try:
        if "identity" in include:
            fields["name"] = r.call("name", N.nvmlDeviceGetName, h) or ""
            fields["uuid"] = r.call("uuid", N.nvmlDeviceGetUUID, h) or ""
            pci = r.call("pci_info", N.nvmlDeviceGetPciInfo, h)
            bus = pci.busId if pci is not None else ""
            fields["pci_bus_id"] = bus.decode() if isinstance(bus, bytes) else bus
        if "ecc" in include:
            fields["ecc"] = _read_ecc(N, r, h)
        if "remap" in include:
            _read_memory_repair(N, r, h, fields)
        if "nvlink" in include or "nvlink_errors" in include:
            fields["nvlinks"] = _read_nvlinks(N, r, h, errors="nvlink_errors" in include)
        if "pcie" in include:
            fields["pcie"] = Pcie(
                gen=r.call("pcie_gen", N.nvmlDeviceGetCurrPcieLinkGeneration, h),
                max_gen=r.call("pcie_max_gen", N.nvmlDeviceGetMaxPcieLinkGeneration, h),
                width=r.call("pcie_width", N.nvmlDeviceGetCurrPcieLinkWidth, h),
                max_width=r.call("pcie_max_width", N.nvmlDeviceGetMaxPcieLinkWidth, h))
        if "clocks" in include:
            fields["clock_event_reasons"] = r.call("clock_event_reasons", _clock_events, N, h)
            fields["sm_clock_mhz"] = r.call("sm_clock", N.nvmlDeviceGetClockInfo, h, _CLOCK_SM)
            fields["sm_clock_max_mhz"] = r.call("sm_clock_max", N.nvmlDeviceGetMaxClockInfo, h, _CLOCK_SM)
        if "thermal" in include:
            fields["temperature_c"] = r.call("temperature", _temperature, N, h)
        if "power" in include:
            mw = r.call("power", N.nvmlDeviceGetPowerUsage, h)
            fields["power_w"] = mw / 1000.0 if mw is not None else None
        if "recovery" in include:
            fields["recovery_action"] = _read_recovery_action(N, r, h)
        if "processes" in include:
            procs = r.call("processes", N.nvmlDeviceGetComputeRunningProcesses, h)
            fields["processes"] = tuple(sorted(p.pid for p in procs)) if procs else ()
    except _Lost as exc:
        return GpuSample(index=index, lost=True, error=str(exc), unsupported=tuple(r.unsupported),
                         **{k: v for k, v in fields.items() if k in ("name", "uuid", "pci_bus_id")})
    return GpuSample(index=index, unsupported=tuple(r.unsupported), errors=tuple(r.errors), **fields)


def _read_recovery_action(N: Any, r: _GpuReader, h: Any) -> Optional[int]:
    """The driver's own verdict (R565+); older drivers answer per field with an error: not supported."""
    values = r.call("recovery_action", N.nvmlDeviceGetFieldValues, h, [_FI_RECOVERY_ACTION])
    if not values:
        return None
    v = values[0]
    if v.nvmlReturn == _NVML_SUCCESS:
        return int(v.value.uiVal)
    if v.nvmlReturn == _NVML_GPU_IS_LOST:
        raise _Lost("recovery_action: GPU is lost")
    if "recovery_action" not in r.unsupported:
        r.unsupported.append("recovery_action")
    return None


def _read_ecc(N: Any, r: _GpuReader, h: Any) -> Optional[EccCounts]:
    total = N.nvmlDeviceGetTotalEccErrors
    vu = r.call("ecc", total, h, _UNCORRECTED, _VOLATILE)
    if vu is None and "ecc" in r.unsupported:   # ECC off or not on this GPU: do not ask three more times
        return None
    return EccCounts(
        volatile_corrected=r.call("ecc", total, h, _CORRECTED, _VOLATILE),
        volatile_uncorrected=vu,
        aggregate_corrected=r.call("ecc", total, h, _CORRECTED, _AGGREGATE),
        aggregate_uncorrected=r.call("ecc", total, h, _UNCORRECTED, _AGGREGATE))


def _read_memory_repair(N: Any, r: _GpuReader, h: Any, fields: Dict[str, Any]) -> None:
    """Row remapping (Ampere and newer); retired pages only where remapping is not supported (Volta)."""
    rows = r.call("remapped_rows", N.nvmlDeviceGetRemappedRows, h)
    if rows is not None:
        corr, unc, pending, failure = rows
        fields["remap"] = RowRemap(corrected=corr, uncorrected=unc, pending=bool(pending), failure=bool(failure))
        return
    sbe = r.call("retired_pages", N.nvmlDeviceGetRetiredPages, h, 0)   # MULTIPLE_SINGLE_BIT_ECC_ERRORS
    if sbe is None:
        return
    dbe = r.call("retired_pages", N.nvmlDeviceGetRetiredPages, h, 1) or []  # DOUBLE_BIT_ECC_ERROR
    pending = r.call("retired_pages_pending", N.nvmlDeviceGetRetiredPagesPendingStatus, h)
    fields["retired"] = RetiredPages(single_bit=len(sbe), double_bit=len(dbe), pending=bool(pending))


def _read_nvlinks(N: Any, r: _GpuReader, h: Any, *, errors: bool) -> Tuple[NvLink, ...]:
    links: List[NvLink] = []
    max_links = max(_NVLINK_MAX_LINKS, getattr(N, "NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS))
    counters_ok = errors
    refused = False
    for link in range(max_links):
        try:
            state = N.nvmlDeviceGetNvLinkState(h, link)
        except (N.NVMLError_InvalidArgument, N.NVMLError_FunctionNotFound):
            break                      # past this GPU's last link
        except N.NVMLError_NotSupported:
            refused = True             # no NVLink at all, or this link is not wired: ask the next
            continue
        except (N.NVMLError_GpuIsLost, N.NVMLError_Unknown) as exc:
            raise _Lost(f"nvlink_state: {exc}") from exc
        except N.NVMLError as exc:
            r.errors.append(f"nvlink_state[{link}]: {exc}")
            continue
        crc = replay = recovery = None
        if counters_ok:
            ctr = N.nvmlDeviceGetNvLinkErrorCounter
            replay = r.call("nvlink_errors", ctr, h, link, _DL_REPLAY)
            if replay is None and "nvlink_errors" in r.unsupported:
                counters_ok = False      # Blackwell removed these counters: stop asking
            else:
                recovery = r.call("nvlink_errors", ctr, h, link, _DL_RECOVERY)
                flit = r.call("nvlink_errors", ctr, h, link, _DL_CRC_FLIT)
                data = r.call("nvlink_errors", ctr, h, link, _DL_CRC_DATA)
                crc = None if flit is None and data is None else (flit or 0) + (data or 0)
        links.append(NvLink(link=link, active=state == 1, crc_errors=crc, replay_errors=replay,
                            recovery_errors=recovery))
    if not links and refused:
        r.unsupported.append("nvlink")
    return tuple(links)


def read_node(node_name: str = "", *, include: Iterable[str] = ALL) -> NodeSample:
    """Read every GPU of this machine through NVML; never raises for NVML trouble (see the docstring)."""
    include = frozenset(include)
    unknown = include - set(GROUPS)
    if unknown:
        raise ValueError(f"unknown telemetry group(s): {', '.join(sorted(unknown))}; known: {', '.join(GROUPS)}")
    N = _import_pynvml()
    if N is None:
        missing = "pynvml is not installed (pip install nvidia-ml-py)"
        return NodeSample(node=node_name, nvml_error=missing, install_error=missing)
    try:
        N.nvmlInit()
    except N.NVMLError as exc:
        return NodeSample(node=node_name, nvml_error=nvml_init_error(N, exc))
    try:
        try:
            driver = N.nvmlSystemGetDriverVersion()
        except N.NVMLError:
            driver = ""
        try:
            count = N.nvmlDeviceGetCount()
        except N.NVMLError as exc:
            return NodeSample(node=node_name, driver_version=driver, nvml_error=f"cannot count GPUs: {exc}")
        gpus = tuple(_read_gpu(N, i, include) for i in range(count))
    finally:
        try:
            N.nvmlShutdown()
        except N.NVMLError:
            pass
    return NodeSample(node=node_name, gpus=gpus, driver_version=driver)


# --- NVML Xid events ---------------------------------------------------------------------------

class NvmlEventError(EnvironmentProblem):
    """NVML stopped delivering events (a GPU was lost, the driver went away): check the node now."""


def _address(handle: Any) -> Optional[int]:
    return ctypes.cast(handle, ctypes.c_void_p).value


class XidEventWatcher:
    """Xid events from NVML, for the node watcher.

        with XidEventWatcher() as w:
            while running:
                for ev in w.wait(500):      # [] on timeout
                    ...

    Registers nvmlEventTypeXidCriticalError (only where the GPU supports it) on every GPU.
    `registered` lists the GPU indexes that deliver events; `skipped` the ones that cannot.
    """

    def __init__(self, event_types: int = XID_EVENT):
        self.event_types = event_types
        self.registered: List[int] = []
        self.skipped: List[Tuple[int, str]] = []
        self._N = None
        self._set = None
        self._gpus: Dict[Optional[int], Tuple[int, str]] = {}   # handle address -> (index, normalised PCI id)

    def __enter__(self) -> "XidEventWatcher":
        N = _import_pynvml()
        if N is None:
            raise EnvironmentProblem("pynvml is not installed (pip install nvidia-ml-py)")
        try:
            N.nvmlInit()
        except N.NVMLError as exc:
            raise EnvironmentProblem(nvml_init_error(N, exc)) from exc
        self._N = N
        try:
            self._set = N.nvmlEventSetCreate()
            for i in range(N.nvmlDeviceGetCount()):
                self._register(N, i)
        except BaseException:
            self.close()
            raise
        return self

    def _register(self, N: Any, i: int) -> None:
        try:
            h = N.nvmlDeviceGetHandleByIndex(i)
            mask = self.event_types & N.nvmlDeviceGetSupportedEventTypes(h)
            if not mask:
                self.skipped.append((i, "Xid events not supported"))
                return
            N.nvmlDeviceRegisterEvents(h, mask, self._set)
            try:
                pci = normalize_pci(N.nvmlDeviceGetPciInfo(h).busId)
            except N.NVMLError:
                pci = ""
        except N.NVMLError as exc:
            self.skipped.append((i, str(exc)))
            return
        self._gpus[_address(h)] = (i, pci)
        self.registered.append(i)

    def wait(self, timeout_ms: int) -> List[XidEvent]:
        """Events that arrive within timeout_ms (all that are queued once the first one is in)."""
        N = self._N
        if N is None or self._set is None:
            raise RuntimeError("XidEventWatcher used outside its `with` block")
        events: List[XidEvent] = []
        wait_ms = int(timeout_ms)
        while True:
            try:
                data = N.nvmlEventSetWait_v2(self._set, wait_ms)
            except N.NVMLError_Timeout:
                return events
            except N.NVMLError as exc:
                if events:
                    return events
                raise NvmlEventError(f"waiting for NVML events failed: {exc}") from exc
            if data.eventType & XID_EVENT:
                index, pci = self._gpus.get(_address(data.device), (None, ""))
                if index is None:
                    try:
                        index = N.nvmlDeviceGetIndex(data.device)
                    except N.NVMLError:
                        index = None
                gi, ci = data.gpuInstanceId, data.computeInstanceId
                events.append(XidEvent(
                    xid=int(data.eventData), pci_bus_id=pci, gpu=index, source="nvml", timestamp=time.time(),
                    gpu_instance=None if gi == _WHOLE_GPU else gi, compute_instance=None if ci == _WHOLE_GPU else ci))
            wait_ms = 0                 # collect what else is queued, without waiting again

    def close(self) -> None:
        N, self._N = self._N, None
        if N is None:
            return
        if self._set is not None:
            try:
                N.nvmlEventSetFree(self._set)
            except N.NVMLError:
                pass
            self._set = None
        try:
            N.nvmlShutdown()
        except N.NVMLError:
            pass

    def __exit__(self, *exc: object) -> None:
        self.close()
