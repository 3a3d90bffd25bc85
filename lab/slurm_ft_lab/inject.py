"""Fault injection for the lab: change a node's fake GPU state and log what the real driver would log.

Each lab node has `<labdir>/nodes/<node>/nvml.state` (read by the fake libnvidia-ml.so.1, format in
fake_nvml/fake_nvml.c; anyone may read it, as anyone may query NVML) and `<labdir>/nodes/<node>/kmsg`
(kernel log in /dev/kmsg record format; root only, as /dev/kmsg with kernel.dmesg_restrict=1).
A fault the real driver reports with an Xid also adds that Xid to the state's history, so NVML
event sets (the watcher) get it too. `heal` restores a healthy node and empties its kernel log,
as a repair and reboot would.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import psutil

from slurm_ft.config import load_config
from slurm_ft.errors import UsageError
from slurm_ft.fsutil import atomic_write, write_unread

DEFAULT_LAB_DIR = "/tmp/slurm-ft-lab"
LAB_DIR_ENV = "SLURM_FT_LAB"
DEFAULT_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)   # DGX H100; same table as fake_nvml.c
MAX_LINKS = 18
XID_HISTORY = 32        # Xids kept per GPU in the state (the library keeps up to 64)
# A node's kernel log is root's: a job's user cannot read it, as /dev/kmsg with kernel.dmesg_restrict=1
# (Debian's and Ubuntu's default). The fake driver state is not: any user may query NVML.
KMSG_MODE = 0o600
CPU_NODE_MARK = "cpu-node"      # in nodes/<node>/ of a CPU node (LabSpec.cpu_nodes): no fake GPUs to heal

CLOCK_EVENTS = {           # nvmlClocksEventReason* bits
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "power_brake": 0x80,
}

FAULTS = ("xid", "ecc_dbe", "remap_pending", "remap_failure", "nvlink_down", "nvlink_errors", "pcie_width",
          "gpu_lost", "clock_event", "slow", "temp", "proc", "hang", "driver_unloaded", "recovery_action",
          "ecc_sbe_rate")
RATE_UNITS = {"s": 60.0, "min": 1.0, "h": 1 / 60.0}     # --ecc-sbe-rate N/UNIT -> per minute
RECOVERY_ACTIONS = {"none": 0, "gpu_reset": 1, "node_reboot": 2, "drain_p2p": 3, "drain_and_reset": 4}
_RECOVERY_TEXT = {0: "None", 1: "GPU Reset Required", 2: "Node Reboot Required", 3: "Drain P2P",
                  4: "Drain and Reset"}
DRIVER_NOT_LOADED = 9   # NVML_ERROR_DRIVER_NOT_LOADED
NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data", "ecc_data")   # NVML_NVLINK_ERROR_DL_* order
# one --nvlink-errors adds these (DCGM fails a link on any replay/recovery growth, or CRC at 100+/s)
NVLINK_ERROR_STEP = {"replay": 1, "recovery": 1, "crc_flit": 100}


def lab_dir(explicit: Optional[str] = None) -> Path:
    """--dir, else $SLURM_FT_LAB, else /tmp/slurm-ft-lab."""
    return Path(explicit or os.environ.get(LAB_DIR_ENV) or DEFAULT_LAB_DIR)


def _fnv1a(text: str) -> int:
    h = 1469598103934665603
    for b in text.encode():
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def default_uuid(node: str, index: int) -> str:
    """The UUID fake_nvml.c gives GPU `index` of `node` when no state file names one."""
    key = f"{node or 'localhost'}:{index}"
    a = _fnv1a(key)
    b = (a * 31 + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    return f"GPU-{a >> 32:08x}-{(a >> 16) & 0xFFFF:04x}-{a & 0xFFFF:04x}-{b >> 48:04x}-{b & 0xFFFFFFFFFFFF:012x}"


def default_pci(index: int) -> str:
    return f"00000000:{DEFAULT_BUSES[index] if index < 8 else 0x10 + index:02x}:00.0"


@dataclass
class GpuState:
    index: int
    uuid: str
    pci: str
    lost: bool = False
    ecc_sbe_volatile: int = 0
    ecc_sbe_aggregate: int = 0
    ecc_dbe_volatile: int = 0
    ecc_dbe_aggregate: int = 0
    remap_corrected: int = 0
    remap_uncorrected: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    nvlink_down: List[int] = field(default_factory=list)
    nvlink_err: Dict[Tuple[int, str], int] = field(default_factory=dict)   # (link, counter) -> count
    pcie_gen: int = 5
    pcie_width: int = 16
    clock_events: int = 0
    slow: float = 1.0
    temp: int = 40
    power_w: float = 120.0
    hang_ms: int = 0
    recovery_action: int = 0
    ecc_sbe_rate: float = 0.0       # corrected ECC errors a minute, counted by the fake library since ...
    ecc_sbe_since: float = 0.0      # ... this unix time (on top of ecc_sbe_*)
    xids: List[Tuple[int, int]] = field(default_factory=list)     # (seq, code)
    procs: List[Tuple[int, int]] = field(default_factory=list)    # (pid, bytes)

    @property
    def kmsg_pci(self) -> str:
        """The PCI id as the driver prints it in Xid lines: 0000:18:00."""
        dom, bus, dev = self.pci.split(".")[0].split(":")[-3:]
        return f"{int(dom, 16):04x}:{bus}:{dev}"

    def lines(self) -> List[str]:
        i = self.index
        out = [f"gpu {i} uuid {self.uuid}", f"gpu {i} pci {self.pci}"]
        scalars = [("lost", int(self.lost)), ("ecc_sbe_volatile", self.ecc_sbe_volatile),
                   ("ecc_sbe_aggregate", self.ecc_sbe_aggregate), ("ecc_dbe_volatile", self.ecc_dbe_volatile),
                   ("ecc_dbe_aggregate", self.ecc_dbe_aggregate), ("remap_corrected", self.remap_corrected),
                   ("remap_uncorrected", self.remap_uncorrected), ("remap_pending", int(self.remap_pending)),
                   ("remap_failure", int(self.remap_failure)), ("pcie_gen", self.pcie_gen),
                   ("pcie_width", self.pcie_width), ("clock_events", hex(self.clock_events)),
                   ("slow", f"{self.slow:g}"), ("temp", self.temp), ("power_w", f"{self.power_w:g}"),
                   ("hang_ms", self.hang_ms), ("recovery_action", self.recovery_action)]
        out += [f"gpu {i} {k} {v}" for k, v in scalars]
        if self.ecc_sbe_rate:
            out.append(f"gpu {i} ecc_sbe_rate {self.ecc_sbe_rate:g} {self.ecc_sbe_since:.3f}")
        out += [f"gpu {i} nvlink_down {link}" for link in sorted(set(self.nvlink_down))]
        out += [f"gpu {i} nvlink_err {link} {NVLINK_COUNTERS.index(c)} {n}"
                for (link, c), n in sorted(self.nvlink_err.items())]
        out += [f"gpu {i} xid {seq} {code}" for seq, code in self.xids]
        out += [f"gpu {i} proc {pid} {mem}" for pid, mem in self.procs]
        return out


@dataclass
class NodeState:
    node: str
    gpus: List[GpuState]
    name: str = "NVIDIA H100 80GB HBM3"
    driver: str = "570.133.20"     # an R570 driver: the recovery-action field (R565+) the fake reports, and
                                   # what NVIDIA's ft_launcher needs before its node check looks at all
    nvlinks: int = MAX_LINKS
    init_error: int = 0

    @classmethod
    def healthy(cls, node: str, ngpus: int = 8) -> "NodeState":
        return cls(node, [GpuState(i, default_uuid(node, i), default_pci(i), temp=40 + i % 3) for i in range(ngpus)])

    def render(self) -> str:
        out = [f"# fake NVML state for {self.node}, written by slurm-ft lab (format: fake_nvml.c)",
               f"gpus {len(self.gpus)}", f"nvlinks {self.nvlinks}", f"name {self.name}", f"driver {self.driver}"]
        if self.init_error:
            out.append(f"init_error {self.init_error}")
        for g in self.gpus:
            out += g.lines()
        return "\n".join(out) + "\n"

    @classmethod
    def parse(cls, node: str, text: str) -> "NodeState":
        head: Dict[str, str] = {}
        per_gpu: Dict[int, List[Tuple[str, str]]] = {}
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, _, rest = line.partition(" ")
            if key == "gpu":
                idx, _, kv = rest.partition(" ")
                gkey, _, val = kv.partition(" ")
                per_gpu.setdefault(int(idx), []).append((gkey, val.strip()))
            else:
                head[key] = rest.strip()
        state = cls.healthy(node, int(head.get("gpus", 8)))
        state.name = head.get("name", state.name)
        state.driver = head.get("driver", state.driver)
        state.nvlinks = int(head.get("nvlinks", state.nvlinks))
        state.init_error = int(head.get("init_error", 0))
        for idx, items in per_gpu.items():
            if idx >= len(state.gpus):
                continue
            g = state.gpus[idx]
            g.nvlink_down, g.nvlink_err, g.xids, g.procs = [], {}, [], []
            for k, v in items:
                if k in ("uuid", "pci"):
                    setattr(g, k, v)
                elif k in ("lost", "remap_pending", "remap_failure"):
                    setattr(g, k, v not in ("0", ""))
                elif k == "clock_events":
                    g.clock_events = int(v, 0)
                elif k in ("slow", "power_w"):
                    setattr(g, k, float(v))
                elif k == "ecc_sbe_rate":
                    rate, since = (float(x) for x in v.split())
                    g.ecc_sbe_rate, g.ecc_sbe_since = rate, since
                elif k == "nvlink_down":
                    g.nvlink_down.append(int(v))
                elif k == "nvlink_err":
                    link, ctr, n = (int(x) for x in v.split())
                    g.nvlink_err[(link, NVLINK_COUNTERS[ctr])] = n
                elif k == "xid":
                    seq, code = v.split()
                    g.xids.append((int(seq), int(code)))
                elif k == "proc":
                    pid, _, mem = v.partition(" ")
                    g.procs.append((int(pid), int(mem or 0)))
                elif hasattr(g, k):
                    setattr(g, k, int(v))
        return state


# --- files -----------------------------------------------------------------------------------------

def node_dir(labdir: Path, node: str) -> Path:
    labdir = Path(labdir)
    d = labdir / "nodes" / node
    if not d.is_dir():
        if not (labdir / "nodes").is_dir():
            raise UsageError(f"no lab in {labdir} (start one with `slurm-ft lab up`, or pass --dir)")
        known = sorted(p.name for p in (labdir / "nodes").iterdir() if p.is_dir())
        hint = f"{known[0]}..{known[-1]}" if known else "none"
        raise UsageError(f"unknown lab node {node!r} in {labdir} (nodes: {hint})")
    return d


def _lab_gpus(labdir: Path) -> int:
    try:
        return int(json.loads((Path(labdir) / "lab.json").read_text()).get("gpus_per_node", 8))
    except (OSError, ValueError, AttributeError):
        return 8


@contextmanager
def _node_lock(labdir: Path, node: str):
    """Serialise read-modify-write of one node's state (two injections at once must both land)."""
    with open(node_dir(labdir, node) / ".inject.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def load_state(labdir: Path, node: str) -> NodeState:
    path = node_dir(labdir, node) / "nvml.state"
    try:
        return NodeState.parse(node, path.read_text())
    except FileNotFoundError:
        return NodeState.healthy(node, _lab_gpus(labdir))
    except ValueError as exc:
        raise UsageError(f"{path}: unreadable fake NVML state ({exc}); `slurm-ft lab heal {node}` rewrites it") from exc


def save_state(labdir: Path, state: NodeState) -> None:
    atomic_write(node_dir(labdir, state.node) / "nvml.state", state.render(), mode=0o644)


def init_node(labdir: Path, node: str, gpus: int = 8, durable: bool = True) -> Path:
    """Create a healthy node: state file and an empty kernel log. Returns the node's directory.
    durable=False: plain writes, for `lab up` before any daemon runs (2,112 nodes x 2 fsyncs is a minute)."""
    d = Path(labdir) / "nodes" / node
    d.mkdir(parents=True, exist_ok=True)
    if not durable:
        write_unread(d / "nvml.state", NodeState.healthy(node, gpus).render())
        write_unread(d / "kmsg", "")
        os.chmod(d / "kmsg", KMSG_MODE)
        return d
    atomic_write(d / "nvml.state", NodeState.healthy(node, gpus).render(), mode=0o644)
    atomic_write(d / "kmsg", "", mode=KMSG_MODE)
    return d


def health_state_file(labdir: Path, node: str) -> Optional[Path]:
    """The node's slurm-ft health state file: `health.state_file` of the lab's slurm-ft.yaml, with
    {node} filled in (nodes/<node>/state.json when the config cannot be read). None when it lies
    outside the lab directory: a heal never removes the real host's /run state."""
    labdir = Path(labdir)
    path = labdir / "nodes" / node / "state.json"
    cfg = labdir / "slurm-ft.yaml"
    if cfg.exists():
        try:
            hc = load_config(str(cfg)).health
            path = Path(hc.on(node, hc.state_file))
        except Exception:  # noqa: BLE001 - a broken lab config must not stop a heal; the default path stays
            pass
    try:
        path.resolve().relative_to(labdir.resolve())
    except ValueError:
        return None
    return path


def heal(labdir: Path, node: str) -> None:
    """Back to healthy GPUs (same count), an empty kernel log and no slurm-ft health state, as after
    repair and reboot. The reboot empties /run, where a real node keeps that state: stale findings
    would fail the next prolog, and a stale belief in a drain of ours would decide the next check."""
    with _node_lock(labdir, node):
        state_file = health_state_file(labdir, node)
        if state_file is not None:
            state_file.unlink(missing_ok=True)
            # the watcher's place in the kernel log (watch.py): a rebooted node's watcher starts at its end
            state_file.with_name(state_file.name + ".watch").unlink(missing_ok=True)
            # the watcher's soft-signal trends live beside it, in /run too: gone with the reboot
            state_file.with_name(state_file.name + ".soft").unlink(missing_ok=True)
        d = Path(labdir) / "nodes" / node
        if (d / CPU_NODE_MARK).exists():    # a CPU node: no GPUs to make healthy, only its kernel log
            if (d / "kmsg").stat().st_size:
                atomic_write(d / "kmsg", "", mode=KMSG_MODE)
            return
        try:
            ngpus = len(load_state(labdir, node).gpus)
        except UsageError:          # an unreadable state file: heal is how it gets fixed
            ngpus = _lab_gpus(labdir)
        d = Path(labdir) / "nodes" / node
        try:                        # already healthy: leave the files (and their mtimes) alone
            if (d / "nvml.state").read_text() == NodeState.healthy(node, ngpus).render() \
                    and (d / "kmsg").stat().st_size == 0:
                return
        except OSError:
            pass
        init_node(labdir, node, ngpus)


def heal_all(labdir: Path) -> List[str]:
    nodes_dir = Path(labdir) / "nodes"
    if not nodes_dir.is_dir():
        raise UsageError(f"no lab in {labdir} (start one with `slurm-ft lab up`, or pass --dir)")
    names = sorted(p.name for p in nodes_dir.iterdir() if p.is_dir())
    for n in names:
        heal(labdir, n)
    return names


# --- kernel log ------------------------------------------------------------------------------------

_XID_TEXT = {
    13: "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
    31: "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1c_00000000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000010",
    45: "Ch 00000010",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
    63: "Row Remapper: New row (0x00000000000a1b2c) marked for remapping, reset gpu to activate.",
    64: "Row Remapper Error: Failed to record row remapping in InfoROM.",
    74: "NVLink: fatal error detected on link {link}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).",
}


def _boot_time() -> float:
    return psutil.boot_time()


def _append_kmsg(path: Path, messages: List[str], now: float, prio: int = 4) -> List[str]:
    """Append records `<prio>,<seq>,<usec since boot>,-;<msg>` after the last sequence number in the file."""
    seq = 0
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                head = line.split(",", 2)
                if len(head) == 3 and head[1].isdigit():
                    seq = max(seq, int(head[1]))
    except FileNotFoundError:
        pass
    usec = max(0, int((now - _boot_time()) * 1e6))
    records = [f"{prio},{seq + i + 1},{usec},-;{msg}" for i, msg in enumerate(messages)]
    with open(path, "a", encoding="utf-8") as fh:   # one write: a follower never sees half a record
        fh.write("".join(r + "\n" for r in records))
    return records


def xid_message(g: GpuState, code: int, *, link: int = 0, pid: Optional[int] = None) -> str:
    text = _XID_TEXT.get(code, "fault injected by slurm-ft lab").format(link=link)
    owner = f"pid={pid}, name=python" if pid is not None else "pid='<unknown>', name=<unknown>"
    return f"NVRM: Xid (PCI:{g.kmsg_pci}): {code}, {owner}, {text}"


def _pcie_message(g: GpuState, width: int) -> str:
    # the PCI core's bandwidth notice (drivers/pci/pci.c, pcie_report_downtraining)
    gts = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0}.get(g.pcie_gen, 32.0)
    per_lane = gts * (0.8 if g.pcie_gen <= 2 else 128 / 130)
    return (f"pci {g.pci[4:]}: {per_lane * width:.3f} Gb/s available PCIe bandwidth, limited by {gts:.1f} GT/s "
            f"PCIe x{width} link at {g.pci[4:8]}:{int(g.pci[9:11], 16) - 1:02x}:00.0 (capable of {per_lane * 16:.3f} Gb/s with {gts:.1f} GT/s PCIe x16 link)")


@dataclass(frozen=True)
class Injected:
    node: str
    gpu: int
    fault: str
    summary: str
    kmsg: Tuple[str, ...] = ()


def inject(labdir: Path, node: str, fault: str, *, gpu: int = 0, value=None, log: bool = True,
           now: Optional[float] = None, driver: bool = True) -> Injected:
    """Apply one fault to GPU `gpu` of `node`. value: the Xid code, link, width, event name, factor or pid.
    `log`: write the driver's kernel-log line; `driver`: change the fake driver's state (False: the line
    is the only evidence, as for an Xid a watcher missed and NVML no longer reports)."""
    if fault not in FAULTS:
        raise UsageError(f"unknown fault {fault!r}; one of: {', '.join(FAULTS)}")
    labdir = Path(labdir)
    with _node_lock(labdir, node):
        return _inject(labdir, node, fault, gpu, value, log, time.time() if now is None else now, driver)


def _inject(labdir: Path, node: str, fault: str, gpu: int, value, log: bool, now: float,
            driver: bool = True) -> Injected:
    state = load_state(labdir, node)
    if not 0 <= gpu < len(state.gpus):
        raise UsageError(f"{node} has GPUs 0..{len(state.gpus) - 1}, not {gpu}")
    g = state.gpus[gpu]
    seq = max([int(now * 1e6)] + [s + 1 for x in state.gpus for s, _ in x.xids])   # increasing, survives heal
    msgs: List[str] = []
    xids: List[int] = []
    recovery_change = (0, 0)

    if fault == "xid":
        code = _int(value, "Xid code", 1, 10_000)
        xids.append(code)
        summary = f"Xid {code}"
    elif fault == "ecc_dbe":
        g.ecc_dbe_volatile += 1
        g.ecc_dbe_aggregate += 1
        xids.append(48)
        summary = f"double-bit ECC error (volatile uncorrected now {g.ecc_dbe_volatile}), Xid 48"
    elif fault == "remap_pending":
        g.remap_pending = True
        g.remap_uncorrected += 1
        xids.append(63)
        summary = "row remapping pending (needs a GPU reset), Xid 63"
    elif fault == "remap_failure":
        g.remap_failure = True
        xids.append(64)
        summary = "row remapping failure (RMA), Xid 64"
    elif fault == "nvlink_down":
        link = _int(value, "NVLink", 0, state.nvlinks - 1)
        if link not in g.nvlink_down:
            g.nvlink_down.append(link)
        xids.append(74)
        summary = f"NVLink {link} down, Xid 74"
    elif fault == "nvlink_errors":
        link = _int(value, "NVLink", 0, state.nvlinks - 1)
        for ctr, step in NVLINK_ERROR_STEP.items():
            g.nvlink_err[(link, ctr)] = g.nvlink_err.get((link, ctr), 0) + step
        counts = ", ".join(f"{c} {g.nvlink_err[(link, c)]}" for c in NVLINK_ERROR_STEP)
        summary = f"NVLink {link} error counters: {counts}"
    elif fault == "temp":
        g.temp = _int(value, "temperature", 0, 150)
        summary = f"temperature {g.temp} C"
    elif fault == "pcie_width":
        width = _int(value, "PCIe width", 1, 16)
        g.pcie_width = width
        msgs.append(_pcie_message(g, width))
        summary = f"PCIe link x{width} (max x16)"
    elif fault == "gpu_lost":
        g.lost = True
        xids.append(79)
        summary = "GPU lost (fallen off the bus), Xid 79"
    elif fault == "clock_event":
        if value not in CLOCK_EVENTS:
            raise UsageError(f"unknown clock event {value!r}; one of: {', '.join(CLOCK_EVENTS)}")
        g.clock_events |= CLOCK_EVENTS[value]
        summary = f"clock event {value} (reasons 0x{g.clock_events:x})"
    elif fault == "slow":
        try:
            factor = float(value)
        except (TypeError, ValueError):
            raise UsageError(f"--slow wants a factor between 0 and 1, not {value!r}") from None
        if not 0 < factor <= 1:
            raise UsageError(f"--slow wants a factor between 0 and 1, not {value!r}")
        g.slow = factor
        summary = f"SM clock at {factor:g} x max"
    elif fault == "hang":
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise UsageError(f"--hang wants seconds, not {value!r}") from None
        if not 0 <= seconds <= 3600:
            raise UsageError(f"--hang wants 0..3600 seconds, not {value!r}")
        g.hang_ms = int(seconds * 1000)
        summary = f"every NVML call on this GPU hangs {seconds:g} s"
    elif fault == "recovery_action":
        if value not in RECOVERY_ACTIONS:
            raise UsageError(f"unknown recovery action {value!r}; one of: {', '.join(RECOVERY_ACTIONS)}")
        old, g.recovery_action = g.recovery_action, RECOVERY_ACTIONS[value]
        xids.append(154)
        recovery_change = (old, g.recovery_action)
        summary = f"driver recovery action {value}, Xid 154"
    elif fault == "ecc_sbe_rate":
        per_min = rate_per_minute(value)
        _fold_sbe(g, now)
        g.ecc_sbe_rate, g.ecc_sbe_since = per_min, now
        summary = (f"corrected ECC errors at {per_min:g} a minute from now on (volatile corrected now "
                   f"{g.ecc_sbe_volatile})" if per_min else "corrected ECC errors stop")
    elif fault == "driver_unloaded":
        state.init_error = DRIVER_NOT_LOADED
        msgs.append("NVRM: The NVIDIA probe routine was not called for 8 device(s).")
        summary = "NVIDIA driver not loaded: nvmlInit fails on this node"
    else:  # proc
        pid = _int(value, "pid", 1, 2**31 - 1)
        g.procs.append((pid, 1 << 30))
        summary = f"compute process pid {pid} holds the GPU"

    for i, code in enumerate(xids):
        g.xids.append((seq + i, code))
        del g.xids[:-XID_HISTORY]
        link = g.nvlink_down[-1] if code == 74 and g.nvlink_down else 0
        if code == 154:
            a, b = recovery_change
            text = (f"GPU recovery action changed from 0x{a:x} ({_RECOVERY_TEXT.get(a, '?')}) "
                    f"to 0x{b:x} ({_RECOVERY_TEXT.get(b, '?')})")
            msgs.append(f"NVRM: Xid (PCI:{g.kmsg_pci}): 154, {text}")
            continue
        msgs.append(xid_message(g, code, link=link, pid=g.procs[0][0] if g.procs else None))
    if fault == "gpu_lost":
        msgs.append(f"NVRM: GPU {g.pci[4:]}: GPU has fallen off the bus.")
    if driver:
        save_state(labdir, state)
    records: List[str] = []
    if log and msgs:
        records = _append_kmsg(node_dir(labdir, node) / "kmsg", msgs, now)
    return Injected(node, gpu, fault, summary, tuple(records))


def rate_per_minute(value) -> float:
    """`600/min`, `10/s`, `36000/h` or a bare number (a minute) -> errors a minute."""
    text = str(value).strip()
    number, _, unit = text.partition("/")
    try:
        n = float(number)
    except ValueError:
        raise UsageError(f"--ecc-sbe-rate wants N/min (or N/s, N/h), not {value!r}") from None
    if unit and unit not in RATE_UNITS:
        raise UsageError(f"--ecc-sbe-rate: unit {unit!r} is not one of {', '.join(RATE_UNITS)}")
    if not 0 <= n <= 1e9 or n != n:
        raise UsageError(f"--ecc-sbe-rate wants 0 or more errors, not {value!r}")
    return n * RATE_UNITS[unit or "min"]


def _fold_sbe(g: GpuState, now: float) -> None:
    """What a rate counted so far goes into the counts (the library adds only what comes after `since`)."""
    if g.ecc_sbe_rate and now > g.ecc_sbe_since:
        n = int(g.ecc_sbe_rate * (now - g.ecc_sbe_since) / 60.0)
        g.ecc_sbe_volatile += n
        g.ecc_sbe_aggregate += n
    g.ecc_sbe_since = now


def _int(value, what: str, lo: int, hi: int) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{what} must be a whole number, not {value!r}") from None
    if not lo <= n <= hi:
        raise UsageError(f"{what} must be between {lo} and {hi}, not {n}")
    return n


def reset_gpu(labdir: Path, node: str, gpu: int) -> None:
    """What `nvidia-smi -r` does to one fake GPU: volatile errors, pending events, hangs and stuck links
    clear and a pending row remap is applied; what outlives a reset stays: a GPU off the bus (only a
    reboot brings it back), aggregate ECC and remap counts, a remap failure, a degraded PCIe link, slowness,
    and the kernel log (the driver's Xid lines stay until a reboot)."""
    with _node_lock(labdir, node):
        state = load_state(labdir, node)
        if not 0 <= gpu < len(state.gpus):
            raise UsageError(f"{node} has GPUs 0..{len(state.gpus) - 1}, not {gpu}")
        g = state.gpus[gpu]
        if g.lost:
            raise UsageError(f"{node} gpu{gpu} is off the bus: a reset cannot reach it")
        _fold_sbe(g, time.time())          # a rate goes on (the memory is as bad as before); the counts restart
        g.ecc_sbe_volatile = g.ecc_dbe_volatile = 0
        g.remap_pending = False
        g.nvlink_down, g.nvlink_err = [], {}
        g.clock_events = g.hang_ms = g.recovery_action = 0
        g.xids, g.procs = [], []
        save_state(labdir, state)
