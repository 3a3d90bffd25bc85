"""The lab trainer with `slurm_ft.progress(step)` called for each of its steps, for jobs whose trainer
does not call it itself: runs the command after `--` (srun ... trainer ...) and relays every `step`
event of this run from CKPT/trainer-log.jsonl to slurm_ft.progress, as rank 0 of a job would.

    python progress_relay.py CKPT -- srun ... python -m slurm_ft.lab.trainer --ckpt-dir CKPT ...
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import slurm_ft


def main(argv) -> int:
    ckpt_dir, cmd = argv[0], argv[2:]
    log = os.path.join(ckpt_dir, "trainer-log.jsonl")
    job, restart = os.environ.get("SLURM_JOB_ID", ""), int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    offset = os.path.getsize(log) if os.path.exists(log) else 0
    child = subprocess.Popen(cmd)
    buf = b""
    while True:
        done = child.poll() is not None
        if os.path.exists(log):
            with open(log, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
            offset += len(data)
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("event") == "step" and e.get("job") == job and e.get("restart") == restart:
                    slurm_ft.progress(e["step"], force=True)
        if done:
            return child.returncode
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
