#!/usr/bin/env python3
"""slurm-ft beside NVRx, torchft and Slurm alone: one lab, one real PyTorch job, one fault, side by side.

    python bench/peers.py [--faults 5] [--nodes 4] [--hot 1] [--groups 2] [--only KEY,KEY]
                          [--dir /tmp/slurm-ft-bench-peers] [--port-base 18400] [--json] [--save FILE]

The job (slurm_ft_lab.torchjob): PyTorch DDP over gloo on CPU, DCP checkpoints every --save-every steps,
one rank per node (8 fake GPUs each), --nodes nodes training and --hot more held beside them. The fault:
one GPU of a training node (not the batch host) falls off the bus (Xid 79; NVML reports it lost): the
rank on it dies at its next step, and any rank started there later dies at its first. Each contender is
deployed as its own documentation deploys it on Slurm (slurm_ft_lab.peers says how), by the lab's job
user; each fault is a fresh job on a clean lab, and the contenders take turns fault by fault, so the load
of a shared machine falls on all of them alike.

Printed per contender (p50/p95 over the faults): fault -> first step after (the job training again),
fault -> full strength (every rank slot stepping again: replica groups differ there), steps redone,
GPU-seconds lost (every rank slot's idle time x 8 GPUs, from its last step before the fault until the
job is back at full strength and 3 steps on: slurm_ft_lab.peerstats), whether the failed node was left
out, whether any healthy node was drained; ratios over slurm-ft's hot-spare figures (above 1: slurm-ft
ahead). A contender that did not recover from every fault prints no figures: its row says why.

Slurm alone is not waited out (600 s a fault): its row is computed from the collective timeout
(configured) + Slurm's requeue delay (measured on this lab, as bench/recovery.py does) + the requeue
path's launch to first step (measured in this run), and its GPU-seconds as the requeue path's plus that
extra wait on every slot. Slurm >= 25.11's expedited requeue the same, where this lab's Slurm has it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_ft_lab import peers, peerstats                         # noqa: E402
from slurm_ft_lab.cluster import Lab, LabSpec                     # noqa: E402
from slurm_ft_lab.scenario import Scenario                        # noqa: E402
from slurm_ft.slurm import versions                               # noqa: E402

REFERENCE = "slurm-ft-hot-spare"
PAIRING = ("slurm-ft + NVRx", "not built: NVRx 0.4.1 hears this fault without a drain (its launcher sees the rank "
           "exit within its 0.1 s monitor interval, and its own NVML check finds the lost GPU at the next "
           "rendezvous); it has no drain poller (NVRx 0.7) nor other hook a drain could feed. Where the pairing "
           "would pay, a hang (NVRx waits out its heartbeat timeout) or a fault its check cannot see, is not "
           "this fault")


def computed_rows(args, lab_nodes: int, requeue_delay: float, expedite: bool, version: str, requeue: peerstats.Row,
                  launch_s: list) -> list:
    """Slurm alone (and with expedited requeue), from their configured and measured parts."""
    rows = []
    if requeue.kind != "measured" or not launch_s:
        why = "needs the slurm-ft requeue row's measured launch to first step (it did not run or recover)"
        rows.append(peerstats.Row("slurm", "Slurm alone", "absent", why, nodes=args.nodes))
        rows.append(peerstats.Row("slurm-expedite", "Slurm expedite alone", "absent", why, nodes=args.nodes))
        return rows
    launch = peerstats.pct(launch_s, 50)
    gpus = 8

    def row(key, label, delay, what):
        first = args.collective_timeout + delay + launch
        lost = requeue.lost_p50 + args.nodes * gpus * (first - requeue.first_p50)
        note = (f"computed: {args.collective_timeout:g} s collective timeout (configured) + {delay:.1f} s {what} "
                f"(measured) + {launch:.1f} s launch to first step (measured, requeue path)")
        return peerstats.Row(key, label, "computed", note, faults=requeue.faults, nodes=args.nodes,
                             first_p50=first, full_p50=first, redone=requeue.redone, lost_p50=lost,
                             left_out=None, healthy_drained=())

    rows.append(row("slurm", "Slurm alone", requeue_delay if not expedite else 121.0,
                    "requeue delay" if not expedite else "requeue delay (plain --requeue)"))
    if expedite:
        rows.append(row("slurm-expedite", "Slurm expedite alone", requeue_delay, "requeue delay (--requeue=expedite)"))
    else:
        rows.append(peerstats.Row("slurm-expedite", "Slurm expedite alone", "absent",
                                  f"not on Slurm {version} (--requeue=expedite needs >= 25.11 and "
                                  "SlurmctldParameters=enable_expedited_requeue)", nodes=args.nodes))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--faults", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=4, help="training nodes (one rank each)")
    ap.add_argument("--hot", type=int, default=1, help="nodes held beside them (hot spares, NVRx's spare launchers)")
    ap.add_argument("--groups", type=int, default=2, help="torchft's replica groups")
    ap.add_argument("--step-time", type=float, default=0.5)
    ap.add_argument("--save-every", type=int, default=5)
    ap.add_argument("--collective-timeout", type=float, default=600.0, help="configured (NCCL's default 600 s)")
    ap.add_argument("--timeout", type=float, default=300.0, help="per phase: the job up; its recovery")
    ap.add_argument("--only", default="", help="comma-separated contender keys: " +
                    ", ".join(c.key for c in peers.MEASURED))
    ap.add_argument("--dir", default="/tmp/slurm-ft-bench-peers")
    ap.add_argument("--port-base", type=int, default=18400)
    ap.add_argument("--keep-lab", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--save", metavar="FILE", help="also write the JSON to FILE")
    args = ap.parse_args(argv)
    if args.faults < 1 or args.nodes < 2 or args.hot < 1 or args.groups < 2 or args.nodes % args.groups:
        ap.error("--faults >= 1, --nodes >= 2, --hot >= 1, --groups >= 2 dividing --nodes")
    only = {k for k in args.only.split(",") if k}
    unknown = only - {c.key for c in peers.MEASURED}
    if unknown:
        ap.error(f"unknown contender(s) {', '.join(sorted(unknown))}")
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, flush=True))
    setup = peers.Setup(nodes=args.nodes, hot=args.hot, groups=args.groups, step_time=args.step_time,
                        save_every=args.save_every, timeout=args.timeout)

    lab = Lab(args.dir)
    started = not lab.running()
    if started:
        lab = Lab(args.dir, LabSpec(nodes=setup.lab_nodes, spares=2, port_base=args.port_base))
        lab.up(timeout=180)
        # a lab of a few nodes opens the drain-rate breaker at its first drain (10% of 7 is 1): the bench
        # measures recoveries, not the breaker
        cfg = yaml.safe_load(Path(lab.config_path).read_text()) or {}
        cfg.setdefault("lifecycle", {})["breaker_max_share"] = 0.9
        Path(lab.config_path).write_text(yaml.safe_dump(cfg))
    elif len(lab.spec.train_nodes) < setup.lab_nodes or not lab.spec.spare_nodes:
        ap.error(f"the lab in {args.dir} has {len(lab.spec.train_nodes)} nodes in train and "
                 f"{len(lab.spec.spare_nodes)} spares; this run needs {setup.lab_nodes} and 1")
    load_start = os.getloadavg()[0]
    work = lab.dir / "peers"
    contenders = [c for c in peers.MEASURED if not only or c.key in only]
    absent = {c.key: c.missing() for c in contenders}
    running = [c for c in contenders if not absent[c.key]]
    runs = {c.key: [] for c in running}
    t0 = time.monotonic()
    try:
        sc = Scenario(lab, work / "slurm")
        sc.prepare()
        version = versions.text(sc.client.version())
        option = sc.client.requeue_option()
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from recovery import measure_requeue_delay
        delay = measure_requeue_delay(sc)
        say(f"lab in {lab.dir}: {lab.spec.nodes} nodes in train + {lab.spec.spares} spares; Slurm {version} "
            f"(jobs submitted with {option}; requeue delay measured {delay:.0f} s); load {load_start:.1f}")
        say(f"job: {args.nodes} training nodes (+{args.hot} held), step {args.step_time:g} s, DCP every "
            f"{args.save_every} steps, fault {setup.fault_after} steps past a checkpoint; {args.faults} fault(s) "
            f"each for {', '.join(c.label for c in running) or 'no contender'}")
        for i in range(args.faults):
            for c in running:
                r = peers.run_fault(lab, work, c, setup, i, say=say)
                runs[c.key].append(r)
                f = r.figures
                say(f"  {c.label}: " + (f"first step after {f.fault_to_first_step_s:.2f} s, full {f.fault_to_full_s:.2f} s, "
                                        f"{f.steps_redone} redone, {f.gpu_s_lost:.0f} GPU-s lost, drained "
                                        f"{', '.join(r.drained) or 'nothing'}; load {os.getloadavg()[0]:.1f}"
                                        if f else f"NOT RECOVERED: {r.error}"))
    finally:
        if started and not args.keep_lab:
            lab.down(quiet=True)

    rows = []
    by_key = {}
    for c in contenders:
        nodes = args.nodes + (args.hot if c.key != "slurm-ft-requeue" else 0)
        if absent[c.key]:
            row = peerstats.Row(c.key, c.label, "absent", absent[c.key], nodes=nodes)
        else:
            row = peerstats.summarize(c.key, c.label, [(r.figures, r.error, r.healthy_drained) for r in runs[c.key]],
                                      nodes)
        rows.append(row)
        by_key[c.key] = row
    launch = []
    for r in runs.get("slurm-ft-requeue", []):
        if r.figures is None:
            continue
        marks = dict(r.controller)
        begin = marks.get("start") or marks.get("requeue")
        if begin is not None:
            launch.append(r.fault_t + r.figures.fault_to_first_step_s - begin)
    if not only or "slurm-ft-requeue" in only:
        expedite = "expedite" in option
        rows += computed_rows(args, setup.lab_nodes, delay, expedite, version,
                              by_key.get("slurm-ft-requeue") or peerstats.Row("", "", "absent"), launch)
    rows.append(peerstats.Row("slurm-ft-nvrx", PAIRING[0], "absent", PAIRING[1]))

    out = {
        "slurm": {"version": version, "requeue_option": option, "requeue_delay_s": round(delay, 1)},
        "setup": {"nodes": args.nodes, "hot": args.hot, "groups": args.groups, "step_time_s": args.step_time,
                  "save_every": args.save_every, "fault_after": setup.fault_after, "gpus_per_node": 8,
                  "faults": args.faults, "load_average_start": round(load_start, 1),
                  "load_average_end": round(os.getloadavg()[0], 1), "wall_s": round(time.monotonic() - t0, 1)},
        "reference": REFERENCE,
        "rows": [r.to_dict() for r in rows],
        "runs": {k: [{"victim": r.victim, "gpu": r.gpu, "failed_group": r.failed_group, "error": r.error,
                      "drained": r.drained, "figures": r.figures.to_dict() if r.figures else None,
                      "fault_t": r.fault_t, "controller": r.controller, "events": r.events}
                     for r in v] for k, v in runs.items()},
    }
    if args.save:
        Path(args.save).write_text(json.dumps(out, indent=2) + "\n")
    if args.json:                   # the events stay in --save's file
        for v in out["runs"].values():
            for r in v:
                r.pop("events")
        print(json.dumps(out, indent=2))
    else:
        print()
        print(peerstats.table(rows, REFERENCE))
        print()
        for r in rows:
            if r.kind == "computed":
                print(f"{r.label}: {r.note}")
        print(f"ratio: the contender's figure over slurm-ft hot spare's (above 1: slurm-ft ahead); GPU-seconds: "
              f"8 GPUs a node; load average {load_start:.1f} -> {os.getloadavg()[0]:.1f} on this machine's cores")
    failed = [r for r in rows if r.kind == "failed"]
    return 1 if failed and not args.json else 0


if __name__ == "__main__":
    sys.exit(main())
