#!/usr/bin/env python3
"""Replica groups on the lab: what a fault in one torchft replica group costs, side by side with the same
job as one gang under the whole-job hot-spare path.

    python bench/replica_groups.py [--groups 2] [--group-nodes 2] [--hot-spares 1] [--step-time 0.3]
                                   [--fault die|hang] [--dir /tmp/slurm-ft-bench-groups] [--port-base 18400]
                                   [--keep-lab] [--json]

One lab, the same FT-DDP job (slurm_ft_lab.ftddp: gloo on CPU, DCP checkpoints every 20 steps), the same
fault (a fatal Xid on a GPU of a node of group 1 that is not the batch host; the rank dies, or hangs with
--fault hang), three runs:
  slurm-ft      `slurm-ft sbatch --replica-groups R --hot-spares K`: the Lighthouse's heartbeat timeout
                1 s (groups.HEARTBEAT_MS), the failed group stopped by the supervisor on the node's notice
  torchft       the same, with the Lighthouse's heartbeat timeout as torchft ships it (5 s): how long the
                healthy groups wait when only torchft's own liveness says a group is gone
  whole job     the same model as one gang (ftddp without a Lighthouse: plain DDP over every rank) under
                `--hot-spares K`: the whole step stops and restarts from its latest checkpoint
Printed: the healthy groups' pause (their longest step from the fault to the failed group's return,
their usual step beside it) and steps lost; fault -> the failed group's first step back in the quorum
(start-up and heal shown apart), fault -> first step after for the whole job; GPU-seconds lost per fault
(the failed group's GPUs until back, the healthy groups' over their pause; the whole job's GPUs until its
first step after, plus its redone steps) and the ratio, against the goal: >= R.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_ft_lab.cluster import Lab, LabSpec                      # noqa: E402
from slurm_ft_lab.groups_scenario import GroupScenario            # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-nodes", type=int, default=2)
    ap.add_argument("--hot-spares", type=int, default=1)
    ap.add_argument("--step-time", type=float, default=0.3)
    ap.add_argument("--fault", choices=("die", "hang"), default="die")
    ap.add_argument("--dir", default="/tmp/slurm-ft-bench-groups")
    ap.add_argument("--port-base", type=int, default=18400)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--keep-lab", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    nodes = a.groups * a.group_nodes + a.hot_spares
    lab = Lab(a.dir, LabSpec(nodes=nodes + 1, spares=2, gpus_per_node=8, port_base=a.port_base))
    started = not lab.running()
    lab.up(timeout=120)
    say = (lambda *x: None) if a.json else print
    out = {}
    try:
        for name, kw in (("slurm-ft", {}), ("torchft", {"heartbeat_ms": 5000}), ("whole job", {"gang": True})):
            say(f"== {name} ...")
            sc = GroupScenario(lab, Path(a.dir) / "bench" / name.replace(" ", "-"), replica_groups=a.groups,
                               hot_spares=a.hot_spares, step_time=a.step_time, on_fault=a.fault, **kw)
            res = sc.run_fault(nodes, timeout=a.timeout)
            out[name] = res.to_dict()
            if name == "whole job":
                gpus = nodes - a.hot_spares
                step_s = out["slurm-ft"]["healthy_step_s"] or a.step_time
                out[name]["gpu_seconds_lost"] = round(gpus * lab.spec.gpus_per_node * (
                    res.fault_to_resume_s + (res.steps_lost or 0) * step_s), 1)
            else:
                phases = {p["name"]: p["s"] for p in out[name]["phases"]}
                out[name]["group_started_s"] = phases.get("group started")
    finally:
        if started and not a.keep_lab:
            lab.down()
            shutil.rmtree(Path(a.dir) / "bench", ignore_errors=True)
    rg, tf, whole = out["slurm-ft"], out["torchft"], out["whole job"]
    ratio = whole["gpu_seconds_lost"] / rg["gpu_seconds_lost"] if rg["gpu_seconds_lost"] else None
    summary = {
        "groups": a.groups, "group_nodes": a.group_nodes, "hot_spares": a.hot_spares, "fault": a.fault,
        "healthy_pause_s": {"slurm-ft": rg["healthy_pause_s"], "torchft": tf["healthy_pause_s"]},
        "healthy_step_s": rg["healthy_step_s"],
        "healthy_group_steps_lost": {"slurm-ft": rg["healthy_group_steps_lost"], "torchft": tf["healthy_group_steps_lost"]},
        "fault_to_back_in_quorum_s": rg["fault_to_resume_s"], "group_started_s": rg["group_started_s"],
        "heal_s": round(rg["fault_to_resume_s"] - rg["group_started_s"], 3) if rg["group_started_s"] else None,
        "whole_job_fault_to_first_step_s": whole["fault_to_resume_s"], "whole_job_steps_redone": whole["steps_lost"],
        "gpu_seconds_lost": {"replica groups": rg["gpu_seconds_lost"], "whole job": whole["gpu_seconds_lost"]},
        "gpu_seconds_ratio": round(ratio, 2) if ratio else None, "goal_ratio": a.groups,
        "runs": out,
    }
    if a.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"\n{a.groups} replica groups x {a.group_nodes} node(s) x 8 GPUs + {a.hot_spares} hot spare(s), "
          f"fault: Xid 79, the rank {'dies' if a.fault == 'die' else 'hangs'}")
    print(f"  healthy groups' longest step at the fault   slurm-ft {rg['healthy_pause_s']:6.2f} s   torchft's "
          f"heartbeat (5 s) {tf['healthy_pause_s']:6.2f} s   (usual step {rg['healthy_step_s']:.2f} s)")
    print(f"  healthy groups' steps lost                  slurm-ft {rg['healthy_group_steps_lost']}   torchft "
          f"{tf['healthy_group_steps_lost']}")
    print(f"  failed group back in the quorum             {rg['fault_to_resume_s']:6.2f} s after the fault "
          f"(started at {rg['group_started_s']} s, healed and stepping {summary['heal_s']} s later)")
    print(f"  whole job (one gang, hot-spare path)         first step after {whole['fault_to_resume_s']:6.2f} s, "
          f"{whole['steps_lost']} step(s) redone")
    print(f"  GPU-seconds lost per fault                  replica groups {rg['gpu_seconds_lost']:8.0f}   whole job "
          f"{whole['gpu_seconds_lost']:8.0f}   ratio {summary['gpu_seconds_ratio']} (goal >= {a.groups})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
