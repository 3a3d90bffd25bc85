"""YAML -> typed, frozen config. Unknown keys and wrong types are errors that name the file and key.

Each part of slurm-ft owns one section dataclass here; `load_config` builds them all, filling defaults
for absent keys. The file must not be writable by others (these programs run as root). Every rule runs
through one Problems: a command's load raises at the first error, `slurm-ft config check`
(config_check.py) collects them all.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import functools
import logging
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List, Mapping, Optional, Tuple, Type, TypeVar

import yaml

from slurm_ft import vocab
from slurm_ft.errors import ConfigError, UsageError
from slurm_ft.fsutil import refuse_unsafe

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

log = logging.getLogger(__name__)

DEFAULT_PATH = "/etc/slurm-ft/slurm-ft.yaml"
ENV_VAR = "SLURM_FT_CONFIG"
TRUST_MODES = ("auto", "admin_comment", "comment")   # job/trust.py: which job field holds the FT tag


@dataclass(frozen=True)
class SoftSignals:
    """Soft signals of one node type (node/soft.py; docs/health.md, "Soft signals"): trends of what the
    watcher reads every health.soft_period_s, judged per GPU. Each one found is a warn finding that asks for
    a planned swap (node/planned.py: a graceful drain within lifecycle.planned_swaps_per_hour, the jobs move
    at their next checkpoint), never a fault drain. 0 turns one off."""
    window_s: float = 3600.0           # the counts below are over this window
    ecc_corrected: int = 1000          # corrected (single-bit) ECC errors added on one GPU
    xid_contained: int = 3             # hardware Xids of the catalog's warn class on one GPU (contained ECC 94,
                                       # row-remap event 63, high SBE rate 92, ...)
    nvlink_replay: int = 1             # NVLink replay + recovery errors added on one GPU (DCGM fails at 1 a minute)
    nvlink_crc: int = 6000             # NVLink CRC errors added on one GPU (a minute at DCGM's fail rate, 100/s)
    clock_window_s: float = 600.0      # clock readings are judged over this window (GPUD's 10 minutes) ...
    clock_event_share: float = 0.6     # ... HW slowdown, HW thermal or power brake in this share of them (GPUD)
    clock_slow_ratio: float = 0.5      # ... or the SM clock below this share of its max with no reason reported
    # fail findings this node type takes by planned swap instead of a fault drain: the driver asks to drain
    # the GPU's work first (recovery actions drain_p2p, drain_and_reset); REMAP_PENDING may join them (NVIDIA:
    # a pending remap does not affect further work; the reset can wait)
    planned_codes: Tuple[str, ...] = ("GPU_RECOVERY_DRAIN_P2P", "GPU_RECOVERY_DRAIN_RESET")
    straggler_ratio: float = 0.7       # a node of a hot-spare job below this share of the others' median speed
                                       # (its ranks' step compute time, slurm_ft.progress(busy_s=)) ...
    straggler_window_s: float = 300.0  # ... this long: the job swaps it out at a checkpoint


@dataclass(frozen=True)
class NodeType:
    """What a healthy node of one type looks like (0 for a count means "do not check")."""
    gpus: int = 8
    nvlinks_per_gpu: int = 18
    pcie_gen: int = 5
    pcie_width: int = 16
    tflops_bf16: float = 0.0        # expected burn-in matmul TFLOPS per GPU; 0 = compare within node only
    ib_ports: int = 0               # InfiniBand ports that must be ACTIVE/LinkUp; 0 = no IB check
    ib_rate_gbps: int = 0           # ... at this rate or better; 0 = any rate
    soft: SoftSignals = field(default_factory=SoftSignals)


@dataclass(frozen=True)
class Thresholds:
    temperature_warn_c: int = 85
    temperature_fail_c: int = 95
    ecc_corrected_volatile_warn: int = 1000
    remap_uncorrectable_warn: int = 512      # DCGM_LIMIT_MAX_ROW_REMAP_UNCORRECTABLE
    retired_pages_fail: int = 63             # DCGM_LIMIT_MAX_RETIRED_PAGES
    nvlink_crc_errors_warn: int = 100
    nvlink_replay_errors_warn: int = 100
    nvlink_recovery_errors_warn: int = 1
    xid_app_recurrence_warn: int = 3         # same app-class XID on one GPU in this many jobs -> warn
    clock_event_samples: int = 5             # full level: HW slowdown in every one of these samples -> fail
    clock_event_window_s: float = 2.0        # ... taken over this many seconds
    disk_free_fail_pct: float = 5.0
    disk_free_warn_pct: float = 10.0
    burnin_relative_min: float = 0.9   # a GPU below this share of the node's best fails burn-in
    burnin_absolute_min: float = 0.8   # ... or below this share of the node type's expected TFLOPS


@dataclass(frozen=True)
class BurninConfig:
    seconds: float = 10.0            # stress time per GPU
    matrix_n: int = 8192             # square bf16 matmul size on a real GPU
    backend: str = "auto"            # auto | torch | cupy | dcgmi | lab | none


@dataclass(frozen=True)
class HealthConfig:
    node_types: Dict[str, NodeType] = field(default_factory=lambda: {"default": NodeType()})
    node_type_of: Dict[str, str] = field(default_factory=dict)   # hostlist expression or glob -> type name
    thresholds: Thresholds = field(default_factory=Thresholds)
    deadline_s: Dict[str, float] = field(default_factory=lambda: {
        "quick": 5.0, "prolog": 20.0, "epilog": 30.0, "full": 120.0, "burnin": 900.0})
    levels: Dict[str, Tuple[str, ...]] = field(default_factory=dict)  # level -> checks, overrides the built-in
    disk_paths: Tuple[str, ...] = ("/tmp",)
    sysfs_root: str = "/"
    kmsg_path: str = "/dev/kmsg"
    xid_lookback_s: float = 7200.0
    state_file: str = "/run/slurm-ft/node-state.json"
    # programs (full paths of root-owned executables; a bare name: such a file in a system directory)
    # allowed to hold a GPU between jobs: node/probes/processes.py
    ignore_processes: Tuple[str, ...] = ("/usr/bin/nvidia-persistenced", "/usr/bin/nv-hostengine", "/usr/bin/dcgmi",
                                         "/usr/bin/nvidia-smi")
    process_grace_s: float = 5.0     # epilog: a GPU process must still be there after this long to count
    burnin: BurninConfig = field(default_factory=BurninConfig)
    auto_resume: bool = True         # a healthy `check --drain` resumes a node that slurm-ft drained
    nvml_hung_drain_after: int = 3   # this many hung NVML checks in a row drain the node (NVML_HUNG); 0 = never
    fleet_view_max_age_s: float = 900.0  # unused since the hooks read the count when they fail a node; old configs load
    soft_period_s: float = 60.0      # `watch` reads the soft signals (node types' `soft`) this often; 0 = never
    # `watch`'s textfile for node_exporter (node/liveness.py): its loop, each check's result; "" = none
    metrics_path: str = "/var/lib/prometheus/node-exporter/slurm_ft_node.prom"

    # kmsg_path, state_file, disk_paths, sysfs_root and metrics_path may name the node ({node}): the lab's
    # nodes share a host
    def on(self, node: str, template: str) -> str:
        return template.replace("{node}", node)

    def type_of(self, node: str) -> Tuple[str, NodeType]:
        """(name, type) of the node type whose `node_type_of` pattern (hostlist expression or glob) names
        this node; "default" otherwise. An unknown type name or a bad hostlist: ConfigError naming the key."""
        for pattern, name in self.node_type_of.items():
            if _names(node, pattern):
                if name not in self.node_types:
                    raise ConfigError(f"health.node_type_of.{pattern}: unknown node type {name!r} "
                                      f"(defined: {', '.join(sorted(self.node_types))})")
                return name, self.node_types[name]
        return "default", self.node_types.get("default", NodeType())


def _names(node: str, pattern: str) -> bool:
    if any(c in pattern for c in "*?") or "[" not in pattern:
        return fnmatch.fnmatchcase(node, pattern) or node == pattern
    from slurm_ft.slurm.hostlist import expand   # lazy: only a node_type_of hostlist ("gpu[01-64]") needs it
    try:
        return node in expand(pattern)
    except UsageError as exc:   # the load refuses it first (_check_node_types): a Config built in code
        raise ConfigError(f"health.node_type_of.{pattern}: {exc}") from None


@dataclass(frozen=True)
class ControllerConfig:
    """The requeue controller (slurm-ft controller run|once); its journal lives in Config.state_dir."""
    interval_s: float = 5.0             # seconds between idle cycles of `controller run` (3 Slurm reads each);
                                        # a node that drains itself wakes it at once (wake_port)
    wake_port: int = 6830               # UDP port the controller listens on for nodes' munge-signed wakes
                                        # (slurm_ft/wake.py); 0: none sent, none heard (it polls only)
    wake_host: str = ""                 # where nodes send them: the controller's host; "" = SlurmctldHost[0]
    spare_partition: str = "spares"     # the reserved pool
    job_partitions: Tuple[str, ...] = ()  # partitions whose FT jobs are recovered; () = all but the pool
    slurm_fault_reasons: Tuple[str, ...] = vocab.SLURM_FAULT_REASONS
    poll_s: float = 0.1                 # re-read period while a recovery waits on Slurm
    cycle_budget_s: float = 60.0        # one cycle stops polling after this long (the next one goes on)
    running_timeout_s: float = 120.0    # a requeued job not running after this long is noted on its incident
    read_progress: bool = True          # read the latest checkpoint step (max-restarts counts only no-progress faults)
    ckpt_scan_s: float = 5.0            # per job: a checkpoint scan not done by then holds that job (never others)
    unresponsive_grace_s: float = 60.0  # NOT_RESPONDING (not DOWN) is a fault only after this long
    wave_nodes: int = 8                 # this many nodes stopping within wave_window_s: an outage, not faults
    wave_window_s: float = 120.0
    wave_settle_s: float = 60.0         # a wave holds its members back until this long after the last came back
    restore_after_s: float = 30.0       # a node quarantined for not answering goes to validation after answering this long
    trust: str = "auto"                 # the job field holding the FT tag: one of TRUST_MODES
                                        # (auto: admin_comment where slurmctld runs job_submit/lua)
    # `controller run`'s liveness textfile (fleet/recovery/liveness.py), beside the sweep's; "" = none
    metrics_path: str = "/var/lib/prometheus/node-exporter/slurm_ft_controller.prom"


REMEDIATION_MODES = ("off", "dry_run", "on")
REMEDIATION_ACTIONS = ("reset_gpu", "reboot", "retest", "rma", "manual")


@dataclass(frozen=True)
class RemediationConfig:
    """What the sweep does to a quarantined node by itself (fleet/lifecycle/remedy_plan.py, docs/remediation.md)."""
    mode: str = "off"                   # off | dry_run (say what it would do) | on
    actions: Dict[str, str] = field(default_factory=dict)   # code -> reset_gpu|reboot|retest|rma|manual;
                                        # an Xid's default is the catalog's action column, other codes: manual
    max_attempts: Dict[str, int] = field(default_factory=lambda: {"reset_gpu": 2, "reboot": 1})
    window_days: float = 30.0           # attempts counted within (since the last release from RMA)
    reboot_timeout_s: float = 1800.0    # a reboot not back by then is a failed remediation
    reset_command: Tuple[str, ...] = ("nvidia-smi", "-r", "-i")   # + the GPU index; run on the node
    reset_timeout_s: float = 120.0
    # the budget (docs/remediation.md): per pool (failure domain), repairs started and, apart, RMA listings
    # within budget_window_s: at most max(budget_nodes, budget_share x the pool's nodes), GKE node
    # auto-repair's max(3, 10 %) an hour; both 0 = no budget. Fleet-wide at most max_concurrent nodes
    # in remediation (rebooting, or reset/rebooted and not yet validated) at once; 0 = no cap.
    budget_nodes: int = 3
    budget_share: float = 0.1
    budget_window_s: float = 3600.0
    max_concurrent: int = 3


@dataclass(frozen=True)
class LifecycleConfig:
    """Node lifecycle: the drain-rate breaker, the lemon rule, sweeps, metrics (see docs/runbook.md)."""
    breaker_max_share: float = 0.1      # at most this share of all nodes drained by slurm-ft per window
    breaker_max_nodes: int = 0          # ... and at most this many (0 = no count limit, only the share)
    breaker_window_s: float = 3600.0
    lemon_incidents: int = 3            # K incidents (faults or failed validations) ...
    lemon_window_days: float = 30.0     # ... within W days put a node on the RMA list
    # the spare and job partitions are the controller's (controller.spare_partition, .job_partitions)
    validate_levels: Tuple[str, ...] = ("full", "burnin")   # run on a repaired node before it is a spare
    spare_recheck_levels: Tuple[str, ...] = ("full",)
    spare_recheck_s: float = 86400.0    # re-check an idle spare whose last pass is older; 0 = never
    validate_command: Tuple[str, ...] = ()  # argv that runs `check` on the node; () = this python -m slurm_ft
    validate_timeout_s: float = 1800.0  # time limit of the validation job
    validate_wait_s: float = 900.0      # how long one sweep waits for its validation jobs; later sweeps pick up
    quarantine_grace_s: float = 120.0   # leave a fresh slurm-ft drain to the controller this long
    maintenance_reservation: str = "slurm-ft-maint"   # prefix; one reservation per validated node
    pool_target: int = 0                # spares wanted; 0 = from `slurm-ft spares plan` when available
    metrics_path: str = "/var/lib/prometheus/node-exporter/slurm_ft.prom"
    remediation: RemediationConfig = field(default_factory=RemediationConfig)
    planned_swaps_per_hour: int = 2     # soft signals' graceful drains fleet-wide within an hour (counted from
                                        # Slurm's reasons, as the breaker counts); 0 = soft signals are only reported
    planned_wait_s: float = 1800.0      # a hot-spare job's supervisor waits this long for the checkpoint it asked
                                        # for, then swaps from its latest one
    job_backstop_s: float = 300.0       # a hot-spare job's supervisor reads its nodes from Slurm this often, for a
                                        # fault no notice told it of; slurmctld serves it as a read of every node


@dataclass(frozen=True)
class PlanningConfig:
    """Inputs of `slurm-ft spares plan|status` and `slurm-ft sim` that no flag gave (see docs/planning.md)."""
    profile: str = "llama3"                     # failure profile, used when no rate below is set
    node_mtbf_hours: Optional[float] = None     # or: one node's mean time between failures
    interruptions_per_day: Optional[float] = None   # or: a rate observed ...
    at_gpus: Optional[int] = None               # ... on this many GPUs
    replace_fraction: Optional[float] = None    # share of faults that take a node out; None = the profile's
    repair_hours: float = 72.0                  # time to return a failed node to service
    target: float = 0.999                       # P(no more nodes out than spares)
    checkpoint_cost_s: float = 10.0             # blocking part of one checkpoint save
    restart_s: float = 300.0                    # fault to training again (ETTR of the plan)
    domains: Dict[str, str] = field(default_factory=dict)   # failure domain -> its nodes (hostlist)
    domain_outage_window_s: float = 600.0       # >= 2 nodes of a domain faulting within this: one outage


@dataclass(frozen=True)
class SlurmConfig:
    """How slurm-ft reaches Slurm (slurm_ft.slurm.client)."""
    conf: str = ""                  # slurm.conf to use (SLURM_CONF); "" = Slurm's own default
    timeout_s: float = 30.0         # limit for each scontrol/sinfo/squeue/sbatch call
    backend: str = "auto"           # auto | commands | pyslurm


@dataclass(frozen=True)
class Config:
    path: Optional[str] = None
    state_dir: str = "/var/lib/slurm-ft"
    fleet_lock: str = ""            # the lock every partition/reservation change takes; "" = <state_dir>/fleet.lock
    # nodes slurm-ft never touches (a Slurm hostlist): checks report and never drain, the controller, the
    # sweep and remediation leave them be. Top level: it binds every part, so no section owns it.
    keep_off: str = ""
    health: HealthConfig = field(default_factory=HealthConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    lifecycle: LifecycleConfig = field(default_factory=LifecycleConfig)
    planning: PlanningConfig = field(default_factory=PlanningConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)

    @property
    def keep_off_nodes(self) -> FrozenSet[str]:
        """The names `keep_off` expands to (the load checked the hostlist)."""
        return _expanded(self.keep_off)

    def keeps_off(self, node: str) -> bool:
        return node in self.keep_off_nodes


@functools.lru_cache(maxsize=8)
def _expanded(expr: str) -> FrozenSet[str]:
    if not expr.strip():
        return frozenset()
    from slurm_ft.slurm.hostlist import expand   # lazy: only a config with keep_off pays for the parser
    try:
        return frozenset(expand(expr))
    except UsageError as exc:   # the load refuses it first (_check_keep_off): a Config built in code
        raise ConfigError(f"keep_off: {exc}") from None


def load_config(path: Optional[str] = None) -> Config:
    """Read the config named by `path`, $SLURM_FT_CONFIG or the default path; absent default -> defaults."""
    p = _checked(path)
    return Config() if p is None else _parse(p)


def config_path(path: Optional[str] = None) -> Tuple[Path, bool]:
    """The config file a command reads, and whether it was named (an argument or $SLURM_FT_CONFIG)."""
    explicit = path or os.environ.get(ENV_VAR)
    return Path(explicit or DEFAULT_PATH), bool(explicit)


def _checked(path: Optional[str]) -> Optional[Path]:
    """The config file to read, its ownership checked; None: no file at the default path (defaults)."""
    p, explicit = config_path(path)
    if not p.exists():
        if explicit:
            raise ConfigError(f"{p}: config file not found")
        return None
    if p.is_dir():      # before the permission advice: `chmod o-w /tmp` would break the host
        raise ConfigError(f"{p}: is a directory, not a config file")
    refuse_unsafe(p, "config file")
    refuse_unsafe(p.resolve().parent, "config directory")   # a world-writable dir lets others swap the file
    return p


class ConfigCache:
    """load_config for a process asked again and again (the watcher answering its node's hooks): the
    file is parsed again only when it changed (inode, size, mtime, ctime); who owns it and its directory
    is checked every time, as load_config does."""

    def __init__(self) -> None:
        self._key: Optional[Tuple[str, int, int, int, int]] = None
        self._config = Config()

    def load(self, path: Optional[str] = None) -> Config:
        p = _checked(path)
        if p is None:
            return Config()
        st = p.stat()
        key = (str(p), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key != self._key:
            self._config, self._key = _parse(p), key
        else:               # as a fresh load would: a served hook's stderr is its own process's
            for w in _warnings(self._config, str(p)):
                log.warning("%s", w)
        return self._config


class Problems:
    """What one config file breaks. A command's load raises at the first error (collect=False); `slurm-ft
    config check` collects every error and warning. Each message names the file and the dotted key."""

    def __init__(self, collect: bool = False) -> None:
        self.collect = collect
        self.errors: List[str] = []
        self.warnings: List[str] = []

    def error(self, message: str) -> None:
        if not self.collect:
            raise ConfigError(message)
        self.errors.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)


def parse_collecting(p: Path, problems: Problems) -> Config:
    """The file's Config, its errors and warnings gathered in `problems` (`slurm-ft config check`); a
    file that is no YAML mapping at all still raises ConfigError."""
    return _parse(p, problems)


def _parse(p: Path, problems: Optional[Problems] = None) -> Config:
    """The file's Config; its errors go to `problems` (by default: raised at the first one)."""
    problems = problems or Problems()
    try:
        data = yaml.load(p.read_text(), Loader=_Loader) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{p}:{where} is not valid YAML: {getattr(exc, 'problem', exc)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read the config file: {getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: top level must be a mapping, not {type(data).__name__}")
    file = str(p)
    cfg = dataclasses.replace(build(Config, data, file, "", problems), path=file)
    _check_levels(cfg, file, problems)
    if cfg.controller.trust not in TRUST_MODES:
        problems.error(f"{p}: controller.trust must be one of {', '.join(TRUST_MODES)}, "
                       f"not {cfg.controller.trust!r}")
    _check_remediation(cfg.lifecycle.remediation, file, problems)
    _check_ignore_processes(cfg.health, file, problems)
    _check_domains(cfg.planning, file, problems)
    _check_soft(cfg.health, file, problems)
    if cfg.lifecycle.job_backstop_s < MIN_JOB_BACKSTOP_S:
        problems.error(f"{p}: lifecycle.job_backstop_s must be at least {MIN_JOB_BACKSTOP_S:g} seconds "
                       f"(each read is one of every node), not {cfg.lifecycle.job_backstop_s:g}")
    _check_node_types(cfg.health, file, problems)
    _check_keep_off(cfg, file, problems)
    _check_ranges(cfg, file, problems)
    _check_paths(cfg, file, problems)
    if cfg.slurm.backend not in SLURM_BACKENDS:
        problems.error(f"{p}: slurm.backend: {cfg.slurm.backend!r} is not one of {', '.join(SLURM_BACKENDS)}")
    for w in _warnings(cfg, file):
        problems.warn(w)
        if not problems.collect:
            log.warning("%s", w)
    return cfg


def _warnings(cfg: Config, file: str) -> List[str]:
    """What loads but a site should hear of at every load (a ConfigCache's too)."""
    lc = cfg.lifecycle
    if lc.breaker_max_share == 0 and lc.breaker_max_nodes == 0:
        return [f"{file}: lifecycle.breaker_max_share and breaker_max_nodes are both 0: NO drain-rate breaker, "
                f"slurm-ft may drain every node of the cluster"]
    return []


class _Loader(yaml.SafeLoader):
    """YAML 1.2's booleans: only true and false. PyYAML's YAML 1.1 also reads a bare on, off, yes or no as
    one, so `mode: on` (as the docs wrote it) reached a string key as True; a boolean key still takes
    those words (_BOOL_WORDS)."""


_BOOL_TAG = "tag:yaml.org,2002:bool"
_Loader.yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL_TAG]
                                   for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
# the YAML 1.1 words PyYAML reads as booleans, in the spellings it accepts
_BOOL_WORDS = {w: v for words, v in ((("yes", "on", "true"), True), (("no", "off", "false"), False))
               for word in words for w in (word, word.capitalize(), word.upper())}
SLURM_BACKENDS = ("auto", "commands", "pyslurm")     # slurm/backend.py: get_client


MIN_JOB_BACKSTOP_S = 10.0


_CODE_RE = re.compile(r"[A-Z][A-Z0-9_]{0,63}\Z")


def _check_soft(hc: "HealthConfig", file: str, problems: Problems) -> None:
    """planned_codes name finding codes (they end up in a drain reason); windows must hold time."""
    for name, nt in hc.node_types.items():
        where = f"health.node_types.{name}.soft"
        for i, code in enumerate(nt.soft.planned_codes):
            if not _CODE_RE.match(code):
                problems.error(f"{file}: {where}.planned_codes[{i}]: {code!r} is not a finding code "
                               f"(REMAP_PENDING, GPU_RECOVERY_DRAIN_RESET, ...)")
        for key in ("window_s", "clock_window_s", "straggler_window_s"):
            if getattr(nt.soft, key) == 0:
                problems.error(f"{file}: {where}.{key} must be more than 0 seconds")


def _check_domains(pc: "PlanningConfig", file: str, problems: Problems) -> None:
    if pc.domain_outage_window_s == 0:
        problems.error(f"{file}: planning.domain_outage_window_s must be more than 0 seconds")
    if not pc.domains:
        return
    try:
        expand_domains(pc.domains)
    except ValueError as exc:
        problems.error(f"{file}: planning.domains: {exc}")


DOMAIN_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}\Z")


def expand_domains(domains: Mapping[str, str]) -> Dict[str, List[str]]:
    """name -> its nodes, from the config's hostlists; ValueError with the reason (the caller names the
    file and key): a bad name, a bad or empty hostlist, a node in two domains."""
    from slurm_ft.slurm.hostlist import expand   # lazy: every check loads the config; only planning.domains needs it
    out: Dict[str, List[str]] = {}
    seen: Dict[str, str] = {}
    for name, expr in domains.items():
        if not DOMAIN_NAME_RE.match(str(name)):
            raise ValueError(f"{name!r} is not a domain name (letters, digits, '_', '.', '-', at most 64)")
        try:
            nodes = expand(expr)
        except UsageError as exc:
            raise ValueError(f"{name}: {exc}") from None
        if not nodes:
            raise ValueError(f"{name}: the hostlist names no node")
        for n in nodes:
            if n in seen and seen[n] != name:
                raise ValueError(f"{name}: node {n} is already in domain {seen[n]} (a node has one failure domain)")
            seen[n] = name
        out[str(name)] = list(dict.fromkeys(nodes))
    return out


def _check_ignore_processes(hc: "HealthConfig", file: str, problems: Problems) -> None:
    """Each entry names a program: an absolute path, or a bare name (older configs: a system program)."""
    for i, entry in enumerate(hc.ignore_processes):
        if not entry or ("/" in entry and not entry.startswith("/")) or entry.endswith("/") \
                or not entry.isprintable():
            problems.error(f"{file}: health.ignore_processes[{i}]: {entry!r} is neither an executable's "
                           f"absolute path (/usr/bin/nvidia-persistenced) nor a bare program name")


def _check_levels(cfg: "Config", file: str, problems: Problems) -> None:
    """Level names come from a closed set: they reach a validation job's script."""
    for key in ("validate_levels", "spare_recheck_levels"):
        for i, level in enumerate(getattr(cfg.lifecycle, key)):
            if level not in vocab.LEVELS:
                problems.error(f"{file}: lifecycle.{key}[{i}]: unknown level {level!r} "
                               f"(valid: {', '.join(vocab.LEVELS)})")


def _check_remediation(rc: "RemediationConfig", file: str, problems: Problems) -> None:
    """Closed sets: an action name decides what happens to a node."""
    where = "lifecycle.remediation"
    if rc.mode not in REMEDIATION_MODES:
        problems.error(f"{file}: {where}.mode: {rc.mode!r} is not one of {', '.join(REMEDIATION_MODES)}")
    for code, action in rc.actions.items():
        if action not in REMEDIATION_ACTIONS:
            problems.error(f"{file}: {where}.actions.{code}: {action!r} is not one of "
                           f"{', '.join(REMEDIATION_ACTIONS)}")
        if not code or not all(c.isalnum() or c == "_" for c in code):
            problems.error(f"{file}: {where}.actions: {code!r} is not a finding code (XID79, NVLINK_DOWN, ...)")
    for action, n in rc.max_attempts.items():
        if action not in ("reset_gpu", "reboot", "retest"):
            problems.error(f"{file}: {where}.max_attempts.{action}: only reset_gpu, reboot and retest are attempted")
        if n < 1:
            problems.error(f"{file}: {where}.max_attempts.{action} must be at least 1")
    if not rc.reset_command:
        problems.error(f"{file}: {where}.reset_command must name a program")
    for key in ("reboot_timeout_s", "reset_timeout_s", "budget_window_s"):
        if getattr(rc, key) == 0:
            problems.error(f"{file}: {where}.{key} must be more than 0 seconds")


_GLOB_RE = re.compile(r"[A-Za-z0-9_.\-*?\[\]!]+\Z")


def _check_node_types(hc: "HealthConfig", file: str, problems: Problems) -> None:
    """node_type_of names a defined type with a pattern that can match: else the matched nodes' checks
    fail at their first run (the hooks then fail safe: health checks off on exactly those nodes)."""
    defined = ", ".join(sorted(hc.node_types))
    for pattern, name in hc.node_type_of.items():
        where = f"health.node_type_of.{pattern}"
        if name not in hc.node_types:
            problems.error(f"{file}: {where}: unknown node type {name!r} (defined in health.node_types: {defined})")
        if any(c in pattern for c in "*?") or "[" not in pattern:
            if not _GLOB_RE.match(pattern):
                problems.error(f"{file}: {where}: {pattern!r} is not a node name or glob (letters, digits, "
                               f"'_', '.', '-' and * ? [...]; one entry per glob, no commas or spaces)")
            continue
        from slurm_ft.slurm.hostlist import expand   # lazy: only a node_type_of hostlist ("gpu[01-64]") needs it
        try:
            expand(pattern)
        except UsageError as exc:
            problems.error(f"{file}: {where}: {exc}")


def _check_keep_off(cfg: "Config", file: str, problems: Problems) -> None:
    """A bad hostlist here would leave slurm-ft's hands on the very nodes a site meant to protect."""
    try:
        _expanded(cfg.keep_off)
    except ConfigError as exc:
        problems.error(f"{file}: {exc}")


def _check_ranges(cfg: "Config", file: str, problems: Problems) -> None:
    """Numbers the types cannot bound: ports, orderings, periods that must pass."""
    port = cfg.controller.wake_port
    if port > 65535:
        problems.error(f"{file}: controller.wake_port must be a UDP port, 1 to 65535 (0 = no wakes), not {port}")
    if cfg.controller.interval_s == 0:
        problems.error(f"{file}: controller.interval_s must be more than 0 seconds")
    t = cfg.health.thresholds
    if t.temperature_warn_c and t.temperature_fail_c and t.temperature_warn_c >= t.temperature_fail_c:
        problems.error(f"{file}: health.thresholds.temperature_warn_c ({t.temperature_warn_c}) must be below "
                       f"temperature_fail_c ({t.temperature_fail_c}), or a GPU fails before it warns")
    for key in ("disk_free_fail_pct", "disk_free_warn_pct"):
        if getattr(t, key) > 100:
            problems.error(f"{file}: health.thresholds.{key} is a percentage: at most 100, got {getattr(t, key):g}")
    if t.disk_free_fail_pct and t.disk_free_warn_pct and t.disk_free_fail_pct > t.disk_free_warn_pct:
        problems.error(f"{file}: health.thresholds.disk_free_fail_pct ({t.disk_free_fail_pct:g}) must not be above "
                       f"disk_free_warn_pct ({t.disk_free_warn_pct:g})")


def _check_paths(cfg: "Config", file: str, problems: Problems) -> None:
    """Paths are absolute: slurmd, cron and systemd each start these programs in a directory of their own."""
    hc = cfg.health
    paths = [("state_dir", cfg.state_dir), ("fleet_lock", cfg.fleet_lock),
             ("lifecycle.metrics_path", cfg.lifecycle.metrics_path), ("slurm.conf", cfg.slurm.conf),
             ("controller.metrics_path", cfg.controller.metrics_path), ("health.metrics_path", hc.metrics_path),
             ("health.state_file", hc.state_file), ("health.sysfs_root", hc.sysfs_root),
             *((f"health.disk_paths[{i}]", d) for i, d in enumerate(hc.disk_paths))]
    if hc.kmsg_path != JOURNAL_SOURCE:
        paths.append(("health.kmsg_path", hc.kmsg_path))
    for key, value in paths:
        if value and not value.startswith("/"):     # "" = the documented default or off
            problems.error(f"{file}: {key} must be an absolute path, not {value!r}")
    _check_textfiles(cfg, file, problems)


def _check_textfiles(cfg: "Config", file: str, problems: Problems) -> None:
    """node_exporter's textfile collector reads *.prom files only, and each writer replaces its file whole:
    two writers on one file would each erase the other's metrics."""
    seen: Dict[str, str] = {}
    for key, value in (("lifecycle.metrics_path", cfg.lifecycle.metrics_path),
                       ("controller.metrics_path", cfg.controller.metrics_path),
                       ("health.metrics_path", cfg.health.metrics_path)):
        if not value:                               # "" = that textfile is not written
            continue
        if not value.endswith(".prom"):
            problems.error(f"{file}: {key} must end in .prom (node_exporter's textfile collector reads no other "
                           f"file), not {value!r}")
        if value in seen:
            problems.error(f"{file}: {key} is the file {seen[value]} names too ({value}): each writer replaces "
                           f"its file whole, so give each its own")
        seen.setdefault(value, key)


JOURNAL_SOURCE = "journal"      # health.kmsg_path naming journald (gpu/journal.py)


_D = TypeVar("_D", bound="DataclassInstance")


def build(cls: Type[_D], data: Any, file: str, where: str, problems: Optional[Problems] = None) -> _D:
    """Convert a mapping into the dataclass `cls`, strictly: unknown keys and wrong types go to `problems`
    (by default raised at the first one); a collected bad value leaves its key at the default."""
    problems = problems or Problems()
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: {where or 'top level'} must be a mapping")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)} - (_INTERNAL if cls is Config else set())
    for k in sorted(set(data) - names, key=str):
        problems.error(f"{file}: unknown key {_key(where, k)} (valid: {', '.join(sorted(names))})")
    kwargs = {}
    for k, v in data.items():
        if k in names:
            try:
                kwargs[k] = _convert(hints[k], v, file, _key(where, k), problems)
            except ConfigError as exc:
                problems.error(str(exc))
    return cls(**kwargs)


_INTERNAL = {"path"}     # Config's fields no file sets: where it was read from


# values that are a share of a whole (0..1)
_SHARES = frozenset({"breaker_max_share", "burnin_relative_min", "burnin_absolute_min", "replace_fraction",
                     "target", "clock_event_share", "clock_slow_ratio", "straggler_ratio", "budget_share"})


def _key(where: str, name: str) -> str:
    return f"{where}.{name}" if where else str(name)


def _convert(tp: Any, value: Any, file: str, key: str, problems: Problems) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):     # a field's type hint: the class, never an instance
        return build(typing.cast("Type[DataclassInstance]", tp), value, file, key, problems)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, file, key, problems)
    if tp is Any:
        return value
    if origin in (dict, Dict):
        if not isinstance(value, dict):
            raise ConfigError(f"{file}: {key} must be a mapping")
        kt, vt = args or (Any, Any)
        out = {}
        for k, v in value.items():      # each entry on its own: a collected bad one is left out
            try:
                out[_convert(kt, k, file, key, problems)] = _convert(vt, v, file, f"{key}.{k}", problems)
            except ConfigError as exc:
                problems.error(str(exc))
        return out
    if origin in (tuple, Tuple):
        if not isinstance(value, list):
            raise ConfigError(f"{file}: {key} must be a list")
        items = []
        for i, v in enumerate(value):
            try:
                items.append(_convert(args[0], v, file, f"{key}[{i}]", problems))
            except ConfigError as exc:
                problems.error(str(exc))
        return tuple(items)
    if tp is bool:
        if isinstance(value, str) and value in _BOOL_WORDS:     # YAML 1.1's yes/no/on/off (_Loader)
            return _BOOL_WORDS[value]
        if not isinstance(value, bool):
            raise ConfigError(f"{file}: {key} must be true or false, not {value!r}")
        return value
    if tp in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (tp is int and not isinstance(value, int)):
            raise ConfigError(f"{file}: {key} must be a number{' (integer)' if tp is int else ''}, not {value!r}")
        if value < 0 or value != value or value == float("inf"):
            raise ConfigError(f"{file}: {key} must be a finite number, not negative, got {value!r}")
        if key.rsplit(".", 1)[-1] in _SHARES and value > 1:
            raise ConfigError(f"{file}: {key} is a share: at most 1, got {value!r}")
        if key.startswith("health.deadline_s.") and value == 0:
            raise ConfigError(f"{file}: {key} must be more than 0 seconds")
        return tp(value)
    if tp is str:
        if isinstance(value, bool):
            raise ConfigError(f"{file}: {key} must be a string, not {str(value).lower()}: "
                              f'write "{str(value).lower()}" in quotes')
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{file}: {key} must be a string, not {value!r}")
        return str(value)
    return value
