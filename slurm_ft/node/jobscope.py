"""The job an epilog judges for: its GPUs on this node and its user, from the environment slurmd gives
the hook. On a node shared by several jobs, a leftover process counts against the ending job only when
it is that job's: on one of its GPUs, owned by its user. Node-wide faults (Xids, ECC, a lost GPU) are
not scoped: they fail the node for every job.

slurmd sets, in the prolog and epilog environment (22.05, 24.11 and 26.05 alike: gres_common.c,
`gres_common_prep_set_env`, from the job's GPU bitmap on this node):
* SLURM_JOB_GPUS: Slurm's indexes of the job's GPUs here, "0,1,2,3";
* CUDA_VISIBLE_DEVICES: each GPU's unique id where Slurm has one, else the same indexes. AutoDetect
  (nvml, nvidia) records every GPU's UUID ("GPU-8a3f...") since 25.11, so on 26.05; before, only MIG
  devices' ("MIG-..."): the 22.05 lab shows "4,5,6,7" for both variables.
Slurm numbers a node's GPUs as gres/gpu sorts them: by device file (natural order), then, where
AutoDetect=nvml gives Links, by the PCI order NVML enumerates: NVML's own indexes on a node whose
/dev/nvidiaN follow PCI order. UUIDs need no such assumption: they are matched against NVML's. With MIG,
Slurm's indexes count MIG devices, not GPUs. Neither variable is set for a job with no GPU here, or
where Slurm does not manage the node's GPUs (no gres File=). Whenever the job's GPUs cannot be told,
every GPU is judged, for the job user's processes only (SLURM_JOB_UID), and the finding says so.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import FrozenSet, Mapping, Optional, Tuple

ENV_KEYS = ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")
MAX_VALUE = 8192             # characters of one variable: 64 UUIDs of 40 characters fit many times over
MAX_GPUS = 256
_ENTRY = re.compile(r"[0-9]{1,4}\Z|(?:GPU|MIG)-[0-9A-Za-z/-]{1,96}\Z")
_UID = re.compile(r"[0-9]{1,10}\Z")


def device_list(value: str) -> Optional[Tuple[str, ...]]:
    """`0,1,2,3` or `GPU-<uuid>,...` (or MIG-...): the entries; None for anything else (ranges, spaces,
    other words, too long)."""
    if not value or len(value) > MAX_VALUE:
        return None
    entries = tuple(value.split(","))
    if len(entries) > MAX_GPUS or not all(_ENTRY.match(e) for e in entries):
        return None
    return entries


@dataclass(frozen=True)
class JobScope:
    job_id: str = ""                        # "": no job (a manual or maintenance check): all is judged
    gpus: Optional[FrozenSet[int]] = None   # the job's GPUs on this node (NVML indexes); None: every GPU
    uid: Optional[int] = None               # the job's user; None: every process
    source: str = ""                        # where the GPUs came from, or why they are not known
    uuids: FrozenSet[str] = frozenset()     # GPU UUIDs still to be matched against NVML's (`on`)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "JobScope":
        uid_text = env.get("SLURM_JOB_UID", "")
        uid = int(uid_text) if _UID.match(uid_text) and int(uid_text) < 2 ** 32 else None
        job_id = env.get("SLURM_JOB_ID", "")
        job_id = job_id if job_id.isdigit() and len(job_id) <= 20 else ("?" if job_id else "")
        unknown = cls(job_id, None, uid)
        lists = {k: device_list(env[k]) for k in ENV_KEYS if k in env}
        for key, entries in lists.items():
            if entries is None or (key == "SLURM_JOB_GPUS" and not all(e.isdigit() for e in entries)):
                return replace(unknown, source=f"{key} is not a GPU list")
        visible = lists.get("CUDA_VISIBLE_DEVICES") or ()
        if any(e.startswith("MIG-") for e in visible):
            return replace(unknown, source="CUDA_VISIBLE_DEVICES names MIG devices, which Slurm's indexes count")
        if visible and all(e.startswith("GPU-") for e in visible):
            return cls(job_id, None, uid, "CUDA_VISIBLE_DEVICES", frozenset(visible))
        indexes = lists.get("SLURM_JOB_GPUS") or visible
        if indexes and all(e.isdigit() for e in indexes):
            key = "SLURM_JOB_GPUS" if "SLURM_JOB_GPUS" in lists else "CUDA_VISIBLE_DEVICES"
            return cls(job_id, frozenset(int(e) for e in indexes), uid, key)
        if lists:
            return replace(unknown, source="CUDA_VISIBLE_DEVICES mixes GPU indexes and UUIDs")
        return replace(unknown, source=f"{' and '.join(ENV_KEYS)} not set")

    def on(self, node_gpus: Mapping[int, str]) -> "JobScope":
        """This scope on a node showing these GPUs (NVML index -> UUID): UUIDs become indexes; a job GPU
        the node does not show (a GPU gone from NVML shifts the indexes) makes the job's GPUs unknown."""
        if self.uuids:
            by_uuid = {u: i for i, u in node_gpus.items() if u}
            missing = sorted(self.uuids - set(by_uuid))
            if missing:
                return replace(self, uuids=frozenset(), source=f"{self.source} names {missing[0][:48]}, "
                                                               f"which this node does not show")
            return replace(self, gpus=frozenset(by_uuid[u] for u in self.uuids), uuids=frozenset())
        if self.gpus is None or self.gpus <= set(node_gpus):
            return self
        missing_index = min(self.gpus - set(node_gpus))
        shown = f"{min(node_gpus)}-{max(node_gpus)}" if node_gpus else "none"
        return replace(self, gpus=None, source=f"{self.source} names GPU {missing_index}, this node shows GPUs {shown}")

    def owns(self, gpu: int, uid: Optional[int]) -> bool:
        """Is a process (its real uid, None when unreadable) on GPU `gpu` this job's to answer for?
        (UUIDs not yet matched by `on`: every GPU.)"""
        return (self.gpus is None or gpu in self.gpus) and (self.uid is None or uid is None or uid == self.uid)

    def note(self) -> str:
        """For the finding: a job's epilog that could not tell its GPUs ("" when it could, or no job)."""
        if not self.job_id or self.gpus is not None:
            return ""
        whose = f", processes of uid {self.uid} only" if self.uid is not None else ""
        return f"job {self.job_id}: its GPUs here are not known ({self.source}): every GPU checked{whose}"
