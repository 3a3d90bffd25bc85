"""Which client answers for Slurm: the commands, or pyslurm where it imports and matches this Slurm
(`slurm.backend` in the config). The one place a client is made from a configuration."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Mapping, Optional

from slurm_ft.errors import EnvironmentProblem, UsageError
from slurm_ft.slurm import pyslurm_backend
from slurm_ft.slurm.client import DEFAULT_TIMEOUT_S, SlurmClient

if TYPE_CHECKING:
    from slurm_ft.config import Config

log = logging.getLogger(__name__)

BACKENDS = ("auto", "commands", "pyslurm")


def get_client(backend: str = "auto", env: Optional[Mapping[str, str]] = None,
               timeout: float = DEFAULT_TIMEOUT_S, conf: Optional[str] = None) -> SlurmClient:
    """A client over the Slurm commands, or over pyslurm when it imports and matches this Slurm.

    "auto" picks pyslurm only when `import pyslurm` works and its major.minor equals Slurm's;
    "pyslurm" insists (EnvironmentProblem when unusable); "commands" never tries it.
    """
    if backend not in BACKENDS:
        raise UsageError(f"unknown Slurm backend {backend!r} (choose from {', '.join(BACKENDS)})")
    commands = SlurmClient(env=env, timeout=timeout, conf=conf)
    if backend == "commands":
        commands.backend_reason = "slurm.backend: commands in the config"
        return commands
    problem = pyslurm_backend.unusable_reason(commands)
    if problem is None:
        chosen = pyslurm_backend.PySlurmClient(env=env, timeout=timeout, conf=conf)
        major, minor, _ = commands.version()
        chosen.backend_reason = (f"pyslurm matches Slurm {major}.{minor:02d}"
                                 f"{'' if backend == 'pyslurm' else ' (slurm.backend: auto)'}")
        return chosen
    if backend == "pyslurm":
        raise EnvironmentProblem(f"the pyslurm backend cannot be used: {problem}")
    log.debug("Slurm backend: commands (%s)", problem)
    commands.backend_reason = problem
    return commands


def client_from_config(config: "Config", timeout: Optional[float] = None) -> SlurmClient:
    """The client a slurm-ft Config asks for (section `slurm`: conf, timeout_s, backend); `timeout`: a
    shorter limit than the config's for a caller that must not wait long (a prolog)."""
    section = getattr(config, "slurm", None)
    if section is None:
        return SlurmClient(timeout=timeout or DEFAULT_TIMEOUT_S)
    limit = min(section.timeout_s, timeout) if timeout else section.timeout_s
    return get_client(section.backend, timeout=limit, conf=section.conf or None)
