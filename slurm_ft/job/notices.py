"""The notices a running job gets, as its supervisor reads them: no Slurm call.

The node's side (node/tell.py) and the controller tell a job of a failed or quarantined node, or of the
steps the controller cancelled on one (`ended`), with `scontrol notify`; the batch step prints each notice on its stderr, i.e. the job's output file
(`slurmstepd-<host>: error: slurm-ft-event v1 failed gpu017 slurm-ft: XID79 gpu3 ...`). The supervisor is
that batch step: it follows the file it writes its own stderr to, from where it was when it started. Each
poll is a size check; new bytes are scanned for the mark. The same file gets srun's own notice of a node
that went DOWN under the step (`srun: error: Node failure on gpu017`: a hot-spare job is submitted with
--no-kill, so Slurm takes the node out of the job instead of killing the job), read as a failed node.
The job's own ranks write to the same file and could print either: it would only steer this job, which
is theirs.
"""
from __future__ import annotations

import logging
import os
import re
import stat
from typing import BinaryIO, List, Optional, Tuple

from slurm_ft.vocab import EVENT_MARK, parse_event

log = logging.getLogger(__name__)

MAX_READ = 8 << 20            # bytes scanned per poll; a job printing faster than that skips ahead
MAX_LINE = 64 << 10           # a partial line kept for the next poll, at most
SRUN_NODE_FAILURE = re.compile(rb"^srun: error: Node failure on ([A-Za-z0-9_.\-]{1,64})\s*$")


class Follower:
    """Follows an output file from its current end; `events()` returns the notices written since."""

    def __init__(self, fh: BinaryIO):
        self.fh = fh
        self.pos = os.fstat(fh.fileno()).st_size
        self.partial = b""
        self.mark = EVENT_MARK.encode()
        self.srun = b"Node failure on "

    @classmethod
    def own_stderr(cls) -> Optional["Follower"]:
        """The file this process's stderr goes to (a batch step's: the job's output), else None (a pipe,
        a terminal, /dev/null: no notices can be read)."""
        try:
            fh = open("/proc/self/fd/2", "rb")     # a second handle on the same file, for reading
        except OSError:
            return None
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            fh.close()
            return None
        return cls(fh)

    def events(self) -> List[Tuple[str, str, str]]:
        """(kind, node, why) of each notice written since the last call, in order."""
        size = os.fstat(self.fh.fileno()).st_size
        if size < self.pos:                # truncated (a requeue that does not append): start over
            self.pos, self.partial = 0, b""
        if size == self.pos:
            return []
        if size - self.pos > MAX_READ:
            log.warning("job output grew by %d bytes in one poll: notices in the skipped part are left to "
                        "the backstop read", size - self.pos)
            self.pos, self.partial = size - MAX_READ, b""
        self.fh.seek(self.pos)
        data = self.fh.read(size - self.pos)
        self.pos += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()[-MAX_LINE:]
        out = []
        for line in lines:
            if self.mark in line:
                ev = parse_event(line.decode("utf-8", "replace"))
                if ev is not None:
                    out.append(ev)
            elif self.srun in line:
                m = SRUN_NODE_FAILURE.match(line)
                if m:
                    out.append(("failed", m.group(1).decode(), "DOWN: node failure reported to srun"))
        return out

    def close(self) -> None:
        self.fh.close()
