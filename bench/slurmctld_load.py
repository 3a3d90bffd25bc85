#!/usr/bin/env python3
"""What slurm-ft costs slurmctld, on a loaded lab: 100 fault-tolerant jobs of 10 users, at three fleet sizes.

    python bench/slurmctld_load.py [--nodes 1024,2048,4032] [--jobs 100] [--users 10] [--minutes 10]
                                   [--nodes-per-job N] [--fault-every 60] [--port-base 21000]
                                   [--dir /tmp/slurm-ft-load-lab] [--json]

For each fleet size the lab comes up (--fast-hooks: a healthy node's HealthCheckProgram, prolog and epilog
cost no Python start; they cost Slurm nothing either way: a healthy node's check makes no Slurm call), then
two phases of --minutes each, on the same job shapes:

  without   the jobs alone: half run `srun` of their program on all but one of their nodes (as a hot-spare
            job's step does), half run it in the batch step (as a requeue-path job does); no slurm-ft
            component runs. What slurmctld spends for the jobs themselves (pings, steps, ...).
  with      the same shapes submitted with `slurm-ft sbatch` (half with --hot-spares 1: their batch step is
            the supervisor), `slurm-ft controller run` at its deployed cadence (controller.interval_s, woken
            by the nodes), the controller host's crons (the metrics every minute, the sweep every 10), and
            a fault every --fault-every seconds: a fatal Xid on a node of one job (hot-spare
            and requeue jobs in turn), drained by `slurm-ft watch` on that node.

The jobs belong to the lab's users (slurmft-u0..), --users of them, round robin: where Slurm's rate limiter
is on (rl_enable, the 24.11 and 26.05 labs) each user has one token bucket for all their jobs.

Printed per size: slurmctld CPU (% of one core) with and without, and slurm-ft's share (the difference,
which a busy lab's own noise can hide); slurm-ft's RPC time in slurmctld (its supervisors' users' sdiag
time, the controller's and the crons' commands at their RPC types' average time, one node update a fault), the figure
that noise does not hide; RPCs per second by type and by user (sdiag, reset at each phase's start); per
component: the controller's Slurm commands and RPCs per second (from its debug log), the supervisors' RPCs
per second (their users', sdiag), the node side's per fault; each supervisor's CPU on its batch host (% of one core, mean and max); detection
latency p50/p95: drain -> supervisor acting (its `notice` event) and drain -> controller acting (the
incident opened), the drain time being when the watcher's `scontrol update` returned. Then how each
figure grows from the smallest size to the largest.

It takes the machine: run it alone. At 4,096 nodes the lab holds ~4 GB. The largest size is 4,032: with its
63 pool spares that is the lab's 4,096 nodes; each node's port lies below the ephemeral range (32768). Its
slurmd and their threads need more pids than a kernel.pid_max of 32,768 gives (fork: "Resource temporarily
unavailable"); raise it on the host first.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_ft_lab import users as lab_users                        # noqa: E402
from slurm_ft_lab.cluster import Lab, LabSpec                        # noqa: E402
from slurm_ft_lab.inject import heal, inject                        # noqa: E402
from slurm_ft.errors import CommandError                           # noqa: E402
from slurm_ft.runner import run                                    # noqa: E402
from slurm_ft.slurm.client import SlurmClient                      # noqa: E402
from slurm_ft.slurm.hostlist import expand                         # noqa: E402

PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")
# Slurm commands the controller runs, and the RPCs each sends (docs: ../shared/research/slurm-events-and-costs.md)
RPCS_OF = [(re.compile(r"'sinfo', '-N'.*'-n'"), ["REQUEST_NODE_INFO_SINGLE", "REQUEST_PARTITION_INFO"]),
           (re.compile(r"'scontrol', 'show', 'node'"), ["REQUEST_NODE_INFO", "REQUEST_PARTITION_INFO"]),
           (re.compile(r"'scontrol', 'show', 'job', '-o', '\d+'"), ["REQUEST_JOB_INFO_SINGLE"]),
           (re.compile(r"'(squeue|scontrol)'.*'--json'"), ["REQUEST_JOB_INFO"]),
           (re.compile(r"'scontrol', 'show', 'job'"), ["REQUEST_JOB_INFO"]),
           (re.compile(r"'scontrol', 'show', 'partition'"), ["REQUEST_PARTITION_INFO"]),
           (re.compile(r"'scontrol', 'show', 'config'"), ["REQUEST_BUILD_INFO"]),
           (re.compile(r"'scontrol', 'update', 'NodeName"), ["REQUEST_UPDATE_NODE"]),
           (re.compile(r"'scontrol', 'update', 'PartitionName"), ["REQUEST_UPDATE_PARTITION"]),
           (re.compile(r"'scontrol', 'update', 'JobId"), ["REQUEST_UPDATE_JOB"]),
           (re.compile(r"'scontrol', 'requeue(hold)?'"), ["REQUEST_JOB_REQUEUE"]),
           (re.compile(r"'scontrol', 'release'"), ["REQUEST_UPDATE_JOB"]),
           (re.compile(r"'scontrol', 'notify'"), ["REQUEST_JOB_NOTIFY"])]


def proc_cpu_s(pid: Optional[int]) -> float:
    if not pid:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def sdiag(env: Dict[str, str]) -> Dict[str, Dict[str, Dict[str, int]]]:
    """{"type": {name: {count, total_us}}, "user": {name: {...}}} from `sdiag` (root)."""
    out = run(["sdiag"], timeout=60, env=env).stdout
    got: Dict[str, Dict[str, Dict[str, int]]] = {"type": {}, "user": {}}
    section = None
    for line in out.splitlines():
        if "statistics by message type" in line:
            section = "type"
        elif "statistics by user" in line:
            section = "user"
        elif section and "count:" in line:
            m = re.match(r"\s*(\S+)\s*\(\s*\d+\)\s*count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)", line)
            if m:
                got[section][m.group(1)] = {"count": int(m.group(2)), "total_us": int(m.group(4))}
        elif section and line.strip() and not line.startswith(("\t", " ")):
            section = None
    return got


def pct(values: List[float], q: float) -> Optional[float]:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


class Phase:
    def __init__(self, lab: Lab, minutes: float):
        self.lab, self.minutes = lab, minutes
        self.env = lab.env()
        self.ctld_pid = int((lab.dir / "run" / "slurmctld.pid").read_text().split()[0])

    def measure(self, during=None) -> dict:
        """sdiag and slurmctld's CPU over --minutes; `during(deadline)` runs meanwhile (faults)."""
        run(["sdiag", "-r"], timeout=60, env=self.env)
        c0, t0 = proc_cpu_s(self.ctld_pid), time.monotonic()
        deadline = t0 + self.minutes * 60
        if during:
            during(deadline)
        time.sleep(max(0.0, deadline - time.monotonic()))
        secs = time.monotonic() - t0
        return {"seconds": secs, "slurmctld_cpu_pct": 100 * (proc_cpu_s(self.ctld_pid) - c0) / secs,
                "sdiag": sdiag(self.env)}


def layout(nodes: int, jobs: int, cap: Optional[int] = None) -> int:
    n = min(nodes // jobs, cap or nodes)
    if n < 3:
        raise SystemExit(f"{nodes} nodes for {jobs} jobs: each job needs 3 nodes at least")
    return n


def as_user(lab: Lab, user: str, argv: List[str], tries: int = 3) -> subprocess.CompletedProcess:
    """A submission as `user`; tried again when slurmctld did not answer in time (at 1,024 nodes the
    teardown of 100 jobs kept it busy past MessageTimeout): the bench measures the steady state after."""
    for attempt in range(tries):
        if attempt:
            time.sleep(10)
        p = subprocess.run(lab.user_argv(argv, user), capture_output=True, text=True, timeout=600,
                           env=lab.user_env(user), cwd=str(lab.user_home(user)))
        if p.returncode == 0 or "timed out" not in p.stderr:
            break
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} ... as {user}: {p.stderr.strip()}")
    return p


def settle(lab: Lab, timeout: float = 900) -> float:
    """After a phase's jobs are gone: every node idle again (epilogs done), then a minute for slurmd and
    slurmctld to finish the teardown; the seconds it took."""
    c, t0 = SlurmClient(env=lab.env()), time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if all(n.state == "IDLE" for n in c.nodes()):
                break
        except CommandError:          # slurmctld busy (timed out): ask again
            pass
        time.sleep(5)
    time.sleep(60)
    return time.monotonic() - t0


def submit_plain(lab: Lab, work: Path, jobs: int, per_job: int, users: List[str]) -> List[int]:
    ids = []
    for i in range(jobs):
        user = users[i % len(users)]
        body = f"srun -N {per_job - 1} --ntasks-per-node=1 sleep 100000" if i % 2 == 0 else "sleep 100000"
        p = as_user(lab, user, ["sbatch", "--parsable", "--exclusive", "-N", str(per_job), "-o",
                                str(work / user / f"plain-{i}.out"), "--wrap", body])
        ids.append(int(p.stdout.split(";")[0]))
    return ids


def submit_ft(lab: Lab, work: Path, jobs: int, per_job: int, users: List[str]) -> List[dict]:
    out = []
    for i in range(jobs):
        user = users[i % len(users)]
        hot = i % 2 == 0
        ck = lab.give(work / user / f"ck-{i}", user)
        argv = [PY, "-m", "slurm_ft", "sbatch", "--exclusive", "--ckpt-dir", str(ck), "-o", str(work / user / f"job-{i}.out"),
                *(["--hot-spares", "1", "-N", str(per_job - 1), "--ntasks-per-node=1"] if hot else ["-N", str(per_job)]),
                "/bin/sleep", "100000"]
        p = as_user(lab, user, argv)
        out.append({"id": int(p.stdout.split()[-1]), "hot": hot, "ck": ck, "user": user})
    return out


def wait_running(lab: Lab, ids: List[int], timeout: float) -> None:
    c = SlurmClient(env=lab.env())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = {j.job_id: j.state for j in c.jobs(ids)}
        if all(states.get(i) == "RUNNING" for i in ids):
            return
        time.sleep(2)
    raise SystemExit(f"jobs not all running after {timeout:g} s")


def cancel_all(lab: Lab) -> None:
    c = SlurmClient(env=lab.env())
    ids = [str(j.job_id) for j in c.jobs() if j.state not in ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT")]
    if ids:
        run(["scancel", "--quiet", *ids], timeout=120, env=lab.env(), check=False)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and any(j.state in ("RUNNING", "COMPLETING", "PENDING") for j in c.jobs()):
        time.sleep(2)


def supervisors(jobs: List[dict]) -> Dict[int, int]:
    """job id -> pid of its supervisor: the batch script itself (slurmd runs the job's copy of it,
    `.../job<ID>/slurm_script`), which `slurm-ft sbatch`'s starter is."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[1].endswith(b"/slurm_script"):
            m = re.search(rb"job0*(\d+)/slurm_script$", argv[1])
            if m:
                found[int(m.group(1))] = int(entry.name)
    return {j["id"]: found[j["id"]] for j in jobs if j["hot"] and j["id"] in found}


def starts(ck: Path) -> List[dict]:
    try:
        return [json.loads(x) for x in (ck / "slurm-ft-starts.jsonl").read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return []


class Faults:
    """A fatal Xid every `every` seconds on a node of one job (hot-spare and requeue jobs in turn), each
    drained by `slurm-ft watch --once` on that node; latencies read back from the supervisor's log and
    the controller's journal."""

    def __init__(self, lab: Lab, jobs: List[dict], every: float, config: Path):
        self.lab, self.jobs, self.every, self.config = lab, jobs, every, config
        self.done: List[dict] = []
        self.env = lab.env()
        self.cursor = {True: 0, False: 0}

    def __call__(self, deadline: float) -> None:
        def loop():
            hot = True
            while time.monotonic() + self.every < deadline:
                t_next = time.monotonic() + self.every
                try:
                    self.one(hot)
                except Exception as exc:   # noqa: BLE001 - a bench: say it and go on
                    print(f"  fault failed: {exc}", file=sys.stderr)
                hot = not hot
                time.sleep(max(0.0, t_next - time.monotonic()))
        threading.Thread(target=loop, daemon=True).start()

    def one(self, hot: bool) -> None:
        pool = [j for j in self.jobs if j["hot"] == hot]
        job = pool[self.cursor[hot] % len(pool)]
        self.cursor[hot] += 1
        c = SlurmClient(env=self.env)
        info = c.job(job["id"])
        if info.state != "RUNNING":
            return
        if hot:
            launches = [e for e in starts(job["ck"]) if e.get("event") == "launch"]
            nodes = expand(launches[-1]["nodes"]) if launches else list(info.nodes)
        else:
            nodes = list(info.nodes)
        victim = next(n for n in nodes if n != info.batch_host)
        env = dict(self.env, SLURMD_NODENAME=victim, SLURM_FT_CONFIG=str(self.lab.config_path),
                   LD_LIBRARY_PATH=str(self.lab.dir / "lib"))
        w = subprocess.Popen([PY, "-m", "slurm_ft", "watch", "--node", victim, "--once", "--json", "--no-serve",
                              "--timeout", "120"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in w.stderr:                    # "slurm-ft watch on NODE: ..." once it follows the log
            if line.startswith("slurm-ft watch on"):
                break
        t_fault = time.time()
        inject(self.lab.dir, victim, "xid", gpu=3, value=79)
        out, _ = w.communicate(timeout=180)
        xids = [x for x in (json.loads(line) for line in out.splitlines() if line.startswith("{")) if x.get("kind") == "xid"]
        handled = xids[-1] if xids else {}
        drained_at = float(((handled.get("check") or {}).get("drain") or {}).get("at") or 0) or None
        rec = {"job": job["id"], "hot": hot, "node": victim, "fault": t_fault, "drained": drained_at}
        self.done.append(rec)
        threading.Thread(target=self.settle, args=(rec, job), daemon=True).start()

    def settle(self, rec: dict, job: dict) -> None:
        """The supervisor's act and the controller's incident for this fault; then the node is repaired."""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and ("sup" not in rec and rec["hot"] or "ctl" not in rec):
            if rec["hot"] and "sup" not in rec:
                ev = next((e for e in starts(job["ck"]) if e.get("event") in ("notice", "fault")
                           and e.get("t", 0) >= rec["fault"] and rec["node"] in e.get("node", e.get("nodes", ""))), None)
                if ev:
                    rec["sup"] = ev["t"]
            if "ctl" not in rec:
                p = subprocess.run([PY, "-m", "slurm_ft", "incidents", "--json", "--job", str(job["id"])],
                                   capture_output=True, text=True, timeout=60,
                                   env=dict(self.env, SLURM_FT_CONFIG=str(self.config)))
                for inc in json.loads(p.stdout or "[]"):
                    if rec["node"] in inc["nodes"] and inc["opened_at"] >= rec["fault"] - 1:
                        rec["ctl"] = inc["opened_at"]
            time.sleep(0.5)
        heal(self.lab.dir, rec["node"])


class Crons:
    """The controller host's cron lines at their deployed cadence (etc/cron.d/slurm-ft): `status
    --write-metrics` every minute, the sweep every 10 minutes, both from the phase's start; each run's
    Slurm commands land in its log (-vv), counted as the controller's are."""

    def __init__(self, env: Dict[str, str], logs: Path):
        self.env, self.logs = env, logs
        self.runs = {"metrics": 0, "sweep": 0}

    def __call__(self, deadline: float) -> None:
        def loop(name: str, argv: List[str], every: float) -> None:
            with open(self.logs / f"{name}.log", "a") as out:
                while time.monotonic() < deadline:
                    t_next = time.monotonic() + every
                    subprocess.run([PY, "-m", "slurm_ft", "-vv", *argv], stdout=out, stderr=subprocess.STDOUT,
                                   env=self.env, timeout=600, check=False)
                    self.runs[name] += 1
                    time.sleep(max(0.0, min(t_next, deadline) - time.monotonic()))
        for name, argv, every in (("metrics", ["status", "--write-metrics"], 60.0), ("sweep", ["sweep"], 600.0)):
            threading.Thread(target=loop, args=(name, argv, every), daemon=True).start()


def controller_rpcs(log: Path, t0: float, t1: float, by_type: Dict[str, Dict[str, int]]) -> Dict[str, float]:
    """The controller's Slurm commands in [t0, t1] from its debug log, the RPCs they sent, and the
    slurmctld time they took: each RPC at its type's average in this phase's `sdiag` (the controller runs
    as root, whose line in sdiag's by-user table also holds every slurmd's messages)."""
    cmds, rpcs, us = 0, 0, 0.0
    for line in log.read_text(errors="replace").splitlines():
        m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) .*ran \[(.*?)\] rc=", line)
        if not m:
            continue
        t = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
        if not t0 <= t <= t1:
            continue
        cmds += 1
        types = next((ts for rx, ts in RPCS_OF if rx.search(m.group(3))), [None])
        rpcs += len(types)
        for ty in types:
            got = by_type.get(ty or "")
            us += got["total_us"] / got["count"] if got and got["count"] else 0.0
    return {"commands_per_s": cmds / (t1 - t0), "rpcs_per_s": rpcs / (t1 - t0), "rpc_ms_per_s": us / 1000 / (t1 - t0)}


def one_size(nodes: int, args) -> dict:
    spares = max(16, nodes // 64)
    lab = Lab(args.dir, LabSpec(nodes=nodes, spares=spares, gpus_per_node=8, port_base=args.port_base,
                                fast_hooks=True, health_interval_s=300))
    t0 = time.monotonic()
    lab.up(timeout=1800)
    print(f"{nodes} nodes: lab up in {time.monotonic() - t0:.0f} s", flush=True)
    users = [u.name for u in lab_users.ensure(lab_users.NAMES[:args.users])]
    per_job = layout(nodes, args.jobs, args.nodes_per_job)
    work = Path(args.dir) / "load-work"              # root's: the controller's config and journal
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.chmod(work, 0o755)
    for u in users:                                    # each user's output and checkpoints, theirs
        lab.give(work / u, u)
    result: dict = {"nodes": nodes, "jobs": args.jobs, "nodes_per_job": per_job, "users": len(users)}
    try:
        # --- without slurm-ft ------------------------------------------------------------------------
        print(f"{nodes} nodes: settled in {settle(lab):.0f} s", flush=True)   # as before the phase with it
        ids = submit_plain(lab, work, args.jobs, per_job, users)
        wait_running(lab, ids, 1800)
        result["without"] = Phase(lab, args.minutes).measure()
        cancel_all(lab)
        print(f"{nodes} nodes: without slurm-ft measured; settled in {settle(lab):.0f} s", flush=True)
        # --- with slurm-ft ---------------------------------------------------------------------------
        config = work / "slurm-ft.yaml"
        data = yaml.safe_load(Path(lab.config_path).read_text()) or {}
        data["state_dir"] = str(work / "state")
        # the metrics textfile in the work directory; the daily re-check of idle spares off (its validation
        # jobs, one per spare on the first sweep, are a day's work, not a cost per minute)
        data.setdefault("lifecycle", {}).update(metrics_path=str(work / "slurm_ft.prom"), spare_recheck_s=0)
        config.write_text(yaml.safe_dump(data))
        os.chmod(config, 0o644)
        ctl_log = work / "controller.log"
        ctl = subprocess.Popen([PY, "-m", "slurm_ft", "-vv", "controller", "run"], stdout=open(ctl_log, "w"),
                               stderr=subprocess.STDOUT, env=dict(lab.env(), SLURM_FT_CONFIG=str(config)))
        try:
            jobs = submit_ft(lab, work, args.jobs, per_job, users)
            wait_running(lab, [j["id"] for j in jobs], 1800)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and not all(any(e.get("event") == "launch" for e in starts(j["ck"]))
                                                           for j in jobs if j["hot"]):
                time.sleep(2)
            sups = supervisors(jobs)
            cpu0 = {j: proc_cpu_s(p) for j, p in sups.items()}
            ctl_cpu0 = proc_cpu_s(ctl.pid)
            faults = Faults(lab, jobs, args.fault_every, config)
            crons = Crons(dict(lab.env(), SLURM_FT_CONFIG=str(config)), work)
            w0 = time.time()
            with_ = Phase(lab, args.minutes).measure(lambda deadline: (crons(deadline), faults(deadline)))
            w1 = time.time()
            time.sleep(5)                       # the last fault's latencies
            secs = with_["seconds"]
            with_["supervisor_cpu_pct"] = [100 * (proc_cpu_s(p) - cpu0[j]) / secs for j, p in sups.items()
                                           if proc_cpu_s(p) > 0]
            with_["controller_cpu_pct"] = 100 * (proc_cpu_s(ctl.pid) - ctl_cpu0) / secs
            with_["controller"] = controller_rpcs(ctl_log, w0, w1, with_["sdiag"]["type"])
            with_["crons"] = {name: dict(controller_rpcs(work / f"{name}.log", w0, w1, with_["sdiag"]["type"]),
                                         runs=crons.runs[name]) for name in crons.runs}
            with_["faults"] = faults.done
            result["with"] = with_
        finally:
            ctl.terminate()
            ctl.wait(120)
            cancel_all(lab)
    finally:
        lab.down()
    return result


def summary(r: dict) -> dict:
    w, wo = r["with"], r["without"]
    secs = w["seconds"]
    users = {k: v for k, v in w["sdiag"]["user"].items() if k.startswith(lab_users.PREFIX)}
    user_rpcs = sum(v["count"] for v in users.values())
    user_us = sum(v["total_us"] for v in users.values())
    all_us = sum(v["total_us"] for v in w["sdiag"]["type"].values())
    sup = [x for x in w.get("supervisor_cpu_pct", [])]
    faults = w["faults"]
    sup_lat = [f["sup"] - f["drained"] for f in faults if f.get("sup") and f.get("drained")]
    ctl_lat = [f["ctl"] - f["drained"] for f in faults if f.get("ctl") and f.get("drained")]
    hot_jobs = r["jobs"] // 2
    upd = w["sdiag"]["type"].get("REQUEST_UPDATE_NODE") or {}
    node_us = len(faults) * (upd["total_us"] / upd["count"] if upd.get("count") else 0.0)    # one drain a fault
    # the users' RPCs, all of them: their jobs sleep, so what they ask is their supervisors' (and relaunches')
    crons = w.get("crons", {})
    cron_ms = sum(c["rpc_ms_per_s"] for c in crons.values())
    ft_ms = user_us / 1000 + (w["controller"]["rpc_ms_per_s"] + cron_ms) * secs + node_us / 1000
    return {
        "nodes": r["nodes"],
        "slurmctld_cpu_pct_without": round(wo["slurmctld_cpu_pct"], 2),
        "slurmctld_cpu_pct_with": round(w["slurmctld_cpu_pct"], 2),
        "slurm_ft_share_cpu_pct": round(w["slurmctld_cpu_pct"] - wo["slurmctld_cpu_pct"], 2),
        "rpc_time_ms_per_s": round(all_us / 1000 / secs, 2),
        "slurm_ft_rpc_time_ms_per_s": round(ft_ms / secs, 3),
        "slurm_ft_rpc_time_pct_of_core": round(ft_ms / secs / 10, 3),
        "supervisors_rpc_per_s": round(user_rpcs / secs, 4),
        "supervisors_rpc_ms_per_s": round(user_us / 1000 / secs, 3),
        "supervisor_rpc_per_s_each": round(user_rpcs / secs / max(hot_jobs, 1), 5),
        "controller_rpc_per_s": round(w["controller"]["rpcs_per_s"], 3),
        "controller_rpc_ms_per_s": round(w["controller"]["rpc_ms_per_s"], 3),
        "controller_cpu_pct": round(w["controller_cpu_pct"], 2),
        **{f"{name}_cron_rpc_per_s": round(c["rpcs_per_s"], 3) for name, c in crons.items()},
        **{f"{name}_cron_rpc_ms_per_s": round(c["rpc_ms_per_s"], 3) for name, c in crons.items()},
        "supervisor_cpu_pct_mean": round(statistics.mean(sup), 3) if sup else None,
        "supervisor_cpu_pct_max": round(max(sup), 3) if sup else None,
        "faults": len(faults),
        "drain_to_supervisor_p50_s": _r(pct(sup_lat, 0.5)), "drain_to_supervisor_p95_s": _r(pct(sup_lat, 0.95)),
        "drain_to_controller_p50_s": _r(pct(ctl_lat, 0.5)), "drain_to_controller_p95_s": _r(pct(ctl_lat, 0.95)),
        "rpc_per_s_by_type": {k: round(v["count"] / secs, 3) for k, v in sorted(w["sdiag"]["type"].items())},
    }


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 3)


def show(rows: List[dict]) -> None:
    keys = [k for k in rows[0] if k != "rpc_per_s_by_type"]
    width = max(len(k) for k in keys)
    print(f"\n{'':<{width}}  " + "  ".join(f"{r['nodes']:>10} nodes" for r in rows)
          + ("  growth (last / first)" if len(rows) > 1 else ""))
    for k in keys[1:]:
        vals = [r[k] for r in rows]
        growth = ""
        if len(rows) > 1 and isinstance(vals[0], (int, float)) and isinstance(vals[-1], (int, float)) and vals[0]:
            growth = f"  x{vals[-1] / vals[0]:.2f}"
        print(f"{k:<{width}}  " + "  ".join(f"{'-' if v is None else v:>16}" for v in vals) + growth)
    types = sorted({t for r in rows for t in r["rpc_per_s_by_type"]})
    print("\nRPCs per second by type (with slurm-ft, whole cluster):")
    for t in types:
        print(f"  {t:<40} " + "  ".join(f"{r['rpc_per_s_by_type'].get(t, 0):>10}" for r in rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", default="1024,2048,4032")
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--nodes-per-job", type=int, metavar="N",
                    help="each job's nodes (default: the fleet shared out): the same jobs on every fleet size, so "
                         "what grows is the fleet alone (and a small machine measures slurmctld, not a lab of "
                         "a thousand slurmstepd)")
    ap.add_argument("--fault-every", type=float, default=60.0)
    ap.add_argument("--port-base", type=int, default=21000)
    ap.add_argument("--dir", default="/tmp/slurm-ft-load-lab")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = [int(x) for x in args.nodes.split(",")]
    results = []
    for n in sizes:              # each size's figures as soon as it is done: a larger size may not come up
        results.append(one_size(n, args))
        print(f"{n} nodes: " + json.dumps(summary(results[-1])), file=sys.stderr, flush=True)
    rows = [summary(r) for r in results]
    if args.json:
        print(json.dumps({"rows": rows, "raw": results}, indent=1, default=str))
        return
    print(f"\n{args.jobs} FT jobs ({args.jobs // 2} with a hot spare) of {args.users} users, {args.minutes:g} min "
          f"per phase, a fault every {args.fault_every:g} s; machine: {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}")
    show(rows)


if __name__ == "__main__":
    main()
