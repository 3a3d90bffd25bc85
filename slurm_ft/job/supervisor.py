"""The hot-spare supervisor: the batch step of a `slurm-ft sbatch --hot-spares K -N N` job.

    jobstart --ckpt-dir DIR --hot-spares K --train-nodes N -- PROGRAM [ARGS...]

Runs as the user, inside the job: no root, nothing of the controller. It launches the training step,
`srun -N N --nodelist=<N healthy nodes of the allocation> --kill-on-bad-exit=1 PROGRAM ARGS` (with
{ckpt} resolved to the latest complete checkpoint at every launch), and learns of its nodes' faults by
event: the node that drains itself, and the controller, tell the job (`scontrol notify`), and the
supervisor reads those notices in its own output file (notices.py), without a Slurm call. It reads its
nodes from Slurm only at its start, every BACKSTOP_S (a fault no notice reported), and before it ends a
job on a failed step. What it does about a fault is hotplan.decide's answer; this module only carries it out:
stop the step, shrink the job to give back the failed nodes the controller has quarantined already (so
it saw them in the job and journaled the incident; the others at a later relaunch), launch the step again
on healthy nodes. Each
action is one JSON line in DIR/slurm-ft-starts.jsonl (the controller and `lab demo` read it).

With `--hang-timeout S` (also without hot spares: K = 0) it watches the ranks' progress reports
(slurm_ft.progress, heartbeat.py): no report from the running launch for S seconds (2 S before its
first) is a hang. It then runs the prolog-level checks on every node of the step at once (one `srun
--overlap --label` of `slurm-ft check --level prolog --json`, bounded by CHECK_TIMEOUT_S; they look and
drain nothing): a node they fail is a culprit, checked again with --drain, and takes the fault path above (relaunch without it, or the requeue fallback); with
none, the step restarts in place from the latest complete checkpoint, counted with Slurm's requeues
against the job's max_restarts (then the job ends, hotplan.EXIT_RESTART_LIMIT). hang.py decides, pure.
A step that fails while Slurm shows no fault on its nodes for EXIT_CHECK_AFTER_S gets the same checks once:
a culprit takes the fault path; with none, the job ends with the step's exit status after
hotplan.EXIT_GRACE_S.

Planned swaps (job/planned.py decides, job/planned_run.py carries it out): a node of the step told degraded (a `degraded` notice, or drained
PLANNED in a backstop read), or found a straggler in the ranks' progress reports, is no fault: the step runs
on while the supervisor asks the job for a checkpoint now (job/ckptrequest.py), then relaunches it without
that node from that checkpoint (no step done twice), within lifecycle.planned_wait_s.

Fail-safe: a failed read of Slurm is logged and the step runs on (no action on a guess); a failed
shrink is logged (the controller quarantines the node either way) and training goes on; a check
that cannot run names no culprit, and most of the step failing alike names none either (hang.systemic):
nothing is drained on a guess.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from slurm_ft import heartbeat
from slurm_ft.job import ckptfallback, hang, rendezvous, startlog, startprep
from slurm_ft.job.notices import Follower
from slurm_ft.job import hotplan as hp
from slurm_ft.job.planned_run import PlannedSwaps, settings
from slurm_ft.job.nodefault import node_fault
from slurm_ft.slurm.client import SlurmClient
from slurm_ft.slurm.hostlist import compress

if TYPE_CHECKING:
    from slurm_ft.slurm.api import SlurmApi

POLL_S = 0.05                # local only: the step's status and the output file's size
BACKSTOP_S = 300.0           # a read of the job's nodes from Slurm, for a fault no notice reported
                             # (lifecycle.job_backstop_s)
BLIND_BACKSTOP_S = 10.0      # ... when the output is no file (no notices can be read)
QUARANTINE_WAIT_S = 1.0      # after a fault, how long the relaunch waits for the controller's quarantine
                             # notice before it reads the partitions itself (a quarantined node may leave)
REFILL_PHASE_S = 0.1         # an srun or a cancel starts within this after a whole second (refill_wait)
STOP_GRACE_S = 10.0          # SIGTERM to srun (it kills the step through slurmctld), then the step is cancelled
STEP_END_S = 120.0           # ... through slurmctld, and srun waited for again (or the controller's `ended`
                             # notice); then SIGKILL (not ended)
CANCELLED_END_S = 15.0       # ... but once slurmctld took every cancel, srun (stuck on an RPC of its own) is
                             # killed after this: the ranks are Slurm's to kill
CANCEL_RETRY_S = 5.0         # a cancel that did not reach slurmctld is sent again after this
ENDED_RECHECK_S = 2.0        # an `ended` notice is checked against Slurm's step list at most this often
FALLBACK_REQUEUE_S = 120.0   # a job handed to the requeue path that nothing requeued: the supervisor does
REQUEUE_RETRY_S = 5.0        # ... and tries again after a refused or timed-out requeue, doubling the wait
REQUEUE_RETRY_MAX_S = 60.0   # ... up to this
LAUNCH_ENV = "SLURM_FT_LAUNCH"   # the launch number within this start of the job (0, 1, ...)
HANG_POLL_S = 1.0            # progress reads per second (one small file per rank)
CHECK_TIMEOUT_S = 120.0      # the hang checks' srun, start-up included; then it is killed: no culprit
EXIT_CHECK_AFTER_S = 2.0     # a failed step with no fault shown this long gets the checks (the node's own
                             # watcher usually drains it within a second: no check on that path)


def srun_argv(nodes: Sequence[str], tasks_per_node: int, program: Sequence[str], name: Optional[str] = None) -> List[str]:
    """The training step's srun; `name` names the step (not the job), so that it alone can be cancelled."""
    n = len(nodes)
    return ["srun", f"--nodes={n}", f"--ntasks={n * tasks_per_node}", f"--ntasks-per-node={tasks_per_node}",
            f"--nodelist={compress(nodes)}", "--kill-on-bad-exit=1", *([f"--job-name={name}"] if name else []),
            *program]


def refill_wait(now: float) -> float:
    """How long to wait before an srun (or a cancel) so that it starts just after a whole second of the
    clock `now`.

    slurmctld refills a user's token bucket on its whole seconds (rl_refill_period), and Slurm's client
    retries a refused RPC after 1 s, 2 s, 3 s ...: an srun started just after a refill asks just after
    every later one too, before the user's other clients (a loop of their own that keeps the bucket empty)
    have taken the tokens; started at any other moment, each retry is a draw against those clients."""
    frac = now % 1.0
    return 0.0 if frac <= REFILL_PHASE_S else 1.0 - frac


def check_argv(nodes: Sequence[str], python: str = sys.executable, drain: bool = False) -> List[str]:
    """One srun of the prolog-level checks on each of `nodes`, beside the step (--overlap); with `drain`,
    each check drains its node on a fail finding (where the breaker and Slurm let it)."""
    n = len(nodes)
    return ["srun", "--overlap", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", f"--nodelist={compress(nodes)}",
            "--kill-on-bad-exit=0", "--label", python, "-m", "slurm_ft", "check", "--level", "prolog",
            *(["--drain"] if drain else []), "--json", "--no-state"]


def port_free_here(here: str, addrs: Mapping[str, str] = {}) -> Callable[[str, int], bool]:
    """Whether a port is free on `node`, by binding it here when `node` is this host: the batch host, where
    the supervisor runs, or a node with its address (NodeAddr: nodes that share one host, as the lab's do,
    share its ports). Another host's ports cannot be seen from here: taken as free."""
    mine = addrs.get(here)

    def free(node: str, port: int) -> bool:
        if node != here and (not mine or addrs.get(node) != mine):
            return True
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as TCPStore binds: TIME_WAIT is no use
            try:
                s.bind(("", port))
            except OSError:
                return False
        return True
    return free


class Supervisor:
    def __init__(self, client: SlurmApi, job_id: int, train_nodes: Optional[int], ckpt_dir: str, argv: Sequence[str],
                 env: Optional[Mapping[str, str]] = None, poll_s: float = POLL_S, hang_timeout: float = 0,
                 max_restarts: int = 0, ckpt_fails: int = ckptfallback.DEFAULT_M,
                 notices: Optional[Follower] = None, backstop_s: float = BACKSTOP_S,
                 planned_wait_s: float = 1800.0, straggler: Tuple[float, float] = (0.0, 0.0),
                 say: Callable[[str], None] = lambda m: print(f"slurm-ft supervisor: {m}", file=sys.stderr,
                                                             flush=True)):
        self.client = client
        self.job_id = job_id
        self.n = train_nodes          # None: every node of the allocation (a K = 0 job watched for hangs)
        self.hang_timeout = hang_timeout
        self.max_restarts = max_restarts
        self.ckpt_fails = ckpt_fails
        self.launch_t = 0.0
        self.next_hang_poll = 0.0
        self.told_stragglers: Set[int] = set()
        self.ckpt_dir = ckpt_dir
        self.argv = list(argv)
        self.env: Dict[str, str] = dict(env if env is not None else os.environ)
        self.poll_s = poll_s
        self.say = say
        self.tasks_per_node = _int(self.env.get("SLURM_NTASKS_PER_NODE"), 1)
        self.restart = _int(self.env.get("SLURM_RESTART_COUNT"), 0)
        self.launches = 0
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.step_nodes: Tuple[str, ...] = ()
        self.exited_at: Optional[float] = None
        self.exit_checked = False  # the step of this launch failed with no known fault, and its nodes were checked
        self.may_shrink = True     # until Slurm refuses (22.05 without accounting: once per start of the job)
        # Every node seen failed in this run of the job, with why. A fault is never forgotten here: a
        # health check may resume a node it drained once the fault no longer shows (a drain-only fault,
        # an XID older than its look-back), and a node Slurm would not take back stays in the job.
        self.failed: Dict[str, str] = {}
        self.addrs: Dict[str, str] = {}    # node -> NodeAddr, from the last read of the nodes
        self.notices = notices             # None: the job's own output file, at run()
        self.backstop_s = backstop_s
        self.next_read = 0.0               # monotonic time of the next backstop read
        self.reads_due: List[float] = []   # reads before the job ends on a failed step (hotplan.EXIT_GRACE_S)
        self.quarantine_notices: Set[str] = set()   # nodes the controller says it quarantined
        self.ended_notices: Set[str] = set()        # nodes whose steps the controller says it cancelled
        self.ended_checked_at = float("-inf")       # monotonic time of the last check of such a notice
        self.hang_restarts = 0             # restarts in place after a hang, in this run of the job
        self.partitions = ""               # the job's partitions (read at run())
        self.planned = PlannedSwaps(self, planned_wait_s, straggler)   # degraded nodes, the checkpoint asked for

    # --- effects ----------------------------------------------------------------------------------
    def faults(self, nodes: Sequence[str]) -> Optional[Dict[str, str]]:
        """Read Slurm: node -> fault for those of `nodes` failed now or before in this run of the job; None
        when Slurm cannot be read (then nothing is decided)."""
        try:
            got = self.client.nodes(list(nodes))
        except Exception as exc:   # noqa: BLE001 - any failure to read is "unknown", never "healthy"
            self.say(f"cannot read node states ({exc}); the step runs on")
            return None
        self.failed.update({x.name: why for x in got for why in [node_fault(x)] if why})
        self.addrs.update({x.name: x.addr for x in got if x.addr})
        self.planned.seen(got)      # out for a planned swap, and no notice of it came
        return self.known(nodes)

    def known(self, nodes: Sequence[str]) -> Dict[str, str]:
        """node -> fault for those of `nodes` known failed (notices and reads so far)."""
        return {x: why for x, why in self.failed.items() if x in nodes}

    def take_notices(self) -> None:
        """What the node's side and the controller told the job since the last poll (no Slurm call)."""
        if self.notices is None:
            return
        for kind, node, why in self.notices.events():
            if kind == "quarantined":
                self.quarantine_notices.add(node)
            elif kind == "ended":
                self.ended_notices.add(node)
                self.log("notice", node=node, reason=why[:300])
            elif kind == "degraded":
                self.planned.notice(node, why)
            elif node not in self.failed:
                self.failed[node] = why or "failed (slurm-ft notice)"
                self.log("notice", node=node, reason=why[:300])

    def current_faults(self, allocation: Sequence[str], now: float) -> Dict[str, str]:
        """The allocation's known faults after this poll's notices, and a read of Slurm when one is due
        (the backstop, or before the job ends on a failed step)."""
        self.take_notices()
        if now >= self.next_read or (self.reads_due and now >= self.reads_due[0]):
            self.next_read = now + self.backstop_s
            self.reads_due = [t for t in self.reads_due if t > now]
            self.faults(allocation)
        return self.known(allocation)

    def log(self, event: str, **fields: object) -> None:
        if self.ckpt_dir:
            startprep.log_event(self.ckpt_dir, {"event": event, "t": time.time(), "job": str(self.job_id),
                                               "restart": self.restart, **fields})

    def launch(self, nodes: Sequence[str], reason: str) -> Optional[int]:
        """Start the training step on `nodes`; an exit status when it cannot start (no checkpoint read)."""
        t0 = time.time()
        # the last step the launch before reached, read before this one's ranks replace the reports: goodput's
        # redone steps after a relaunch, as jobstart's `before` after a requeue
        before = startprep.last_progress(self.ckpt_dir) if self.ckpt_dir else None
        resolved, found, rc, fields = startprep.prepare(self.argv, self.ckpt_dir, self.say, job=str(self.job_id),
                                                       m=self.ckpt_fails, restart=self.restart)
        if rc is not None:
            self.log("exit", rc=rc, reason="no checkpoint to start from", **fields)
            return rc
        env = dict(self.env)
        env.update(startprep.ckpt_env(found, self.ckpt_dir))
        env[LAUNCH_ENV] = str(self.launches)
        rdv, rank0 = rendezvous.launch_env(self.env, nodes, self.addrs, self.job_id, self.restart, self.launches,
                                           port_free_here(self.env.get("SLURMD_NODENAME", ""), self.addrs))
        env.update(rdv)
        try:
            program = startprep.exec_argv(resolved[0], resolved[1:])
        except OSError as exc:
            self.say(f"cannot run {resolved[0]}: {exc}")
            return 127
        argv = srun_argv(nodes, self.tasks_per_node, program)
        waited = refill_wait(time.time())
        time.sleep(waited)
        self.proc = subprocess.Popen(argv, env=env)
        self.step_nodes, self.exited_at, self.exit_checked = tuple(nodes), None, False
        self.ended_notices.clear()         # of an earlier step
        self.launch_t, self.told_stragglers = time.time(), set()
        self.log("launch", launch=self.launches, nodes=compress(nodes), ckpt=env["SLURM_FT_CKPT"],
                 step=found.step if found and found.path else None, reason=reason, rank0=rank0,
                 master=f"{rdv['MASTER_ADDR']}:{rdv['MASTER_PORT']}", prepare_s=round(time.time() - t0, 3),
                 refill_wait_s=round(waited, 3), before=before, **fields)
        self.say(f"launch {self.launches} on {compress(nodes)}: {reason}")
        self.launches += 1
        return None

    def stop(self) -> bool:
        """End the running step; whether it ended (end_step)."""
        return self.end_step(self.proc, STOP_GRACE_S)

    def end_step(self, proc: Optional["subprocess.Popen[bytes]"], grace_s: float, name: Optional[str] = None) -> bool:
        """End the step srun `proc` runs (named `name`, when several run); whether it ended (end_steps)."""
        return self.end_steps([(proc, name)], grace_s)

    def end_steps(self, runs: Sequence[Tuple[Optional["subprocess.Popen[bytes]"], Optional[str]]],
                  grace_s: float) -> bool:
        """End the steps these sruns run, each named when several run, all at once (one grace, one wait
        for the cancels, however many); whether every one ended. srun answers SIGTERM by killing the step
        through slurmctld (an RPC of the job's user: their rate limiter may hold it) and exits once the
        ranks are gone. A killed srun would not end them: its ranks run on, writing the checkpoint
        directory beside the next launch's (deleting the checkpoint it resumes from, in a loaded lab). So
        a step that outlives the grace is cancelled through slurmctld, and srun waited for again (or the
        controller's word that it cancelled the step, await_end). Once slurmctld took the cancel of every
        such step (or lists none: gone), its ranks are Slurm's to kill, and an srun still blocked on its
        own RPC is killed after CANCELLED_END_S. A cancel that did not reach slurmctld is sent again every
        CANCEL_RETRY_S; a step none of whose cancels got through within STEP_END_S is never launched beside
        (the caller's requeue path)."""
        live = [(p, n) for p, n in runs if p is not None and p.poll() is None]
        for p, _ in live:
            p.send_signal(signal.SIGTERM)
        late = _outlive(live, grace_s)
        if not late:
            return True
        one = len(late) == 1
        self.say(f"{_steps(late)} did not end {grace_s:g} s after SIGTERM: cancelling {'it' if one else 'them'} "
                 f"through Slurm")
        pending, deadline = list(late), time.monotonic() + STEP_END_S
        while pending:                       # a cancel that did not go through is sent again
            pending = self._cancel(pending)
            if not pending:
                break
            live = self.await_end(late, min(CANCEL_RETRY_S, max(0.0, deadline - time.monotonic())))
            if not live:
                return True                  # srun ended after all, or the controller ended the step
            if time.monotonic() >= deadline:
                _kill(live)
                one = len(live) == 1
                self.say(f"{_steps(live)} did not end {STEP_END_S:g} s after SIGTERM and "
                         f"{'its cancel' if one else 'their cancels'} did not reach Slurm: no launch beside "
                         f"{'it' if one else 'them'}")
                return False
            pending = [r for r in pending if r in live]
        left = self.await_end(late, CANCELLED_END_S)
        if left:
            self.say(f"srun did not exit {CANCELLED_END_S:g} s after slurmctld took the cancel of its step "
                     f"(it waits on an RPC of its own): killed; the ranks are Slurm's to kill")
            self.log("srun_killed", after_cancel_s=CANCELLED_END_S)
            _kill(left)
        return True

    def _cancel(self, runs: Sequence[Tuple["subprocess.Popen[bytes]", Optional[str]]]
                ) -> List[Tuple["subprocess.Popen[bytes]", Optional[str]]]:
        """Cancel each run's step through slurmctld (a step it lists no more is gone); those whose cancel
        did not go through (the user's RPCs time out on an empty bucket). Sent just after a refill of it."""
        time.sleep(refill_wait(time.time()))
        failed = []
        for run in runs:
            name = run[1]
            try:
                steps = self.client.steps(self.job_id, name)   # the training steps alone (checks are waited for)
                for step in steps:
                    self.client.cancel_step(self.job_id, step)
                self.log("cancel_step", steps=steps, **({"name": name} if name else {}))
            except Exception as exc:   # noqa: BLE001 - sent again until STEP_END_S; then the requeue path
                self.say(f"could not cancel the step{f' {name}' if name else ''}: {exc}")
                failed.append(run)
        return failed

    def await_end(self, runs: Sequence[Tuple["subprocess.Popen[bytes]", Optional[str]]], within_s: float
                  ) -> List[Tuple["subprocess.Popen[bytes]", Optional[str]]]:
        """Those of `runs` still running `within_s` from now. srun ends a step through slurmctld as the
        job's user, whose RPCs may wait minutes on an empty rate-limiter bucket; the controller (root, not
        limited) cancels a step left on a failed node and says so (an `ended` notice): its ranks are gone
        then, and srun, still waiting on its RPC, is killed (a killed srun leaves no rank behind now)."""
        deadline = time.monotonic() + within_s
        while True:
            live = [(p, n) for p, n in runs if p.poll() is None]
            if not live:
                return []
            self.take_notices()
            ended = self.ended_notices & set(self.step_nodes)
            if ended and len(runs) == 1 and self._steps_gone(runs[0][1], ended):
                self.say(f"the controller ended the step on {compress(sorted(ended))}: srun stopped")
                self.log("ended", nodes=compress(sorted(ended)))
                _kill(live)
                return []
            if time.monotonic() >= deadline:
                return live
            time.sleep(min(POLL_S * 4, max(0.0, deadline - time.monotonic())))

    def _steps_gone(self, name: Optional[str], nodes: Set[str]) -> bool:
        """An `ended` notice, checked: Slurm lists no step of this run on those nodes any more. The notice
        is a line of the job's output, which its own ranks can print; believed unchecked, a forged one
        would kill srun with its ranks still running (one step read of this job, every ENDED_RECHECK_S)."""
        now = time.monotonic()
        if now - self.ended_checked_at < ENDED_RECHECK_S:
            return False
        self.ended_checked_at = now
        try:
            return not self.client.steps(self.job_id, name, on=sorted(nodes))
        except Exception as exc:   # noqa: BLE001 - unread is not gone: the step is waited for as before
            self.say(f"cannot read the job's steps ({exc}): the controller's notice waits")
            return False

    def shrink(self, allocation: Sequence[str], release: Sequence[str], timeout: float = hp.GIVE_BACK_S
               ) -> Tuple[str, ...]:
        """The allocation without `release`, given back to Slurm; unchanged when the shrink fails or is
        not done within `timeout` (a shrink still waiting on the user's bucket then: the nodes stay, unused)."""
        keep = tuple(x for x in allocation if x not in release)
        if not release:
            return tuple(allocation)
        try:
            if timeout <= 0:
                raise TimeoutError(f"no time left of the {hp.GIVE_BACK_S:g} s for giving nodes back")
            self.client.shrink(self.job_id, keep, timeout=timeout)
        except Exception as exc:   # noqa: BLE001 - the controller quarantines the node anyway
            self.say(f"could not give {compress(release)} back to Slurm: {exc}")
            self.log("release", nodes=compress(release), ok=False, error=str(exc)[:300])
            if hp.refuses_resize(str(exc)):   # each try costs ~5 s of slurmctld retries: not again
                self.may_shrink = False
            return tuple(allocation)
        self.env = hp.env_after_shrink(self.env, compress(keep), len(keep))
        self.log("release", nodes=compress(release), ok=True, allocation=compress(keep))
        self.say(f"gave {compress(release)} back to Slurm; the job holds {compress(keep)}")
        return keep

    # --- the loop ----------------------------------------------------------------------------------
    def run(self) -> int:
        job = self.client.job(self.job_id)
        allocation, batch_host = tuple(job.nodes), job.batch_host
        self.partitions = job.partition
        if self.n is None:
            self.n = len(allocation)
        if self.notices is None:
            self.notices = Follower.own_stderr()
            if self.notices is None:
                self.backstop_s = min(self.backstop_s, BLIND_BACKSTOP_S)
                self.say(f"the job's output is not a file: no notices of node faults can be read; reading Slurm "
                         f"every {self.backstop_s:g} s instead")
        first = hp.first_launch(allocation, self.faults(allocation) or {}, self.n)
        self.next_read = time.monotonic() + self.backstop_s
        if first.kind != "launch":
            return self._fallback(first)
        rc = self.launch(first.nodes, first.reason)
        if rc is not None:
            return rc
        while True:
            time.sleep(self.poll_s)
            assert self.proc is not None         # started by launch() above
            rc = self.proc.poll()
            now = time.monotonic()
            if rc is not None and self.exited_at is None:
                self.exited_at = now
                if rc != 0:              # Slurm's word before the job ends on this step's exit status
                    self.reads_due = [now + hp.EXIT_GRACE_S]
            faults = self.current_faults(allocation, now)
            view = hp.View(allocation=allocation, faults=faults, batch_host=batch_host, train_nodes=self.n,
                           step_nodes=self.step_nodes, step_rc=rc,
                           since_exit_s=now - self.exited_at if rc is not None and self.exited_at is not None
                           else 0.0, avoid=self.planned.avoid(faults))
            # a step that stopped after the checkpoint asked for: the swap, before hotplan reads its exit
            act = self.planned.action(view, now) if self.planned.ask is not None and rc is not None \
                else hp.Action("wait")
            if act.kind != "swap":
                act = hp.decide(view)
            if act.kind == "wait" and rc is None and self.planned.active:
                act = self.planned.action(view, now)
            if act.kind == "wait" and rc is None and self.hang_timeout and now >= self.next_hang_poll:
                self.next_hang_poll = now + HANG_POLL_S
                act = self.watch_progress(view)
            elif act.kind == "wait" and rc not in (None, 0) and not self.exit_checked \
                    and view.since_exit_s >= EXIT_CHECK_AFTER_S:
                self.exit_checked = True
                act = self.failed_step_action(view, rc)
            if act.kind == "wait":
                continue
            if act.kind == "exit":
                self.stop()              # a hung step, when the restart limit ends the job (ending it ends all)
                self.log("exit", rc=act.rc, reason=act.reason)
                self.say(act.reason)
                assert act.rc is not None        # every exit action carries its status (hotplan.decide, hang_action)
                return act.rc
            if act.kind == "fallback":
                return self._fallback(act)
            if act.kind == "swap":
                rc, allocation = self.planned.swap(act, allocation, job.partition)
                if rc is not None:
                    return rc
                continue
            if act.kind == "restart":
                t0 = time.time()
                if not self.stop():
                    return self._fallback(hp.Action("fallback", reason=f"{act.reason}; the old step would not end"),
                                          at_once=True)
                self.log("stopped", nodes=compress(self.step_nodes), stop_s=round(time.time() - t0, 3))
                rc = self.launch(act.nodes, act.reason)
            else:
                rc, allocation = self.relaunch(act, allocation, job.partition)
            if rc is not None:
                return rc

    def relaunch(self, act: hp.Action, allocation: Tuple[str, ...], partitions: str
                 ) -> Tuple[Optional[int], Tuple[str, ...]]:
        """Stop, give the failed nodes back while no step runs, start again: (launch's rc, the allocation now)."""
        t_fault = time.time()
        self.log("fault", nodes=compress(act.failed), reason=act.reason[:1000])
        self.say(f"fault: {act.reason}")
        self.planned.ask = None         # the relaunch leaves the degraded nodes out too: no swap is owed any more
        if not self.stop():
            return self._fallback(dataclasses.replace(act, kind="fallback",
                                                      reason=f"{act.reason}; the old step would not end"),
                                  at_once=True), allocation
        self.log("stopped", nodes=compress(self.step_nodes), stop_s=round(time.time() - t_fault, 3))
        notice_by = time.monotonic() + QUARANTINE_WAIT_S - (time.time() - t_fault)
        give_back_by = max(notice_by, time.monotonic()) + hp.GIVE_BACK_S
        out = self.quarantined(partitions, act.release, notice_by, give_back_by)
        allocation = self.shrink(allocation, out, give_back_by - time.monotonic())
        return self.launch(act.nodes, f"relaunch without {compress(act.failed)}"), allocation

    # --- hangs ------------------------------------------------------------------------------------
    def watch_progress(self, view: hp.View) -> hp.Action:
        """Read the ranks' reports: a straggler is told; a hang is checked for a culprit (see hang_action)."""
        at = hang.Launch(str(self.job_id), self.restart, self.launches - 1, self.launch_t)
        records = heartbeat.read_all(self.ckpt_dir)
        for s in hang.stragglers(records, at, self.hang_timeout):
            if s["rank"] not in self.told_stragglers:
                self.told_stragglers.add(s["rank"])
                self.log("straggler", launch=at.launch, **s)
                self.say(f"straggler: rank {s['rank']} on {s['host']} at step {s['step']}, others at {s['ahead_step']} "
                         f"({s['behind_s']} s behind)")
        why = hang.stalled(records, at, time.time(), self.hang_timeout)
        if why is None:
            return hp.Action("wait")
        self.log("hang", launch=at.launch, nodes=compress(self.step_nodes), reason=why)
        self.say(f"hang: {why}; checking the step's nodes")
        return self.hang_action(view, why)

    def checked(self, view: hp.View, event: str, **fields: object) -> hp.View:
        """`view` after the prolog-level checks looked at the step's nodes: their culprits are faults too.
        The checks look first and drain nothing; only believable culprits (hang.systemic: not most of the
        step failing alike, which is the checks' own trouble or the job's environment) are checked again
        with --drain, so that Slurm and the controller see them."""
        t0 = time.time()
        found = self.check_nodes(self.step_nodes)
        doubt = hang.systemic(found, len(self.step_nodes))
        if doubt:
            self.say(f"not believed, no culprit: {doubt}")
            found = {}
        elif found:
            self.check_nodes(sorted(found), drain=True)
        self.failed.update(found)
        faults = self.faults(view.allocation)
        self.log(event, nodes=compress(self.step_nodes), culprits=compress(sorted(found)),
                 check_s=round(time.time() - t0, 3), **fields, **({"not_believed": doubt} if doubt else {}))
        return dataclasses.replace(view, faults=dict(found if faults is None else faults))

    def failed_step_action(self, view: hp.View, rc: int) -> hp.Action:
        """The step failed and Slurm shows no fault on its nodes (yet): a GPU that failed without an Xid
        the node's watcher saw, or a watcher that is not running, would leave the job to end after
        EXIT_GRACE_S. The checks look now; a culprit takes the fault path at once."""
        self.say(f"the step exited {rc} with no node fault known; checking the step's nodes")
        return hp.decide(self.checked(view, "exit_check", rc=rc))

    def hang_action(self, view: hp.View, why: str) -> hp.Action:
        act = hp.decide(self.checked(view, "hang_check"))
        if act.kind != "wait":
            return act                  # a culprit: the fault path (relaunch without it, or fallback)
        # counted in the starts log (across this job's starts), and here: a job with no checkpoint
        # directory (submitted before that was refused) has no log, and must still stop restarting
        logged = sum(1 for r in startlog.read(os.path.join(self.ckpt_dir, startprep.STARTS_LOG))
                     if r.get("event") == "hang_restart" and r.get("job") == str(self.job_id)) if self.ckpt_dir else 0
        used = max(logged, self.hang_restarts)
        if not hang.restarts_left(self.max_restarts, self.restart, used):
            return hp.Action("exit", rc=hp.EXIT_RESTART_LIMIT,
                             reason=f"hung with no culprit and the restart limit is used up ({self.restart} requeue(s) "
                                    f"+ {used} restart(s) in place of max_restarts {self.max_restarts}): {why}")
        self.hang_restarts = used + 1
        self.log("hang_restart", launch=self.launches - 1, restarts=self.restart + used + 1)
        return hp.Action("restart", nodes=self.step_nodes, reason=f"restart in place after a hang, no culprit: {why}")

    def check_nodes(self, nodes: Sequence[str], drain: bool = False) -> Dict[str, str]:
        """node -> why, for the nodes the prolog-level checks fail (with `drain`, each drains itself when it may)."""
        try:
            # stderr to the job's: a check that could not see (no watcher on its node to read the kernel
            # log for the user) says so there, labelled by task
            proc = subprocess.Popen(check_argv(nodes, drain=drain), env=self.env, stdout=subprocess.PIPE,
                                    text=True, errors="replace")
        except OSError as exc:
            self.say(f"cannot run the hang checks: {exc}; no culprit")
            return {}
        try:
            out, _ = proc.communicate(timeout=CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            self.say(f"the hang checks took over {CHECK_TIMEOUT_S:g} s: killed")
        return hang.culprits(out or "")

    def quarantined(self, partitions: str, nodes: Sequence[str], until: float, read_by: Optional[float] = None
                    ) -> Tuple[str, ...]:
        """Those of `nodes` the controller has taken out of the job's partitions: it saw them failed in
        the job and journaled the incident, so they may leave the job. Its notice says so; without one by
        `until` (monotonic), one read of the partitions does (if done by `read_by`). The others stay in
        the job, unused, until the next relaunch (no longer wait for the controller on the way back to
        training)."""
        if not nodes or not self.may_shrink:
            return ()
        while not set(nodes) <= self.quarantine_notices and self.notices is not None and time.monotonic() < until:
            time.sleep(self.poll_s)
            self.take_notices()
        if set(nodes) <= self.quarantine_notices:
            return tuple(nodes)
        try:
            timeout = None if read_by is None else max(0.1, read_by - time.monotonic())
            members = {x for p in partitions.split(",") if p for x in self.client.partition(p, timeout).nodes}
        except Exception as exc:   # noqa: BLE001 - cannot tell: keep them for now
            self.say(f"cannot read partition {partitions}: {exc}")
            return tuple(x for x in nodes if x in self.quarantine_notices)
        return tuple(x for x in nodes if x not in members or x in self.quarantine_notices)

    def _fallback(self, act: hp.Action, at_once: bool = False) -> int:
        """Hand over to the controller: stop the step and keep the failed nodes in the job so Slurm
        shows them; the controller requeues the job (which ends this process). A fault only this
        supervisor saw (a node down for a moment, a controller that is not running) would leave the job
        idle: after FALLBACK_REQUEUE_S it requeues the job itself (its owner may); the controller then
        hands the incident to the requeue path and recovers it as any other. `at_once`: a reason the
        controller cannot see (an old step that would not end, where it still counts on this
        supervisor): requeued now. Logged first: a step slow to end (up to STEP_END_S) must not hide the
        decision from whoever reads the job's events."""
        self.log("fallback", nodes=compress(act.failed) if act.failed else "", reason=act.reason[:1000])
        self.stop()
        if not at_once:
            self.say(f"to the requeue path: {act.reason}; waiting for the controller to requeue the job")
            time.sleep(FALLBACK_REQUEUE_S)
            self.say(f"not requeued after {FALLBACK_REQUEUE_S:g} s: requeuing the job myself")
        else:
            self.say(f"to the requeue path: {act.reason}; requeuing the job myself")
        self.requeue_until_done("the old step would not end" if at_once else "not requeued by the controller")
        while True:                  # until the requeue kills the batch step (or the job's time limit)
            time.sleep(3600)

    def requeue_until_done(self, why: str) -> None:
        """`scontrol requeue` as the job's owner until slurmctld takes it: a user's RPCs wait on their rate
        limiter's bucket, which the user's own loops may keep empty, and a job whose requeue failed once
        would sit with no step until its time limit. A requeue that went through ends this process."""
        for attempt in itertools.count(1):
            try:
                self.client.requeue(self.job_id)
            except Exception as exc:   # noqa: BLE001 - any failure: try again; the job's time limit bounds it
                wait = min(REQUEUE_RETRY_MAX_S, REQUEUE_RETRY_S * 2 ** (attempt - 1))
                self.say(f"could not requeue the job (try {attempt}): {exc}; again in {wait:g} s")
                time.sleep(wait)
                continue
            self.log("requeue", reason=why, tries=attempt)
            return


def _kill(runs: Sequence[Tuple["subprocess.Popen[bytes]", Optional[str]]]) -> None:
    for p, _ in runs:
        p.kill()
        p.wait()


def _outlive(runs: Sequence[Tuple["subprocess.Popen[bytes]", Optional[str]]], within_s: float
             ) -> List[Tuple["subprocess.Popen[bytes]", Optional[str]]]:
    """Those of `runs` still running `within_s` from now: one deadline for all."""
    deadline = time.monotonic() + within_s
    late = []
    for p, name in runs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            late.append((p, name))
    return late


def _steps(runs: Sequence[object]) -> str:
    return "the step" if len(runs) == 1 else f"{len(runs)} steps"


def _int(text: Optional[str], default: int) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default


def main(ckpt_dir: str, train_nodes: Optional[int], argv: Sequence[str], hang_timeout: float = 0,
         max_restarts: int = 0, ckpt_fails: int = ckptfallback.DEFAULT_M) -> int:
    job = os.environ.get("SLURM_JOB_ID", "")
    if not job.isdigit():
        print("slurm-ft supervisor: not inside a Slurm job (no SLURM_JOB_ID)", file=sys.stderr)
        return 2
    wait_s, straggler, backstop_s = settings(os.environ.get("SLURMD_NODENAME", ""))
    return Supervisor(SlurmClient(), int(job), train_nodes, ckpt_dir, argv, hang_timeout=hang_timeout,
                      max_restarts=max_restarts, ckpt_fails=ckpt_fails, planned_wait_s=wait_s, backstop_s=backstop_s,
                      straggler=straggler if train_nodes else (0.0, 0.0)).run()
