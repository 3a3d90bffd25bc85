"""The lab's `nvidia-smi -r -i N`: reset one fake GPU of the node this runs on ($SLURMD_NODENAME, set
for the validation job). The lab's slurm-ft.yaml names it as lifecycle.remediation.reset_command.
Exit 0 reset, 1 the GPU cannot be reset (off the bus), 2 bad input."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional

from slurm_ft.errors import UsageError
from slurm_ft_lab.inject import reset_gpu


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slurm_ft_lab.fake_reset")
    ap.add_argument("--dir", required=True)
    ap.add_argument("gpu", type=int)
    args = ap.parse_args(argv)
    node = os.environ.get("SLURMD_NODENAME", "")
    if not node:
        print("fake reset: no $SLURMD_NODENAME (run it inside a job on the node)", file=sys.stderr)
        return 2
    try:
        reset_gpu(Path(args.dir), node, args.gpu)
    except UsageError as exc:
        print(f"GPU {args.gpu}: reset failed: {exc}", file=sys.stderr)
        return 1
    print(f"GPU 00000000:{args.gpu:02x}:00.0 was successfully reset.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
