"""The lab's RebootProgram: "reboot" one fake node the way a real reboot looks to Slurm.

slurmd runs RebootProgram (slurm.conf) when slurmctld sends it REQUEST_REBOOT_NODES. Many slurmd share
this host, so the program finds its node from the slurmd that started it (`slurmd -N NODE`), returns at
once (slurmd waits for it) and leaves a detached helper that, after `delay` seconds, stops that slurmd,
heals the node's fake GPUs and kernel log (a reboot clears a fallen-off GPU and empties /run), and
starts the slurmd again with `-b`: the host's real boot time did not change, and slurmctld accepts a
node as rebooted only when it reports a boot after the request (it waits until ResumeTimeout, then
marks the node DOWN "reboot timed out"). The same node comes back on the same port.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

from slurm_ft_lab import inject
from slurm_ft_lab.cluster import Lab, _proc_cmdline, _terminate

LOG_NAME = "reboot.log"


def _ppid(pid: int) -> Optional[int]:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def node_of_ancestor(pid: int) -> Optional[str]:
    """The NODE of the nearest `slurmd ... -N NODE` among pid and its ancestors."""
    seen = 0
    while pid and pid > 1 and seen < 16:
        argv = _proc_cmdline(pid)
        if argv and os.path.basename(argv[0]) == "slurmd" and "-N" in argv[:-1]:
            return argv[argv.index("-N") + 1]
        pid = _ppid(pid) or 0
        seen += 1
    return None


def reboot(labdir: Path, node: str, delay: float) -> None:
    """The detached helper's work: stop the node's slurmd, heal the node, start it as freshly booted."""
    time.sleep(delay)
    lab = Lab(labdir)
    pid = lab.slurmd_pid(node)
    if pid is not None:
        _terminate([pid], 10.0)
    inject.heal(labdir, node)
    lab.start_slurmds(booted=True)
    _log(labdir, f"{node}: rebooted (slurmd {pid} stopped, node healed, slurmd started with -b)")


def _log(labdir: Path, line: str) -> None:
    with open(Path(labdir) / "log" / LOG_NAME, "a") as f:
        f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slurm_ft_lab.reboot")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--delay", type=float, default=3.0)
    ap.add_argument("--node", help="default: the node of the slurmd that runs this program")
    ap.add_argument("--detached", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    labdir = Path(args.dir)
    node = args.node or node_of_ancestor(os.getppid())
    if not node:
        _log(labdir, f"no slurmd -N NODE among the ancestors of {os.getpid()}: nothing rebooted")
        return 1
    if args.detached:
        try:
            reboot(labdir, node, args.delay)
        except Exception as exc:    # nobody reads this helper's stderr: say it where the lab's user looks
            _log(labdir, f"{node}: reboot failed: {type(exc).__name__}: {exc}")
            return 1
        return 0
    # slurmd waits for its RebootProgram, and stopping slurmd must not stop the helper: a new session
    subprocess.Popen([sys.executable, "-m", "slurm_ft_lab.reboot", "--dir", str(labdir), "--delay",
                      str(args.delay), "--node", node, "--detached"], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_")})
    _log(labdir, f"{node}: reboot requested, back in {args.delay:g} s")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sys.exit(main())
