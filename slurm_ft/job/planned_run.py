"""The hot-spare supervisor's planned swaps, carried out: what job/planned.py decides, done to the job.

The supervisor (supervisor.py) owns one PlannedSwaps and hands it what it hears and reads: `degraded`
notices, nodes Slurm shows drained PLANNED, each poll's view. This module keeps what a planned swap needs
between polls (the degraded nodes and since when, the checkpoint asked for, the stragglers' clock), asks
the job for a checkpoint (job/ckptrequest.py), reads the newest complete one while it waits, and makes
the swap: stop the step, give the nodes back, launch again without them. Supervisor events (one JSON line
each in DIR/slurm-ft-starts.jsonl): `notice` (kind degraded), `planned` (phase asked, swap, not_swapped),
`straggler` (node, reason). settings(): the wait bound and the straggler rule from the config the job can
read.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import TYPE_CHECKING, Callable, Dict, Mapping, Optional, Protocol, Sequence, Set, Tuple

from slurm_ft import heartbeat
from slurm_ft.job import ckpt, ckptrequest, hang, hotplan as hp, planned as pl
from slurm_ft.slurm.hostlist import compress
from slurm_ft.vocab import planned

if TYPE_CHECKING:
    import subprocess

    from slurm_ft.slurm.types import Node

CKPT_POLL_S = 0.2            # while a checkpoint is asked for: how often the newest complete one is read
STRAGGLER_POLL_S = 2.0       # progress reads for stragglers (one small file per rank)
QUARANTINE_WAIT_S = 60.0     # a degraded node: the checkpoint is asked for once the controller took it out of
                             # the partition (it may then leave the job at the swap), or after this long
RELEASE_WAIT_S = 1.0         # at the swap, as at a fault's relaunch: the quarantine notice awaited, then a read


class Supervised(Protocol):
    """What a planned swap uses of the supervisor that owns it (job/supervisor.py's Supervisor)."""
    job_id: int
    ckpt_dir: str
    restart: int
    launches: int
    launch_t: float
    step_nodes: Tuple[str, ...]
    proc: Optional["subprocess.Popen[bytes]"]
    partitions: str
    may_shrink: bool
    quarantine_notices: Set[str]
    say: Callable[[str], None]

    def log(self, event: str, **fields: object) -> None: ...

    def launch(self, nodes: Sequence[str], reason: str) -> Optional[int]: ...

    def stop(self) -> bool: ...

    def shrink(self, allocation: Sequence[str], release: Sequence[str], timeout: float = hp.GIVE_BACK_S
               ) -> Tuple[str, ...]: ...

    def quarantined(self, partitions: str, nodes: Sequence[str], until: float, read_by: Optional[float] = None
                    ) -> Tuple[str, ...]: ...

    def _fallback(self, act: hp.Action, at_once: bool = False) -> int: ...


class PlannedSwaps:
    def __init__(self, sup: Supervised, wait_s: float = 1800.0, straggler: Tuple[float, float] = (0.0, 0.0)):
        self.sup = sup
        self.wait_s = wait_s
        self.degraded: Dict[str, str] = {}        # node -> why (notices, PLANNED drains, stragglers)
        self.degraded_at: Dict[str, float] = {}   # monotonic time each was first held back for its quarantine
        self.straggling: Set[str] = set()         # degraded by this job's own reports (not drained by anyone)
        self.partitions_read: Set[str] = set()    # degraded nodes whose quarantine was read off the partitions
        self.said: Set[str] = set()
        self.ask: Optional[pl.Ask] = None
        self.asks = 0
        self.newest: Optional[int] = None
        self.next_ckpt_read = 0.0
        self.stragglers = pl.Stragglers(*straggler) if straggler[0] > 0 else None
        self.next_straggler_poll = 0.0

    @property
    def active(self) -> bool:
        """Anything to look at on a poll: a degraded node, or stragglers to watch for."""
        return bool(self.degraded) or self.stragglers is not None

    # --- what the supervisor hears and reads ---------------------------------------------------------
    def notice(self, node: str, why: str) -> None:
        """A `degraded` notice (the node's side drained it for a planned swap)."""
        if node not in self.degraded:
            self.degraded[node] = why or "degraded (slurm-ft notice)"
            self.sup.log("notice", node=node, reason=why[:300], kind="degraded")

    def seen(self, nodes: Sequence[Node]) -> None:
        """A read of the job's nodes: those drained PLANNED are degraded (no notice came)."""
        for x in nodes:
            if x.drained and planned(x.reason) and x.name not in self.degraded:
                self.degraded[x.name] = x.reason
                self.sup.log("notice", node=x.name, reason=x.reason[:300], kind="degraded", source="read")

    def avoid(self, faults: Mapping[str, str]) -> Dict[str, str]:
        """The degraded nodes a launch must not use (hotplan's View.avoid): no reason for a relaunch alone."""
        return {x: why for x, why in self.degraded.items() if x not in faults}

    # --- a poll ------------------------------------------------------------------------------------
    def action(self, view: hp.View, now: float) -> hp.Action:
        """`swap` when a planned swap is due now; anything else it decides is carried out here (`wait`)."""
        self._watch_stragglers(now)
        if self.ask is not None and (now >= self.next_ckpt_read or view.step_rc is not None):
            self.next_ckpt_read = now + CKPT_POLL_S
            self.newest = self._newest()
        act = pl.decide(pl.View(allocation=view.allocation, faults=view.faults, degraded=self.degraded,
                                batch_host=view.batch_host, train_nodes=view.train_nodes, step_nodes=view.step_nodes,
                                step_rc=view.step_rc, asked=self.ask, newest_ckpt=self.newest, now=now,
                                wait_s=self.wait_s))
        if act.kind == "request" and not self._quarantine_pending(act, now):
            self._ask(act, now)
        elif act.kind == "none" and act.failed and not set(act.failed) <= self.said:
            self.said |= set(act.failed)
            self.sup.log("planned", phase="not_swapped", nodes=compress(act.failed), reason=act.reason[:1000])
            self.sup.say(f"planned swap not possible: {act.reason}")
        return act if act.kind == "swap" else hp.Action("wait")

    def _quarantine_pending(self, act: hp.Action, now: float) -> bool:
        """Hold the ask until the controller has taken the drained degraded nodes out of the partition (its
        notice), so that the swap gives them back to Slurm; the step runs on meanwhile, nothing is lost.
        Past QUARANTINE_WAIT_S one read of the partitions decides, and the swap goes ahead either way (a
        node not quarantined stays in the job, unused). Stragglers wait for nobody; nor does anything where
        Slurm refuses to shrink the job."""
        sup = self.sup
        drained = [x for x in act.failed if x not in self.straggling and x not in sup.quarantine_notices
                   and x not in self.partitions_read]
        if not drained or not sup.may_shrink:
            return False
        for x in drained:
            self.degraded_at.setdefault(x, now)
        if now - min(self.degraded_at[x] for x in drained) < QUARANTINE_WAIT_S:
            return True
        sup.quarantine_notices.update(sup.quarantined(sup.partitions, drained, now))   # one read, no wait
        self.partitions_read.update(drained)
        return False

    def _ask(self, act: hp.Action, now: float) -> None:
        """Ask the running launch for a checkpoint now (the file its ranks read: job/ckptrequest.py)."""
        sup = self.sup
        newest = self._newest()
        step = max((r["step"] for r in self._reports().values()), default=None)
        self.asks += 1
        if sup.ckpt_dir:
            try:
                ckptrequest.request(sup.ckpt_dir, str(sup.job_id), sup.restart, sup.launches - 1, act.reason,
                                    self.asks)
            except OSError as exc:        # the periodic checkpoint (or the wait bound) still swaps
                sup.say(f"cannot ask for a checkpoint in {sup.ckpt_dir}: {exc}")
        self.ask = pl.Ask(now, step, newest, act.failed)
        self.newest, self.next_ckpt_read = newest, now + CKPT_POLL_S
        sup.log("planned", phase="asked", nodes=compress(act.failed), step=step, newest=newest,
                reason=act.reason[:1000])
        sup.say(f"planned swap: {act.reason}")

    def _newest(self) -> Optional[int]:
        try:
            found = ckpt.latest(self.sup.ckpt_dir) if self.sup.ckpt_dir else None
        except Exception as exc:   # noqa: BLE001 - an unreadable directory: the wait bound still swaps
            self.sup.say(f"cannot read {self.sup.ckpt_dir}: {exc}")
            return None
        return found.step if found is not None and found.path else None

    def _reports(self) -> Dict[int, heartbeat.Report]:
        """The ranks' progress reports of the running launch."""
        sup = self.sup
        return hang.current(heartbeat.read_all(sup.ckpt_dir),
                            hang.Launch(str(sup.job_id), sup.restart, sup.launches - 1, sup.launch_t))

    def _watch_stragglers(self, now: float) -> None:
        """Every STRAGGLER_POLL_S: nodes of the step far slower than the others for long enough are degraded."""
        sup = self.sup
        if self.stragglers is None or now < self.next_straggler_poll or sup.proc is None:
            return
        self.next_straggler_poll = now + STRAGGLER_POLL_S
        for node, why in self.stragglers.update(self._reports(), time.time()).items():
            if node in sup.step_nodes and node not in self.degraded:
                self.degraded[node] = why
                self.straggling.add(node)
                sup.log("straggler", launch=sup.launches - 1, node=node, reason=why)
                sup.say(f"straggler: {node}: {why}")

    # --- the swap ------------------------------------------------------------------------------------
    def swap(self, act: hp.Action, allocation: Tuple[str, ...], partitions: str
             ) -> Tuple[Optional[int], Tuple[str, ...]]:
        """Stop the step (it may have stopped itself after the checkpoint), give back the degraded nodes the
        controller quarantined and the stragglers, launch again without them: (launch's rc, allocation)."""
        sup = self.sup
        t0 = time.time()
        sup.log("planned", phase="swap", nodes=compress(act.failed), reason=act.reason[:1000])
        sup.say(act.reason)
        self.ask = None
        if not sup.stop():          # the supervisor's own way out, as for a fault's relaunch
            return sup._fallback(dataclasses.replace(act, kind="fallback",
                                                     reason=f"{act.reason}; the old step would not end"),
                                 at_once=True), allocation
        sup.log("stopped", nodes=compress(sup.step_nodes), stop_s=round(time.time() - t0, 3))
        if sup.ckpt_dir:
            ckptrequest.clear(sup.ckpt_dir)
        # stragglers were judged by this job alone: nobody quarantines them, and nothing keeps them here
        drained = [x for x in act.release if x not in self.straggling]
        now = time.monotonic()
        by = now + RELEASE_WAIT_S + hp.GIVE_BACK_S
        out = sup.quarantined(partitions, drained, now + RELEASE_WAIT_S, by)
        if sup.may_shrink:
            out = (*out, *(x for x in act.release if x in self.straggling))
        allocation = sup.shrink(allocation, out, by - time.monotonic())
        return sup.launch(act.nodes, f"planned swap without {compress(act.failed)}"), allocation


def settings(node: str) -> Tuple[float, Tuple[float, float], float]:
    """(lifecycle.planned_wait_s, (straggler_ratio, straggler_window_s) of the node type of `node`,
    lifecycle.job_backstop_s) from slurm-ft's config where this job can read it, else the defaults (a job
    runs on without it)."""
    from slurm_ft.config import Config, SoftSignals, load_config  # lazy: yaml; the starter's own steps need none
    try:
        config = load_config()
    except Exception as exc:  # noqa: BLE001 - no config to read: the defaults
        print(f"slurm-ft supervisor: config not read ({exc}); planned-swap and backstop defaults", file=sys.stderr)
        config = Config()
    try:
        soft = config.health.type_of(node)[1].soft
    except Exception:  # noqa: BLE001 - a bad node_type_of entry: the defaults
        soft = SoftSignals()
    return (config.lifecycle.planned_wait_s, (soft.straggler_ratio, soft.straggler_window_s),
            config.lifecycle.job_backstop_s)
