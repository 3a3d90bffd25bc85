"""The replica-group scenario on the lab: a torchft job of R groups (slurm_ft_lab.ftddp, FT-DDP over gloo)
under `slurm-ft sbatch --replica-groups R --hot-spares K`, a fatal Xid on a node of one group, and what
each group did around it: the failed group's relaunch on a hot spare and its return to the quorum, the
healthy groups' pause and their steps.

The same job as one gang (`gang=True`: ftddp without a Lighthouse, plain DDP over every rank) under
`--hot-spares K` is the whole-job hot-spare path, for the comparison of GPU-seconds lost per fault.

Entry point for benches: `GroupScenario(lab, work, replica_groups=2, hot_spares=1).run_fault(nodes=5)`
(nodes: the job's, N + K), which returns a GroupFaultResult (to_dict() is `lab demo --replica-groups`'s JSON).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from slurm_ft.errors import EnvironmentProblem
from slurm_ft.runner import run
from slurm_ft.slurm.hostlist import expand
from slurm_ft_lab.inject import inject
from slurm_ft_lab.scenario import PHASE_OF_STEP, PY, Phase, Scenario, _r

PHASE_OF_GROUP_EVENT = {"fault": "group fault seen", "stopped": "group stopped", "launch": "group relaunched",
                        "park": "group parked", "fallback": "whole-job path"}


@dataclass
class GroupFaultResult:
    path: str                              # "replica-group" (or "hot-spare" for the gang comparison)
    job_id: int
    failed_node: str
    failed_group: int
    fault_t: float
    gpus_per_node: int
    group_nodes: int
    groups: int
    spare_node: Optional[str] = None
    phases: List[Phase] = field(default_factory=list)
    first_in_quorum_t: Optional[float] = None       # the failed group's first committed step with every group
    healthy: Dict[int, dict] = field(default_factory=dict)   # group -> pause_s, step_s, steps_lost, steps_after

    @property
    def fault_to_resume_s(self) -> Optional[float]:
        return None if self.first_in_quorum_t is None else self.first_in_quorum_t - self.fault_t

    @property
    def healthy_group_steps_lost(self) -> Optional[int]:
        return sum(h["steps_lost"] for h in self.healthy.values()) if self.healthy else None

    @property
    def healthy_pause_s(self) -> Optional[float]:
        return max((h["pause_s"] for h in self.healthy.values()), default=None)

    def gpu_seconds_lost(self) -> Optional[float]:
        """The failed group's GPUs from the fault to its first step back in the quorum, and every healthy
        group's GPUs over its pause (the time past its usual step)."""
        if self.fault_to_resume_s is None:
            return None
        g = self.group_nodes * self.gpus_per_node
        return g * self.fault_to_resume_s + g * sum(max(0.0, h["pause_s"] - h["step_s"]) for h in self.healthy.values())

    def to_dict(self) -> dict:
        return {"path": self.path, "job_id": self.job_id, "failed_node": self.failed_node,
                "failed_group": self.failed_group, "spare_node": self.spare_node,
                "fault_to_resume_s": _r(self.fault_to_resume_s),
                "healthy_group_steps_lost": self.healthy_group_steps_lost,
                "healthy_pause_s": _r(self.healthy_pause_s),
                "healthy_step_s": _r(max((h["step_s"] for h in self.healthy.values()), default=None)),
                "gpu_seconds_lost": _r(self.gpu_seconds_lost()),
                "groups": self.groups, "group_nodes": self.group_nodes,
                "phases": [{"name": p.name, "s": _r(p.t - self.fault_t), "detail": p.detail}
                           for p in sorted(self.phases, key=lambda p: p.t)]}


class GroupScenario(Scenario):
    def __init__(self, lab, work, *, replica_groups: int = 2, hot_spares: int = 1, step_time: float = 0.3,
                 save_every: int = 20, heartbeat_ms: Optional[int] = None, gang: bool = False,
                 on_fault: str = "die", **kw):
        super().__init__(lab, work, step_time=step_time, ckpt_every=save_every, hot_spares=hot_spares, **kw)
        self.replica_groups = replica_groups
        self.gang = gang                   # the same job as one gang under --hot-spares alone (Scenario.fault)
        self.path = "hot-spare" if gang else "replica-group"
        self.heartbeat_ms = heartbeat_ms
        self.on_fault = on_fault

    def submit(self, nodes: int, via: str = "wrapper") -> int:
        """ftddp on `nodes` nodes (N + K), R replica groups of (nodes - K) / R."""
        train = nodes - self.hot_spares
        if train % self.replica_groups:
            raise ValueError(f"{train} training nodes are not {self.replica_groups} whole groups")
        sbatch = ["-J", "slurm-ft-groups", "--ntasks-per-node=1", "--gres=gpu:8", "--open-mode=append",
                  "-o", str(self.job_out)]
        trainer = [PY, "-m", "slurm_ft_lab.ftddp", "--ckpt-dir", str(self.ckpt_dir), "--resume", "{ckpt}",
                   "--step-time", str(self.step_time), "--save-every", str(self.ckpt_every), "--on-fault", self.on_fault]
        groups = [] if self.gang else ["--replica-groups", str(self.replica_groups)]
        argv = [PY, "-m", "slurm_ft", "sbatch", "--parsable", "--ckpt-dir", str(self.ckpt_dir), "--max-restarts", "100",
                *groups, "--hot-spares", str(self.hot_spares), "-N", str(train), *sbatch, *trainer]
        env = dict(self.lab.user_env(), LD_LIBRARY_PATH=str(self.lab.dir / "lib"),
                   PYTHONPATH=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
        if self.heartbeat_ms:
            env["SLURM_FT_LIGHTHOUSE_HEARTBEAT_MS"] = str(self.heartbeat_ms)
        res = run(self.lab.user_argv(argv), timeout=120, env=env, cwd=str(self.job_dir))
        self.job_id = int(res.stdout.strip().split(";")[0])
        return self.job_id

    def group_launches(self) -> List[dict]:
        return [e for e in self.supervisor_events() if e.get("event") == "launch" and "group" in e]

    def committed(self, group: int) -> List[dict]:
        return [e for e in self.events() if e.get("event") == "step" and e.get("group") == group and e.get("committed")]

    def fault(self, *, victim_group: int = 1, gpu: int = 3, xid: int = 79, warmup_steps: int = 10,
              timeout: float = 600.0, settle_s: float = 20.0):  # type: ignore[override]
        """Wait until every group committed `warmup_steps` steps with the others, break a GPU of a node of
        `victim_group` (not the batch host), time the group's return and the others' steps. As one gang:
        Scenario.fault (the whole step relaunched on the hot spare)."""
        if self.gang:
            return Scenario.fault(self, victim_index=1, gpu=gpu, xid=xid, warmup_steps=max(warmup_steps, self.ckpt_every + 2),
                                  timeout=timeout)
        deadline = time.monotonic() + timeout
        while True:
            launches = self.group_launches()
            if (len({e["group"] for e in launches}) >= self.replica_groups and all(
                    len([s for s in self.committed(g) if s.get("participants") == self.replica_groups]) >= warmup_steps
                    for g in range(self.replica_groups))):
                break
            if time.monotonic() > deadline:
                raise EnvironmentProblem(f"lab scenario: the groups did not all train within {timeout:g} s; "
                                         f"{self._where_it_stands('-')}")
            time.sleep(0.2)
        job = self.client.job(self.job_id)
        last = {e["group"]: e for e in launches}
        victim = next(n for n in expand(last[victim_group]["nodes"]) if n != job.batch_host)
        watcher = self._start_watch(victim, timeout)
        if not watcher.ready.wait(timeout):
            raise EnvironmentProblem(f"lab scenario: slurm-ft watch on {victim} did not start within {timeout:g} s")
        with self._lock:
            self._steps.clear()
        sup_seen = len(self.supervisor_events())
        t_fault = time.time()
        self._fault_t = t_fault
        inject(self.lab.dir, victim, "xid", gpu=gpu, value=xid)
        res = GroupFaultResult(self.path, self.job_id, victim, victim_group, t_fault, self.lab.spec.gpus_per_node,
                               len(expand(last[victim_group]["nodes"])), self.replica_groups)
        self._phase(res, Phase("fault", t_fault, f"Xid {xid} on {victim} gpu{gpu} (group {victim_group})"))
        drained, seen_steps, new_launch = False, 0, None
        while time.monotonic() < deadline:
            if not drained:
                node = self.client.node(victim)
                if node.drained or node.down:
                    drained = True
                    self._phase(res, Phase("drain", time.time(), node.reason))
            with self._lock:
                steps = list(self._steps)
            for kind, outcome, detail, t, spares in steps[seen_steps:]:
                name = PHASE_OF_STEP.get(kind)
                if name and outcome in ("ok", "skipped"):
                    res.phases.append(Phase(name, t, detail))
            seen_steps = len(steps)
            sup = self.supervisor_events()
            for e in sup[sup_seen:]:
                name = PHASE_OF_GROUP_EVENT.get(e.get("event"))
                if name:
                    self._phase(res, Phase(name, e["t"], f"group {e.get('group', '-')}: "
                                                         + (e.get("reason") or e.get("nodes", ""))[:200]))
                if e.get("event") == "fallback":
                    raise EnvironmentProblem(f"lab scenario: the supervisor fell back to the whole-job path: {e}")
                if e.get("event") == "launch" and e.get("group") == victim_group:
                    new_launch = e["launch"]
                    res.spare_node = ",".join(n for n in expand(e["nodes"]) if n not in expand(last[victim_group]["nodes"])) or None
            sup_seen = len(sup)
            if new_launch is not None:
                back = [s for s in self.committed(victim_group) if s.get("launch") == new_launch
                        and s.get("participants") == self.replica_groups]
                if back:
                    res.first_in_quorum_t = back[0]["t"]
                    start = next((e for e in self.events() if e.get("event") == "start" and e.get("group") == victim_group
                                  and e.get("launch") == new_launch), None)
                    if start:
                        self._phase(res, Phase("group started", start["t"], f"rejoin={start.get('rejoin')}, "
                                                                             f"start-up {start.get('startup_s')} s"))
                    self._phase(res, Phase("back in the quorum", back[0]["t"],
                                           f"group {victim_group} step {back[0]['step']} with all {self.replica_groups} "
                                           f"groups (healed from a peer)"))
                    break
            time.sleep(0.05)
        else:
            raise EnvironmentProblem(f"lab scenario: group {victim_group} of job {self.job_id} not back in the quorum "
                                     f"within {timeout:g} s; {self._where_it_stands(victim)}")
        time.sleep(settle_s)           # the healthy groups' steps past the return, for their pause
        for g in range(self.replica_groups):
            if g != victim_group:
                res.healthy[g] = healthy_figures(self.committed(g), t_fault, res.first_in_quorum_t)
        watcher.join(timeout=1)
        self._fault_t = None
        return res

    def run_fault(self, nodes: int, **kw) -> GroupFaultResult:
        """prepare, controller, submit, fault, stop: one measured fault (the bench's entry point)."""
        self.prepare()
        self.start_controller()
        try:
            self.submit(nodes)
            return self.fault(**kw)
        finally:
            self.stop()


def healthy_figures(steps: List[dict], t_fault: float, t_back: float) -> dict:
    """A healthy group's committed steps around a fault: its usual step (median interval before the fault),
    its longest interval from the fault to the failed group's return (the pause), and the steps it lost
    (its step counter going back, or a step number missing)."""
    before = [s for s in steps if s["t"] <= t_fault]
    around = [s for s in steps if s["t"] > t_fault]
    ts = [s["t"] for s in before[-30:]]
    step_s = statistics.median(b - a for a, b in zip(ts, ts[1:])) if len(ts) > 2 else 0.0
    window = ([before[-1]] if before else []) + [s for s in around if s["t"] <= t_back + 5 * max(step_s, 0.1)]
    gaps = [b["t"] - a["t"] for a, b in zip(window, window[1:])]
    seq = [s["step"] for s in (before[-1:] + around)]
    lost = sum(max(0, a + 1 - b) for a, b in zip(seq, seq[1:]))      # a counter that went back redoes steps
    return {"pause_s": round(max(gaps, default=0.0), 3), "step_s": round(step_s, 3), "steps_lost": lost,
            "steps_after": len(around), "last_before": before[-1]["step"] if before else None,
            "first_after": around[0]["step"] if around else None,
            "step_times": [round(s["t"] - t_fault, 3) for s in window]}
