#!/usr/bin/env python3
"""A seeded, randomized fault campaign with invariants, on the lab with slurm-ft deployed as at a site.

    python bench/chaos.py [--minutes 30] [--seed 1] [--gap 45 90] [--nodes 16] [--spares 4] [--jobs 4]
                          [--dir /tmp/slurm-ft-chaos-lab] [--port-base 19000] [--save FILE] [--json]
    python bench/chaos.py --self-test        # each invariant caught on a planted violation (no lab)
    python bench/chaos.py --render bench/results/chaos-22.05.8-seed1.json     # its docs/benchmarks.md section

The controller (`slurm-ft controller run`), a `slurm-ft watch` on every node and the hooks run as deployed;
half the jobs hold a hot spare, the others take the requeue path; they belong to three lab users. Faults
are drawn (seeded) from slurm_ft_lab.campaign.KINDS, one every GAP seconds (uniform in the range, counted
from the fault before, and never before that fault settled): a GPU falling off the bus, two of them on one
job 2 s apart, an application's Xid beside the job, the job's batch host partitioned, the controller
killed mid-incident, slurmctld restarted mid-incident, a node's watcher dead when its GPU fails. After each
settles, the invariants of slurm_ft_lab.invariants are checked on one read of the lab; each violation is
printed with its evidence. Printed at the end: faults by kind, recovered, fault -> stepping again (p50 /
p95 / max per kind), and violations by invariant. Exit 1 when any invariant broke.

Not covered yet: replica-group jobs (torchft: too heavy for the campaign's 2 cores beside 20 watchers), a
checkpoint write that fails, a partition while a drain is written.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_ft_lab import invariants as inv                       # noqa: E402
from slurm_ft_lab.campaign import KINDS, Campaign                 # noqa: E402
from slurm_ft_lab.cluster import Lab, LabSpec                     # noqa: E402
from slurm_ft.slurm import versions                               # noqa: E402


def self_test() -> int:
    results = inv.self_test()
    for i, (name, ok, evidence) in enumerate(results):
        word = ("clean" if ok else "FALSE ALARM") if i == 0 else ("caught" if ok else "MISSED")
        print(f"{name:<22} {word:<7} {evidence}")
    return 0 if all(caught for _, caught, _ in results) else 1


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else None


def report(outcomes, elapsed_s: float, meta: dict) -> dict:
    kinds = {}
    for o in outcomes:
        k = kinds.setdefault(o.fault.kind, {"faults": 0, "recovered": 0, "stepping_again_s": []})
        k["faults"] += 1
        if not [v for v in o.violations if v.fault == o.fault.id and v.invariant == "runs_again"]:
            k["recovered"] += 1
        if o.stepping_again_s is not None:
            k["stepping_again_s"].append(o.stepping_again_s)
    for k in kinds.values():
        xs = k["stepping_again_s"]
        k.update(p50_s=statistics.median(xs) if xs else None, p95_s=_pct(xs, 0.95), max_s=max(xs) if xs else None)
    by_invariant = {name: [] for name in inv.INVARIANTS}
    for o in outcomes:
        for v in o.violations:
            by_invariant[v.invariant].append({"fault": v.fault, "evidence": v.evidence})
    return {**meta, "elapsed_s": round(elapsed_s, 1), "faults": len(outcomes), "by_kind": kinds,
            "violations": by_invariant, "runs_lost": len(by_invariant["runs_again"]),
            "healthy_drained": len(by_invariant["healthy_in_service"]) + len(by_invariant["user_xid_no_drain"])}


def render(r: dict, source: str) -> str:
    """The markdown of one saved run for docs/benchmarks.md (between its `<!-- chaos: FILE -->` markers;
    tests/unit/test_benchmarks_doc.py checks the doc against the file)."""
    f = lambda x: "-" if x is None else f"{x:.1f}"
    lines = [f"{r['faults']} faults in {r['elapsed_s'] / 60:.1f} min, Slurm {r['slurm']}, a {r['nodes']} + "
             f"{r['spares']}-node lab, {r['jobs']} jobs, seed {r['seed']}, a fault every "
             f"{r['gap_s'][0]:g}-{r['gap_s'][1]:g} s after the one before settled; load average "
             f"{r['load_start']:.1f} at the start, {r['load_end']:.1f} at the end (`{source}`).", "",
             "| fault | faults | recovered | fault to stepping again, p50 / p95 / max (s) |",
             "|---|---|---|---|"]
    for kind, k in sorted(r["by_kind"].items()):
        times = " / ".join(f(k[x]) for x in ("p50_s", "p95_s", "max_s")) if k["stepping_again_s"] else "no restart"
        lines.append(f"| {kind} | {k['faults']} | {k['recovered']} | {times} |")
    lines += ["", "| invariant | violations |", "|---|---|"]
    lines += [f"| {name} | {len(vs)} |" for name, vs in r["violations"].items()]
    return "\n".join(lines) + "\n"


def _print(r: dict) -> None:
    print(f"\n{r['faults']} faults in {r['elapsed_s'] / 60:.1f} min on Slurm {r['slurm']} (seed {r['seed']}); "
          f"load average {r['load_start']:.1f} -> {r['load_end']:.1f}")
    print(f"{'kind':<20}{'faults':>7}{'recovered':>10}{'p50 s':>8}{'p95 s':>8}{'max s':>8}")
    f = lambda x: "-" if x is None else f"{x:.1f}"
    for kind, k in sorted(r["by_kind"].items()):
        print(f"{kind:<20}{k['faults']:>7}{k['recovered']:>10}{f(k['p50_s']):>8}{f(k['p95_s']):>8}{f(k['max_s']):>8}")
    print("\nviolations by invariant (fault -> stepping again is the first step of the job's next start)")
    for name, vs in r["violations"].items():
        print(f"  {name:<20}{len(vs):>4}" + "".join(f"\n      fault {v['fault']}: {v['evidence']}" for v in vs))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--self-test", action="store_true", help="plant one violation per invariant and show each caught")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--faults", type=int, default=0, help="stop after this many faults (0: --minutes decides)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gap", type=float, nargs=2, default=(45.0, 90.0), metavar=("MIN", "MAX"))
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--spares", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--dir", default="/tmp/slurm-ft-chaos-lab")
    ap.add_argument("--port-base", type=int, default=19000)
    ap.add_argument("--save", metavar="FILE", help="also write the JSON to FILE (bench/results/)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--render", metavar="FILE", help="print a saved run's markdown for docs/benchmarks.md")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    if args.render:
        print(render(json.loads(Path(args.render).read_text()), args.render), end="")
        return 0
    if not (0 < args.minutes <= 24 * 60) or not (0 < args.gap[0] <= args.gap[1] <= 3600):
        ap.error("--minutes in (0, 1440], --gap MIN <= MAX within (0, 3600]")
    if args.jobs * 4 > args.nodes + args.spares or args.jobs < 1:
        ap.error(f"--jobs {args.jobs}: each takes 3 or 4 nodes of the {args.nodes} + {args.spares}")
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, flush=True))
    lab = Lab(args.dir, LabSpec(nodes=args.nodes, spares=args.spares, port_base=args.port_base))
    started = not lab.running()
    if started:
        lab.up(timeout=180)
    camp = Campaign(lab, Path(args.dir) / "chaos", seed=args.seed, jobs=args.jobs, say=say)
    load_start, t0, outcomes = os.getloadavg()[0], time.monotonic(), []
    try:
        camp.prepare()
        slurm = versions.text(camp.client.version())
        say(f"lab {args.nodes} + {args.spares} nodes, Slurm {slurm}, {args.jobs} jobs; seed {args.seed}")
        end = t0 + args.minutes * 60
        while time.monotonic() < end and (not args.faults or len(outcomes) < args.faults):
            began = time.monotonic()
            o = camp.fault(camp.draw())
            outcomes.append(o)
            say(f"  settled: stepping again {o.stepping_again_s} s; violations "
                f"{[v.invariant for v in o.violations] or 'none'}; load {os.getloadavg()[0]:.1f}")
            for v in o.violations:
                say(f"    {v.invariant}: {v.evidence}")
            gap = camp.rng.uniform(*args.gap)
            time.sleep(max(0.0, began + gap - time.monotonic()))
    finally:
        camp.stop()
        if started:
            lab.down(quiet=True)
    r = report(outcomes, time.monotonic() - t0, {"seed": args.seed, "slurm": slurm, "nodes": args.nodes,
                                                 "spares": args.spares, "jobs": args.jobs, "gap_s": list(args.gap),
                                                 "load_start": load_start, "load_end": os.getloadavg()[0],
                                                 "kinds": {k: {"weight": w, "settle_s": s}
                                                           for k, (w, s) in KINDS.items()}})
    if args.save:
        Path(args.save).write_text(json.dumps(r, indent=2) + "\n")
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        _print(r)
    return 1 if any(r["violations"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
