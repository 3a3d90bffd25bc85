"""The hot-spare supervisor: the batch step of a `slurm-ft sbatch --hot-spares K -N N` job.

    jobstart --ckpt-dir DIR --hot-spares K --train-nodes N -- PROGRAM [ARGS...]

Runs as the user, inside the job: no root, nothing of the controller. It launches the training step,
`srun -N N --nodelist=<N healthy nodes of the allocation> --kill-on-bad-exit=1 PROGRAM ARGS` (with
{ckpt} resolved to the latest complete checkpoint at every launch), and polls Slurm's view of its
nodes. What it does about a fault is hotplan.decide's answer; this module only carries it out:
stop the step, shrink the job to give back the failed nodes the controller has quarantined already (so
it saw them in the job and journaled the incident; the others at a later relaunch), launch the step again
on healthy nodes. Each
action is one JSON line in DIR/slurm-ft-starts.jsonl (the controller and `lab demo` read it).

Fail-safe: a failed read of Slurm is logged and the step runs on (no action on a guess); a failed
shrink is logged (the controller quarantines the node either way) and training goes on.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from slurm_ft.recovery import hotplan as hp
from slurm_ft.recovery import jobstart
from slurm_ft.recovery import rendezvous
from slurm_ft.recovery.nodefault import node_fault
from slurm_ft.slurm.hostlist import compress

POLL_S = 0.5                 # Slurm reads per second the supervisor costs: 2
STOP_GRACE_S = 10.0          # SIGTERM to srun, then SIGKILL
LAUNCH_ENV = "SLURM_FT_LAUNCH"   # the launch number within this start of the job (0, 1, ...)


def srun_argv(nodes: Sequence[str], tasks_per_node: int, program: Sequence[str]) -> List[str]:
    n = len(nodes)
    return ["srun", f"--nodes={n}", f"--ntasks={n * tasks_per_node}", f"--ntasks-per-node={tasks_per_node}",
            f"--nodelist={compress(nodes)}", "--kill-on-bad-exit=1", *program]


class Supervisor:
    def __init__(self, client, job_id: int, train_nodes: int, ckpt_dir: str, argv: Sequence[str],
                 env: Optional[Mapping[str, str]] = None, poll_s: float = POLL_S,
                 say: Callable[[str], None] = lambda m: print(f"slurm-ft supervisor: {m}", file=sys.stderr,
                                                             flush=True)):
        self.client = client
        self.job_id = job_id
        self.n = train_nodes
        self.ckpt_dir = ckpt_dir
        self.argv = list(argv)
        self.env: Dict[str, str] = dict(env if env is not None else os.environ)
        self.poll_s = poll_s
        self.say = say
        self.tasks_per_node = _int(self.env.get("SLURM_NTASKS_PER_NODE"), 1)
        self.restart = _int(self.env.get("SLURM_RESTART_COUNT"), 0)
        self.launches = 0
        self.proc: Optional[subprocess.Popen] = None
        self.step_nodes: tuple = ()
        self.exited_at: Optional[float] = None
        self.may_shrink = True     # until Slurm refuses (22.05 without accounting: once per start of the job)
        # Every node seen failed in this run of the job, with why. A fault is never forgotten here: a
        # health check may resume a node it drained once the fault no longer shows (a drain-only fault,
        # an XID older than its look-back), and a node Slurm would not take back stays in the job.
        self.failed: Dict[str, str] = {}
        self.addrs: Dict[str, str] = {}    # node -> NodeAddr, from the last read of the nodes

    # --- effects ----------------------------------------------------------------------------------
    def faults(self, nodes: Sequence[str]) -> Optional[Dict[str, str]]:
        """node -> fault for those of `nodes` failed now or before in this run of the job; None when Slurm
        cannot be read (then nothing is decided)."""
        try:
            got = self.client.nodes(list(nodes))
        except Exception as exc:   # noqa: BLE001 - any failure to read is "unknown", never "healthy"
            self.say(f"cannot read node states ({exc}); the step runs on")
            return None
        self.failed.update({x.name: why for x in got for why in [node_fault(x)] if why})
        self.addrs.update({x.name: x.addr for x in got if x.addr})
        return {x: why for x, why in self.failed.items() if x in nodes}

    def log(self, event: str, **fields) -> None:
        if self.ckpt_dir:
            jobstart.log_event(self.ckpt_dir, {"event": event, "t": time.time(), "job": str(self.job_id),
                                               "restart": self.restart, **fields})

    def launch(self, nodes: Sequence[str], reason: str) -> Optional[int]:
        """Start the training step on `nodes`; an exit status when it cannot start (no checkpoint read)."""
        t0 = time.time()
        resolved, found, rc = jobstart.prepare(self.argv, self.ckpt_dir, self.say)
        if rc is not None:
            return rc
        env = dict(self.env)
        env.update(jobstart.ckpt_env(found, self.ckpt_dir))
        env[LAUNCH_ENV] = str(self.launches)
        rdv, rank0 = rendezvous.launch_env(self.env, nodes, self.addrs, self.job_id, self.restart, self.launches)
        env.update(rdv)
        try:
            program = jobstart.exec_argv(resolved[0], resolved[1:])
        except OSError as exc:
            self.say(f"cannot run {resolved[0]}: {exc}")
            return 127
        argv = srun_argv(nodes, self.tasks_per_node, program)
        self.proc = subprocess.Popen(argv, env=env)
        self.step_nodes, self.exited_at = tuple(nodes), None
        self.log("launch", launch=self.launches, nodes=compress(nodes), ckpt=env["SLURM_FT_CKPT"],
                 step=found.step if found else None, reason=reason, rank0=rank0,
                 master=f"{rdv['MASTER_ADDR']}:{rdv['MASTER_PORT']}", prepare_s=round(time.time() - t0, 3))
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

    def shrink(self, allocation: Sequence[str], release: Sequence[str]) -> tuple:
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
        faults = self.faults(allocation) or {}
        first = hp.first_launch(allocation, faults, self.n)
        if first.kind != "launch":
            return self._fallback(first)
        rc = self.launch(first.nodes, first.reason)
        if rc is not None:
            return rc
        while True:
            time.sleep(self.poll_s)
            rc = self.proc.poll()
            now = time.monotonic()
            if rc is not None and self.exited_at is None:
                self.exited_at = now
            faults = self.faults(allocation)
            if faults is None:
                if rc is None:
                    continue
                faults = {}              # the step is over: its exit status stands on its own
            act = hp.decide(hp.View(allocation=allocation, faults=faults, batch_host=batch_host,
                                    train_nodes=self.n, step_nodes=self.step_nodes, step_rc=rc,
                                    since_exit_s=now - self.exited_at if rc is not None else 0.0))
            if act.kind == "wait":
                continue
            if act.kind == "exit":
                self.log("exit", rc=act.rc, reason=act.reason)
                self.say(act.reason)
                return act.rc
            if act.kind == "fallback":
                return self._fallback(act)
            # relaunch: stop, give the failed nodes back while no step runs, start again
            t_fault = time.time()
            self.log("fault", nodes=compress(act.failed), reason=act.reason[:1000])
            self.say(f"fault: {act.reason}")
            self.stop()
            self.log("stopped", nodes=compress(self.step_nodes), stop_s=round(time.time() - t_fault, 3))
            allocation = self.shrink(allocation, self.quarantined(job.partition, act.release))
            rc = self.launch(act.nodes, f"relaunch without {compress(act.failed)}")
            if rc is not None:
                return rc

    def quarantined(self, partitions: str, nodes: Sequence[str]) -> tuple:
        """Those of `nodes` the controller has taken out of the job's partitions: it saw them failed in
        the job and journaled the incident, so they may leave the job. The others stay in it, unused,
        until the next relaunch (no wait for the controller on the way back to training)."""
        if not nodes or not self.may_shrink:
            return ()
        try:
            members = {x for p in partitions.split(",") if p for x in self.client.partition(p).nodes}
        except Exception as exc:   # noqa: BLE001 - cannot tell: keep them for now
            self.say(f"cannot read partition {partitions}: {exc}")
            return ()
        return tuple(x for x in nodes if x not in members)

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


def main(ckpt_dir: str, train_nodes: int, argv: Sequence[str]) -> int:
    from slurm_ft.slurm.client import SlurmClient
    job = os.environ.get("SLURM_JOB_ID", "")
    if not job.isdigit():
        print("slurm-ft supervisor: not inside a Slurm job (no SLURM_JOB_ID)", file=sys.stderr)
        return 2
    return Supervisor(SlurmClient(), int(job), train_nodes, ckpt_dir, argv).run()
