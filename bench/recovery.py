#!/usr/bin/env python3
"""Fault-to-first-resumed-step: slurm-ft against Slurm alone, on the lab at 64 nodes x 8 GPUs.

    python bench/recovery.py [--path requeue|hot-spare|slurm] [--faults 5] [--dir /tmp/slurm-ft-bench-lab]
                             [--port-base 18000] [--json]
    python bench/recovery.py --compare BEFORE.json AFTER.json     # two --save outputs, medians side by side
    python bench/recovery.py --no-job-hooks --save X.json         # diagnostic: what the prolog/epilog cost
    python bench/recovery.py --path hot-spare --nodes 8 --faults 20 --hogs 4 --breaker-share 0.9
                                                                  # the stress run: every fault on a loaded host

Where the time goes at 64 nodes on the lab's two shared cores (2026-11-29, p50 of 5 faults each): the 64
epilog and 64 prolog checks (`slurm-ft check`, about 0.1 CPU-s each) are 8.6 s of a 14.5 s restart;
without them it is 5.9 s (--no-job-hooks, a measurement only: never a way to run).

One run of the 512-GPU trainer job; `--faults` times in a row a fatal Xid 79 goes to one GPU of one of
its nodes (a different node each time). Each time `slurm-ft watch` on that node drains it, the controller
(in this process) swaps a spare in and requeues the job, and the trainer resumes from its latest complete
checkpoint. Between faults the failed node is "repaired" (healed, resumed, put back in `spares`) so the
pool never runs dry. Printed: each phase's time since the fault (p50 and p95 over the faults) and the
total, fault to the first training step after it.

--path hot-spare: the job is submitted with `--hot-spares F` (F = --faults) on --nodes + F nodes, so the
training step runs on --nodes nodes throughout; at each fault its supervisor stops the step and relaunches
it on a hot spare of the allocation: no requeue, no epilogs, no scheduling, no prologs. No repair between
faults: each fault takes one hot spare.

--path planned: no fault at all: corrected ECC errors start climbing on one GPU of a node of the step (the
fake driver counts them at 100 a second); that node's `slurm-ft watch` sees the soft signal and drains it
gracefully, the supervisor asks the trainer for a checkpoint and moves the step to a hot spare from it.
Timed from the soft signal (the node drained PLANNED) to the first step on the spare; steps redone: 0.
Like hot-spare, the job holds --faults hot spares.

--path slurm: Slurm alone only (no slurm-ft recovery): the requeue delay and a plain start's launch to
first step are measured on the lab, the collective timeout is configured.

Slurm alone, same fault: the health check drains the node within HealthCheckInterval, but a drain does
not stop a running job; the surviving ranks wait in their collective until its timeout (NCCL: 600 s),
the job exits, and if it is requeued at all (RequeueExit or a wrapper; without either it stays FAILED
and a person resubmits) Slurm holds it for its requeue delay before it can start again. That figure is
computed, not waited out: the requeue delay is MEASURED here (a requeued job's EligibleTime), the
launch-to-first-step time is MEASURED (the same launch as slurm-ft's, from this run), the collective
timeout and HealthCheckInterval are CONFIGURED constants (flags below). The output says which is which.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_ft_lab.cluster import Lab, LabSpec                       # noqa: E402
from slurm_ft_lab.recovery_summary import summary                  # noqa: E402
from slurm_ft_lab.scenario import Scenario                         # noqa: E402
from slurm_ft.runner import run                                    # noqa: E402
from slurm_ft.slurm import versions                                # noqa: E402
from slurm_ft_lab.waits import wait_job_state  # noqa: E402


def measure_requeue_delay(sc: Scenario) -> float:
    """Slurm's own delay before a requeued job may start again: EligibleTime - requeue time, for a job
    submitted with the requeue option slurm-ft uses on this cluster (`--requeue` before Slurm 25.11:
    about 121 s; `--requeue=expedite` where enabled: eligible at once, so the delay is about 0)."""
    from slurm_ft.vocab import slurm_time as parse_slurm_time
    c = sc.client
    # root's job, in the pool (a site keeps `spares` to root): the delay is Slurm's, whoever's job it is
    res = run(["sbatch", "--parsable", c.requeue_option(), "-p", "spares", "-N", "1", "-o", "/dev/null",
               "--wrap", "sleep 600"], timeout=60, env=sc.env)
    jid = int(res.stdout.strip().split(";")[0])
    try:
        wait_job_state(c, jid, "RUNNING", timeout=120)
        t0 = time.time()
        c.requeue(jid)
        t = (t0 + time.time()) / 2        # slurmctld stamped the requeue somewhere in the call
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            j = c.job(jid)
            eligible = parse_slurm_time(j.eligible_time) if j.state == "PENDING" else None
            if j.state == "PENDING" and (j.reason == "BeginTime" or (eligible is not None and j.restart_count)):
                return max(0.0, eligible - t) if eligible is not None else 0.0   # 1 s resolution, as printed
            if j.state == "RUNNING" and j.restart_count:
                return 0.0                # started again before a read saw it pending: eligible at once
            time.sleep(0.05)
        raise RuntimeError("requeued job never showed its eligible time")
    finally:
        run(["scancel", str(jid)], timeout=30, env=sc.env, check=False)


def repair(sc: Scenario, node: str) -> None:
    """What the lifecycle does between faults (repair, validate, back to the pool), minus the waiting."""
    from slurm_ft_lab.inject import heal
    heal(sc.lab.dir, node)                # also forgets the health state, as the repair's reboot would
    sc.client.resume([node])
    pool = sc.client.partition("spares").nodes
    sc.client.set_partition_nodes("spares", sorted(set(pool) | {node}))


def compare(before: dict, after: dict, names=("before", "after")) -> str:
    """Two saved runs side by side: p50 of each segment and of the total, with the load averages."""
    a, b = before["slurm_ft"], after["slurm_ft"]
    la = lambda r: f"{r['lab'].get('load_average_start', '?')} -> {r['lab'].get('load_average_1m', '?')}"
    w, c = 52, max(10, *(len(n) + 2 for n in names))
    lines = [f"{'p50 (s)':<{w}}{names[0]:>{c}}{names[1]:>{c}}{'change':>9}"]
    for label in list(a["segments"]) + [k for k in b["segments"] if k not in a["segments"]]:
        x, y = a["segments"].get(label, {}).get("p50_s"), b["segments"].get(label, {}).get("p50_s")
        diff = f"{y - x:+9.2f}" if x is not None and y is not None else f"{'':>9}"
        lines.append(f"{label:<{w}}{_f(x):>{c}}{_f(y):>{c}}{diff}")
    for key, label in (("fault_to_first_step_p50_s", "fault -> first step after, p50"),
                       ("fault_to_first_step_p95_s", "fault -> first step after, p95")):
        x, y = a[key], b[key]
        lines.append(f"{label:<{w}}{_f(x):>{c}}{_f(y):>{c}}{y - x:+9.2f}")
    lines.append(f"{'faults':<{w}}{before['faults']:>{c}}{after['faults']:>{c}}")
    lines.append(f"load average (1 min) at start -> end: {names[0]} {la(before)}; {names[1]} {la(after)}")
    return "\n".join(lines)


def _f(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _slurm_alone_only(args, requeue_delay: float, launch_s: float) -> int:
    """--path slurm: the same fault under Slurm alone, from its measured and configured parts."""
    parts = [("ranks hang until the collective timeout", args.collective_timeout, "configured"),
             ("Slurm's requeue delay", round(requeue_delay, 1), "measured"),
             ("launch to first step (a plain job start)", round(launch_s, 3), "measured")]
    total = sum(p[1] for p in parts)
    out = {"path": "slurm", "fault_to_first_step_s": round(total, 1),
           "components": [{"name": n, "s": v, "kind": k} for n, v, k in parts],
           "note": "assumes the job is requeued when it exits (RequeueExit or a wrapper); otherwise it stays "
                   "FAILED until a person resubmits it"}
    if args.save:
        Path(args.save).write_text(json.dumps(out, indent=2) + "\n")
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for n, v, k in parts:
        print(f"{n:<45}{v:>10.2f} s  ({k})")
    print(f"{'fault -> first step after, Slurm alone':<45}{total:>10.1f} s")
    return 0


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--compare":
        if len(argv) != 3:
            print("usage: bench/recovery.py --compare BEFORE.json AFTER.json", file=sys.stderr)
            return 2
        runs = [json.loads(Path(p).read_text()) for p in argv[1:]]
        print(compare(*runs, names=tuple(Path(p).stem for p in argv[1:])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", choices=("requeue", "hot-spare", "planned", "slurm"), default="requeue",
                    help="requeue: the controller requeues onto a pool spare; hot-spare: the job's supervisor "
                         "relaunches on a spare in its allocation; planned: a soft signal, the job moves to a hot "
                         "spare at a checkpoint asked for; slurm: Slurm alone (computed from measurements)")
    ap.add_argument("--faults", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/slurm-ft-bench-lab")
    ap.add_argument("--port-base", type=int, default=18000)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--spares", type=int, default=4)
    ap.add_argument("--step-time", type=float, default=0.5)
    ap.add_argument("--ckpt-every", type=int, default=5)
    ap.add_argument("--collective-timeout", type=float, default=600.0, help="configured (NCCL default 600 s)")
    ap.add_argument("--health-interval", type=float, default=300.0,
                    help="HealthCheckInterval assumed for Slurm alone (configured; the lab runs 30 s)")
    ap.add_argument("--timeout", type=float, default=600.0, help="per phase")
    ap.add_argument("--keep-lab", action="store_true", help="leave a lab brought up here running")
    ap.add_argument("--no-job-hooks", action="store_true",
                    help="diagnostic: a lab without Prolog/Epilog, to measure what the 64 prolog and 64 "
                         "epilog checks cost a restart (never a way to run; needs a lab this run starts)")
    ap.add_argument("--breaker-share", type=float, metavar="F",
                    help="diagnostic: lifecycle.breaker_max_share for this run (a lab of a few nodes opens the "
                         "drain-rate breaker at its first drain: 10%% of 13 nodes is 1)")
    ap.add_argument("--hogs", type=int, default=0, metavar="N",
                    help="N processes spinning on the CPU from the job's submission to the end: the stress run "
                         "(every fault must still be recovered with the lab's cores taken)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--save", metavar="FILE", help="also write the JSON to FILE (for the planning sim)")
    args = ap.parse_args(argv)
    if args.faults < 1:
        ap.error("--faults must be >= 1")

    lab = Lab(args.dir)
    started = not lab.running()
    if (args.no_job_hooks or args.breaker_share is not None) and not started:
        ap.error(f"--no-job-hooks and --breaker-share need a lab this run starts; one is up in {args.dir}")
    hot = args.faults if args.path in ("hot-spare", "planned") else 0
    planned = args.path == "planned"
    if started:
        lab = Lab(args.dir, LabSpec(nodes=args.nodes + hot, spares=args.spares, port_base=args.port_base,
                                    job_hooks=not args.no_job_hooks))
    t_up = time.monotonic()
    if started:
        lab.up(timeout=180)             # a running lab is reset by the scenario instead (it may hold quarantined nodes)
    up_s = time.monotonic() - t_up
    load_start = os.getloadavg()[0]
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, flush=True))
    say(f"lab in {lab.dir}: {lab.spec.nodes} x {lab.spec.gpus_per_node} GPUs + {lab.spec.spares} spares "
        f"({'up in %.1f s' % up_s if started else 'already up'}); load average {os.getloadavg()[0]:.1f}")

    hot = min(hot, max(0, lab.spec.nodes - 1))      # a lab already up: its nodes are what there is
    sc = Scenario(lab, lab.dir / "bench", step_time=args.step_time, ckpt_every=args.ckpt_every,
                  collective_timeout=args.collective_timeout, hot_spares=hot, planned=planned)
    results = []
    first_launch_s = None
    hogs = []
    try:
        if args.breaker_share is not None:       # the nodes' config (the watchers'); the controller's copies it
            cfg = yaml.safe_load(Path(lab.config_path).read_text()) or {}
            cfg.setdefault("lifecycle", {})["breaker_max_share"] = args.breaker_share
            Path(lab.config_path).write_text(yaml.safe_dump(cfg))
        sc.prepare()
        version = versions.text(sc.client.version())
        requeue = sc.client.requeue_option()
        say(f"Slurm {version}; jobs submitted with {requeue}")
        requeue_delay = measure_requeue_delay(sc)
        say(f"Slurm's requeue delay ({requeue}), measured: {requeue_delay:.0f} s")
        if args.path != "slurm":
            sc.start_controller()
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
        if hogs:
            say(f"{len(hogs)} CPU hog(s) spinning until the run ends")
        t_submit = time.time()
        job = sc.submit(lab.spec.nodes)
        train = lab.spec.nodes - hot
        say(f"job {job}: {train * lab.spec.gpus_per_node}-GPU trainer"
            + (f" + {hot} hot spare node(s)" if hot else "") + f"; {args.path} path")
        if args.path == "slurm":
            first = sc.wait_event(lambda e: e.get("event") == "step", args.timeout, "first step")
            running = sc.client.job(job)
            from slurm_ft.vocab import slurm_time as parse_slurm_time
            t0 = parse_slurm_time(running.start_time) or t_submit
            first_launch_s = first["t"] - t0
            say(f"launch to first step, measured (job start -> first step): {first_launch_s:.2f} s")
        for i in range(args.faults if args.path != "slurm" else 0):
            r = sc.fault(victim_index=7 + 13 * i, gpu=i % lab.spec.gpus_per_node, timeout=args.timeout)
            results.append(r)
            say(f"{'signal' if planned else 'fault'} {i + 1}: {r.failed_node} gpu{r.gpu} -> spare {r.spare_node}: "
                f"first step after {r.fault_to_resume_s:.2f} s (resumed from step {r.resumed_from_step}, "
                f"{r.steps_lost} redone); load {os.getloadavg()[0]:.1f}")
            if not hot:
                repair(sc, r.failed_node)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        sc.stop()
        if started and not args.keep_lab:
            lab.down(quiet=True)
    if args.path == "slurm":
        return _slurm_alone_only(args, requeue_delay, first_launch_s)

    sft = summary(results, hot=bool(hot), planned=planned)
    per_phase, segments = sft["phases"], sft["segments"]
    launch_p50 = sft["launch_to_first_step_p50_s"]
    alone_total = args.collective_timeout + requeue_delay + launch_p50
    out = {
        "path": args.path,
        "slurm": {"version": version, "requeue_option": requeue},
        "lab": {"nodes": lab.spec.nodes, "hot_spares": hot, "gpus_per_node": lab.spec.gpus_per_node,
                "spares": lab.spec.spares, "cpu_hogs": args.hogs,
                "job_hooks": lab.spec.job_hooks,
                "step_time_s": args.step_time, "ckpt_every": args.ckpt_every,
                "load_average_start": round(load_start, 1), "load_average_1m": round(os.getloadavg()[0], 1)},
        "faults": len(results),
        "slurm_ft": sft,
        "slurm_alone": {
            "fault_to_first_step_s": round(alone_total, 1),
            "components": [
                {"name": "health-check drain (mean wait, not on the critical path)",
                 "s": args.health_interval / 2, "kind": "configured", "source": "HealthCheckInterval / 2"},
                {"name": "ranks hang until the collective timeout", "s": args.collective_timeout,
                 "kind": "configured", "source": "NCCL default timeout"},
                {"name": "Slurm's requeue delay", "s": round(requeue_delay, 1), "kind": "measured",
                 "source": f"EligibleTime - requeue time of a job submitted with {requeue} in this lab"},
                {"name": "launch to first step", "s": round(launch_p50, 3), "kind": "measured",
                 "source": "p50 of this run's " + ("supervisor stop" if hot else "StartTime=now (or, without "
                                                                  "one, requeue)") + " -> first step"},
            ],
            "note": "assumes the job is requeued when it exits (RequeueExit or a wrapper); otherwise it stays "
                    "FAILED until a person resubmits it",
        },
    }
    out["speedup_p50"] = round(alone_total / out["slurm_ft"]["fault_to_first_step_p50_s"], 1)
    if planned:         # no fault: nothing for Slurm alone to recover from (its job would fail later, unwarned)
        out["slurm_alone"], out["speedup_p50"] = None, None
        out["slurm_ft"]["note"] = "timed from the soft signal (the node drained PLANNED) to the first step on the spare"
    if args.save:
        Path(args.save).write_text(json.dumps(out, indent=2) + "\n")
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print()
    print(f"{'phase (s since the fault)':<30}{'p50':>9}{'p95':>9}")
    for name, v in per_phase.items():
        print(f"{name:<30}{v['p50_s']:>9.2f}{v['p95_s']:>9.2f}")
    print()
    print(f"{'where the time goes':<52}{'p50':>9}{'p95':>9}")
    for label, v in segments.items():
        print(f"{label:<52}{v['p50_s']:>9.2f}{v['p95_s']:>9.2f}")
    print()
    if planned:
        print(f"Slurm {version}; planned swaps on a {lab.spec.nodes}-node lab ({hot} hot spares)")
        print(f"{'soft signal -> first step on the spare, p50':<48}{sft['fault_to_first_step_p50_s']:>9.2f} s")
        print(f"{'                                         p95':<48}{sft['fault_to_first_step_p95_s']:>9.2f} s")
        print(f"steps redone per swap: {out['slurm_ft']['steps_lost']}")
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        return 0
    print(f"Slurm {version}, jobs submitted with {requeue}")
    print(f"{'fault -> first step after':<40}{'slurm-ft':>12}{'Slurm alone':>14}")
    print(f"{'  p50':<40}{sft['fault_to_first_step_p50_s']:>11.2f}s{alone_total:>13.1f}s")
    print(f"{'  p95':<40}{sft['fault_to_first_step_p95_s']:>11.2f}s{'':>14}")
    print(f"{'  ratio (Slurm alone / slurm-ft, p50)':<40}{out['speedup_p50']:>11.1f}x")
    print()
    print("Slurm alone = " + " + ".join(f"{c['s']:g} s {c['name']} ({c['kind']})"
                                         for c in out["slurm_alone"]["components"][1:]))
    print(f"  health check drain: {args.health_interval:g} s interval (configured), off the critical path; "
          + out["slurm_alone"]["note"])
    print(f"steps redone per fault (checkpoint every {args.ckpt_every}): {out['slurm_ft']['steps_lost']}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 shared cores; 64 prologs/epilogs and 64 "
          f"trainer ranks start on them at every restart)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
