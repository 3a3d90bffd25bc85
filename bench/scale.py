#!/usr/bin/env python3
"""Fleet scale: the lab at 2,048 + 64 nodes, and what one controller cycle costs there.

    python bench/scale.py [--nodes 2048] [--spares 64] [--jobs 200] [--repeat 5] [--dir D] [--port-base P]
                          [--reads-only] [--keep] [--json]

Prints, each a median of --repeat runs where it repeats:
  lab up        wall time of `lab up` (fresh, --fast-hooks), the CPU it took (this process, the slurmd
                start-ups, slurmctld), the memory of its daemons (PSS: shared pages counted once) and
                the load average of the machine (other labs on it stretch the wall time, not the CPU)
  slurm reads   the three reads one cycle needs (nodes: sinfo --json, jobs: squeue --json, partitions),
                wall time and the CPU of the Slurm commands (children's CPU)
  cycle         one pass of `Controller.cycle()` (observe, plan, act) with 200 running fault-tolerant jobs
                and nothing to recover: wall, the controller's own CPU (this process) and the Slurm
                commands' CPU, side by side
  fleet view    what a node's health check reads for the breaker (`guard.fleet_view`: every node)
  backends      each read the product makes (every node, a job's 8 nodes, one node, one job, the
                partitions) over each Slurm backend that runs here, side by side: the commands, and
                pyslurm where a release matching this Slurm imports (Slurm 25.11: `ci/cleanroom
                bookworm-25.11`); a read the pyslurm backend leaves to the commands says so
  plan          `plan()` alone on that cycle's snapshot (CPU time): the pure part
  fault         one node of job 1 drained as `watch` drains an XID 79; then single passes of the cycle until
                the incident is recovered: each pass with what it did (open, quarantine, swap, requeue,
                start, ...), the medians of passes that act and of those that only wait, what the
                incident said it waited for, and the time to recovered
--reads-only: the lab, the jobs and the reads (both backends) alone, no controller.
The lab is taken down at the end unless --keep. Run it alone: it needs ~2 GB and the machine's cores.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_ft.config import load_config                            # noqa: E402
from slurm_ft.errors import CommandError                           # noqa: E402
from slurm_ft.breaker import guard                               # noqa: E402
from slurm_ft_lab.cluster import Lab, LabSpec, ephemeral_port_range  # noqa: E402
from slurm_ft.fleet import db                                        # noqa: E402
from slurm_ft.fleet.recovery import journal as jn                    # noqa: E402
from slurm_ft.fleet.recovery.controller import Controller            # noqa: E402
from slurm_ft.fleet.recovery.plan import plan                        # noqa: E402
from slurm_ft.job.tag import FtSpec, encode                   # noqa: E402
from slurm_ft.runner import run                                    # noqa: E402
from slurm_ft.slurm import pyslurm_backend                         # noqa: E402
from slurm_ft.slurm.backend import get_client                      # noqa: E402
from slurm_ft.slurm.client import SlurmClient                      # noqa: E402


def cpu():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def measure(fn, repeat: int, ctld_pid=None) -> dict:
    """Medians of wall, own CPU, children's CPU (the Slurm commands) and slurmctld's CPU over `repeat` calls."""
    walls, mine, kids, ctld = [], [], [], []
    for _ in range(repeat):
        c0, k0, s0 = *cpu(), proc_cpu_s(ctld_pid)
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        c1, k1, s1 = *cpu(), proc_cpu_s(ctld_pid)
        mine.append(c1 - c0)
        kids.append(k1 - k0)
        ctld.append(s1 - s0)
    return {"wall_s": statistics.median(walls), "own_cpu_s": statistics.median(mine),
            "slurm_cpu_s": statistics.median(kids), "slurmctld_cpu_s": statistics.median(ctld)}


def once(fn, ctld_pid=None) -> dict:
    """Wall, own CPU, children's CPU and slurmctld's CPU of one call, and what it returned."""
    c0, k0, s0 = *cpu(), proc_cpu_s(ctld_pid)
    t0 = time.perf_counter()
    value = fn()
    wall = time.perf_counter() - t0
    c1, k1, s1 = *cpu(), proc_cpu_s(ctld_pid)
    return {"wall_s": wall, "own_cpu_s": c1 - c0, "slurm_cpu_s": k1 - k0, "slurmctld_cpu_s": s1 - s0, "value": value}


def proc_cpu_s(pid) -> float:
    """CPU seconds a running process has used (user + system, all its threads)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, TypeError):
        return 0.0


def recover_one_fault(ctl: Controller, client: SlurmClient, job_id: int, timeout: float, ctld_pid=None) -> dict:
    """Drain one node of `job_id` as `watch` does for an XID 79, then run single passes of the cycle
    until its incident is recovered. Returns the acting pass, the waiting passes and what they wait on."""
    job = client.job(job_id)
    bad = job.nodes[len(job.nodes) // 2]
    client.drain([bad], f"slurm-ft: XID79 gpu3 GPU has fallen off the bus (bench {time.time():.0f})")
    t0 = time.monotonic()
    passes, notes, status = [], [], ""
    while time.monotonic() - t0 < timeout:
        r = once(lambda: ctl.cycle(budget_s=0), ctld_pid)      # budget 0: one observe, plan, act
        r["acts"] = sorted({s.kind for s in r.pop("value").steps})
        passes.append(r)
        incs = [i for i in jn.incidents(ctl.conn) if i.job_id == job_id]
        if incs:
            status = incs[-1].status
            if incs[-1].note and incs[-1].note not in notes:
                notes.append(incs[-1].note)
            if status == "recovered":
                break
        time.sleep(0.2)
    keys = ("wall_s", "own_cpu_s", "slurm_cpu_s", "slurmctld_cpu_s")
    acting = [p for p in passes if p["acts"]]
    waiting = [p for p in passes if not p["acts"]]
    return {"node": bad, "status": status, "recovered_s": time.monotonic() - t0, "passes": passes,
            "acting": {k: statistics.median(p[k] for p in acting) if acting else 0.0 for k in keys},
            "waiting": {k: statistics.median(p[k] for p in waiting) if waiting else 0.0 for k in keys},
            "acting_passes": len(acting), "waiting_passes": len(waiting), "notes": notes}


def pss_mb(lab: Lab) -> float:
    total = 0
    for d in lab.daemons():
        if not d["alive"]:
            continue
        try:
            for line in open(f"/proc/{d['pid']}/smaps_rollup"):
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def submit_jobs(lab: Lab, jobs: int, nodes_each: int, out_dir: Path) -> list:
    """`jobs` fault-tolerant jobs (the slurm-ft tag, requeueable), each sleeping on nodes_each nodes."""
    tag = encode(FtSpec(ckpt_dir=str(out_dir / "ckpt")))
    ids = []
    for i in range(jobs):
        argv = ["sbatch", "--parsable", "--requeue", "--exclusive", "-N", str(nodes_each), f"--comment={tag}",
                "-o", str(out_dir / "job-%j.out"), "-J", f"scale{i}", "--wrap", "sleep 36000"]
        for attempt in range(3):     # a slurmctld busy with 2,112 registrations may time out a submission
            try:
                p = run(argv, timeout=60, env=lab.env())
                break
            except CommandError as exc:
                if attempt == 2 or "timed out" not in str(exc):
                    raise
                time.sleep(5)
        ids.append(int(p.stdout.strip().split(";")[0]))
    return ids


def wait_running(client: SlurmClient, ids: list, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        running = sum(1 for j in client.jobs() if j.job_id in set(ids) and j.state == "RUNNING")
        if running == len(ids) or time.monotonic() > deadline:
            return running
        time.sleep(2)


# Each read the product makes, and who makes it (the fleet-cost issue's hot callers first).
READS = (
    ("every node", "controller cycle, health check's fleet view", lambda c, names, job: c.fleet_nodes()),
    ("a job's 8 nodes", "supervisor backstop, prolog", lambda c, names, job: c.nodes(names)),
    ("one node", "node check, drain", lambda c, names, job: c.node(names[0])),
    ("one job", "supervisor, controller act", lambda c, names, job: c.job(job)),
    ("partitions", "controller cycle, give-back", lambda c, names, job: c.partitions()),
)
# What PySlurmClient answers itself; every other read is the commands backend's, inherited.
PYSLURM_READS = {"every node", "a job's 8 nodes"}


def backend_reads(lab: Lab, job_id: int, repeat: int, ctld_pid=None) -> dict:
    """Each of READS over each backend that runs here, medians of `repeat`."""
    env = {"SLURM_CONF": str(lab.conf)}
    clients = {"commands": get_client("commands", env=env)}
    problem = pyslurm_backend.unusable_reason(clients["commands"])
    if problem is None:
        clients["pyslurm"] = get_client("pyslurm", env=env)
    names = clients["commands"].job(job_id).nodes[:8]
    out: dict = {"pyslurm_unusable": problem, "reads": {}}
    for read, _, fn in READS:
        out["reads"][read] = {name: measure(lambda c=c, fn=fn: fn(c, names, job_id), repeat, ctld_pid)
                              for name, c in clients.items()}
    if "pyslurm" in clients:
        # the library's own call for the reads the backend leaves to the commands: what moving them would save
        import pyslurm  # lazy: imported (reading the lab's config) by the pyslurm backend above
        out["library"] = {
            "one node": measure(lambda: pyslurm.Node.load(names[0]), repeat, ctld_pid),
            "one job": measure(lambda: pyslurm.Job.load(job_id), repeat, ctld_pid),
            "partitions": measure(lambda: pyslurm.Partitions.load(), repeat, ctld_pid),
        }
    return out


def print_backends(b: dict) -> None:
    if b["pyslurm_unusable"]:
        print(f"backends: the commands alone ({b['pyslurm_unusable']})")
    cols = ("wall_s", "own_cpu_s", "slurm_cpu_s", "slurmctld_cpu_s")
    print(f"{'read (medians)':<18}{'backend':<10}{'wall s':>8}{'own CPU s':>11}{'Slurm CPU s':>13}"
          f"{'slurmctld CPU s':>17}  callers")
    for read, callers, _ in READS:
        for name, r in b["reads"][read].items():
            via = "" if name == "commands" or read in PYSLURM_READS else " (its commands)"
            print(f"{read:<18}{name:<10}" + "".join(f"{r[k]:>{w}.4f}" for k, w in zip(cols, (8, 11, 13, 17)))
                  + f"  {callers}{via}")
        if len(b["reads"][read]) == 2 and read in PYSLURM_READS:
            cmd, py = b["reads"][read]["commands"], b["reads"][read]["pyslurm"]
            cpu = lambda r: r["own_cpu_s"] + r["slurm_cpu_s"]     # noqa: E731 - the caller's host, both ways
            print(f"{'':<18}{'ratio':<10}{cmd['wall_s'] / max(py['wall_s'], 1e-9):>7.1f}x"
                  f"{'  host CPU ':>11}{cpu(cmd) / max(cpu(py), 1e-9):.1f}x  (commands / pyslurm)")
    calls = {"one node": "Node.load (node + partitions RPCs)", "one job": "Job.load (one job's RPC)",
             "partitions": "Partitions.load (partitions + config RPCs)"}
    for read, r in b.get("library", {}).items():
        print(f"{read:<18}{'library':<10}" + "".join(f"{r[k]:>{w}.4f}" for k, w in zip(cols, (8, 11, 13, 17)))
              + f"  pyslurm.{calls[read]} alone, unmapped")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--spares", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/slurm-ft-scale-lab")
    ap.add_argument("--port-base", type=int, default=None,
                    help="default: just below the kernel's ephemeral port range (lab up refuses ports in it)")
    ap.add_argument("--fault-timeout", type=float, default=600, help="seconds to wait for the recovery")
    ap.add_argument("--reads-only", action="store_true", help="the reads over each backend alone, no controller")
    ap.add_argument("--keep", action="store_true", help="leave the lab up")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.port_base is None:
        rng = ephemeral_port_range()
        a.port_base = (rng[0] if rng else 32768) - (a.nodes + a.spares + 1) - 16

    lab = Lab(a.dir, LabSpec(nodes=a.nodes, spares=a.spares, port_base=a.port_base, fast_hooks=True))
    out: dict = {"nodes": a.nodes, "spares": a.spares, "gpus": (a.nodes + a.spares) * 8, "jobs": a.jobs}
    if lab.running():
        lab.down()
    try:
        load = os.getloadavg()[0]
        c0, k0 = cpu()
        res = lab.up(timeout=600)
        c1, k1 = cpu()
        ctld = next((d["pid"] for d in lab.daemons() if d["name"] == "slurmctld"), None)
        out["lab_up"] = {"wall_s": res.elapsed_s, "daemons": len(lab.daemons()), "pss_mb": pss_mb(lab),
                         "own_cpu_s": c1 - c0, "starts_cpu_s": k1 - k0, "slurmctld_cpu_s": proc_cpu_s(ctld),
                         "load_at_start": load, "cpus": os.cpu_count()}
        client = SlurmClient(env={"SLURM_CONF": str(lab.conf)})
        work = Path(tempfile.mkdtemp(prefix="scale-", dir="/tmp"))
        work.chmod(0o755)
        ids = submit_jobs(lab, a.jobs, max(1, a.nodes // a.jobs), work)
        out["jobs_running"] = wait_running(client, ids, timeout=600)

        out["backends"] = backend_reads(lab, ids[0], a.repeat, ctld)
        if a.reads_only:
            return report(a, out)
        config = load_config(str(lab.config_path))
        config = dataclasses.replace(config, state_dir=str(work / "state"))
        ctl = Controller(client, jn.connect(db.path_in(config.state_dir)), config)
        out["slurm_reads"] = {
            "nodes": measure(client.nodes, a.repeat, ctld),
            "jobs": measure(client.jobs, a.repeat, ctld),
            "partitions": measure(client.partitions, a.repeat, ctld),
        }
        out["slurm_reads"]["sum"] = {k: sum(r[k] for r in out["slurm_reads"].values())
                                     for k in ("wall_s", "own_cpu_s", "slurm_cpu_s", "slurmctld_cpu_s")}
        out["cycle"] = measure(lambda: ctl.cycle(budget_s=0), a.repeat, ctld)
        out["fleet_view"] = measure(lambda: guard.fleet_view(config, client=client), a.repeat, ctld)
        snap = ctl.observe()
        incidents = jn.state(ctl.conn, snap.taken_at)
        times = []
        for _ in range(max(20, a.repeat)):
            t0 = time.process_time()
            plan(snap, incidents, ctl.policy, snap.taken_at)
            times.append(time.process_time() - t0)
        out["plan_cpu_s"] = statistics.median(times)
        out["snapshot"] = {"nodes": len(snap.nodes), "jobs": len(snap.jobs), "ft_jobs": len(snap.specs)}
        out["fault"] = recover_one_fault(ctl, client, ids[0], timeout=a.fault_timeout, ctld_pid=ctld)
    finally:
        if not a.keep:
            lab.down()
    report(a, out)


def report(a, out: dict) -> None:
    if a.json:
        print(json.dumps(out, indent=2))
        return
    up = out["lab_up"]
    print(f"lab up  {a.nodes}+{a.spares} nodes ({out['gpus']} fake GPUs): {up['wall_s']:.1f} s, "
          f"{up['daemons']} daemons, {up['pss_mb']:.0f} MB (PSS); CPU: {up['own_cpu_s']:.1f} s here, "
          f"{up['starts_cpu_s']:.1f} s slurmd start-ups, {up['slurmctld_cpu_s']:.1f} s slurmctld; "
          f"load average {up['load_at_start']:.1f} on {up['cpus']} CPUs at start")
    print(f"jobs    {out['jobs_running']}/{a.jobs} fault-tolerant jobs running"
          + (f"; snapshot {out['snapshot']}" if "snapshot" in out else ""))
    print_backends(out["backends"])
    if "cycle" not in out:
        return
    print(f"{'medians of ' + str(a.repeat):<22}{'wall s':>8}{'own CPU s':>11}{'Slurm CPU s':>13}{'slurmctld CPU s':>17}")
    f = out["fault"]
    # slurmctld's CPU in a fault pass includes the requeue's kill and epilogs going on meanwhile
    rows = [(f"read {k}", v) for k, v in out["slurm_reads"].items()] + [
        ("cycle, idle", out["cycle"]), ("fleet view (per node)", out["fleet_view"])]
    if f["acting_passes"]:
        rows.append(("cycle, fault: acting", f["acting"]))
    if f["waiting_passes"]:
        rows.append(("cycle, fault: waiting", f["waiting"]))
    for name, r in rows:
        print(f"{name:<22}{r['wall_s']:>8.3f}{r['own_cpu_s']:>11.3f}{r['slurm_cpu_s']:>13.3f}"
              f"{r['slurmctld_cpu_s']:>17.3f}")
    print(f"plan() on the snapshot: {out['plan_cpu_s'] * 1000:.1f} ms CPU")
    print(f"fault on {f['node']}: {f['status'] or 'no incident'} after {f['recovered_s']:.1f} s, "
          f"{f['acting_passes']} acting and {f['waiting_passes']} waiting passes (fault rows: medians); each pass:")
    for p in f["passes"]:
        print(f"  {'+'.join(p['acts']) or 'wait':<30}{p['wall_s']:>8.3f}{p['own_cpu_s']:>11.3f}{p['slurm_cpu_s']:>13.3f}"
              f"{p['slurmctld_cpu_s']:>17.3f}")
    for note in f["notes"]:
        print(f"  incident said: {note}")


if __name__ == "__main__":
    main()
