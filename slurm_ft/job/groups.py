"""The replica-group supervisor: the batch step of a `slurm-ft sbatch --replica-groups R [--hot-spares K] -N N` job.

    jobstart --ckpt-dir DIR --replica-groups R --train-nodes N [--hot-spares K] -- PROGRAM [ARGS...]

Runs as the user, inside the job, like the hot-spare supervisor (supervisor.py, whose notices, reads of
Slurm, checks and fallback it reuses). It starts the torchft Lighthouse on the batch host
(`torchft_lighthouse`, from the job's PATH or beside this Python; its log in DIR/slurm-ft-lighthouse.log)
and one `srun` step per replica group of M = N / R nodes, each with

    TORCHFT_LIGHTHOUSE=http://<batch host>:<port>  REPLICA_GROUP_ID=g  NUM_REPLICA_GROUPS=R
    MASTER_ADDR/MASTER_PORT   the group's own store (rendezvous.py, a fresh port per launch)
    SLURM_FT_GROUP_REJOIN=1   when the other groups train on; {ckpt} is the newest complete checkpoint
                              either way: the group loads it, then heals from a peer ahead of it (torchft's
                              live recovery), or trains on from it when its first quorum holds no peer
    SLURM_FT_RANK_OFFSET      where the group's ranks start in the job (progress reports, heartbeat.py)

A fault on a node of group g (the node's notice, or the backstop read) stops g alone and relaunches it
on its healthy nodes plus an idle one (a hot spare), or parks it while none is left: the other groups
never stop. groupplan.decide says what; this module carries it out. The batch host failing (the
Lighthouse's), or fewer than paths.MIN_GROUPS groups able to run, takes the requeue path (the
supervisor's fallback). With `--hang-timeout S`, each group's progress is watched on its own: a group
that stops reporting is checked (the prolog-level checks on its nodes) and relaunched without a culprit
or, with none, restarted in place, within --max-restarts.

The Lighthouse runs with heartbeat_timeout_ms HEARTBEAT_MS (torchft's default: 5000): the pause of the
healthy groups at a fault is that timeout. slurm-ft stops a failed group's step itself within a poll of
the notice (a rank that hangs on a dead GPU keeps its group heartbeating otherwise: with two groups,
torchft's split-brain guard then blocks the quorum until it times out), so a shorter heartbeat timeout
is all the Lighthouse needs to drop it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from slurm_ft import heartbeat
from slurm_ft.job import ckptfallback, groupplan as gp, hang, hotplan as hp, rendezvous, startprep
from slurm_ft.job.notices import Follower
from slurm_ft.job.paths import MIN_GROUPS
from slurm_ft.job.planned_run import settings
from slurm_ft.job.supervisor import (BACKSTOP_S, EXIT_CHECK_AFTER_S, HANG_POLL_S, LAUNCH_ENV, STOP_GRACE_S,
                                     Supervisor, port_free_here, srun_argv)
from slurm_ft.slurm.client import SlurmClient
from slurm_ft.slurm.hostlist import compress

if TYPE_CHECKING:
    from slurm_ft.slurm.api import SlurmApi

LIGHTHOUSE = "torchft_lighthouse"
LIGHTHOUSE_LOG = "slurm-ft-lighthouse.log"
HEARTBEAT_MS = 1000          # the Lighthouse's heartbeat timeout: the healthy groups' pause at a fault
HEARTBEAT_ENV = "SLURM_FT_LIGHTHOUSE_HEARTBEAT_MS"   # the job's own choice (100 ms to 10 min), exported at submit
JOIN_MS = 10000              # how long a quorum waits for a heartbeating straggler (torchft's Slurm example)
LIGHTHOUSE_SLOT = 99         # the rendezvous launch slot the Lighthouse's port is drawn from (groups use 0..98)
GROUP_STOP_GRACE_S = 2.0     # a failed group's srun gets SIGTERM, then its step is cancelled: its heartbeats
                             # must end fast


@dataclass
class Running:
    """One group's current step."""
    nodes: Tuple[str, ...] = ()           # () = parked
    proc: Optional["subprocess.Popen[bytes]"] = None
    launch: int = -1                      # its launch number (SLURM_FT_LAUNCH): unique within this start
    started_t: float = 0.0                # wall clock
    exited_at: Optional[float] = None     # monotonic
    rc: Optional[int] = None
    next_hang_poll: float = 0.0


def step_name(g: int) -> str:
    """Group g's srun step name (squeue, sacct): how its step alone is found to be cancelled."""
    return f"slurm-ft-group{g}"


def lighthouse_argv(binary: str, port: int, heartbeat_ms: int = HEARTBEAT_MS) -> List[str]:
    return [binary, "--bind", f"[::]:{port}", "--min_replicas", str(MIN_GROUPS), "--quorum_tick_ms", "100",
            "--join_timeout_ms", str(JOIN_MS), "--heartbeat_timeout_ms", str(heartbeat_ms)]


def find_lighthouse(env: Dict[str, str], python: str = sys.executable) -> Optional[str]:
    """torchft's Lighthouse on the job's PATH, else beside the Python running this (a venv's bin/)."""
    found = shutil.which(LIGHTHOUSE, path=env.get("PATH"))
    if found:
        return found
    beside = os.path.join(os.path.dirname(python), LIGHTHOUSE)
    return beside if os.access(beside, os.X_OK) else None


class GroupSupervisor(Supervisor):
    def __init__(self, client: SlurmApi, job_id: int, train_nodes: int, groups: int, ckpt_dir: str,
                 argv: Sequence[str], heartbeat_ms: int = HEARTBEAT_MS, hang_timeout: float = 0,
                 max_restarts: int = 0, ckpt_fails: int = ckptfallback.DEFAULT_M, notices: Optional[Follower] = None,
                 env: Optional[Dict[str, str]] = None, backstop_s: float = BACKSTOP_S):
        super().__init__(client, job_id, train_nodes, ckpt_dir, argv, env=env, hang_timeout=hang_timeout,
                         max_restarts=max_restarts, ckpt_fails=ckpt_fails, notices=notices, backstop_s=backstop_s)
        self.r = groups
        self.m = train_nodes // groups
        self.heartbeat_ms = heartbeat_ms
        self.groups: List[Running] = [Running() for _ in range(groups)]
        self.lighthouse: Optional["subprocess.Popen[bytes]"] = None
        self.lighthouse_addr = ""
        self.lighthouse_cmd: List[str] = []
        self.lighthouse_log: Optional[IO[bytes]] = None

    # --- the Lighthouse ---------------------------------------------------------------------------
    def start_lighthouse(self, batch_host: str) -> Optional[str]:
        """Start the Lighthouse on this host (the batch host); an error text when it cannot run."""
        if not self.lighthouse_cmd:
            binary = find_lighthouse(self.env)
            if binary is None:
                return f"no {LIGHTHOUSE} on the job's PATH nor beside {sys.executable}: install torchft"
            free = port_free_here(batch_host, self.addrs)
            ports = rendezvous.candidate_ports(self.job_id, self.restart, LIGHTHOUSE_SLOT)
            port = next((p for p in ports if free(batch_host, p)), ports[0])
            self.lighthouse_cmd = lighthouse_argv(binary, port, self.heartbeat_ms)
            self.lighthouse_addr = f"http://{self.addrs.get(batch_host) or batch_host}:{port}"
        if self.lighthouse_log is None and self.ckpt_dir:
            try:
                self.lighthouse_log = open(os.path.join(self.ckpt_dir, LIGHTHOUSE_LOG), "ab")
            except OSError:
                self.lighthouse_log = None
        out = self.lighthouse_log if self.lighthouse_log is not None else subprocess.DEVNULL
        try:
            self.lighthouse = subprocess.Popen(self.lighthouse_cmd, stdout=out, stderr=out,
                                               env=dict(self.env, RUST_LOG=self.env.get("RUST_LOG", "info")))
        except OSError as exc:
            return f"cannot run {self.lighthouse_cmd[0]}: {exc}"
        self.log("lighthouse", addr=self.lighthouse_addr, heartbeat_ms=self.heartbeat_ms, pid=self.lighthouse.pid)
        self.say(f"torchft Lighthouse at {self.lighthouse_addr} (heartbeat timeout {self.heartbeat_ms} ms)")
        return None

    # --- one group's step ---------------------------------------------------------------------------
    def launch_group(self, g: int, nodes: Sequence[str], reason: str, first: bool = False) -> Optional[int]:
        """Start group g's step on `nodes`; an exit status when it cannot start (no checkpoint read). Not
        `first` (a start of the job's groups) and with another group training: it rejoins, healing from a peer."""
        t0 = time.time()
        rejoin = not first and any(x.proc is not None and x.rc is None for i, x in enumerate(self.groups) if i != g)
        resolved, found, rc, fields = startprep.prepare(self.argv, self.ckpt_dir, self.say, job=str(self.job_id),
                                                       m=self.ckpt_fails, restart=self.restart)
        if rc is not None:
            self.log("exit", rc=rc, reason="no checkpoint to start from", group=g, **fields)
            return rc
        env = dict(self.env)
        env.update(startprep.ckpt_env(found, self.ckpt_dir))
        env[LAUNCH_ENV] = str(self.launches)
        rdv, rank0 = rendezvous.launch_env(self.env, nodes, self.addrs, self.job_id, self.restart,
                                           self.launches % LIGHTHOUSE_SLOT,
                                           port_free_here(self.env.get("SLURMD_NODENAME", ""), self.addrs))
        env.update(rdv)
        env.update({"TORCHFT_LIGHTHOUSE": self.lighthouse_addr, "REPLICA_GROUP_ID": str(g),
                    "NUM_REPLICA_GROUPS": str(self.r), "SLURM_FT_RANK_OFFSET": str(g * self.m * self.tasks_per_node),
                    "SLURM_FT_GROUP_REJOIN": "1" if rejoin else "0"})
        try:
            program = startprep.exec_argv(resolved[0], resolved[1:])
        except OSError as exc:
            self.say(f"cannot run {resolved[0]}: {exc}")
            return 127
        run = self.groups[g]
        run.proc = subprocess.Popen(srun_argv(nodes, self.tasks_per_node, program, step_name(g)), env=env)
        run.nodes, run.launch, run.started_t, run.exited_at, run.rc = tuple(nodes), self.launches, time.time(), None, None
        self.log("launch", launch=self.launches, group=g, nodes=compress(nodes), ckpt=env["SLURM_FT_CKPT"],
                 step=found.step if found and found.path else None, reason=reason, rank0=rank0, rejoin=rejoin,
                 master=f"{rdv['MASTER_ADDR']}:{rdv['MASTER_PORT']}", prepare_s=round(time.time() - t0, 3), **fields)
        self.say(f"group {g}: launch {self.launches} on {compress(nodes)}: {reason}")
        self.launches += 1
        return None

    def stop_group(self, g: int, grace_s: float = GROUP_STOP_GRACE_S) -> bool:
        """End group g's step (its own, by name: the other groups' run on); whether it ended."""
        return self.end_step(self.groups[g].proc, grace_s, step_name(g))

    def stop(self) -> bool:
        """Every group's step and the Lighthouse (the job ends, or the requeue path takes over); whether
        every step ended."""
        ended = self.end_steps([(run.proc, step_name(g)) for g, run in enumerate(self.groups)], STOP_GRACE_S)
        if self.lighthouse is not None and self.lighthouse.poll() is None:
            self.lighthouse.terminate()
            try:
                self.lighthouse.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.lighthouse.kill()
                self.lighthouse.wait()
        return ended

    # --- the loop ----------------------------------------------------------------------------------
    def run(self) -> int:
        job = self.client.job(self.job_id)
        allocation, batch_host = tuple(job.nodes), job.batch_host
        self.follow_notices()
        faults = self.faults(allocation) or {}
        self.next_read = time.monotonic() + self.backstop_s
        layout = gp.form(allocation, faults, batch_host, self.r, self.m)
        if batch_host in faults or sum(1 for x in layout if x) < MIN_GROUPS:
            return self._fallback(hp.Action("fallback", failed=tuple(x for x in allocation if x in faults),
                                            reason=f"{len(allocation) - len(faults)} healthy node(s), batch host "
                                                   f"{'failed' if batch_host in faults else 'healthy'}: not even "
                                                   f"{MIN_GROUPS} group(s) of {self.m}"))
        why = self.start_lighthouse(batch_host)
        if why:
            self.say(why)
            self.log("exit", rc=127, reason=why)
            return 127
        for g, nodes in enumerate(layout):
            if nodes:
                rc = self.launch_group(g, nodes, f"group {g} of {self.r}: {len(nodes)} node(s)", first=True)
                if rc is not None:
                    self.stop()
                    return rc
            else:
                self.log("park", group=g, reason="too few healthy nodes at the start")
        self.log("groups", groups=self.r, group_nodes=self.m, hot_spares=len(allocation) - self.r * self.m)
        while True:
            time.sleep(self.poll_s)
            now = time.monotonic()
            for run in self.groups:
                if run.proc is not None and run.rc is None:
                    run.rc = run.proc.poll()
                    if run.rc is not None:
                        run.exited_at = now
                        if run.rc != 0:      # Slurm's word soon: a node the watcher drains, not yet told
                            self.reads_due.append(now + EXIT_CHECK_AFTER_S)
            if self.lighthouse is not None and self.lighthouse.poll() is not None:
                self.log("lighthouse_exit", rc=self.lighthouse.returncode)
                self.say(f"the Lighthouse exited {self.lighthouse.returncode}: starting it again")
                why = self.start_lighthouse(batch_host)
                if why:
                    self.stop()
                    self.log("exit", rc=127, reason=why)
                    return 127
            faults = self.current_faults(allocation, now)
            view = gp.View(allocation=allocation, faults=faults, batch_host=batch_host, group_nodes=self.m,
                           groups=tuple(gp.Group(nodes=x.nodes, rc=x.rc,
                                                 since_exit_s=now - x.exited_at if x.exited_at is not None else 0.0)
                                        for x in self.groups))
            acts = gp.decide(view)
            if not acts and self.hang_timeout:
                acts = self.watch_groups(view, now)
            for act in acts:
                rc = self.carry_out(act)
                if rc is not None:
                    return rc

    def carry_out(self, act: gp.Action) -> Optional[int]:
        if act.kind == "fallback":
            return self._fallback(hp.Action("fallback", failed=act.failed, reason=act.reason))
        if act.kind == "exit":
            self.stop()
            self.log("exit", rc=act.rc, reason=act.reason)
            self.say(act.reason)
            return act.rc
        g = act.group
        t0 = time.time()
        if act.failed:
            self.log("fault", group=g, nodes=compress(act.failed), reason=act.reason[:1000])
            self.say(f"group {g}: fault: {act.reason}")
        old = self.groups[g].nodes
        if not self.stop_group(g):       # its ranks may still write: never launched beside
            return self._fallback(hp.Action("fallback", failed=act.failed,
                                            reason=f"group {g}'s step did not end: {act.reason}"), at_once=True)
        if old:
            self.log("stopped", group=g, nodes=compress(old), stop_s=round(time.time() - t0, 3))
        if act.kind == "park":
            self.groups[g] = Running()
            self.log("park", group=g, reason=act.reason[:1000])
            self.say(f"group {g} parked: {act.reason}")
            return None
        rc = self.launch_group(g, act.nodes, f"relaunch without {compress(act.failed)}" if act.failed else act.reason)
        if rc is not None:                # this group cannot start: the others train on
            self.groups[g] = Running()
            self.log("park", group=g, reason=f"cannot start (exit {rc})")
        return None

    def follow_notices(self) -> None:
        if self.notices is None:
            self.notices = Follower.own_stderr()
            if self.notices is None:
                self.backstop_s = min(self.backstop_s, 10.0)

    # --- hangs, per group ---------------------------------------------------------------------------
    def watch_groups(self, view: gp.View, now: float) -> List[gp.Action]:
        records = heartbeat.read_all(self.ckpt_dir)
        for g, run in enumerate(self.groups):
            if run.proc is None or run.rc is not None or now < run.next_hang_poll:
                continue
            run.next_hang_poll = now + HANG_POLL_S
            at = hang.Launch(str(self.job_id), self.restart, run.launch, run.started_t)
            why = hang.stalled(records, at, time.time(), self.hang_timeout)
            if why is None:
                continue
            self.log("hang", group=g, launch=run.launch, nodes=compress(run.nodes), reason=why)
            self.say(f"group {g}: hang: {why}; checking its nodes")
            found = self.check_nodes(run.nodes)
            if hang.systemic(found, len(run.nodes)):
                found = {}
            elif found:
                self.check_nodes(sorted(found), drain=True)
            self.failed.update(found)
            self.log("hang_check", group=g, nodes=compress(run.nodes), culprits=compress(sorted(found)))
            if found:
                return [a for a in gp.decide(gp.View(view.allocation, {**view.faults, **found}, view.batch_host,
                                                     view.group_nodes, view.groups)) if a.group == g or a.group < 0]
            if not hang.restarts_left(self.max_restarts, self.restart, self.hang_restarts):
                return [gp.Action("exit", rc=hp.EXIT_RESTART_LIMIT,
                                  reason=f"group {g} hung with no culprit and the restart limit is used up: {why}")]
            self.hang_restarts += 1
            self.log("hang_restart", group=g, launch=run.launch, restarts=self.restart + self.hang_restarts)
            return [gp.Action("restart", group=g, nodes=run.nodes, reason=f"restart in place after a hang, no culprit: {why}")]
        return []


def main(ckpt_dir: str, train_nodes: int, groups: int, argv: Sequence[str], hang_timeout: float = 0,
         max_restarts: int = 0, ckpt_fails: int = ckptfallback.DEFAULT_M) -> int:
    job = os.environ.get("SLURM_JOB_ID", "")
    if not job.isdigit():
        print("slurm-ft supervisor: not inside a Slurm job (no SLURM_JOB_ID)", file=sys.stderr)
        return 2
    hb = os.environ.get(HEARTBEAT_ENV, "")
    backstop_s = settings(os.environ.get("SLURMD_NODENAME", ""))[2]
    return GroupSupervisor(SlurmClient(), int(job), train_nodes, groups, ckpt_dir, argv,
                           heartbeat_ms=int(hb) if hb.isdigit() and 100 <= int(hb) <= 600_000 else HEARTBEAT_MS,
                           hang_timeout=hang_timeout, max_restarts=max_restarts, ckpt_fails=ckpt_fails,
                           backstop_s=backstop_s).run()
