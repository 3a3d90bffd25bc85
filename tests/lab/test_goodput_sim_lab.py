"""The simulator against the lab: a real job goes through a short schedule of faults of mixed classes (a
hang, GPU faults met on hot spares, one with the hot spares used up), and `slurm-ft sim --schedule`, fed
that schedule and this lab's figures, accounts for the lost GPU-seconds `slurm-ft status --job J --json`
measures, within 20%.

The figures are the phases of this run's own recoveries, summed up as bench/recovery.py sums up its faults
(each phase's p50) and written by bench/figures.py over the shipped file, as a site measures its own. So
they are this Slurm version's (26.05 requeues in 4.8 s what 22.05 takes 11 s for) at this machine's load
of the moment (a CI box running four labs on two cores takes three times the shipped figures, and a
calibration run a minute earlier was off by 30-40% in both directions). What is checked is the model: the
way the product takes for each fault, how the phases make a recovery, the hang's timeout and checks, the
work redone, the startup.

The job: `slurm-ft sbatch --hot-spares 2 --hang-timeout 20 -N 4` of the lab's trainer (0.5 s steps, a
checkpoint every 10), submitted as the lab submits jobs (its default user). The faults, in order:
  1. rank 1 stops stepping after step 14 (no Xid): the supervisor's hang timeout and checks, restart in place
  2. Xid 79 on a GPU of the step: `slurm-ft watch` drains the node, relaunch on a hot spare
  3. the same on another node: the second hot spare
  4. the same again: no hot spare left, the controller requeues the job onto a pool spare
  5. the same on the requeued job, which has its hot spares again: in the allocation
Each fault comes steps after a checkpoint, so each costs redone steps as well as its recovery.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path
from typing import List

import pytest

from ctl_helpers import slurm_ft
from slurm_ft.cli.sim import SHIPPED_FIGURES
from slurm_ft.runner import run
from slurm_ft_lab.recovery_summary import summary
from slurm_ft_lab.scenario import FaultResult, Scenario, run_key

pytestmark = pytest.mark.lab

PY = sys.executable
STEP_S = 0.5
CKPT_EVERY = 10
HANG_S = 20
N, K = 4, 2


def _status(lab, cfg: Path, jid: int) -> dict:
    return json.loads(slurm_ft(lab, cfg, "status", "--job", str(jid), "--json").stdout)


def _submit(lab, sc: Scenario) -> int:
    env = dict(lab.env, LD_LIBRARY_PATH=str(lab.dir / "lib"))     # the nodes' "driver" (fake NVML)
    trainer = [PY, "-m", "slurm_ft_lab.trainer", "--ckpt-dir", str(sc.ckpt_dir), "--resume", "{ckpt}",
               "--steps", "1000000", "--step-time", str(STEP_S), "--ckpt-every", str(CKPT_EVERY),
               "--stall-at", "14", "--stall-rank", "1"]
    argv = [PY, "-m", "slurm_ft", "sbatch", "--parsable", "--ckpt-dir", str(sc.ckpt_dir), "--max-restarts", "20",
            "--hot-spares", str(K), "--hang-timeout", str(HANG_S), "-N", str(N), "-J", "goodput-sim",
            "--ntasks-per-node=1", "--gres=gpu:8", "--open-mode=append", "-o", str(sc.job_out), *trainer]
    # as the lab's job user, in their directory (the scenario's job/), as a user submits on a cluster
    res = run(lab.cluster.user_argv(argv), timeout=120, env=dict(lab.user_env(), LD_LIBRARY_PATH=env["LD_LIBRARY_PATH"]),
              cwd=str(sc.job_dir))
    return int(res.stdout.strip().split(";")[0])


def _first_step_start(events, key, step_s: float) -> float:
    """When the first step of run `key` began (its event is logged at its end)."""
    return next(e["t"] for e in events if e["event"] == "step" and run_key(e) == key) - step_s


def _figures_of(lab, work: Path, hot: List[FaultResult], requeued: List[FaultResult]) -> Path:
    """This run's recoveries as figures: bench/recovery.py's summary of each path, bench/figures.py over
    the shipped file (what they do not measure, the hang's checks among them, stays the shipped)."""
    version = ".".join(map(str, lab.client.version()))
    files = []
    for path, rs in (("hot-spare", hot), ("requeue", requeued)):
        f = work / f"recovery-{path}.json"
        f.write_text(json.dumps({"path": path, "slurm": {"version": version},
                                 "lab": {"nodes": N + K, "hot_spares": K, "load_average_1m": os.getloadavg()[0]},
                                 "faults": len(rs), "slurm_ft": summary(rs, hot=path == "hot-spare")}))
        files.append(str(f))
    out = run([PY, str(Path(__file__).resolve().parents[2] / "bench" / "figures.py"), "--base", str(SHIPPED_FIGURES),
               "--recovery", *files], timeout=60)
    figures = work / "figures.json"
    figures.write_text(out.stdout)
    return figures


def test_the_simulator_accounts_for_a_lab_job_s_lost_gpu_seconds_within_20_percent(lab, work):
    sc = Scenario(lab.cluster, work / "sc", step_time=STEP_S, ckpt_every=CKPT_EVERY, hot_spares=K)
    sc.prepare()
    sc.start_controller()
    cfg = sc.config_path
    faults = []                             # (name, kind, swap, fault time, run key it hit)
    results: List[FaultResult] = []         # the Xids' recoveries, phase by phase
    try:
        jid = sc.job_id = _submit(lab, sc)
        sc.wait_event(lambda e: e.get("event") == "step" and run_key(e) == (0, 0) and e["step"] >= 3, 300, "step 3")
        _status(lab, cfg, jid)              # slurm-ft sees the first run's progress
        # 1. the hang: rank 1 stops after step 8; the last step the gang finished is the fault's time
        sc.wait_event(lambda e: e.get("event") == "stall", 120, "the stall")       # after step 14
        sc.wait_event(lambda e: e.get("event") == "step" and run_key(e) == (0, 1) and e["step"] >= 14, 180,
                      "steps after the hang's restart in place")
        last = max((e for e in sc.events() if e.get("event") == "step" and run_key(e) == (0, 0)), key=lambda e: e["step"])
        faults.append(("hang", "hang", False, last["t"], (0, 0)))
        _status(lab, cfg, jid)
        # 2-5. Xid 79 on a GPU of the training step (never the batch host: the scenario picks among the others)
        for i in range(4):
            key = sc.current_run()
            r = sc.fault(victim_index=i, gpu=i, warmup_steps=CKPT_EVERY + 6, timeout=300)
            results.append(r)
            faults.append((f"xid79 {r.failed_node}", "crash", True, r.fault_t, key))
            after = sc.current_run()
            sc.wait_event(lambda e: e.get("event") == "step" and run_key(e) == after
                          and e["step"] >= r.first_step_after + 2, 120, "steps after the recovery")
            _status(lab, cfg, jid)
        sc.wait_event(lambda e: e.get("event") == "step" and run_key(e) == sc.current_run()
                      and e["step"] >= r.first_step_after + 6, 120, "a few more steps")
        g = _status(lab, cfg, jid)
    finally:
        sc.stop()

    events = sc.events()
    keys = sorted({run_key(e) for e in events if e.get("event") == "start"})
    # the ways back the product took: in place (the hang), in the allocation, the requeue
    assert keys == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)], keys
    actual_ways = ["in place", "in allocation", "in allocation", "requeue", "in allocation"]
    requeued = [r for r, w in zip(results, actual_ways[1:]) if w == "requeue"]
    figures = _figures_of(lab, work, [r for r in results if r not in requeued], requeued)

    # what slurm-ft measured
    assert g["restarts"] and len(g["restarts"]) == 5 and g["step_time_s"], g
    lost = g["lost_seconds"]
    measured = lost["startup"] + lost["recovery"] + lost["redone_steps"]

    # the schedule: each fault's time since the run it hit began computing
    step_s = g["step_time_s"]
    schedule = {"faults": [{"name": name, "kind": kind, "swap": swap,
                            "after_s": round(t - _first_step_start(events, key, step_s), 3)}
                           for name, kind, swap, t, key in faults]}
    sched = work / "schedule.json"
    sched.write_text(json.dumps(schedule))
    # the job's checkpoint interval as it ran: the median time between two checkpoints of one run (two
    # of different runs are apart by a recovery too: with a run or two between faults, most pairs are)
    saves = [(run_key(e), e["t"]) for e in events if e.get("event") == "ckpt"]
    gaps = [b - a for (ka, a), (kb, b) in zip(saves, saves[1:]) if ka == kb]
    interval = statistics.median(gaps) if gaps else CKPT_EVERY * step_s
    p = slurm_ft(lab, None, "sim", "--schedule", str(sched), "--gpus", str(8 * N), "--gpus-per-node", "8",
                 "--hot-spares", str(K), "--hang-timeout", str(HANG_S), "--init-s", "0", "--checkpoint-cost-s", "0",
                 "--checkpoint-interval", str(interval / 60), "--figures", str(figures),
                 *(["--expedite"] if "expedite" in lab.client.requeue_option() else []), "--json")
    sim = json.loads(p.stdout)
    assert [f["way"] for f in sim["faults"]] == actual_ways
    predicted = sim["lost_seconds"]["total"]

    gpus = g["gpus"]
    rows = [f"{'fault':<16} {'way':<14} {'sim recovery':>12} {'lab recovery':>12} {'sim redone':>10} {'lab redone':>10}"]
    for f, x in zip(sim["faults"], g["restarts"]):
        rows.append(f"{f['name'][:16]:<16} {f['way']:<14} {f['recovery_s']:>12.2f} {x['recovery_s'] or 0:>12.2f} "
                    f"{f['lost_work_s']:>10.2f} {x['redone_s'] or 0:>10.2f}")
    rows.append(f"startup: sim {sim['lost_seconds']['startup']:.2f} s, lab {lost['startup']:.2f} s; "
                f"lost GPU-seconds ({gpus} GPUs): sim {predicted * gpus:.0f}, lab {measured * gpus:.0f} "
                f"({100 * (predicted - measured) / measured:+.1f}%); load average {os.getloadavg()[0]:.1f}; "
                f"checkpoint interval {interval:.2f} s, step {step_s:.2f} s, faults after "
                f"{[f['after_s'] for f in schedule['faults']]} s")
    print("\n".join(rows))
    assert abs(predicted - measured) <= 0.2 * measured, "\n".join(rows)
    # the redone steps are the schedule's arithmetic: the same within a step a fault (ranks report once a second)
    sim_redone = sum(f["lost_work_s"] for f in sim["faults"])
    assert abs(sim_redone - lost["redone_steps"]) <= len(faults) * 2 * step_s, "\n".join(rows)
    assert statistics.median(f["after_s"] for f in schedule["faults"]) > interval        # past a checkpoint
