"""Which checks run at which level, and what each level must read from the node.

    quick   HealthCheckProgram, every few minutes: cheap NVML reads only, well under a second (the
            driver's own recovery action included)
    prolog  before every job: quick + NVLink state, temperature, clock events, disk
    epilog  after every job: prolog + leftover GPU processes; Xids since the job started
    full    validation / on demand: everything, NVLink counters, InfiniBand, sampled clock events
    burnin  full + a matmul stress per GPU (TFLOPS vs expected and vs the node's best GPU)

`health.levels` in the config may replace a level's check list.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, FrozenSet, Iterable, Mapping, Optional, Set, Tuple

from slurm_ft.errors import ConfigError, UsageError
from slurm_ft.node.probes import BY_NAME, CHECKS, LEVEL_ORDER

if TYPE_CHECKING:
    from slurm_ft.config import HealthConfig

LEVELS: Dict[str, Tuple[str, ...]] = {
    level: tuple(c.name for c in CHECKS if LEVEL_ORDER.index(c.level) <= i) for i, level in enumerate(LEVEL_ORDER)
}
# what the NVML reader (slurm_ft.gpu.nvml.read_node groups) must fetch for each check
NVML_PARTS: Mapping[str, FrozenSet[str]] = {c.name: c.nvml for c in CHECKS if c.nvml}
# NVLink error counters cost 4 NVML calls per link (576 on an 8 x 18-link node): full levels only
DEEP_LEVELS = ("full", "burnin")
# a job's own hooks: a fail verdict there lets Slurm drain the node, so it asks the breaker first
HOOK_LEVELS = ("prolog", "epilog")


def checks_for(level: str, overrides: Optional[Mapping[str, Tuple[str, ...]]] = None) -> Tuple[str, ...]:
    overrides = dict(overrides or {})
    if level not in LEVELS and level not in overrides:
        raise UsageError(f"unknown level {level!r} (valid: {', '.join(LEVELS)})")
    checks = tuple(overrides.get(level, LEVELS.get(level, ())))
    unknown = [c for c in checks if c not in BY_NAME]
    if unknown:
        raise UsageError(f"health.levels.{level}: unknown check {unknown[0]!r} (valid: {', '.join(BY_NAME)})")
    return checks


def nvml_parts(checks: Iterable[str], level: str = "quick") -> FrozenSet[str]:
    parts: Set[str] = set()
    for c in checks:
        parts |= NVML_PARTS.get(c, frozenset())
    if "nvlink" in parts and level in DEEP_LEVELS:
        parts.add("nvlink_errors")
    if parts:
        parts.add("identity")
    return frozenset(parts)


BURNIN_BACKENDS = ("auto", "torch", "cupy", "dcgmi", "none")   # and those installed distributions add


def validate(hc: HealthConfig, file: str = "config") -> None:
    """Values the YAML types cannot check: level names, check names, the burn-in backend."""
    for key in hc.deadline_s:
        if key not in LEVELS:
            raise ConfigError(f"{file}: health.deadline_s.{key}: unknown level (valid: {', '.join(LEVELS)})")
    for key in hc.levels:
        if key not in LEVELS:
            raise ConfigError(f"{file}: health.levels.{key}: unknown level (valid: {', '.join(LEVELS)})")
        try:
            checks_for(key, hc.levels)
        except UsageError as exc:
            raise ConfigError(f"{file}: {exc}") from None
    if hc.burnin.backend not in BURNIN_BACKENDS:
        # lazy: only a backend name not built in pays for reading the entry points (every check validates)
        from slurm_ft.node.burnin import added_backends
        added = added_backends()
        if hc.burnin.backend not in added:
            raise ConfigError(f"{file}: health.burnin.backend: {hc.burnin.backend!r} is not one of "
                              f"{', '.join([*BURNIN_BACKENDS, *sorted(added)])}")
