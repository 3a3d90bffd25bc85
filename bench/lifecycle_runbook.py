#!/usr/bin/env python3
"""Time each step of the runbook's 3 a.m. sequence in the lab (docs/runbook.md quotes these figures).

    python bench/lifecycle_runbook.py [--dir /tmp/lab-h7] [--port-base 23500] [--rounds 3] [--json]
    python bench/lifecycle_runbook.py --remediate ...    # no person: the sweep reboots, validates, pools

Each round: a fault on a node of a running fault-tolerant job -> detection and drain -> controller
recovery onto the spare -> the sweep records the quarantine -> what an admin runs (status, incidents,
node list, node history, xid explain) -> `node repaired` -> the sweep validates (full + burn-in) and
returns the node to the spares -> breaker status and reset. With --remediate no admin step runs:
sweeps (as their timer would run them, back to back) reboot the node through Slurm's RebootProgram
(lifecycle.remediation, mode on), validate it and return it to the spares; "fault -> back in spares"
is the whole loop with no person. Every step is the real command, timed as a
subprocess (Python start-up included, as the admin sees it). Prints the median and spread per step and
the machine's load average, since other work on a shared machine slows every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from slurm_ft_lab import inject as inj
from slurm_ft_lab.cluster import Lab, LabSpec
from slurm_ft.slurm.client import SlurmClient

PY = sys.executable


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/lab-h7")
    ap.add_argument("--port-base", type=int, default=23500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--remediate", action="store_true", help="no admin: the sweep's remediation repairs the node")
    args = ap.parse_args()

    lab = Lab(args.dir, LabSpec(nodes=64, spares=4, gpus_per_node=8, port_base=args.port_base))
    started_here = not lab.running()
    lab.up(timeout=180)
    env = lab.env()
    client = SlurmClient(env={"SLURM_CONF": str(lab.conf)})
    work = Path(tempfile.mkdtemp(prefix="slurm-ft-runbook-"))
    cfg = _config(lab, work, args.remediate)
    env["SLURM_FT_CONFIG"] = str(cfg)
    train, spares = lab.spec.train_nodes, lab.spec.spare_nodes
    timings: dict = {}
    load_before = os.getloadavg()

    def timed(step: str, *argv: str, extra_env=None, ok=(0,)) -> subprocess.CompletedProcess:
        e = dict(env, **(extra_env or {}))
        t0 = time.monotonic()
        p = subprocess.run([PY, "-m", "slurm_ft", *argv], capture_output=True, text=True, env=e, timeout=600)
        timings.setdefault(step, []).append(time.monotonic() - t0)
        if p.returncode not in ok:
            raise SystemExit(f"{step}: `slurm-ft {' '.join(argv)}` exited {p.returncode}\n{p.stdout}{p.stderr}")
        return p

    try:
        _reset(client, train, spares)
        client.set_partition_nodes("train", train[:4])
        client.drain(spares[1:], "runbook bench: held back")
        timed("sweep (nothing to do)", "sweep")
        marker = work / "started"
        out = subprocess.run([PY, "-m", "slurm_ft", "sbatch", "-N", "4", "-o", str(work / "job-%j.out"),
                              "/bin/sh", "-c", f"touch {marker} && exec sleep 36000"],
                             capture_output=True, text=True, env=env, timeout=60, check=True).stdout
        job_id = int(out.split()[-1])
        _wait(lambda: marker.exists(), 120, "job start")
        pool_node = spares[0]
        used: set = set()
        for r in range(args.rounds):
            job = client.job(job_id)
            # a node not faulted before: a third fault on one node would (rightly) put it on the RMA list
            bad = next(n for n in job.nodes if n != pool_node and n not in used)
            used.add(bad)
            # On a cluster the HealthCheckProgram runs between a node's return and its next fault and
            # clears the node-local "drained by us" belief; here the next fault follows within seconds.
            (lab.dir / "nodes" / bad / "state.json").unlink(missing_ok=True)
            inj.inject(lab.dir, bad, "xid", gpu=3, value=79)
            marker.unlink()
            t_fault = time.monotonic()
            timed("detect + drain (check --level quick --drain)", "check", "--level", "quick", "--drain",
                  "--node", bad, extra_env={"LD_LIBRARY_PATH": f"{lab.dir}/lib", "SLURMD_NODENAME": bad}, ok=(1,))
            timed("controller recovery (controller once)", "controller", "once", "--budget", "120")
            _wait(lambda: marker.exists(), 180, "job restart")
            timings.setdefault("fault -> job running again on the spare", []).append(time.monotonic() - t_fault)
            if args.remediate:   # nobody types anything: sweeps until the node is a spare again
                deadline = time.monotonic() + 300
                while not (client.node(bad).partitions == ("spares",) and not client.node(bad).drained
                           and client.node(bad).state == "IDLE"):
                    if time.monotonic() > deadline:
                        raise SystemExit(f"round {r}: {bad} not back in spares within 300 s")
                    timed("sweep (remediation: reboot, validate, pool)", "sweep")
                    time.sleep(1)
                timings.setdefault("fault -> back in spares, no person", []).append(time.monotonic() - t_fault)
                pool_node = bad
                continue
            timed("sweep records the quarantine", "sweep")
            timed("status", "status")
            timed("incidents", "incidents")
            timed("node list", "node", "list")
            timed("node history NODE", "node", "history", bad)
            timed("xid explain (node's kernel log)", "xid", "explain", str(lab.dir / "nodes" / bad / "kmsg"), ok=(0, 1))
            inj.heal(lab.dir, bad)                # and, as the repair's reboot, forgets its health state
            timed("node repaired NODE", "node", "repaired", bad, "--note", "bench")
            timed("sweep validates (full + burnin) -> spare", "sweep")
            node = client.node(bad)
            if node.partitions != ("spares",) or node.drained:
                raise SystemExit(f"round {r}: {bad} not back in spares: {node}")
            pool_node = bad
        timed("breaker status", "breaker", "status", ok=(0, 1))
        timed("breaker reset", "breaker", "reset")
    finally:
        for j in client.jobs():
            if j.state in ("PENDING", "RUNNING"):
                client.cancel(j.job_id)
        inj.heal_all(lab.dir)
        _reset(client, train, spares)
        if started_here:
            lab.down()

    rows = {k: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v), "n": len(v)}
            for k, v in timings.items()}
    result = {"rounds": args.rounds, "nodes": len(train) + len(spares), "loadavg_before": load_before,
              "loadavg_after": os.getloadavg(), "steps": rows}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"runbook steps in the lab ({result['nodes']} nodes, {args.rounds} rounds; load average "
          f"{load_before[0]:.1f} before, {result['loadavg_after'][0]:.1f} after, on {os.cpu_count()} CPUs)")
    for k, v in rows.items():
        print(f"  {k:<48} median {v['median_s']:6.2f} s   min {v['min_s']:6.2f}   max {v['max_s']:6.2f}   n={v['n']}")


def _config(lab: Lab, work: Path, remediate: bool = False) -> Path:
    data = yaml.safe_load(lab.config_path.read_text()) or {}
    data["state_dir"] = str(work / "state")
    if remediate:
        data.setdefault("lifecycle", {}).setdefault("remediation", {})["mode"] = "on"
    data.setdefault("lifecycle", {}).update({
        "validate_command": ["env", f"LD_LIBRARY_PATH={lab.dir}/lib", PY, "-m", "slurm_ft"],
        "quarantine_grace_s": 0, "spare_recheck_s": 0, "pool_target": 1, "breaker_max_share": 0.5,
        "metrics_path": str(work / "slurm_ft.prom")})
    path = work / "slurm-ft.yaml"
    path.write_text(yaml.safe_dump(data))
    os.chmod(path, 0o644)
    return path


def _reset(client: SlurmClient, train, spares) -> None:
    for r in client.reservations():
        if r.name.startswith("slurm-ft-maint-"):
            client.delete_reservation(r.name)
    client.set_partition_nodes("train", train)
    client.set_partition_nodes("spares", spares)
    bad = [n.name for n in client.nodes() if n.drained]
    if bad:
        client.resume(bad)


def _wait(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


if __name__ == "__main__":
    main()
