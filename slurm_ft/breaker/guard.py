""""May I take these nodes out of service?": the one question every drain in slurm-ft asks first.

Health checks (`check --drain`, the HealthCheckProgram, `watch`), the sweep's spare re-checks and the
controller's quarantines call `may_take_out` (or `may_drain` for one node) before they touch Slurm. The
answer is the pure `rules.may_take_out` over a fresh Slurm snapshot, so every host and the controller
see one fleet-wide breaker, with no node-local state to reset. An admin's hold (breaker/hold.py: open or
closed for a bounded time, in the state directory) decides over it while in force.

When the count cannot be known (Slurm unreachable, a malformed answer) the answer is NO, logged as an
error: slurm-ft's own trouble must never take nodes out.

Prolog and epilog ask only when they are about to fail the node (`hook_decision`): a healthy node's
hooks and health checks read nothing of the fleet, so slurmctld's load does not grow as nodes x fleet.
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from typing import TYPE_CHECKING, Iterable, Iterator, Optional, Sequence

from slurm_ft.config import Config
from slurm_ft.errors import SlurmFTError
from slurm_ft.breaker import hold, rules as brk

if TYPE_CHECKING:
    from slurm_ft.slurm.api import SlurmApi
    from slurm_ft.slurm.types import Node

log = logging.getLogger(__name__)


def enabled(config: Config) -> bool:
    lc = config.lifecycle
    return lc.breaker_max_share > 0 or lc.breaker_max_nodes > 0


def decide(config: Config, fleet: brk.FleetView, nodes: Iterable[str], now: float) -> brk.Decision:
    lc = config.lifecycle
    return brk.may_take_out(fleet, nodes, now, max_share=lc.breaker_max_share, max_nodes=lc.breaker_max_nodes,
                            window_s=lc.breaker_window_s)


def fleet_view(config: Config, *, client: Optional[SlurmApi] = None, snapshot: Optional[Sequence[Node]] = None,
               now: Optional[float] = None) -> brk.FleetView:
    """The breaker's view of the fleet from `snapshot` (slurm.types.Node list), else a fresh read of every node
    (`client.fleet_nodes()`, the light one: made only when a drain is about to happen, never on a healthy run)."""
    now = time.time() if now is None else now
    if snapshot is None:
        if client is None:
            # lazy: only a caller without a client pays for the Slurm backend
            from slurm_ft.slurm.backend import client_from_config
            client = client_from_config(config)
        snapshot = client.fleet_nodes()
    return brk.view(snapshot, now)


def may_take_out(config: Config, nodes: Iterable[str], *, client: Optional[SlurmApi] = None,
                 snapshot: Optional[Sequence[Node]] = None, actor: str = "",
                 now: Optional[float] = None) -> brk.Decision:
    """May `actor` take `nodes` out of service now (drain, quarantine, anything that removes them)?

    `snapshot`: the caller's fresh `client.nodes()`, to save a Slurm call. An unknown count says no."""
    nodes = list(nodes)
    now = time.time() if now is None else now
    held = hold.override(hold.current(config, now), nodes, now)    # an admin's hold wins, limits or none
    if held is not None:
        if not held.allowed:
            log.warning("%s%s", f"{actor}: " if actor else "", held.reason)
        return held
    if not enabled(config):
        return brk.Decision(True, "breaker disabled", 0, 1 << 30)
    try:
        fleet = fleet_view(config, client=client, snapshot=snapshot, now=now)
    except (SlurmFTError, OSError) as exc:
        why = f"fleet drain count unknown ({exc}); not taking out {', '.join(nodes)}"
        log.error("%s%s", f"{actor}: " if actor else "", why)
        return brk.Decision(False, why, 0, 0)
    d = decide(config, fleet, nodes, now)
    if not d.allowed:
        log.warning("%s%s", f"{actor}: " if actor else "", d.reason)
    return d


def may_drain(config: Config, node: str, *, client: Optional[SlurmApi] = None, actor: str = "check",
              now: Optional[float] = None) -> brk.Decision:
    """`may_take_out` for one node."""
    return may_take_out(config, [node], client=client, actor=actor, now=now)


@contextlib.contextmanager
def serialized(config: Config) -> Iterator[None]:
    """Decide, drain and `settle` one at a time among the callers sharing `state_dir` (one host, the lab,
    a shared file system). Best effort: without the lock file the callers rely on `settle` alone."""
    fd = None
    try:
        os.makedirs(config.state_dir, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(config.state_dir, "breaker.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as exc:
        log.warning("breaker lock in %s not taken: %s", config.state_dir, exc)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def settle(config: Config, node: str, reason: str, *, client: SlurmApi, actor: str = "check") -> str:
    """Right after draining `node` with `reason`: re-read Slurm; undo the drain when racing drains on
    other hosts put the fleet past the limit (`breaker.keeps`) or the count cannot be read. Returns why
    it was undone, or "" when the drain stands."""
    now = time.time()
    if not enabled(config) or hold.override(hold.current(config, now), [node], now) is not None:
        return ""       # no limit, or an admin's hold decided: held closed, racing drains stand
    lc = config.lifecycle
    try:
        fleet = fleet_view(config, client=client, now=now)
        if brk.keeps(fleet, node, now, max_share=lc.breaker_max_share, max_nodes=lc.breaker_max_nodes,
                     window_s=lc.breaker_window_s):
            return ""
        why = (f"drain-rate breaker: drains racing on other hosts passed the limit "
               f"{brk.limit(fleet.total, lc.breaker_max_share, lc.breaker_max_nodes)}; drain of {node} undone")
    except (SlurmFTError, OSError) as exc:
        why = f"fleet drain count unknown after draining {node} ({exc}); drain undone"
    try:
        if client.node(node).reason == reason:      # still our drain: nobody rewrote it meanwhile
            client.resume([node])
    except (SlurmFTError, OSError) as exc:
        log.error("%s: %s; undoing the drain of %s failed: %s", actor, why, node, exc)
        return f"{why} (resume failed: {exc})"
    log.error("%s: %s", actor, why)
    return why


# --- the hook path ---------------------------------------------------------------------------------

HOOK_READ_TIMEOUT_S = 10.0     # a prolog/epilog must not wait long on a busy slurmctld: unknown says no


def hook_decision(config: Config, node: str, now: Optional[float] = None,
                  client: Optional[SlurmApi] = None) -> brk.Decision:
    """May the prolog/epilog fail this node (Slurm then drains it)? Asked only when the hook is about to
    fail it (rare: a healthy node's hooks never call Slurm), from a fresh read of the fleet; an unknown
    count says no. Hooks on many nodes failing at once may each see room for one more: the controller
    settles such a burst afterwards (fleet/recovery/controller.py, `settle_hook_drains`)."""
    if not enabled(config) and hold.current(config, now) is None:
        return brk.Decision(True, "breaker disabled", 0, 1 << 30)
    return may_take_out(config, [node], client=client or hook_client(config), actor="hook", now=now)


def hook_client(config: Config) -> SlurmApi:
    """The Slurm client of a hook about to fail its node, with the hooks' short timeout."""
    # lazy: only a failing hook pays for the Slurm backend
    from slurm_ft.slurm.backend import client_from_config
    return client_from_config(config, timeout=HOOK_READ_TIMEOUT_S)
