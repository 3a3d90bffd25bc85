"""One fatal Xid 79 from the kernel log to the resumed job, traced: run by test_walk.py as a script, under
the real pynvml and the lab's fake driver (its environment must be set before pynvml loads the library).

The three places the fault passes run here in turn over one in-memory Slurm (fakeslurm.py), each handing
on to the next only through Slurm, as on a cluster:
  node    the watcher follows the kernel log, the quick check judges, the node is drained
  fleet   the controller reads the drain, swaps in a spare and requeues the job
  job     the job's starter, at the requeued start, resumes from the newest complete checkpoint
A profiler notes every call into slurm_ft: which module called which, and at each hand-off (the
XidEvent the log reader makes, each write to Slurm, the exec of the trainer) which slurm_ft files are
on the stack. Prints one JSON object.
"""
from __future__ import annotations

import json
import os
import pickle
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Tuple

import slurm_ft

from fakeslurm import FakeSlurm

PACKAGE = os.path.dirname(slurm_ft.__file__) + os.sep
REPO = os.path.dirname(os.path.dirname(PACKAGE))
WRITES = {"drain", "resume", "set_partition_nodes", "requeue", "release", "update_job", "start_now",  # FakeSlurm's
          "shrink", "cancel"}                                                                     # writes


class Trace:
    def __init__(self) -> None:
        self.calls: Counter[Tuple[str, str]] = Counter()      # (caller file, called file), across files
        self.ran: Dict[str, None] = {}                        # slurm_ft files in the order first run
        self.handoffs: List[Dict[str, Any]] = []              # what was handed on, and the stack then
        self.made_event = False

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        where = code.co_filename
        if where.startswith(PACKAGE) and code.co_name != "<module>":
            mine = _rel(where)
            self.ran.setdefault(mine)
            back = frame.f_back
            if back is not None and back.f_code.co_filename.startswith(PACKAGE) and back.f_code.co_filename != where:
                self.calls[(_rel(back.f_code.co_filename), mine)] += 1
        elif where.endswith("fakeslurm.py") and code.co_name in WRITES:
            self.handoff(f"slurm {code.co_name}", frame.f_back)
        elif code.co_name == "__init__" and type(frame.f_locals.get("self")).__name__ == "XidEvent" \
                and not self.made_event:
            self.made_event = True                            # the first: the log reader's, in its thread
            self.handoff("XidEvent", frame.f_back)

    def handoff(self, what: str, frame: Any) -> None:
        stack = []
        while frame is not None:
            if frame.f_code.co_filename.startswith(PACKAGE):
                stack.append(f"{_rel(frame.f_code.co_filename)}:{frame.f_code.co_name}")
            frame = frame.f_back
        self.handoffs.append({"what": what, "stack": stack[::-1]})

    def on(self) -> None:
        threading.setprofile(self)
        sys.setprofile(self)

    def off(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)


def _rel(path: str) -> str:
    return os.path.relpath(path, REPO)


def node(work: Path, slurm: FakeSlurm, trace: Trace) -> None:
    from slurm_ft.config import load_config
    from slurm_ft.node import host
    from slurm_ft.node.watch import Watcher

    config = load_config(os.environ["SLURM_FT_CONFIG"])
    watcher = Watcher("n1", config, client=slurm, use_nvml=False)
    trace.on()
    watcher.start()
    usec = int((time.time() - host.boot_time()) * 1e6)
    with open(work / "kmsg", "a") as log:      # gpu3 of the fake driver is on bus 5d
        log.write(f"4,9,{usec},-;NVRM: Xid (PCI:0000:5d:00): 79, pid=1, name=python, GPU has fallen off the bus.\n")
    watcher.run(once=True, timeout=60)
    watcher.stop()
    trace.off()


def fleet(work: Path, slurm: FakeSlurm, trace: Trace) -> None:
    from slurm_ft.config import Config, ControllerConfig
    from slurm_ft.fleet.recovery import journal
    from slurm_ft.fleet import db
    from slurm_ft.fleet.recovery.controller import Controller

    config = Config(state_dir=str(work / "controller"),
                    controller=ControllerConfig(poll_s=0.0, read_progress=False, cycle_budget_s=5.0))
    controller = Controller(slurm, journal.connect(db.path_in(config.state_dir)), config, sleep=lambda s: None)
    trace.on()
    controller.cycle()
    trace.off()


def job(ckpt_dir: Path, slurm: FakeSlurm, trace: Trace) -> List[str]:
    from slurm_ft.job import jobstart

    started: List[str] = []
    os.environ.update(SLURM_JOB_ID="100", SLURM_RESTART_COUNT=str(slurm.j[100].restart_count))
    real_exec = os.execvp

    def execvp(file: str, argv: List[str]) -> None:     # the trainer's start: the last hand-off
        trace.handoff("exec", sys._getframe(1))
        started.extend(argv)
    os.execvp = execvp
    trace.on()
    try:
        jobstart.main(["--ckpt-dir", str(ckpt_dir), "--", "/bin/true", "--resume", "{ckpt}"])
    finally:
        trace.off()
        os.execvp = real_exec
    return started


def dcp_checkpoints(ckpt_dir: Path, steps: List[int]) -> None:
    for step in steps:
        d = ckpt_dir / f"step_{step}"
        d.mkdir(parents=True)
        (d / "__0_0.distcp").write_bytes(b"tensor bytes")
        (d / ".metadata").write_bytes(pickle.dumps({"storage": ["__0_0.distcp"]}, protocol=2))


def main(work: Path) -> None:
    from slurm_ft.job.tag import FtSpec

    ckpt_dir = work / "ckpt"
    dcp_checkpoints(ckpt_dir, [4, 5])
    slurm = FakeSlurm(train=["n1", "n2", "n3", "n4"], spares=["n5", "n6"], others=[f"x{i}" for i in range(20)])
    slurm.add_job(4, FtSpec(ckpt_dir=str(ckpt_dir), max_restarts=5))
    parts = {"node": Trace(), "fleet": Trace(), "job": Trace()}
    node(work, slurm, parts["node"])
    fleet(work, slurm, parts["fleet"])
    started = job(ckpt_dir, slurm, parts["job"])
    print(json.dumps({
        "slurm": [list(map(str, c)) for c in slurm.calls], "started": started,
        "job": {"state": slurm.j[100].state, "nodes": list(slurm.j[100].nodes)},
        "parts": {name: {"ran": list(t.ran), "handoffs": t.handoffs,
                         "calls": [[a, b, n] for (a, b), n in sorted(t.calls.items())]}
                  for name, t in parts.items()},
    }))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
