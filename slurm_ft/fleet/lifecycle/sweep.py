"""`slurm-ft sweep`: one pass over the fleet for cron or a systemd timer.

classify (pure, reconcile.py) -> act -> report only what changed:
  1. record what the controller and the checks did to Slurm (faults, quarantines, swaps);
     quarantine failed nodes nobody took out of the partitions (after a grace for the controller);
  2. validate repaired nodes, and re-check idle spares on a schedule, each as a job in a maintenance
     reservation of its own, so that nothing else lands on the node meanwhile;
  3. a node that passes goes back to the spare pool, resumed; one that fails is drained and quarantined
     again (or put on the RMA list by the lemon rule);
  4. compare the pool with the plan and alert when short (once per change, not every run);
  5. write the Prometheus textfile.
A lock in the state directory keeps two sweeps from overlapping; the second exits 5.
"""
from __future__ import annotations

import json
import logging
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple, TypedDict

from slurm_ft.config import Config
from slurm_ft.errors import CommandError, UsageError
from slurm_ft.fleet.report import fleet_view
from slurm_ft.fleet.recovery import journal
from slurm_ft.fleet.lifecycle import remedy_act
from slurm_ft.breaker import guard
from slurm_ft.node.levels import LEVELS
from slurm_ft.filelock import FileLock
from slurm_ft.slurm.membership import Delta, Membership
from slurm_ft.fleet.lifecycle.pool import pool_target
from slurm_ft.fleet.lifecycle.remedy_act import take_reset_gpus
from slurm_ft.fleet.lifecycle.reconcile import Change, classify, leave_alone
from slurm_ft.fleet.lifecycle.transitions import Event, HistoryEntry, State, default_state
from slurm_ft.fleet.lifecycle.node_history import Store
from slurm_ft.fleet.lifecycle.sweep_report import SweepReport
from slurm_ft.slurm.types import Job, Node
from slurm_ft import vocab
from slurm_ft.vocab import owned

if TYPE_CHECKING:
    from slurm_ft.slurm.api import SlurmApi

log = logging.getLogger(__name__)

PASS_MARK = "slurm-ft-validate: PASS"
FAIL_MARK = "slurm-ft-validate: FAIL"
ENDED = vocab.ENDED_JOB_STATES | {"NODE_FAIL"}     # a validation job's node failing ends it


class _Lemon(TypedDict):
    """Store.apply's lemon-rule keywords (Sweeper.lemon)."""
    lemon_k: int
    lemon_window_s: float


class Sweeper:
    def __init__(self, config: Config, client: SlurmApi, store: Store, *, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, actor: str = "sweep"):
        self.cfg = config
        self.lc = config.lifecycle
        self.client = client
        self.store = store
        self.clock = clock
        self.sleep = sleep
        self.actor = actor
        self.spare = config.controller.spare_partition
        self.lemon = _Lemon(lemon_k=self.lc.lemon_incidents, lemon_window_s=self.lc.lemon_window_days * 86400.0)
        # every partition/reservation edit as a delta under the fleet lock the controller takes too
        self.membership = Membership.from_config(client, config, f"{actor}'s partition change")
        self.last_nodes: Optional[Sequence[Node]] = None   # Slurm's nodes at the end of the last pass

    # --- the pass ---------------------------------------------------------------------------

    def run(self, wait_s: Optional[float] = None) -> SweepReport:
        report = SweepReport(started=self.clock())
        nodes = self.client.nodes()
        job_parts = self.job_partitions()
        records = self.store.records()
        work = classify(nodes, {n: r.state for n, r in records.items()},
                        {n: r.last_pass for n, r in records.items()}, self.clock(),
                        spare_partition=self.spare, job_partitions=job_parts, grace_s=self.lc.quarantine_grace_s,
                        recheck_s=self.lc.spare_recheck_s, swapped=self._swapped_spares())
        work, skipped = leave_alone(work, self.cfg.keep_off_nodes)
        for name, what in sorted(skipped.items()):
            log.warning("keep_off: %s: the sweep leaves it alone (would %s)", name, what)
        by_name = {n.name: n for n in nodes}
        for name in work.enrol:   # silent: a spare we had not recorded yet
            self.store.enrol(name, State.SPARE, self.clock(), cause=f"in {self.spare}", actor=self.actor)
        for change in work.changes:
            self._guarded(report, change.node, lambda: self._apply_change(report, change, by_name[change.node]))
        revalidate: Dict[str, Sequence[str]] = {}
        for name in work.revalidate:
            self._guarded(report, name, lambda: revalidate.update(self._revalidate(report, by_name[name])))
        remedied: List[str] = []
        # the first read stands for the whole pass while the pass has changed nothing in Slurm: a quiet sweep
        # reads every node once (each read is one of the whole fleet for slurmctld)
        unchanged = nodes if not (work.changes or work.revalidate or report.changes or report.errors) else None
        if self.lc.remediation.mode != "off":   # reset, reboot or RMA what the policy can decide alone
            remedied = remedy_act.run(self, report, dry_run=self.lc.remediation.mode == "dry_run", nodes=unchanged)
            unchanged = unchanged if not (remedied or report.changes or report.errors) else None
        if self.lc.remediation.mode != "on":    # a planned swap's node is validated in every mode: nothing to repair
            remedied += remedy_act.run(self, report, only_planned=True, nodes=unchanged)
        if remedied:
            by_name.update({n.name: n for n in self.client.nodes(remedied)})
        running: Dict[str, int] = {}
        for name in work.poll:
            rec = self.store.record(name)
            if rec and rec.validation_job:
                running[name] = rec.validation_job
            else:   # a sweep died between recording and submitting: start over
                self._guarded(report, name, lambda: running.update(self._start(report, by_name[name], recheck=False)))
        for name in [*work.validate, *remedied]:
            self._guarded(report, name, lambda: running.update(self._start(report, by_name[name], recheck=False)))
        for name, levels in revalidate.items():
            self._guarded(report, name, lambda: running.update(self._start(report, by_name[name], recheck=False,
                                                                           levels=levels)))
        for name in work.recheck:
            self._guarded(report, name, lambda: running.update(self._start(report, by_name[name], recheck=True)))
        self._wait(report, running, self.lc.validate_wait_s if wait_s is None else wait_s)
        self._pool(report, unchanged if not (remedied or running or report.changes or report.errors) else None)
        report.finished = self.clock()
        self.store.kv_set_json("last_sweep", {"time": report.finished, "elapsed_s": report.finished - report.started,
                                              "changes": len(report.changes), "alerts": len(report.alerts)})
        return report

    def _swapped_spares(self) -> List[str]:
        journal.ensure(self.store.db)
        return sorted({s for inc in journal.incidents(self.store.db) for s in inc.spares})

    def job_partitions(self) -> Tuple[str, ...]:
        configured = tuple(self.cfg.controller.job_partitions)
        if configured:
            return configured
        return tuple(p.name for p in self.client.partitions() if p.name != self.spare)

    def _guarded(self, report: SweepReport, node: str, fn: Callable[[], object]) -> None:
        """One node's trouble (a Slurm error, a refused transition) must not stop the sweep."""
        try:
            fn()
        except (CommandError, UsageError) as exc:   # TransitionError is a UsageError
            report.errors.append(f"{node}: {exc}")
            log.warning("%s: %s", node, exc)

    # --- recording what others did ----------------------------------------------------------

    def _apply_change(self, report: SweepReport, change: Change, node: Node) -> None:
        if change.act == "quarantine":
            self.take_out(change.node)
        entry = self._record(change.node, change.event, change.cause, node)
        if entry.to_state in (State.QUARANTINED, State.RMA):
            self.mark_quarantined(change.node, entry.to_state)
        report.changes.append(f"{change.node}: {entry.from_state} -> {entry.to_state} ({_short(entry.cause)})")
        if entry.to_state is State.RMA:
            report.alerts.append(f"{change.node}: on the RMA list ({_short(entry.cause)})")

    def mark_quarantined(self, name: str, state: State) -> None:
        """Rewrite the drain reason to `slurm-ft: QUARANTINED ...`: a later healthy check must not resume
        the node (the health check resumes only drains whose fault code its level can re-check); only
        a passed validation brings it back. Never an admin's reason (theirs, as they wrote it), nor a
        node handed to validation (REVALIDATE: the next step needs that word)."""
        node = self.client.node(name)
        if not (node.drained or node.state == "DOWN"):   # DOWN: back from a reboot that did not help
            return
        if vocab.admins(node.reason, self.cfg.controller.slurm_fault_reasons):
            return
        if vocab.revalidation(node.reason) and state is State.QUARANTINED:
            return
        self.client.drain([name], vocab.rewritten_reason("RMA" if state is State.RMA else "QUARANTINED", node.reason))

    def _resume(self, name: str) -> None:
        """Resume if still drained (a health check may have resumed it meanwhile), or DOWN after the
        remediation's reboot (nextstate=DOWN)."""
        node = self.client.node(name)
        if node.drained or node.state == "DOWN":
            self.client.resume([name])

    def _record(self, name: str, event: Event, cause: str, node: Optional[Node] = None) -> HistoryEntry:
        default = State.SPARE if event is Event.SWAP_IN else default_state(node.partitions if node else (), self.spare)
        return self.store.apply(name, event, self.clock(), default=default, cause=cause, actor=self.actor,
                                **self.lemon)

    def take_out(self, name: str) -> List[str]:
        """Remove a node from every job partition and the spare pool (a delta under the fleet lock)."""
        return self.membership.remove(name, [self.spare, *self.job_partitions()])

    def put_in_pool(self, name: str) -> bool:
        """Add the node to the pool unless a job partition holds it now (the controller swapped it in)."""
        with self.membership.locked():
            parts = self.membership.partitions()
            serving = [p for p in self.job_partitions() if p in parts and name in parts[p].nodes]
            if serving:
                log.warning("%s: in %s, not returned to %s", name, ",".join(serving), self.spare)
                return False
            self.membership.change({self.spare: Delta(add=(name,))}, parts)
            return True

    # --- validation jobs ----------------------------------------------------------------------

    def reservation_name(self, node: str) -> str:
        return f"{self.lc.maintenance_reservation}-{node}"

    def _revalidate(self, report: SweepReport, node: Node) -> Dict[str, Sequence[str]]:
        """A node quarantined for not answering answers again (the controller's REVALIDATE reason): repaired
        in the lifecycle, validated in this sweep. It stopped with a wave of others (`outage, `): the spare
        re-check levels, as for an idle spare; alone (its own hang looks the same): the full validation."""
        rec = self.store.record(node.name)
        if rec is None or rec.state is not State.QUARANTINED:
            return {}          # the lemon rule put it on the RMA list, or something else holds it
        cause, outage = vocab.revalidation(node.reason) or (node.reason, False)
        entry = self._record(node.name, Event.REPAIRED, cause, node)
        report.changes.append(f"{node.name}: {entry.from_state} -> {entry.to_state} ({_short(cause)})")
        return {node.name: self.lc.spare_recheck_levels if outage else self.lc.validate_levels}

    def _start(self, report: SweepReport, node: Node, *, recheck: bool,
               levels: Optional[Sequence[str]] = None) -> Dict[str, int]:
        if levels is None:
            levels = self.lc.spare_recheck_levels if recheck else self.lc.validate_levels
        name = node.name
        resv = self.reservation_name(name)
        minutes = max(1, int(self.lc.validate_timeout_s // 60) + 5)
        with self.membership.locked():   # the controller takes spares under this lock: check and reserve at once
            if recheck and not self._idle_spare(name):
                return {}
            # 1. reserve first: from here on nothing but our job can land on the node, and the controller
            #    no longer takes it (a reserved node is not available)
            self._drop_reservation(resv)
            self.membership.reserve([name], resv, duration=str(minutes), flags=("MAINT", "IGNORE_JOBS"),
                                    users=("root",))
            try:   # 2. a repaired node sits in no partition and is drained: into the pool's partition
                if not recheck and not self.put_in_pool(name):
                    raise UsageError(f"in a job partition; not validated (run `slurm-ft node quarantine {name}`)")
            except BaseException:
                self._drop_reservation(resv)
                raise
        try:
            if not recheck:
                self._resume(name)
            out = self.out_dir() / f"{name}-{int(self.clock())}.out"
            options = [f"--job-name=slurm-ft-validate-{name}", f"--partition={self.spare}", f"--reservation={resv}",
                       f"--nodelist={name}", "--nodes=1", "--exclusive", "--no-requeue",
                       f"--time={max(1, int(self.lc.validate_timeout_s // 60))}", f"--output={out}"]
            resets = [] if recheck else take_reset_gpus(self.store, name)
            job_id = self.client.submit(validation_script(name, levels, self._check_argv(), options,
                                                          reset_gpus=resets,
                                                          reset_argv=[*self._ft_argv(), "gpu-reset", "--gpu"]))
        except BaseException:
            # a spare must not stay reserved (out of the controller's reach) for a job that never came
            self._drop_reservation(resv)
            raise
        entry = self._record(name, Event.VALIDATE,
                             f"{'re-check' if recheck else 'validation'} job {job_id}: {' + '.join(levels)}", node)
        self.store.set_validation(name, job_id, self.clock())
        self.store.kv_set(f"validation_out:{name}", str(out))
        if not recheck:   # a routine re-check is news only when it fails
            report.changes.append(f"{name}: {entry.from_state} -> validating (job {job_id}, {' + '.join(levels)})")
        return {name: job_id}

    def _idle_spare(self, name: str) -> bool:
        """Still in the pool only, and available: the controller may have swapped it in since our read."""
        parts = self.membership.partitions()
        pool = parts[self.spare].nodes if self.spare in parts else ()
        serving = any(name in parts[p].nodes for p in self.job_partitions() if p in parts)
        return name in pool and not serving and self.client.node(name).available

    def _ft_argv(self) -> List[str]:
        """`slurm-ft --config FILE` as the validation job runs it on the node."""
        argv = list(self.lc.validate_command) or [sys.executable, "-m", "slurm_ft"]
        if self.cfg.path:
            argv += ["--config", self.cfg.path]
        return argv

    def _check_argv(self) -> List[str]:
        return self._ft_argv() + ["check"]

    def out_dir(self) -> Path:
        d = Path(self.cfg.state_dir) / "validation"
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        return d

    def _wait(self, report: SweepReport, running: Dict[str, int], wait_s: float) -> None:
        deadline = self.clock() + max(0.0, wait_s)
        left = dict(running)
        while left:
            for name, job_id in list(left.items()):
                verdict = self._verdict(name, job_id)
                if verdict is not None:
                    del left[name]
                    self._guarded(report, name, lambda: self._finish(report, name, job_id, *verdict))
            if not left or self.clock() >= deadline:
                break
            self.sleep(0.5)
        report.pending.extend(f"{n} (job {j})" for n, j in sorted(left.items()))

    def _verdict(self, name: str, job_id: int) -> Optional[Tuple[bool, str]]:
        """(passed, why) once the validation job has ended, None while it runs."""
        out = Path(self.store.kv_get(f"validation_out:{name}") or "/nonexistent")
        try:
            job: Optional[Job] = self.client.job(job_id)
        except UsageError:
            job = None   # finished and gone from slurmctld's list: the output file decides
        if job is not None and job.state not in ENDED:
            return None
        text = out.read_text(errors="replace") if out.exists() else ""
        return read_verdict(text, job.state if job else "gone", job_id)

    def _finish(self, report: SweepReport, name: str, job_id: int, passed: bool, why: str) -> None:
        self._prune_outputs(name)
        rec = self.store.record(name)
        recheck = bool(rec and rec.cause.startswith("re-check"))
        resv = self.reservation_name(name)
        node = self.client.node(name)
        if passed:
            with self.membership.locked():   # in the pool before the reservation ends: never in neither
                self.put_in_pool(name)
                self._drop_reservation(resv)
            if node.drained and owned(node.reason):
                self._resume(name)
            self._record(name, Event.PASS, why, node)
            if not recheck:   # a spare that passes its routine re-check is no news
                report.changes.append(f"{name}: validating -> spare ({_short(why)})")
            return
        if why.endswith("without a verdict") and node.drained:   # e.g. our prolog failed it before it ran
            why += f" (node drained: {node.reason})"
        reason = vocab.validation_failed_reason(why)
        if recheck:
            decision = guard.may_drain(self.cfg, name, client=self.client, actor=self.actor,
                                       now=self.clock())
            if not decision.allowed:
                self._drop_reservation(resv)
                self._record(name, Event.PASS, f"re-check failed ({why}) but not quarantined: {decision.reason}", node)
                report.alerts.append(f"{name}: spare failed its re-check ({_short(why)}); {decision.reason}")
                return
        self.client.drain([name], reason)   # drained before the reservation ends: the controller never takes it
        self.take_out(name)
        self._drop_reservation(resv)
        entry = self._record(name, Event.FAIL, why, node)
        self.mark_quarantined(name, entry.to_state)
        report.changes.append(f"{name}: validating -> {entry.to_state} ({_short(entry.cause)})")
        if entry.to_state is State.RMA:
            report.alerts.append(f"{name}: on the RMA list ({_short(entry.cause)})")

    def _prune_outputs(self, name: str) -> None:
        """Keep the latest validation output of a node (the one `node history` points at), drop older ones."""
        keep = self.store.kv_get(f"validation_out:{name}")
        for f in self.out_dir().glob(f"{name}-*.out"):
            if str(f) != keep:
                f.unlink(missing_ok=True)

    def _drop_reservation(self, resv: str) -> None:
        self.membership.unreserve(resv)

    # --- the pool against the plan ------------------------------------------------------------

    def _pool(self, report: SweepReport, nodes: Optional[Sequence[Node]] = None) -> None:
        nodes = self.client.nodes() if nodes is None else nodes
        self.last_nodes = nodes
        records = self.store.records()
        good = [n for n in nodes if self.spare in n.partitions and n.available and not self.cfg.keeps_off(n.name)
                and (records[n.name].state if n.name in records else State.SPARE) is State.SPARE]
        report.pool_size = len(good)
        report.pool_target, report.pool_target_source = pool_target(self.cfg, nodes, self.job_partitions())
        short = max(0, report.pool_target - report.pool_size)
        was = int(self.store.kv_get("pool_short_alerted", "0") or 0)
        if short > was:
            report.alerts.append(f"spare pool short: {report.pool_size} of {report.pool_target} "
                                 f"({report.pool_target_source})")
        elif was and not short:
            report.changes.append(f"spare pool back to {report.pool_size} of {report.pool_target}")
        self.store.kv_set("pool_short_alerted", str(short))


def validation_script(node: str, levels: Sequence[str], check_argv: Sequence[str],
                      sbatch_options: Sequence[str] = (), *, reset_gpus: Sequence[int] = (),
                      reset_argv: Sequence[str] = ()) -> str:
    """The batch script: each level in turn, a marker line the sweep reads back, no shell evaluation of data.

    `reset_gpus`: GPUs to reset first (the remediation's reset_gpu) with `reset_argv` + the index.

    Levels come from a closed set (a config value is never shell text); the node name and every
    argument are quoted all the same.
    """
    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise UsageError(f"unknown validation level {bad[0]!r} (valid: {', '.join(LEVELS)})")
    odd = [o for o in sbatch_options if not o.isprintable()]
    if odd:   # a newline would end the #SBATCH comment and start a shell command
        raise UsageError(f"sbatch option with control characters: {odd[0]!r}")
    cmd = " ".join(shlex.quote(a) for a in check_argv)
    where = "".join(c if c.isalnum() or c in "-_.[],:" else "?" for c in node)   # a comment line stays one line
    lines = ["#!/bin/sh"] + [f"#SBATCH {o}" for o in sbatch_options] + [
        f"# slurm-ft validation of {where}: {' + '.join(levels)} (submitted by `slurm-ft sweep`)",
    ]
    reset = " ".join(shlex.quote(a) for a in reset_argv)
    for gpu in reset_gpus:
        gpu = int(gpu)
        lines += [
            f"echo {shlex.quote(f'slurm-ft-validate: reset gpu{gpu}')}",
            f"{reset} {gpu}",
            "rc=$?",
            f'if [ "$rc" -ne 0 ]; then echo {shlex.quote(f"{FAIL_MARK} reset_gpu gpu{gpu} exit")} "$rc"; exit 1; fi',
        ]
    for level in levels:
        q = shlex.quote(level)
        lines += [
            f"echo {shlex.quote(f'slurm-ft-validate: level {level}')}",
            f"{cmd} --level {q} --json --node {shlex.quote(node)}",
            "rc=$?",
            f'if [ "$rc" -ne 0 ]; then echo {shlex.quote(f"{FAIL_MARK} {level} exit")} "$rc"; exit 1; fi',
        ]
    lines.append(f"echo {shlex.quote(PASS_MARK)}")
    return "\n".join(lines) + "\n"


def read_verdict(text: str, job_state: str, job_id: int) -> Tuple[bool, str]:
    """Pass only on the PASS marker; a failure names the failing findings when the output has them."""
    if PASS_MARK in text and job_state in ("COMPLETED", "gone"):
        return True, f"passed (job {job_id})"
    fails: List[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        for f in doc.get("findings", []) if isinstance(doc, dict) else []:
            if f.get("severity") == "fail":
                gpu = f" gpu{f['gpu']}" if f.get("gpu") is not None else ""
                fails.append(f"{f.get('code') or f.get('check')}{gpu} {f.get('reason', '')}".strip())
    marker = next((ln for ln in text.splitlines() if ln.startswith(FAIL_MARK)), "")
    if fails:
        return False, "; ".join(fails[:3])
    if marker:
        return False, marker[len("slurm-ft-validate: "):]
    return False, f"job {job_id} ended {job_state} without a verdict"


def _short(text: str, n: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def sweep_locked(config: Config, client: SlurmApi, *, wait_s: Optional[float] = None,
                 clock: Callable[[], float] = time.time) -> SweepReport:
    """The whole sweep under the state directory's lock (Busy, exit 5, when another holds it)."""
    with FileLock(Path(config.state_dir) / "sweep.lock", "sweep"):
        with Store(config.state_dir) as store:
            sweeper = Sweeper(config, client, store, clock=clock)
            report = sweeper.run(wait_s)
            try:                                      # metrics after the pass, from the same store and nodes
                fleet_view.write_metrics(config, client, store, report=report, nodes=sweeper.last_nodes)
            except OSError as exc:
                report.errors.append(f"metrics: cannot write {config.lifecycle.metrics_path}: {exc.strerror}")
    return report
