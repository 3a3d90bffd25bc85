"""The controller's cycle: observe one snapshot, plan, act; every act journaled before and after.

Stateless between cycles except for the journal: a controller killed at any moment (SIGKILL included)
and started again reads the open incidents back and the plan carries them on. Each act re-reads what
it changes from Slurm just before writing (partition node lists under the fleet lock the sweep and the
node CLI take too, slurm/membership.py), and does nothing when the work is already done, so an
intent whose result never reached the journal is safe to redo (tests/lab/test_crash_consistency.py
kills it right after each journal write, through `on_journal`, and starts another).
"""
from __future__ import annotations

import logging
import sqlite3
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import (TYPE_CHECKING, Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Set,
                    Tuple, TypeVar)

from slurm_ft.config import Config
from slurm_ft.errors import CommandError, SlurmFTError
from slurm_ft.filelock import FileLock
from slurm_ft.slurm.membership import Delta, Membership
from slurm_ft.fleet.recovery.records import Incident, Placement, Step
from slurm_ft.fleet.recovery import journal as jn
from slurm_ft.fleet.recovery import outage as out
from slurm_ft.job.ckptscan import Scanner, hold_reason
from slurm_ft.job.nodefault import node_fault
from slurm_ft.fleet.recovery import policies
from slurm_ft.fleet.recovery.plan import fault_time, plan, prolog_runs
from slurm_ft.fleet.recovery.policies.common import PENDING_STATES, ControllerSettings, ended_by_node_failure
from slurm_ft.fleet.recovery.snapshot import Snapshot
from slurm_ft.job import trust
from slurm_ft.job.paths import PLANNED, PLANNED_DEFERRED, REQUEUE, is_planned
from slurm_ft.job.tag import FtSpec, with_note
from slurm_ft.breaker import guard, hold as breaker_hold, rules as brk
from slurm_ft.slurm.client import JobNotFound
from slurm_ft.slurm.hostlist import compress
from slurm_ft.slurm.types import Job, Node
from slurm_ft import vocab, wake

if TYPE_CHECKING:
    from slurm_ft.slurm.api import SlurmApi

log = logging.getLogger(__name__)

WAITING = ("poll",)
_T = TypeVar("_T")


@dataclass
class CycleResult:
    steps: List[Step] = field(default_factory=list)   # steps acted on (polls not counted)
    open_incidents: int = 0
    elapsed_s: float = 0.0


FAILED_PROLOG_KEEP_S = 600.0   # a failed prolog's wake, until its job is read requeued
FULL_READ_S = 1.0      # while only waiting on jobs: a full observe at least this often
WOKEN_MAX = 8          # more woken nodes than this at once (a wave): one read of every node instead


def _job_fingerprint(job: Optional[Job]) -> Tuple[object, ...]:
    """What the plan's waits look at: a change in any of these is worth a full read."""
    if job is None:
        return ()
    return (job.state, job.reason, job.held, job.nodes, job.restart_count, job.eligible_time,
            job.excluded_nodes, job.num_nodes)


class Controller:
    """One controller over one journal. `cycle()` runs until nothing is left to do now (or its budget ends)."""

    def __init__(self, client: SlurmApi, conn: sqlite3.Connection, config: Config, *,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 on_step: Optional[Callable[[Step, str, str, float], None]] = None,
                 on_journal: Optional[Callable[[str, str], None]] = None) -> None:
        self.client = client
        self.conn = conn
        self.config = config
        self.cc = config.controller
        self.policy = ControllerSettings.from_config(self.cc, keep_off=config.keep_off_nodes)
        self.clock = clock
        self.sleep = sleep
        self.on_step = on_step          # called (step, outcome, detail, now) after each act: the demo's timeline
        self.on_journal = on_journal    # called (step kind, "intent" | "result") right after each journal write
        self._snap: Optional[Snapshot] = None   # the snapshot the current steps come from
        self._breaker_said = False
        self._hold_said = ""                    # the breaker hold last logged (breaker/hold.py)
        self.membership = Membership.from_config(client, config, "controller's partition change")
        self._scans = Scanner(self.cc.ckpt_scan_s)
        self._seen: Dict[str, out.Seen] = {}     # outage.track: who stopped/started answering, when
        self._watching_since = clock()
        self._alerted: Dict[str, str] = {}       # alert key -> last text logged (loud once per change)
        self._trust: Optional[str] = None        # the job field holding FT tags (trust.resolve), read once
        self._failed_prologs: Dict[int, Tuple[FrozenSet[str], float]] = {}   # job -> nodes, when (wakes)
        self._woken: Set[str] = set()            # nodes whose wake came since the last cycle began
        self._full: Optional[Snapshot] = None    # the last read of every node
        self._kept_off: Dict[str, str] = {}      # keep_off node -> the fault last logged as left alone

    def heard(self, payload: str) -> None:
        """A node's verified wake (slurm_ft/wake.py): the cycle that follows reads that node first
        (observe_woken); a failed prolog's names its job, kept for the plan a while (prolog_runs)."""
        node, job = wake.parse(payload)
        self._woken.add(node)
        if job is not None:
            nodes, _ = self._failed_prologs.get(job, (frozenset(), 0.0))
            self._failed_prologs[job] = (nodes | {node}, self.clock())

    # --- observe -----------------------------------------------------------------------------------

    def observe(self) -> Snapshot:
        nodes = self.client.nodes()
        if self._settle_hook_drains(nodes):
            nodes = self.client.nodes()
        self._note_keep_off(nodes)
        jobs, specs, placements, now = self._observe_jobs()
        parts = self.client.partitions()
        p = self.policy
        self._seen = out.track(self._seen, nodes, now, horizon_s=p.wave_window_s + p.wave_settle_s + 3600)
        counted, limit, past = self._out_of_service(nodes, now)
        self._full = Snapshot.of(nodes, jobs, parts, specs=specs, taken_at=now, seen=dict(self._seen),
                                 watching_since=self._watching_since, out_counted=counted, out_limit=limit,
                                 out_past_limit=past, placements=placements)
        return self._full

    def _note_keep_off(self, nodes: Iterable[Node]) -> None:
        """A fault on a keep_off node, which the plan leaves alone (policy.keep_off): logged once per fault,
        not every cycle, with "keep_off:" to grep for."""
        for n in nodes:
            if n.name not in self.policy.keep_off:
                continue
            why = node_fault(n, self.policy.slurm_fault_reasons) or ""
            if why and self._kept_off.get(n.name) != why:
                log.warning("keep_off: %s: %s; left alone (no incident, no spare, no partition change)", n.name, why)
            self._kept_off[n.name] = why

    def observe_woken(self, names: Set[str]) -> Optional[Snapshot]:
        """The nodes that woke the controller read alone (`sinfo -n`: one node each, not the fleet), laid over
        the last read of every node, with the jobs read afresh: what the plan needs to open the incidents of
        the jobs on them, a full read sooner. None (read everything) without a recent full read, or for a
        wave of wakes."""
        last = self._full
        names = {n for n in names if last is not None and n in last.nodes}
        if last is None or not names or len(names) > WOKEN_MAX \
                or self.clock() - last.taken_at > 2 * self.cc.interval_s + FULL_READ_S:
            return None
        try:
            fresh = {n: self.client.node(n) for n in sorted(names)}
        except SlurmFTError as exc:
            log.warning("woken by %s, but not read alone (%s): reading every node", compress(sorted(names)), exc)
            return None
        jobs, specs, placements, now = self._observe_jobs()
        return replace(last, nodes={**last.nodes, **fresh}, jobs={j.job_id: j for j in jobs}, specs=specs,
                       taken_at=now, placements=placements)

    def _observe_jobs(self) -> Tuple[List[Job], Dict[int, FtSpec], Dict[int, Dict[int, Placement]], float]:
        """Every job, the fault-tolerant ones' specs, where each FT job's runs ran (the journal, this read's
        added), and when the jobs were read."""
        jobs = self.client.jobs()
        specs = {}
        field = self.trusted_field()
        for j in jobs:
            spec = trust.spec_of(j, field)
            if spec is not None:
                specs[j.job_id] = spec
        now = self.clock()
        placements = jn.placements(self.conn)       # as of the previous read: the plan compares with them
        ft_jobs = {j.job_id: j for j in jobs if j.job_id in specs}
        jn.record_placements(self.conn, ft_jobs.values(), placements, now)
        self._failed_prologs = {jid: v for jid, v in self._failed_prologs.items()
                                if jid in ft_jobs and now - v[1] < FAILED_PROLOG_KEEP_S}
        learnt = prolog_runs(ft_jobs, placements, self._failed_prologs)
        jn.add_placements(self.conn, learnt)
        for run in learnt:
            log.info("job %s: run %d had %s (a failed prolog's wake; Slurm requeued it with none)", run.job_id,
                     run.restart_count, compress(list(run.nodes)))
            placements.setdefault(run.job_id, {})[run.restart_count] = run
        return jobs, specs, placements, now

    def trusted_field(self) -> str:
        """admin_comment or comment (config controller.trust; auto asks slurmctld once). When slurmctld's
        config cannot be read, AdminComment: a user cannot write it, so nothing is trusted that a user
        could forge (asked again next cycle)."""
        if self._trust is None:
            try:
                plugins = self.client.job_submit_plugins() if self.cc.trust == "auto" else ()
            except CommandError as exc:
                log.error("cannot read slurmctld's JobSubmitPlugins (%s): trusting only AdminComment tags "
                          "this cycle", exc)
                return "admin_comment"
            self._trust = trust.resolve(self.cc.trust, plugins)
            log.info("fault-tolerance tags are read from %s", "AdminComment" if self._trust == "admin_comment"
                     else "Comment")
        return self._trust

    def _out_of_service(self, nodes: Sequence[Node], now: float) -> Tuple[FrozenSet[str], int, FrozenSet[str]]:
        """The drain-rate breaker's count, limit and the nodes taken out past the limit, from the same
        snapshot of Slurm's nodes the breaker reads everywhere (breaker.view: slurm-ft drains,
        QUARANTINED/RMA included, by reason time within the window): the plan charges each quarantine
        against it (outage.breaker_room). Limit 0: none. Held closed by an admin: none; held open: the
        quarantine's own drain asks the guard, which refuses (the step waits)."""
        held = self._admin_hold(now)
        if not guard.enabled(self.config) or (held is not None and held.state == "closed"):
            return frozenset(), 0, frozenset()
        lc = self.config.lifecycle
        fleet = brk.view(nodes, now)
        counted = frozenset(n for n, t in fleet.out if now - t <= lc.breaker_window_s)
        cap = brk.limit(fleet.total, lc.breaker_max_share, lc.breaker_max_nodes)
        self._say_breaker(len(counted), cap)
        return counted, cap, brk.past_limit(fleet, now, cap=cap, window_s=lc.breaker_window_s)

    def _settle_hook_drains(self, nodes: Sequence[Node]) -> List[str]:
        """Undo the prolog/epilog drains that took the fleet past the breaker's limit; the nodes resumed.

        A hook about to fail its node reads the fleet count first (guard.hook_decision), but hooks failing on
        many nodes at once each see room for one more, and Slurm drains every node whose hook failed. The
        controller's read is the one place that sees them all: a hook drain stays only if fewer than `limit`
        other nodes were taken out at the same second or earlier (breaker.keeps, ties against it), the others
        are resumed, loudly. Slurm-ft's own drains settle on their node (guard.settle)."""
        now = self.clock()
        if not guard.enabled(self.config) or self._admin_hold(now) is not None:   # an admin's hold: its drains stand
            return []
        lc = self.config.lifecycle
        fleet = brk.view(nodes, now)
        undo = [n.name for n in nodes
                if n.drained and n.reason.strip() in vocab.HOOK_FAULT_REASONS
                and not brk.keeps(fleet, n.name, now, max_share=lc.breaker_max_share, max_nodes=lc.breaker_max_nodes,
                                  window_s=lc.breaker_window_s)]
        if not undo:
            return []
        cap = brk.limit(fleet.total, lc.breaker_max_share, lc.breaker_max_nodes)
        try:
            self.client.resume(undo)
        except SlurmFTError as exc:
            log.error("ALERT: drain-rate breaker: prolog/epilog drains past the limit %d (%s) not undone: %s",
                      cap, compress(undo), exc)
            return []
        log.error("ALERT: drain-rate breaker: prolog/epilog failures drained nodes past the limit %d within %s; "
                  "resumed %s (a burst of hook failures is more likely slurm-ft's or the site's trouble than "
                  "the nodes')", cap, brk._span(lc.breaker_window_s), compress(undo))
        return undo

    def _tell(self, job_id: int, kind: str, nodes: Iterable[str], why: str = "") -> None:
        """Tell a hot-spare job's supervisor (`scontrol notify`, read in its output): best effort, the
        supervisor's own backstop read covers a notice that does not arrive."""
        for node in nodes:
            try:
                self.client.notify(job_id, vocab.event_line(kind, node, why))
            except SlurmFTError as exc:
                log.warning("job %s not told that %s is %s: %s", job_id, node, kind, exc)

    def _admin_hold(self, now: float) -> Optional[breaker_hold.Hold]:
        """An admin's hold on the breaker in force now; said once per change (set, changed, expired)."""
        held = breaker_hold.current(self.config, now)
        text = held.describe() if held is not None else ""
        if text != self._hold_said:
            log.warning("drain-rate breaker %s", text or "hold ended: the breaker decides by its limits again")
            self._hold_said = text
        return held

    def _say_breaker(self, count: int, cap: int) -> None:
        """Loud once when the drain-rate breaker reaches its limit (issue 6): drains stop; the recovery of
        a fault drained within the limit goes on, one drained past it waits (the plan's alert)."""
        is_open = count >= cap
        if is_open and not self._breaker_said:
            log.error("drain-rate breaker open (%d nodes taken out by slurm-ft within %s (limit %d)): no more "
                      "drains or quarantines; faults drained within the limit are still recovered", count,
                      brk._span(self.config.lifecycle.breaker_window_s), cap)
        self._breaker_said = is_open

    def _may_drain(self, node: str) -> Tuple[bool, str]:
        d = guard.may_drain(self.config, node, client=self.client, actor="controller", now=self.clock())
        return d.allowed, d.reason

    # --- the cycle ------------------------------------------------------------------------------------

    def cycle(self, budget_s: Optional[float] = None) -> CycleResult:
        """Observe, plan, act until the plan has nothing but waits; poll quickly while Slurm catches up."""
        budget = self.cc.cycle_budget_s if budget_s is None else budget_s
        start = self.clock()
        result = CycleResult()
        woken, self._woken = self._woken, set()
        while True:
            snap = self.observe_woken(woken) if woken else None
            if snap is not None:      # a node's wake: its job's incident opened on that read, the rest on a full one
                self._snap = snap
                opens = [s for s in plan(snap, jn.state(self.conn, snap.taken_at), self.policy, snap.taken_at)
                         if s.kind == "open" and woken & set(s.nodes)]
                for step in self._scans_first(opens, snap):
                    self.act(step)
                    result.steps.append(step)
                woken = set()
                continue
            woken = set()
            snap = self.observe()
            self._snap = snap                 # read after the jobs: what it shows happened before
            incidents = jn.state(self.conn, snap.taken_at)
            steps = plan(snap, incidents, self.policy, snap.taken_at)
            self._alert([s for s in steps if s.kind == "alert"])
            steps = [s for s in steps if s.kind != "alert"]
            acts = [s for s in steps if s.kind not in WAITING]
            failed = False
            for step in self._scans_first(acts, snap):
                failed |= self.act(step) == "failed"
                result.steps.append(step)
            result.open_incidents = len(jn.incidents(self.conn, open_only=True))
            if not steps:
                break
            spent = self.clock() - start
            if acts and not failed and spent < 2 * budget:
                continue            # read again at once: the next step depends on what this one did
            if spent >= budget:
                break               # only waits left (or a step keeps failing): the next cycle goes on
            if failed or acts:
                self.sleep(self.cc.poll_s)
            else:
                self._await_job_change(snap, steps)
        result.elapsed_s = self.clock() - start
        return result

    def _scans_first(self, acts: List[Step], snap: Snapshot) -> Iterable[Step]:
        """Start the checkpoint scans of every incident to open at once (each in its own thread), and
        act first on what does not wait for one, then on each job as its scan finishes: a job whose
        directory hangs delays no other job's recovery."""
        dirs = {}
        for s in acts:
            spec = snap.specs.get(s.job_id)
            if s.kind == "open" and spec is not None and spec.ckpt_dir and self.cc.read_progress:
                dirs[id(s)] = spec.ckpt_dir
                self._scans.start(spec.ckpt_dir)
        return _as_ready(acts, dirs, self._scans.finished, self.sleep) if dirs else acts

    def _alert(self, alerts: List[Step]) -> None:
        """Loud, once per change: a wave of unresponsive nodes, a quarantine the breaker refused."""
        keys = {}
        for a in alerts:
            key = {0: "wave", -1: "outage"}.get(a.job_id, f"job{a.job_id}")
            keys[key] = a.reason
            if self._alerted.get(key) != a.reason:
                log.error("ALERT: %s", a.reason)
        for key in set(self._alerted) - set(keys):
            log.warning("alert over: %s", self._alerted[key])
        self._alerted = keys

    def _await_job_change(self, snap: Snapshot, steps: List[Step]) -> None:
        """Only waits left, and every wait is on a job (its requeue, its epilogs, its scheduling): re-read
        just the queue (one `squeue`, a quarter of a full observe's CPU) every poll_s until a waited job
        changes, then let the cycle observe everything again. At most FULL_READ_S between full reads, so
        a fault elsewhere is still seen. In the lab the hooks and ranks of a restart share two cores with
        this loop: a cheaper poll is a faster restart."""
        ids = sorted({s.job_id for s in steps if s.kind in WAITING})
        before = {i: _job_fingerprint(snap.jobs.get(i)) for i in ids}
        polls = max(1, int(FULL_READ_S / max(self.cc.poll_s, 0.01)))
        for _ in range(polls):
            self.sleep(self.cc.poll_s)
            if not ids:
                return
            try:
                now = {j.job_id: j for j in self.client.jobs(ids)}
            except (CommandError, SlurmFTError):
                return                  # the full read reports it
            if any(_job_fingerprint(now.get(i)) != before[i] for i in ids):
                return

    # --- act ------------------------------------------------------------------------------------------

    def act(self, step: Step) -> str:
        """Run one step with its intent and result journaled; return the outcome."""
        now = self.clock()
        if step.kind == "open":
            try:
                self._open(step, now)
            except SlurmFTError as exc:     # the job ended between the read and now: nothing to open
                log.warning("job %s: not opening an incident: %s", step.job_id, exc)
                return "failed"
            return "ok"
        if step.kind == "revalidate":
            return self._revalidate_node(step, now)
        if step.kind == "restore":
            return self._restore(step)
        if step.kind == "release":
            return self._release_unclaimed(step)
        inc = _one(jn.incidents(self.conn, job_id=step.job_id, open_only=True))
        if inc is None or inc.id != step.incident_id:
            return "skipped"        # closed meanwhile (another cycle got there first)
        if step.kind == "swap":     # the chosen spares are part of the intent: a restart reuses them
            jn.update_incident(self.conn, inc.id, spares=step.spares, shrink_to=step.num_nodes)
        sid = jn.record_intent(self.conn, inc.id, step.kind, now, step.reason)
        self._journaled(step.kind, "intent")
        try:
            outcome, detail = self.acts()[step.kind](step, inc)
        except SlurmFTError as exc:         # Slurm refused or timed out, or the job is gone: retried next read
            outcome, detail = "failed", str(exc)
            log.warning("incident %s job %s: %s failed: %s", inc.id, inc.job_id, step.kind, exc)
        done = self.clock()
        jn.record_result(self.conn, sid, outcome, done, detail)
        self._journaled(step.kind, "result")
        log.info("incident %s job %s: %s %s %s", inc.id, inc.job_id, step.kind, outcome, detail)
        if self.on_step:
            self.on_step(step, outcome, detail, done)
        return outcome

    def _release_unclaimed(self, step: Step) -> str:
        try:
            self.client.release(step.job_id)
        except SlurmFTError as exc:
            log.warning("job %s: not released: %s", step.job_id, exc)
            return "failed"
        log.error("ALERT: %s", step.reason)
        return "ok"

    def acts(self) -> Dict[str, Callable[[Step, Incident], Tuple[str, str]]]:
        """The act behind each step kind an incident's policy plans (fleet/recovery/policies; `open` and
        `revalidate` are acted on before an incident exists)."""
        return {"quarantine": self._quarantine, "swap": self._swap, "requeue": self._requeue,
                "exclude": self._exclude, "start": self._start, "confirm": self._confirm, "hold": self._hold,
                "wait": self._wait, "give_up": self._give_up, "abandon": self._abandon, "note": self._note,
                "handover": self._handover, "end_steps": self._end_steps,
                "released": self._released, "planned": self._planned, "superseded": self._superseded,
                "join": self._join}

    def _open(self, step: Step, now: float) -> None:
        job = self.client.job(step.job_id)
        spec = trust.spec_of(job, self.trusted_field())
        found = self._scans.verdict(spec.ckpt_dir) if spec and spec.ckpt_dir and self.cc.read_progress else None
        ckpt_step = found.step if found is not None else None
        snap = self._snap     # the read the step was planned on holds its nodes: no second read of them
        if snap is None or not set(step.nodes) <= set(snap.nodes):
            snap = Snapshot(nodes={n.name: n for n in self.client.nodes(sorted(step.nodes))}, jobs={}, partitions={})
        fault_at = fault_time(snap, step.nodes)
        path = step.path or REQUEUE
        supervised = policies.of_path(path).supervised and spec is not None
        # the job does not restart on a supervisor's path: no checkpoint hold (its supervisor relaunches in
        # the allocation), nor for a planned swap (no fault); the incident's note says what for people
        hold = hold_reason(found) if found is not None and not supervised and not is_planned(path) else None
        note = policies.of_path(path).note(spec) if supervised and spec is not None and not is_planned(path) else ""
        try:
            iid = jn.open_incident(
                self.conn, job_id=step.job_id, nodes=step.nodes, faults=step.reason.split("; "),
                partition=step.partition,
                restart_count=job.restart_count if step.restart_count is None else step.restart_count,
                job_nodes=job.num_nodes or len(job.nodes), ckpt_step=ckpt_step, fault_at=fault_at, now=now,
                detail=f"job {job.job_id} {job.state} on {len(job.nodes)} nodes; {step.reason}", path=path,
                note=note, job_submit=job.submit_time)
        except jn.AlreadyOpen:
            return
        if is_planned(path):
            self._open_planned(step, job, spec, iid, now)
            return
        if supervised:
            for fault in step.reason.split("; "):     # its supervisor may not have heard from the node
                node, _, why = fault.partition(": ")
                self._tell(job.job_id, "failed", [node], why)
        if hold:    # the plan keeps this job held: a restart would start from scratch over its checkpoints
            jn.update_incident(self.conn, iid, note=hold)
            log.error("incident %s: job %s stays held: %s", iid, step.job_id, hold)
        log.warning("incident %s: job %s, failed %s (%s)", iid, step.job_id, ",".join(step.nodes), step.reason)
        self._journaled("open", "intent")
        self._journaled("open", "result")
        if self.on_step:
            self.on_step(step, "ok", step.reason, now)

    def _open_planned(self, step: Step, job: Job, spec: Optional[FtSpec], iid: int, now: float) -> None:
        """Say what a planned swap's path does (`incidents` shows it): the job's supervisor at its next
        checkpoint (a hot spare), a spare before it starts again (pending after a restart), or, running
        with no hot spare, the job's next restart (noted and closed at once: `deferred`)."""
        nodes = ", ".join(step.nodes)
        pol = policies.of_path(step.path)
        mark = pol.note(spec) if spec is not None else step.path
        if step.path == PLANNED:
            jn.update_incident(self.conn, iid, note=f"{mark}: the job's supervisor moves off {nodes} at its next "
                                                    f"checkpoint ({spec.hot_spares if spec else 0} hot spare(s))")
            for fault in step.reason.split("; "):     # its supervisor may not have heard from the node
                node, _, why = fault.partition(": ")
                self._tell(job.job_id, "degraded", [node], why)
        elif step.path == PLANNED_DEFERRED:
            why = ("its batch host" if job.batch_host in step.nodes else "no hot spare left" if spec is not None
                   and spec.hot_spares else "no hot spare")
            self._close(iid, step.job_id, "deferred", now, now, f"{mark}: {why}: {nodes} drained, no new job lands "
                                                                    f"there; the job runs on and a spare takes its "
                                                                    f"place at the job's next restart")
        else:
            jn.update_incident(self.conn, iid, note=f"{mark}: a spare takes the place of {nodes} before job "
                                                    f"{job.job_id} starts again")
        log.warning("incident %s: job %s, planned swap of %s (%s)", iid, step.job_id, nodes, step.reason)
        self._journaled("open", "intent")
        self._journaled("open", "result")
        if self.on_step:
            self.on_step(step, "ok", step.reason, now)

    def _revalidate_node(self, step: Step, now: float) -> str:
        """Hand a node quarantined for not answering, answering again, to the sweep's validation: its drain
        reason becomes step.reason (vocab.REVALIDATE), checked again on a fresh read first. It stays
        drained and out of every partition until it passes (sweep.py)."""
        name = step.nodes[0]
        try:
            node = self.client.node(name)
            if not out.restorable(node, self._seen.get(name), self._watching_since, self.clock(),
                                  self.policy.restore_after_s):
                return "skipped"
            self.client.drain([name], step.reason)
        except SlurmFTError as exc:
            log.warning("revalidation of %s not requested: %s", name, exc)
            return "failed"
        log.warning("%s answers again (quarantined for not answering, incident %s): to validation (%s)", name,
                    step.incident_id, step.reason)
        if self.on_step:
            self.on_step(step, "ok", step.reason, self.clock())
        return "ok"

    def _restore(self, step: Step) -> str:
        """Do a closed incident's partition changes again (plan._restorations), as deltas on a fresh read
        under the fleet lock: a node the sweep or a person moved meanwhile is left where it is now."""
        try:
            with self.membership.locked():
                parts = self.membership.partitions()
                deltas = {p: Delta(remove=tuple(n for n in step.nodes if n in parts[p].nodes))
                          for p in parts if self.policy.is_job_partition(p) and set(step.nodes) & set(parts[p].nodes)}
                spares = tuple(x for x in step.spares if self.policy.spare_partition in parts
                               and x in parts[self.policy.spare_partition].nodes)
                if spares and step.partition in parts:
                    deltas[self.policy.spare_partition] = Delta(remove=spares)
                    add = deltas.get(step.partition, Delta())
                    deltas[step.partition] = Delta(add=add.add + spares, remove=add.remove)
                if not deltas:
                    return "skipped"
                self.membership.change(deltas, parts)
        except SlurmFTError as exc:
            log.warning("incident %s: partition changes not restored: %s", step.incident_id, exc)
            return "failed"
        log.warning("incident %s job %s: %s", step.incident_id, step.job_id, step.reason)
        if self.on_step:
            self.on_step(step, "ok", step.reason, self.clock())
        return "ok"

    def _join(self, step: Step, inc: Incident) -> Tuple[str, str]:
        """Nodes of the incident's run that failed since it opened become its own (plan._late_failures):
        quarantined and replaced with the first, journaled as faults of this incident."""
        faults = tuple(f for f in step.reason.split("; ") if f)
        jn.update_incident(self.conn, inc.id, nodes=(*inc.nodes, *step.nodes), faults=(*inc.faults, *faults))
        log.warning("incident %s job %s: %s failed too since it opened: joins it", inc.id, inc.job_id,
                    compress(list(step.nodes)))
        return "ok", f"{compress(list(step.nodes))} join the incident"

    def _requeue(self, step: Step, inc: Incident) -> Tuple[str, str]:
        job = self.client.job(inc.job_id)
        if job.restart_count > inc.restart_count or not (job.running or ended_by_node_failure(job)):
            return "skipped", f"already requeued ({job.state}, restart {job.restart_count})"
        self.client.requeue(inc.job_id, hold=step.hold)
        return "ok", ("held: " if step.hold else "") + step.reason

    def _quarantine(self, step: Step, inc: Incident) -> Tuple[str, str]:
        failed = set(inc.nodes)
        moved: List[str] = []
        drained, refused, refused_nodes = [], [], set()
        admins = set()
        with self.membership.locked():   # the breaker's answer and the partition write under the fleet lock
            # Ask the fleet-wide breaker before the node leaves the partition: a refused one stays put.
            for node in self.client.nodes(list(inc.nodes)):
                if vocab.admins(node.reason, self.policy.slurm_fault_reasons) and (node.drained or node.down):
                    # an admin took it on since the incident opened: their reason stays, the node stays put
                    refused.append(f"{node.name} left to its admin ({node.reason})")
                    admins.add(node.name)
                    continue
                if not node.drained and node.down:   # drained too, so it stays out when it answers again
                    seen = next((f.split(": ", 1)[1] for f in inc.faults if f.startswith(node.name + ": ")),
                                node.state)
                    reason = vocab.unresponsive_reason(seen, inc.job_id)
                    ok, why = self._may_drain(node.name)
                    if ok:
                        self.client.drain([node.name], reason)
                        drained.append(node.name)
                    else:
                        refused.append(f"{node.name} not drained: {why}")
                        refused_nodes.add(node.name)
            failed -= refused_nodes | admins
            parts = self.membership.partitions()     # a fresh read, a delta on it: the sweep's edits stay
            moved = [p for p in parts if self.policy.is_job_partition(p) and failed & set(parts[p].nodes)]
            if moved:
                self.membership.change({p: Delta(remove=tuple(sorted(failed))) for p in moved}, parts)
        if not moved and not drained and not refused_nodes:
            return "skipped", "; ".join(["already out of the job partitions"] + refused)
        if moved and policies.of_path(inc.path).supervised:   # its supervisor may give these back to Slurm now
            self._tell(inc.job_id, "quarantined", sorted(failed))
        # a node the breaker refused stays in its partition: the step is not done (retried, not looped on)
        return ("failed" if refused_nodes else "ok"), "; ".join(
            [f"{compress(sorted(failed)) if failed else '-'} out of {','.join(moved) or '-'}"]
            + ([f"drained {compress(drained)}"] if drained else []) + refused)

    def _swap(self, step: Step, inc: Incident) -> Tuple[str, str]:
        pool_name = self.policy.spare_partition
        with self.membership.locked():   # the checks and the move on one read, no writer in between
            fresh = self.membership.partitions()
            target, pool = fresh.get(inc.partition), fresh.get(pool_name)
            if target is None or pool is None:
                return "failed", f"partition {inc.partition if target is None else pool_name} not found"
            # a spare the sweep took out of the pool meanwhile (failed re-check, reserved, quarantined)
            gone = [s for s in step.spares if s not in target.nodes and s not in pool.nodes]
            bad = list(gone)
            for node in self.client.nodes(list(step.spares)) if step.spares else []:
                if node.name not in target.nodes and not node.available and node.name not in bad:
                    bad.append(node.name)
            if bad:
                keep = [s for s in step.spares if s not in bad]
                jn.update_incident(self.conn, inc.id, spares=keep)
                return "failed", f"spare(s) {compress(sorted(bad))} no longer healthy in {pool_name}; choosing again"
            # Into the job partition first, out of the pool second (Delta order): a crash in between
            # leaves the spare in both (never in neither), and the redo finishes the move.
            if step.spares:
                self.membership.change({inc.partition: Delta(add=tuple(step.spares)),
                                        pool_name: Delta(remove=tuple(step.spares))}, fresh)
        if step.num_nodes:
            jn.update_incident(self.conn, inc.id, status="open", note=f"shrunk to {step.num_nodes} nodes: pool short")
        what = f"{compress(step.spares)} {pool_name} -> {inc.partition}" if step.spares else "no spare"
        if inc.status == "waiting":
            jn.update_incident(self.conn, inc.id, status="open")
        return "ok", what + (f"; job shrinks to {step.num_nodes} nodes" if step.num_nodes else "")

    def _exclude(self, step: Step, inc: Incident) -> Tuple[str, str]:
        job = self.client.job(inc.job_id)
        # a spare taken now may be a node an earlier incident excluded, since repaired and validated
        excl = sorted((set(job.excluded_nodes) | set(inc.nodes)) - set(inc.spares))
        fields: Dict[str, str] = {}
        if set(excl) != set(job.excluded_nodes):
            fields["ExcNodeList"] = compress(excl) if excl else ""
        if step.num_nodes and job.num_nodes != step.num_nodes:
            fields["NumNodes"] = str(step.num_nodes)
        if not fields:
            return "skipped", "already excluded"
        self.client.update_job(inc.job_id, **fields)
        return "ok", " ".join(f"{k}={v}" for k, v in fields.items())

    def _start(self, step: Step, inc: Incident) -> Tuple[str, str]:
        job = self.client.job(inc.job_id)
        if job.state not in PENDING_STATES:
            return "skipped", f"job is {job.state}"
        self._next_second_after_kill(inc)
        if job.held or step.hold:
            self.client.release(inc.job_id)
            # a released requeued job still has the requeue's begin time (+121 s): clear it too
            self.client.update_job(inc.job_id, StartTime="now")
            return "ok", "released, StartTime=now"
        self.client.update_job(inc.job_id, StartTime="now")
        return "ok", "StartTime=now"

    def _next_second_after_kill(self, inc: Incident) -> None:
        """Slurm 22.05 revokes a killed job's credentials to the second: a relaunch on the same nodes
        whose credential is from the second of the kill is refused ("already killed, do not launch
        batch job") and the job FAILS. The job is PENDING now, so the kill is done: start it in the
        next second at the earliest (costs half a second on average, only right after our requeue)."""
        requeue = inc.step("requeue")
        now = self.clock()
        if requeue is None or requeue.outcome != "ok" or now - (requeue.done_at or now) > 3.0:
            return
        killed_by = self._snap.taken_at if self._snap else now   # the read that showed it PENDING: the kill came before
        wait = int(killed_by) + 1.02 - now
        if wait > 0:
            self.sleep(wait)

    def _confirm(self, step: Step, inc: Incident) -> Tuple[str, str]:
        job = self.client.job(inc.job_id)
        if not job.running:
            return "failed", f"job is {job.state} ({job.reason})"
        now = self.clock()
        closes_as = policies.of_path(inc.path).closes_as      # a planned swap done is no fault of ours to count
        self._close(inc.id, inc.job_id, closes_as, inc.opened_at, now,
                    inc.note if inc.note.startswith("shrunk") or closes_as != "recovered" else "", inc.fault_at)
        return "ok", f"running on {compress(job.nodes)}"

    def _end_steps(self, step: Step, inc: Incident) -> Tuple[str, str]:
        """Cancel the job's steps on the failed nodes (never its batch step): one step read of this job.
        A step the supervisor already relaunched runs on the hot spare, not there: it is not touched."""
        steps = self.client.steps(inc.job_id, on=inc.nodes)
        for s in steps:
            self.client.cancel_step(inc.job_id, s)
        if not steps:
            return "skipped", f"no step of the job on {compress(inc.nodes)}"
        ids = ",".join(map(str, steps))
        log.warning("incident %s job %s: step(s) %s still on %s past the supervisor's stop: cancelled",
                    inc.id, inc.job_id, ids, compress(inc.nodes))
        self._tell(inc.job_id, "ended", inc.nodes, f"step(s) {ids} cancelled by the slurm-ft controller")
        return "ok", f"cancelled step(s) {ids} on {compress(inc.nodes)}"

    def _released(self, step: Step, inc: Incident) -> Tuple[str, str]:
        """Close a hot-spare incident: the job runs on and no longer holds the failed nodes."""
        job = self.client.job(inc.job_id)
        if not job.running:
            return "failed", f"job is {job.state} ({job.reason})"
        self._close(inc.id, inc.job_id, "recovered", inc.opened_at, self.clock(), inc.note, inc.fault_at)
        kept = [n for n in inc.nodes if n in job.nodes]
        return "ok", (f"running on {compress(job.nodes)}; "
                      + (f"{compress(kept)} still in the job, unused" if kept else f"released {compress(inc.nodes)}"))

    def _planned(self, step: Step, inc: Incident) -> Tuple[str, str]:
        """Close a planned swap in a hot-spare job: its supervisor moved off the node (or kept it, unused)."""
        job = self.client.job(inc.job_id)
        if not job.running:
            return "failed", f"job is {job.state} ({job.reason})"
        self._close(inc.id, inc.job_id, "planned", inc.opened_at, self.clock(), f"{inc.note}; {step.reason}", inc.fault_at)
        kept = [n for n in inc.nodes if n in job.nodes]
        return "ok", (f"running on {compress(job.nodes)}; "
                      + (f"{compress(kept)} still in the job, unused" if kept else f"released {compress(inc.nodes)}"))

    def _superseded(self, step: Step, inc: Incident) -> Tuple[str, str]:
        """A fault (or a restart) overtook a planned swap: its incident takes the node along."""
        self._close(inc.id, inc.job_id, "superseded", inc.opened_at, self.clock(), f"{inc.note}; {step.reason}",
                    inc.fault_at)
        return "ok", step.reason

    def _hold(self, step: Step, inc: Incident) -> Tuple[str, str]:
        """Keep the job from starting: requeue it held if it still runs, hold it if Slurm requeued it."""
        job = self.client.job(inc.job_id)
        if job.running and job.restart_count <= inc.restart_count:
            self.client.requeue(inc.job_id, hold=True)
        elif job.state == "PENDING" and not job.held:
            self.client.update_job(inc.job_id, Priority=0)      # = scontrol hold
        jn.update_incident(self.conn, inc.id, status="waiting")
        self._admin_comment(inc.job_id, vocab.job_comment(f"held: {step.reason}"))
        return "ok", step.reason

    def _wait(self, step: Step, inc: Incident) -> Tuple[str, str]:
        jn.update_incident(self.conn, inc.id, status="waiting", note=step.reason)
        self._admin_comment(inc.job_id, vocab.job_comment(step.reason))
        log.warning("incident %s job %s: %s", inc.id, inc.job_id, step.reason)
        return "ok", step.reason

    def _give_up(self, step: Step, inc: Incident) -> Tuple[str, str]:
        self._admin_comment(inc.job_id, vocab.job_comment(f"held, not restarted again: {step.reason}"))
        self._close(inc.id, inc.job_id, "gave_up", inc.opened_at, self.clock(), step.reason, inc.fault_at)
        log.error("incident %s job %s: gave up: %s", inc.id, inc.job_id, step.reason)
        return "ok", step.reason

    def _abandon(self, step: Step, inc: Incident) -> Tuple[str, str]:
        self._close(inc.id, inc.job_id, "abandoned", inc.opened_at, self.clock(), step.reason, inc.fault_at)
        return "ok", step.reason

    def _note(self, step: Step, inc: Incident) -> Tuple[str, str]:
        jn.update_incident(self.conn, inc.id, note=step.reason)
        log.warning("incident %s job %s: %s", inc.id, inc.job_id, step.reason)
        return "ok", step.reason

    def _handover(self, step: Step, inc: Incident) -> Tuple[str, str]:
        """The incident leaves its supervisor's path for the requeue path (its next steps are that policy's)."""
        jn.update_incident(self.conn, inc.id, path=REQUEUE, note=step.reason)
        log.warning("incident %s job %s: %s", inc.id, inc.job_id, step.reason)
        return "ok", step.reason

    def _close(self, iid: int, job_id: int, status: str, opened_at: float, now: float, note: str = "",
               fault_at: Optional[float] = None) -> None:
        """Close an incident in the journal and say so with its total (as `incidents` shows it: from its open),
        and from the fault where Slurm showed when: the journal's close is otherwise seen nowhere in the log."""
        if not jn.close_incident(self.conn, iid, status, now, note):
            return
        since_fault = f" ({now - fault_at:.2f} s from the fault)" if fault_at is not None else ""
        log.warning("incident %s job %s: %s in %.2f s%s", iid, job_id, status, now - opened_at, since_fault)

    def _admin_comment(self, job_id: int, text: str) -> None:
        """Tell the job's owner why it waits (scontrol show job: AdminComment); best effort. Where the
        tag lives in AdminComment the note goes after it: the tag is what keeps the job followed."""
        try:
            text = text[:200]
            if self.trusted_field() == "admin_comment":
                text = with_note(self.client.job(job_id).admin_comment, text)
            self.client.update_job(job_id, AdminComment=text)
        except (CommandError, JobNotFound) as exc:
            log.warning("job %s: cannot set AdminComment: %s", job_id, exc)

    def _journaled(self, kind: str, when: str) -> None:
        if self.on_journal:
            self.on_journal(kind, when)


def _as_ready(acts: List[Step], dirs: Dict[int, str], finished: Callable[[str], bool],
              sleep: Callable[[float], None], tick: float = 0.02) -> Iterator[Step]:
    """acts in their order, except that an `open` whose scan is still running goes after the others."""
    waiting = []
    for s in acts:
        if id(s) in dirs and not finished(dirs[id(s)]):
            waiting.append(s)
        else:
            yield s
    while waiting:
        ready = [s for s in waiting if finished(dirs[id(s)])]
        for s in ready:
            waiting.remove(s)
            yield s
        if waiting and not ready:
            sleep(tick)


def _one(items: Sequence[_T]) -> Optional[_T]:
    return items[0] if items else None


def controller_lock(state_dir: str) -> FileLock:
    """One controller per state dir: an flock the kernel drops when the process dies (SIGKILL included)."""
    return FileLock(Path(state_dir) / "controller.lock", "controller")
