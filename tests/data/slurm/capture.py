#!/usr/bin/env python3
"""Capture real Slurm outputs for the parser unit tests (tests/unit/test_slurm_parse.py).

Brings up a small lab (4 train nodes + 1 spare), puts nodes and jobs into the states the parsers
must read, saves what scontrol/sinfo/squeue/sbatch print into this directory, and takes the lab
down. Run as root on a machine with Slurm: `python tests/data/slurm/capture.py [--port-base N] [--out DIR]`.
By default the files go to tests/data/slurm/<major.minor>/ (e.g. 24.11/); the files directly in this
directory are the first 22.05 capture, kept for the tests that read them.
Where the version has them, `scontrol show ... --json` is captured too (else its error in *.err),
with `scontrol show config` and the errors of a few refused commands.

States captured: idle; ALLOCATED (an exclusive job); IDLE+DRAIN with a reason full of quotes, `=`, `;`; MIXED+DRAIN (drained while
a job runs); a killed slurmd (NOT_RESPONDING, then DOWN*); a running job whose name
has a space, whose comment has spaces/quotes/`=` and whose command has arguments; a pending job
waiting on BeginTime; a job held after requeuehold; completed and failed jobs; an active MAINT
reservation and a future one; where expedited requeue is enabled (>= 25.11), a `--requeue=expedite`
job requeued HELD after a non-zero exit with clean epilogs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from slurm_ft_lab.cluster import Lab, LabSpec
from slurm_ft.slurm.client import SlurmClient
from slurm_ft.slurm.parse import sinfo_node_format
from slurm_ft.vocab import EVENT_MARK, event_line
from slurm_ft_lab.waits import wait_for, wait_job_state

HERE = Path(__file__).resolve().parent
REASON = 'slurm-ft: XID79 gpu3 "fell off the bus" a=b; c=\'d\''
COMMENT = 'slurm-ft:ft=1 note="a b" x=y;z'


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-base", type=int, default=18700)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    top = Path(tempfile.mkdtemp(prefix="slurm-ft-capture-", dir="/tmp"))
    os.chmod(top, 0o755)
    lab = Lab(top / "lab", LabSpec(nodes=4, spares=1, gpus_per_node=8, port_base=args.port_base))
    lab.up()
    try:
        c = SlurmClient(env={"SLURM_CONF": str(lab.conf)})
        major, minor, _ = c.version()
        out = args.out or HERE / f"{major}.{minor:02d}"
        out.mkdir(parents=True, exist_ok=True)
        capture(lab, top, out)
    finally:
        lab.down()
        shutil.rmtree(top, ignore_errors=True)


def capture(lab: Lab, work: Path, out_dir: Path = HERE) -> None:
    c = SlurmClient(env={"SLURM_CONF": str(lab.conf)})

    def save(name: str, argv) -> None:
        out = c._run(argv, check=False)
        if out.returncode != 0:          # e.g. `scontrol show node --json` on 22.05
            name = name.rsplit(".", 1)[0] + ".err"
            (out_dir / name).write_text(f"rc={out.returncode}\n{out.stderr}{out.stdout}")
        else:
            (out_dir / name).write_text(out.stdout)
        print(f"{name}: {len(out.stdout.splitlines())} lines")

    save("scontrol_show_node_idle.txt", ["scontrol", "show", "node", "-o"])
    capture_hang_check(lab, c, work, out_dir)
    save("scontrol_show_config.txt", ["scontrol", "show", "config"])
    capture_config_ping_down(lab, c, out_dir)
    save("scontrol_show_job_unknown.txt", ["scontrol", "show", "job", "-o", "999999"])
    save("scontrol_show_reservation_none.txt", ["scontrol", "show", "reservation", "-o"])

    script = work / "train.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    script.chmod(0o755)
    running = c.submit(["-J", "train run", "--comment", COMMENT, "-w", "gpu001", "-N1", "--gres=gpu:8", "--exclusive",
                        "--requeue", "-o", str(work / "train-%j.out"), str(script), "--steps", "10", "two words"],
                       cwd=str(work))
    (out_dir / "sbatch_parsable.txt").write_text(f"{running}\n")
    begin = c.submit(["--begin=now+1hour", "-N1", "--wrap", "sleep 1"], cwd=str(work))
    small = c.submit(["-w", "gpu002", "-n1", "--gres=gpu:1", "--wrap", "sleep 600"], cwd=str(work))
    held = c.submit(["-p", "spares", "-N1", "--requeue", "--wrap", "sleep 600"], cwd=str(work))
    done = c.submit(["-w", "gpu004", "-N1", "--wrap", "true"], cwd=str(work))
    failed = c.submit(["-w", "gpu004", "-N1", "--wrap", "exit 3"], cwd=str(work))
    for jid in (running, small, held):
        wait_job_state(c, jid, "RUNNING", 60)
    wait_job_state(c, done, "COMPLETED", 60)
    wait_job_state(c, failed, "FAILED", 60)
    wait_job_state(c, begin, "PENDING", 10)
    if c.expedited_requeue_available():   # >= 25.11 with enable_expedited_requeue: a non-zero exit with
        exp = c.submit(["-w", "gpu004", "-N1", "--requeue=expedite", "--wrap", "exit 3"], cwd=str(work))
        wait_for(lambda: c.job(exp).held, 60, "expedited requeue held")   # clean epilogs -> held
    c.requeue(held, hold=True)
    wait_for(lambda: c.job(held).held, 30, "held")
    c.drain("gpu002", "slurm-ft: draining while a job runs")
    c.drain("gpu003", REASON)
    c.create_reservation("gpu003", name="maint_now", duration="60")
    c.create_reservation("gpu004", name="later", start="now+1day", duration="30", flags=())

    slurmd = next(d["pid"] for d in lab.daemons() if d.get("node") == "gpu004")
    os.kill(slurmd, signal.SIGKILL)
    wait_for(lambda: "NOT_RESPONDING" in c.node("gpu004").flags, 60, "gpu004 not responding")
    save("scontrol_show_node.txt", ["scontrol", "show", "node", "-o"])
    one = ["sinfo", "-N", "-h", "-O", sinfo_node_format(), "-n"]   # SlurmClient.node: one node asked for
    save("sinfo_node_draining.txt", [*one, "gpu002"])
    save("sinfo_node_drained.txt", [*one, "gpu003"])
    save("sinfo_node_noresp.txt", [*one, "gpu004"])
    save("sinfo_node_unknown.txt", [*one, "gpu999"])
    # what a job's output shows of `scontrol notify` (the node's watcher tells the job of a drain)
    c.notify(running, event_line("failed", "gpu001", REASON))
    out_file = work / f"train-{running}.out"
    wait_for(lambda: EVENT_MARK in out_file.read_text(errors="replace"), 30, "the notice in the job's output")
    (out_dir / "notify_batch_output.txt").write_text(out_file.read_text(errors="replace"))
    save("sinfo.json", ["sinfo", "--json"])
    save("sinfo_N.txt", ["sinfo", "-h", "-N", "-o", "%N %T"])
    save("scontrol_show_job.txt", ["scontrol", "show", "job", "-o"])
    save("squeue.json", ["squeue", "--json"])
    save("scontrol_show_partition.txt", ["scontrol", "show", "partition", "-o"])
    save("scontrol_show_reservation.txt", ["scontrol", "show", "reservation", "-o"])
    save("scontrol_version.txt", ["scontrol", "--version"])
    for what in ("node", "job", "partition", "reservation"):
        save(f"scontrol_show_{what}.json", ["scontrol", "show", what, "--json"])
    wait_for(lambda: c.node("gpu004").state == "DOWN", 60, "gpu004 down")
    save("scontrol_show_node_down.txt", ["scontrol", "show", "node", "-o", "gpu004"])
    save("sinfo_node_down.txt", [*one, "gpu004"])
    save("scontrol_show_node_down.json", ["scontrol", "show", "node", "gpu004", "--json"])
    time.sleep(0.1)


def capture_config_ping_down(lab: Lab, c: SlurmClient, out_dir: Path) -> None:
    """`scontrol show config` when slurmctld answers the configuration read but not the ping after it (a
    loaded slurmctld): gdb stops scontrol at its ping and slurmctld is SIGSTOPped until the ping has timed
    out (MessageTimeout). Needs gdb (apt-get install gdb): skipped, and said so, without it."""
    import subprocess
    gdb = shutil.which("gdb")
    scontrol = shutil.which("scontrol")
    if not gdb or not scontrol:
        print("scontrol_show_config_ping_down.txt: not captured (no gdb)")
        return
    ctld = int((lab.dir / "run" / "slurmctld.pid").read_text().split()[0])
    ping = "ping_all_controllers" if c.version() >= (23, 2) else "slurm_ping"
    out = out_dir / "scontrol_show_config_ping_down.txt"
    try:
        p = subprocess.run([gdb, "-q", "-batch", "-ex", "set breakpoint pending on", "-ex", f"break {ping}",
                            "-ex", f"run show config > {out}", "-ex", f"shell kill -STOP {ctld}", "-ex", "continue",
                            "--args", scontrol], env=lab.env(), capture_output=True, text=True, timeout=300)
    finally:
        os.kill(ctld, signal.SIGCONT)
    print(f"{out.name}: {len(out.read_text().splitlines())} lines ({p.stdout.strip().splitlines()[-1:]})")


def capture_hang_check(lab: Lab, c: SlurmClient, work: Path, out_dir: Path) -> None:
    """The hot-spare supervisor's hang check as it runs in a job (recovery.supervisor.check_argv): one
    srun --label of `slurm-ft check --json` on 4 nodes, gpu002's GPU lost. Its reports are longer than
    the 1 KiB pieces slurmstepd forwards, so their lines interleave."""
    import subprocess
    import sys
    from slurm_ft_lab.inject import heal_all, inject
    from slurm_ft.job.supervisor import check_argv
    nodes = ["gpu001", "gpu002", "gpu003", "gpu004"]
    job = c.submit(["-w", ",".join(nodes), "-N4", "--wrap", "sleep 600"], cwd=str(work))
    wait_job_state(c, job, "RUNNING", 60)
    # RUNNING comes before the prologs end (PrologFlags=Alloc): a GPU lost before then fails the prolog
    from slurm_ft.config import load_config
    from slurm_ft.node import state
    health = load_config(str(lab.config_path)).health
    wait_for(lambda: all(job in state.running_jobs(state.load(state.path_for(health, n))) for n in nodes), 60,
             "the prologs' records")
    inject(lab.dir, "gpu002", "gpu_lost", gpu=0, log=False)
    env = dict(lab.env(), SLURM_JOB_ID=str(job), LD_LIBRARY_PATH=str(lab.dir / "lib"))
    p = subprocess.run(check_argv(nodes, python=sys.executable), env=env, capture_output=True, text=True, timeout=300)
    (out_dir / "srun_label_hang_check.txt").write_text(p.stdout)
    print(f"srun_label_hang_check.txt: {len(p.stdout.splitlines())} lines (rc {p.returncode})")
    heal_all(lab.dir)                     # before the epilog checks the node
    c.cancel(job)
    wait_for(lambda: c.job(job).state == "CANCELLED" and "COMPLETING" not in c.node("gpu004").flags, 60,
             "the hang check's job ended")
    if c.node("gpu002").drained:          # by the check (--drain)
        c.resume(["gpu002"])


if __name__ == "__main__":
    main()
