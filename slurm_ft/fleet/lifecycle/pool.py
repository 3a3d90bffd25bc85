"""How many spare nodes the pool should hold: the configured number, else `spares plan` for the job
partitions' size (the sweep refills to it; the metrics report it)."""
from __future__ import annotations

import logging
from typing import Sequence, Tuple

from slurm_ft.config import Config
from slurm_ft.plan.spares import plan_from_settings, plan_spares
from slurm_ft.slurm.types import Node

log = logging.getLogger(__name__)


def pool_target(cfg: Config, nodes: Sequence[Node], job_partitions: Sequence[str]) -> Tuple[int, str]:
    """The configured target, or `spares plan` for the job partitions' size (the planning section's rates)."""
    if cfg.lifecycle.pool_target:
        return cfg.lifecycle.pool_target, "lifecycle.pool_target"
    workers = [n for n in nodes if set(job_partitions) & set(n.partitions)]
    gpn = next(iter(cfg.health.node_types.values())).gpus if cfg.health.node_types else 8
    try:   # the same inputs as `slurm-ft spares plan` without flags: the config's planning section
        pc = getattr(cfg, "planning", None)
        gpus = max(1, len(workers)) * gpn
        plan = plan_from_settings(gpus, gpn, pc) if pc is not None else plan_spares(gpus, gpn)
    except Exception as exc:   # a bad planning section must not stop the sweep: say why the target is 0
        log.warning("no spare plan: %s", exc)
        return 0, f"no plan ({exc})"
    return plan.spare_nodes, (f"spares plan for {len(workers)} nodes: {plan.rate_source}, "
                              f"repair {plan.repair_hours:g} h, target {plan.target:g}")
