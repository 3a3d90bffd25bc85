"""The job an epilog judges for: its GPUs on this node and its user, from the environment slurmd gives
the hook. On a node shared by several jobs, a leftover process counts against the ending job only when
it is that job's: on one of its GPUs, owned by its user. Node-wide faults (Xids, ECC, a lost GPU) are
not scoped: they fail the node for every job.

slurmd sets, in the prolog and epilog environment (22.05, 24.11 and 26.05 alike: gres_common.c,
`gres_common_prep_set_env`, from the job's GPU bitmap on this node):
* SLURM_JOB_GPUS: Slurm's indexes of the job's GPUs here, "0,1,2,3";
* CUDA_VISIBLE_DEVICES: the same indexes, or each device's UUID where gres.conf gives one (MIG).
Slurm numbers a node's GPUs as gres/gpu sorts them: by device file (natural order), then, where
AutoDetect=nvml gives Links, by the PCI order NVML enumerates: NVML's own indexes on a node whose
/dev/nvidiaN follow PCI order. Neither variable is set for a job with no GPU here, or where Slurm does
not manage the node's GPUs (no gres File=): the job's GPUs are then not known and every GPU is judged,
for the job user's processes only (SLURM_JOB_UID), and the finding says so.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import AbstractSet, FrozenSet, Mapping, Optional

ENV_KEYS = ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")
MAX_VALUE = 1024             # characters of one variable; 256 indexes of 4 digits fit
MAX_GPUS = 256
_INDEX_LIST = re.compile(r"[0-9]{1,4}(?:,[0-9]{1,4})*\Z")
_UID = re.compile(r"[0-9]{1,10}\Z")


def index_list(value: str) -> Optional[FrozenSet[int]]:
    """`0,1,2,3` -> {0, 1, 2, 3}; None for anything else (ranges, UUIDs, spaces, too long)."""
    if len(value) > MAX_VALUE or not _INDEX_LIST.match(value):
        return None
    gpus = frozenset(int(i) for i in value.split(","))
    return gpus if len(gpus) <= MAX_GPUS else None


@dataclass(frozen=True)
class JobScope:
    job_id: str = ""                        # "": no job (a manual or maintenance check): all is judged
    gpus: Optional[FrozenSet[int]] = None   # the job's GPUs on this node; None: every GPU
    uid: Optional[int] = None               # the job's user; None: every process
    source: str = ""                        # where `gpus` came from, or why they are not known

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "JobScope":
        uid_text = env.get("SLURM_JOB_UID", "")
        uid = int(uid_text) if _UID.match(uid_text) and int(uid_text) < 2 ** 32 else None
        job_id = env.get("SLURM_JOB_ID", "")
        job_id = job_id if job_id.isdigit() and len(job_id) <= 20 else ("?" if job_id else "")
        # a CUDA_VISIBLE_DEVICES of UUIDs (MIG) says Slurm's indexes count MIG devices, not GPUs
        present = [k for k in reversed(ENV_KEYS) if k in env]
        for key in present:
            if index_list(env[key]) is None:
                return cls(job_id, None, uid, f"{key} is not a GPU index list")
        if present:
            return cls(job_id, index_list(env[present[-1]]), uid, present[-1])
        return cls(job_id, None, uid, f"{' and '.join(ENV_KEYS)} not set")

    def on(self, node_gpus: AbstractSet[int]) -> "JobScope":
        """This scope on a node showing these GPU indexes: a job GPU the node does not show (a GPU
        gone from NVML shifts the indexes) makes the job's GPUs unknown."""
        if self.gpus is None or self.gpus <= node_gpus:
            return self
        missing = min(self.gpus - node_gpus)
        shown = f"{min(node_gpus)}-{max(node_gpus)}" if node_gpus else "none"
        return replace(self, gpus=None, source=f"{self.source} names GPU {missing}, this node shows GPUs {shown}")

    def owns(self, gpu: int, uid: Optional[int]) -> bool:
        """Is a process (its real uid, None when unreadable) on GPU `gpu` this job's to answer for?"""
        return (self.gpus is None or gpu in self.gpus) and (self.uid is None or uid is None or uid == self.uid)

    def note(self) -> str:
        """For the finding: a job's epilog that could not tell its GPUs ("" when it could, or no job)."""
        if not self.job_id or self.gpus is not None:
            return ""
        whose = f", processes of uid {self.uid} only" if self.uid is not None else ""
        return f"job {self.job_id}: its GPUs here are not known ({self.source}): every GPU checked{whose}"
