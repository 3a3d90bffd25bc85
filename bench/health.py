#!/usr/bin/env python3
"""Health-check benchmarks: what a node pays for slurm-ft, and how fast a fatal Xid drains a node.

    python bench/health.py [--runs 15] [--lab DIR --port-base N] [--no-lab]

1. quick level (the HealthCheckProgram's work) on an 8-GPU fake node, as a fresh process each time,
   median of N, next to a bare `python -c pass` in the same run (ratio); each check twice: alone (no
   watcher on the node) and answered by the node's `slurm-ft watch` over its check socket. Goals:
   < 0.3 s alone, <= 2x `python -c pass` answered.
2. prolog: job-start latency of `srun -N1 -w NODE /bin/true` with the prolog wired and with the lab's
   prolog hook replaced by `exit 0`; the difference is what slurm-ft adds. Goal: < +0.5 s.
3. Xid-to-drain with `slurm-ft watch`: inject Xid 79 (kernel-log line + NVML event) M times; latency
   from the injection to the drain command having returned (cross-checked with scontrol). Goal: < 1 s.
Parts 2 and 3 use a lab: an existing one in --lab, else a small one started (and stopped) here.
The machine's CPUs may be shared: read medians, not minima.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

PY = sys.executable
BIN = str(Path(PY).parent / "slurm-ft")       # the console script a shim would exec


def timed(argv, env=None, ok=(0,)) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    dt = time.perf_counter() - t0
    if p.returncode not in ok:
        raise SystemExit(f"{argv} exited {p.returncode}: {p.stderr[-500:]}")
    return dt


def med(xs) -> float:
    return statistics.median(xs)


def bench_quick(runs: int) -> dict:
    from slurm_ft_lab.fake_nvml import build
    tmp = Path(tempfile.mkdtemp(prefix="slurm-ft-bench-"))
    lib = build(tmp / "lib")
    cfg = tmp / "slurm-ft.yaml"
    cfg.write_text(yaml.safe_dump({"health": {"kmsg_path": str(tmp / "{node}.kmsg"),
                                              "state_file": str(tmp / "state" / "{node}.json")}}))
    os.chmod(cfg, 0o644)
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib.parent), SLURM_FT_FAKE_NODE="bench001",
               SLURMD_NODENAME="bench001", SLURM_FT_CONFIG=str(cfg), SLURM_FT_BIN=BIN)
    env.pop("SLURM_FT_LAB_DIR", None)
    # the kernel log holds a realistic amount of noise: 2000 unrelated records
    (tmp / "bench001.kmsg").write_text("".join(f"6,{i},{i * 1000},-;usb 1-{i % 9}: new device\n" for i in range(2000)))
    shim = Path(__file__).resolve().parent.parent / "healthcheck" / "slurm-ft-healthcheck"
    served_env = dict(env, SLURM_FT_CHECK_SOCKET=str(tmp / "run" / "check-{node}.sock"),
                      SLURM_FT_QUERY_SOCKET=str(tmp / "run" / "query-{node}.sock"))   # not the host's /run
    env["SLURM_FT_CHECK_SOCKET"] = str(tmp / "nowhere" / "check-{node}.sock")      # no watcher answers there
    times: dict = {k: [] for k in ("bare", "quick", "prolog", "shim", "served_quick", "served_prolog",
                                   "served_shim")}

    def one_round(prefix: str, env: dict) -> None:
        times[prefix + "quick"].append(timed([BIN, "check", "--level", "quick"], env))
        times[prefix + "prolog"].append(timed([BIN, "check", "--level", "prolog"], env))
        times[prefix + "shim"].append(timed(["/bin/sh", str(shim)], env))

    timed([BIN, "check", "--level", "quick"], env, ok=(0,))          # warm the page cache
    watcher = None
    try:
        for _ in range(runs):
            times["bare"].append(timed([PY, "-c", "pass"], env))
            one_round("", env)                           # no watcher: each check in a process of its own
            watcher = watcher or _start_watcher(served_env, tmp / "run" / "check-bench001.sock")
            one_round("served_", served_env)             # `slurm-ft watch` answers over its socket
    finally:
        if watcher is not None:
            watcher.terminate()
            watcher.wait(timeout=30)
    out = {"runs": runs, "python_c_pass_s": med(times["bare"]), "quick_s": med(times["quick"]),
           "prolog_level_s": med(times["prolog"]), "healthcheck_shim_s": med(times["shim"]),
           "served_quick_s": med(times["served_quick"]), "served_prolog_s": med(times["served_prolog"]),
           "served_shim_s": med(times["served_shim"])}
    out["quick_over_python"] = out["quick_s"] / out["python_c_pass_s"]
    out["served_quick_over_python"] = out["served_quick_s"] / out["python_c_pass_s"]
    return out


def _start_watcher(env: dict, sock: Path) -> subprocess.Popen:
    """`slurm-ft watch` for the bench node, as its systemd service runs it; returns once it serves.
    The watcher and the checks above take turns: their runs do not overlap."""
    p = subprocess.Popen([BIN, "watch", "--no-drain"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.monotonic() + 60
    while not sock.exists():
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            raise SystemExit(f"slurm-ft watch did not serve on {sock}: {p.stderr.read()[-500:] if p.stderr else ''}")
        time.sleep(0.05)
    return p


def _lab(args):
    from slurm_ft_lab.cluster import Lab, LabSpec
    lab = Lab(args.lab) if Path(args.lab, "etc", "slurm.conf").exists() else None
    if lab is not None and lab.running():
        return lab, False
    lab = Lab(args.lab, LabSpec(nodes=4, spares=1, gpus_per_node=8, port_base=args.port_base))
    lab.up(timeout=120)
    return lab, True


def bench_prolog(lab, node: str, runs: int) -> dict:
    hook = lab.dir / "hooks" / "prolog"
    original = hook.read_text()
    env = lab.env()

    def srun_times() -> list:
        return [timed(["srun", "-N1", "-w", node, "--gres=gpu:8", "/bin/true"], env) for _ in range(runs)]

    timed(["srun", "-N1", "-w", node, "/bin/true"], env)
    with_prolog = srun_times()
    try:
        hook.write_text("#!/bin/sh\nexit 0\n")
        without = srun_times()
    finally:
        hook.write_text(original)
    return {"runs": runs, "srun_with_prolog_s": med(with_prolog), "srun_without_prolog_s": med(without),
            "prolog_adds_s": med(with_prolog) - med(without)}


def bench_watch(lab, node: str, injections: int) -> dict:
    from slurm_ft_lab import inject as inj
    from slurm_ft.slurm.client import SlurmClient
    tmp = Path(tempfile.mkdtemp(prefix="slurm-ft-bench-watch-"))
    data = yaml.safe_load(Path(lab.config_path).read_text()) or {}
    data["state_dir"] = str(tmp / "state")
    data.setdefault("lifecycle", {}).update({"breaker_max_share": 0.0, "breaker_max_nodes": 0})
    cfg = tmp / "slurm-ft.yaml"
    cfg.write_text(yaml.safe_dump(data))
    os.chmod(cfg, 0o644)
    env = dict(lab.env(), SLURM_FT_CONFIG=str(cfg), SLURMD_NODENAME=node, SLURM_FT_LAB_DIR=str(lab.dir),
               LD_LIBRARY_PATH=str(lab.dir / "lib"))
    client = SlurmClient(env={"SLURM_CONF": str(lab.conf)})
    inj.heal(lab.dir, node)
    proc = subprocess.Popen([PY, "-m", "slurm_ft", "watch", "--json"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    latencies, confirmed = [], []
    try:
        select.select([proc.stderr], [], [], 20)
        proc.stderr.readline()                       # the banner: the sources are open
        for i in range(injections):
            t0 = time.time()
            inj.inject(lab.dir, node, "xid", gpu=i % 8, value=79)
            while True:
                ready, _, _ = select.select([proc.stdout], [], [], 10)
                if not ready:
                    raise SystemExit("watch did not report the injected Xid within 10 s")
                ev = json.loads(proc.stdout.readline())
                if ev.get("kind") == "xid" and ev["fatal"]:
                    break
            latencies.append(ev["time"] - t0)
            while not client.node(node).drained:     # cross-check: Slurm really has it drained
                if time.time() - t0 > 15:
                    raise SystemExit(f"injection {i}: watch reported {ev.get('check', {}).get('drain')} but "
                                     f"{node} is not drained after 15 s")
                time.sleep(0.01)
            confirmed.append(time.time() - t0)
            time.sleep(0.3)                          # let the second source's copy of the event pass
            while select.select([proc.stdout], [], [], 0)[0]:
                proc.stdout.readline()
            inj.heal(lab.dir, node)
            client.resume([node])
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        inj.heal(lab.dir, node)
        if client.node(node).drained:
            client.resume([node])
    return {"injections": injections, "xid_to_drain_median_s": med(latencies), "xid_to_drain_max_s": max(latencies),
            "xid_to_drained_in_scontrol_median_s": med(confirmed)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--injections", type=int, default=7)
    ap.add_argument("--lab", default=os.environ.get("SLURM_FT_TEST_LAB_DIR", "/tmp/slurm-ft-bench-lab"))
    ap.add_argument("--port-base", type=int, default=int(os.environ.get("SLURM_FT_TEST_PORT_BASE", "20700")))
    ap.add_argument("--no-lab", action="store_true", help="only the quick-level part (no Slurm needed)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))    # run the finally blocks: stop the lab

    q = bench_quick(args.runs)
    print(f"quick level, 8 fake GPUs, fresh process (median of {q['runs']}); "
          f"checked alone | answered by `slurm-ft watch`:")
    print(f"  python -c pass          {q['python_c_pass_s'] * 1000:7.1f} ms")
    print(f"  slurm-ft check quick    {q['quick_s'] * 1000:7.1f} ms ({q['quick_over_python']:.1f}x) | "
          f"{q['served_quick_s'] * 1000:6.1f} ms ({q['served_quick_over_python']:.1f}x)   goal <= 2x: "
          f"{'met' if q['served_quick_over_python'] <= 2 else 'MISSED'}")
    print(f"  slurm-ft check prolog   {q['prolog_level_s'] * 1000:7.1f} ms        | {q['served_prolog_s'] * 1000:6.1f} ms")
    print(f"  healthcheck shim        {q['healthcheck_shim_s'] * 1000:7.1f} ms        | {q['served_shim_s'] * 1000:6.1f} ms"
          f"   (sh + quick + --drain, healthy)")
    result = {"quick": q}
    if not args.no_lab:
        lab, started = _lab(args)
        try:
            node = lab.spec.train_nodes[-1]
            p = bench_prolog(lab, node, args.runs)
            print(f"job start, srun -N1 /bin/true on {node} (median of {p['runs']}):")
            print(f"  prolog wired            {p['srun_with_prolog_s'] * 1000:7.1f} ms")
            print(f"  prolog replaced by exit {p['srun_without_prolog_s'] * 1000:7.1f} ms")
            print(f"  slurm-ft prolog adds    {p['prolog_adds_s'] * 1000:+7.1f} ms   goal < +500 ms: "
                  f"{'met' if p['prolog_adds_s'] < 0.5 else 'MISSED'}")
            w = bench_watch(lab, lab.spec.train_nodes[-2], args.injections)
            print(f"Xid 79 to drain with slurm-ft watch ({w['injections']} injections):")
            print(f"  median {w['xid_to_drain_median_s'] * 1000:.0f} ms, max {w['xid_to_drain_max_s'] * 1000:.0f} ms; "
                  f"seen drained by scontrol after {w['xid_to_drained_in_scontrol_median_s'] * 1000:.0f} ms (median)   "
                  f"goal < 1 s: {'met' if w['xid_to_drain_median_s'] < 1 else 'MISSED'}")
            result.update(prolog=p, watch=w)
        finally:
            if started:
                lab.down()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
