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

Planned swaps (job/planned.py decides): a node of the step told degraded (a `degraded` notice, or drained
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
import os
import signal
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from slurm_ft import heartbeat
from slurm_ft.job import ckpt, ckptfallback, ckptrequest, hang, jobstart, rendezvous, startlog
from slurm_ft.job.notices import Follower
from slurm_ft.job import hotplan as hp, planned as pl
from slurm_ft.job.nodefault import node_fault
from slurm_ft.slurm.client import SlurmClient
from slurm_ft.slurm.hostlist import compress
from slurm_ft.vocab import planned

if TYPE_CHECKING:
    from slurm_ft.slurm.api import SlurmApi

POLL_S = 0.05                # local only: the step's status and the output file's size
BACKSTOP_S = 300.0           # a read of the job's nodes from Slurm, for a fault no notice reported
BLIND_BACKSTOP_S = 10.0      # ... when the output is no file (no notices can be read)
QUARANTINE_WAIT_S = 1.0      # after a fault, how long the relaunch waits for the controller's quarantine
                             # notice before it reads the partitions itself (a quarantined node may leave)
STOP_GRACE_S = 10.0          # SIGTERM to srun, then SIGKILL
LAUNCH_ENV = "SLURM_FT_LAUNCH"   # the launch number within this start of the job (0, 1, ...)
HANG_POLL_S = 1.0            # progress reads per second (one small file per rank)
CHECK_TIMEOUT_S = 120.0      # the hang checks' srun, start-up included; then it is killed: no culprit
EXIT_CHECK_AFTER_S = 2.0     # a failed step with no fault shown this long gets the checks (the node's own
                             # watcher usually drains it within a second: no check on that path)
CKPT_POLL_S = 0.2            # while a checkpoint is asked for: how often the newest complete one is read
PLANNED_QUARANTINE_WAIT_S = 60.0   # a degraded node: the checkpoint is asked for once the controller took it
                             # out of the partition (it may then leave the job at the swap), or after this long
STRAGGLER_POLL_S = 2.0       # progress reads for stragglers (one small file per rank)


def srun_argv(nodes: Sequence[str], tasks_per_node: int, program: Sequence[str]) -> List[str]:
    n = len(nodes)
    return ["srun", f"--nodes={n}", f"--ntasks={n * tasks_per_node}", f"--ntasks-per-node={tasks_per_node}",
            f"--nodelist={compress(nodes)}", "--kill-on-bad-exit=1", *program]


def check_argv(nodes: Sequence[str], python: str = sys.executable, drain: bool = False) -> List[str]:
    """One srun of the prolog-level checks on each of `nodes`, beside the step (--overlap); with `drain`,
    each check drains its node on a fail finding (where the breaker and Slurm let it)."""
    n = len(nodes)
    return ["srun", "--overlap", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", f"--nodelist={compress(nodes)}",
            "--kill-on-bad-exit=0", "--label", python, "-m", "slurm_ft", "check", "--level", "prolog",
            *(["--drain"] if drain else []), "--json", "--no-state"]


def port_free_here(here: str) -> Callable[[str, int], bool]:
    """Whether a port is free on `node`, by binding it here when `node` is this host (rank 0 on the batch
    host, where the supervisor runs); another node's ports cannot be seen from here: taken as free."""
    def free(node: str, port: int) -> bool:
        if node != here:
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
        # planned swaps: degraded nodes (notices, PLANNED drains, stragglers), the checkpoint asked for
        self.degraded: Dict[str, str] = {}
        self.degraded_at: Dict[str, float] = {}    # monotonic time each was first seen degraded
        self.partitions_read: Set[str] = set()     # degraded nodes whose quarantine was read off the partitions
        self.straggling: Set[str] = set()          # degraded by this job's own reports (not drained by anyone)
        self.planned_said: Set[str] = set()
        self.ckpt_ask: Optional[pl.Ask] = None
        self.asks = 0
        self.planned_wait_s = planned_wait_s
        self.newest_ckpt: Optional[int] = None
        self.next_ckpt_read = 0.0
        self.stragglers = pl.Stragglers(*straggler) if straggler[0] > 0 else None
        self.next_straggler_poll = 0.0
        self.partitions = ""                       # the job's partitions (read at run())

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
        for x in got:               # out for a planned swap, and no notice of it came
            if x.drained and planned(x.reason) and x.name not in self.degraded:
                self.degraded[x.name] = x.reason
                self.log("notice", node=x.name, reason=x.reason[:300], kind="degraded", source="read")
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
            elif kind == "degraded":
                if node not in self.degraded:
                    self.degraded[node] = why or "degraded (slurm-ft notice)"
                    self.log("notice", node=node, reason=why[:300], kind="degraded")
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
            jobstart.log_event(self.ckpt_dir, {"event": event, "t": time.time(), "job": str(self.job_id),
                                               "restart": self.restart, **fields})

    def launch(self, nodes: Sequence[str], reason: str) -> Optional[int]:
        """Start the training step on `nodes`; an exit status when it cannot start (no checkpoint read)."""
        t0 = time.time()
        resolved, found, rc, fields = jobstart.prepare(self.argv, self.ckpt_dir, self.say, job=str(self.job_id),
                                                       m=self.ckpt_fails, restart=self.restart)
        if rc is not None:
            self.log("exit", rc=rc, reason="no checkpoint to start from", **fields)
            return rc
        env = dict(self.env)
        env.update(jobstart.ckpt_env(found, self.ckpt_dir))
        env[LAUNCH_ENV] = str(self.launches)
        rdv, rank0 = rendezvous.launch_env(self.env, nodes, self.addrs, self.job_id, self.restart, self.launches,
                                           port_free_here(self.env.get("SLURMD_NODENAME", "")))
        env.update(rdv)
        try:
            program = jobstart.exec_argv(resolved[0], resolved[1:])
        except OSError as exc:
            self.say(f"cannot run {resolved[0]}: {exc}")
            return 127
        argv = srun_argv(nodes, self.tasks_per_node, program)
        self.proc = subprocess.Popen(argv, env=env)
        self.step_nodes, self.exited_at, self.exit_checked = tuple(nodes), None, False
        self.launch_t, self.told_stragglers = time.time(), set()
        self.log("launch", launch=self.launches, nodes=compress(nodes), ckpt=env["SLURM_FT_CKPT"],
                 step=found.step if found and found.path else None, reason=reason, rank0=rank0,
                 master=f"{rdv['MASTER_ADDR']}:{rdv['MASTER_PORT']}", prepare_s=round(time.time() - t0, 3),
                 **fields)
        self.say(f"launch {self.launches} on {compress(nodes)}: {reason}")
        self.launches += 1
        return None

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def shrink(self, allocation: Sequence[str], release: Sequence[str]) -> Tuple[str, ...]:
        """The allocation without `release`, given back to Slurm; unchanged when the shrink fails."""
        keep = tuple(x for x in allocation if x not in release)
        if not release:
            return tuple(allocation)
        try:
            self.client.shrink(self.job_id, keep)
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
                           else 0.0, avoid={x: why for x, why in self.degraded.items() if x not in faults})
            act = self.planned_action(view, now) if self.ckpt_ask is not None and rc is not None else hp.Action("wait")
            if act.kind != "swap":
                act = hp.decide(view)
            if act.kind == "wait" and rc is None and (self.degraded or self.stragglers is not None):
                act = self.planned_action(view, now)
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
                self.stop()              # a hung step, when the restart limit ends the job
                self.log("exit", rc=act.rc, reason=act.reason)
                self.say(act.reason)
                assert act.rc is not None        # every exit action carries its status (hotplan.decide, hang_action)
                return act.rc
            if act.kind == "fallback":
                return self._fallback(act)
            if act.kind == "swap":
                rc, allocation = self.planned_swap(act, allocation, job.partition)
                if rc is not None:
                    return rc
                continue
            if act.kind == "restart":
                t0 = time.time()
                self.stop()
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
        self.ckpt_ask = None            # the relaunch leaves the degraded nodes out too: no swap is owed any more
        self.stop()
        self.log("stopped", nodes=compress(self.step_nodes), stop_s=round(time.time() - t_fault, 3))
        allocation = self.shrink(allocation, self.quarantined(partitions, act.release,
                                                              time.monotonic() + QUARANTINE_WAIT_S
                                                              - (time.time() - t_fault)))
        return self.launch(act.nodes, f"relaunch without {compress(act.failed)}"), allocation

    # --- planned swaps ----------------------------------------------------------------------------
    def planned_action(self, view: hp.View, now: float) -> hp.Action:
        """Degraded nodes of the step (notices, PLANNED drains, stragglers): ask for a checkpoint, then
        `swap` once it is there (job/planned.py decides); anything but a swap is carried out here."""
        self.watch_stragglers(now)
        if self.ckpt_ask is not None and (now >= self.next_ckpt_read or view.step_rc is not None):
            self.next_ckpt_read = now + CKPT_POLL_S
            self.newest_ckpt = self.read_newest()
        pv = pl.View(allocation=view.allocation, faults=view.faults, degraded=self.degraded,
                     batch_host=view.batch_host, train_nodes=view.train_nodes, step_nodes=view.step_nodes,
                     step_rc=view.step_rc, asked=self.ckpt_ask, newest_ckpt=self.newest_ckpt, now=now,
                     wait_s=self.planned_wait_s)
        act = pl.decide(pv)
        if act.kind == "request" and self.quarantine_pending(act, now, view):
            return hp.Action("wait")
        if act.kind == "request":
            self.ask(act, now)
        elif act.kind == "none" and act.failed and not set(act.failed) <= self.planned_said:
            self.planned_said |= set(act.failed)
            self.log("planned", phase="not_swapped", nodes=compress(act.failed), reason=act.reason[:1000])
            self.say(f"planned swap not possible: {act.reason}")
        return act if act.kind == "swap" else hp.Action("wait")

    def quarantine_pending(self, act: hp.Action, now: float, view: hp.View) -> bool:
        """Hold the ask until the controller has taken the drained degraded nodes out of the partition (its
        notice), so that the swap gives them back to Slurm; the step runs on meanwhile, nothing is lost.
        Past PLANNED_QUARANTINE_WAIT_S one read of the partitions decides, and the swap goes ahead either
        way (a node not quarantined stays in the job, unused). Stragglers wait for nobody."""
        drained = [x for x in act.failed if x not in self.straggling and x not in self.quarantine_notices
                   and x not in self.partitions_read]
        if not drained or not self.may_shrink:      # Slurm refuses this job's shrinks: nothing to wait for
            return False
        for x in drained:
            self.degraded_at.setdefault(x, now)
        if now - min(self.degraded_at[x] for x in drained) < PLANNED_QUARANTINE_WAIT_S:
            return True
        self.quarantine_notices.update(self.quarantined(self.partitions, drained, now))   # one read, no wait
        self.partitions_read.update(drained)
        return False

    def ask(self, act: hp.Action, now: float) -> None:
        """Ask the running launch for a checkpoint now (the file its ranks read: job/ckptrequest.py)."""
        newest = self.read_newest()
        mine = hang.current(heartbeat.read_all(self.ckpt_dir), hang.Launch(str(self.job_id), self.restart,
                                                                            self.launches - 1, self.launch_t))
        step = max((r["step"] for r in mine.values()), default=None)
        self.asks += 1
        if self.ckpt_dir:
            try:
                ckptrequest.request(self.ckpt_dir, str(self.job_id), self.restart, self.launches - 1,
                                    act.reason, self.asks)
            except OSError as exc:        # the periodic checkpoint (or the wait bound) still swaps
                self.say(f"cannot ask for a checkpoint in {self.ckpt_dir}: {exc}")
        self.ckpt_ask = pl.Ask(now, step, newest, act.failed)
        self.newest_ckpt, self.next_ckpt_read = newest, now + CKPT_POLL_S
        self.log("planned", phase="asked", nodes=compress(act.failed), step=step, newest=newest,
                 reason=act.reason[:1000])
        self.say(f"planned swap: {act.reason}")

    def read_newest(self) -> Optional[int]:
        try:
            found = ckpt.latest(self.ckpt_dir) if self.ckpt_dir else None
        except Exception as exc:   # noqa: BLE001 - an unreadable directory: the wait bound still swaps
            self.say(f"cannot read {self.ckpt_dir}: {exc}")
            return None
        return found.step if found is not None and found.path else None

    def planned_swap(self, act: hp.Action, allocation: Tuple[str, ...], partitions: str
                     ) -> Tuple[Optional[int], Tuple[str, ...]]:
        """Stop the step (it may have stopped itself after the checkpoint), give back the degraded nodes the
        controller quarantined and the stragglers, launch again without them: (launch's rc, allocation)."""
        t0 = time.time()
        self.log("planned", phase="swap", nodes=compress(act.failed), reason=act.reason[:1000])
        self.say(act.reason)
        self.stop()
        self.log("stopped", nodes=compress(self.step_nodes), stop_s=round(time.time() - t0, 3))
        self.ckpt_ask = None
        if self.ckpt_dir:
            ckptrequest.clear(self.ckpt_dir)
        # stragglers were judged by this job alone: nobody quarantines them, and nothing keeps them here
        drained = [x for x in act.release if x not in self.straggling]
        out = self.quarantined(partitions, drained, time.monotonic() + QUARANTINE_WAIT_S)
        if self.may_shrink:
            out = (*out, *(x for x in act.release if x in self.straggling))
        allocation = self.shrink(allocation, out)
        return self.launch(act.nodes, f"planned swap without {compress(act.failed)}"), allocation

    def watch_stragglers(self, now: float) -> None:
        """Every STRAGGLER_POLL_S: nodes of the step far slower than the others for long enough are degraded."""
        if self.stragglers is None or now < self.next_straggler_poll or self.proc is None:
            return
        self.next_straggler_poll = now + STRAGGLER_POLL_S
        at = hang.Launch(str(self.job_id), self.restart, self.launches - 1, self.launch_t)
        mine = hang.current(heartbeat.read_all(self.ckpt_dir), at)
        found = self.stragglers.update(mine, time.time())
        for node, why in found.items():
            if node in self.step_nodes and node not in self.degraded:
                self.degraded[node] = why
                self.straggling.add(node)
                self.log("straggler", launch=at.launch, node=node, reason=why)
                self.say(f"straggler: {node}: {why}")

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
        used = sum(1 for r in startlog.read(os.path.join(self.ckpt_dir, jobstart.STARTS_LOG))
                   if r.get("event") == "hang_restart" and r.get("job") == str(self.job_id))
        if not hang.restarts_left(self.max_restarts, self.restart, used):
            return hp.Action("exit", rc=hp.EXIT_RESTART_LIMIT,
                             reason=f"hung with no culprit and the restart limit is used up ({self.restart} requeue(s) "
                                    f"+ {used} restart(s) in place of max_restarts {self.max_restarts}): {why}")
        self.log("hang_restart", launch=self.launches - 1, restarts=self.restart + used + 1)
        return hp.Action("restart", nodes=self.step_nodes, reason=f"restart in place after a hang, no culprit: {why}")

    def check_nodes(self, nodes: Sequence[str], drain: bool = False) -> Dict[str, str]:
        """node -> why, for the nodes the prolog-level checks fail (with `drain`, each drains itself when it may)."""
        try:
            proc = subprocess.Popen(check_argv(nodes, drain=drain), env=self.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True, errors="replace")
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

    def quarantined(self, partitions: str, nodes: Sequence[str], until: float) -> Tuple[str, ...]:
        """Those of `nodes` the controller has taken out of the job's partitions: it saw them failed in
        the job and journaled the incident, so they may leave the job. Its notice says so; without one by
        `until` (monotonic), one read of the partitions does. The others stay in the job, unused, until
        the next relaunch (no longer wait for the controller on the way back to training)."""
        if not nodes or not self.may_shrink:
            return ()
        while not set(nodes) <= self.quarantine_notices and self.notices is not None and time.monotonic() < until:
            time.sleep(self.poll_s)
            self.take_notices()
        if set(nodes) <= self.quarantine_notices:
            return tuple(nodes)
        try:
            members = {x for p in partitions.split(",") if p for x in self.client.partition(p).nodes}
        except Exception as exc:   # noqa: BLE001 - cannot tell: keep them for now
            self.say(f"cannot read partition {partitions}: {exc}")
            return tuple(x for x in nodes if x in self.quarantine_notices)
        return tuple(x for x in nodes if x not in members or x in self.quarantine_notices)

    def _fallback(self, act: hp.Action) -> int:
        """Hand over to the controller: stop the step and keep the failed nodes in the job so Slurm
        shows them; the controller requeues the job (which ends this process)."""
        self.stop()
        self.log("fallback", nodes=compress(act.failed) if act.failed else "", reason=act.reason[:1000])
        self.say(f"no hot spare left: {act.reason}; waiting for the controller to requeue the job")
        while True:                  # until the requeue kills the batch step (or the job's time limit)
            time.sleep(3600)


def _int(text: Optional[str], default: int) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default


def planned_settings(node: str) -> Tuple[float, Tuple[float, float]]:
    """(lifecycle.planned_wait_s, (straggler_ratio, straggler_window_s) of the node type of `node`) from
    slurm-ft's config where this job can read it, else the defaults (a job runs on without it)."""
    from slurm_ft.config import Config, SoftSignals, load_config  # lazy: yaml; the starter's own steps need none
    try:
        config = load_config()
    except Exception as exc:  # noqa: BLE001 - no config to read: the defaults
        print(f"slurm-ft supervisor: config not read ({exc}); planned-swap defaults", file=sys.stderr)
        config = Config()
    try:
        soft = config.health.type_of(node)[1].soft
    except Exception:  # noqa: BLE001 - a bad node_type_of entry: the defaults
        soft = SoftSignals()
    return config.lifecycle.planned_wait_s, (soft.straggler_ratio, soft.straggler_window_s)


def main(ckpt_dir: str, train_nodes: Optional[int], argv: Sequence[str], hang_timeout: float = 0,
         max_restarts: int = 0, ckpt_fails: int = ckptfallback.DEFAULT_M) -> int:
    job = os.environ.get("SLURM_JOB_ID", "")
    if not job.isdigit():
        print("slurm-ft supervisor: not inside a Slurm job (no SLURM_JOB_ID)", file=sys.stderr)
        return 2
    wait_s, straggler = planned_settings(os.environ.get("SLURMD_NODENAME", ""))
    return Supervisor(SlurmClient(), int(job), train_nodes, ckpt_dir, argv, hang_timeout=hang_timeout,
                      max_restarts=max_restarts, ckpt_fails=ckpt_fails, planned_wait_s=wait_s,
                      straggler=straggler if train_nodes else (0.0, 0.0)).run()
