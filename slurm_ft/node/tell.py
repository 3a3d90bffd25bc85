"""After slurm-ft drained this node: tell the jobs running here, and wake the controller.

A fault drain tells them `failed`; a soft signal's graceful drain (node/planned.py) tells them `degraded`:
a hot-spare job then moves off this node at its next checkpoint.

Detection by event instead of polling (see docs/health.md, "Who hears of a drain"). Both are best effort:
a failure is logged and the drain stands; the controller's own poll and the job's backstop find it later.

* The jobs: every job running here gets one `scontrol notify` (one RPC each, from root: never
  rate-limited) with a `slurm-ft-event v1 failed NODE REASON` line (vocab.event_line). Which jobs run here
  is known without an RPC: those whose prolog ran here and epilog not yet (the state file), and those with
  a step here (slurmd's spool directory, where root's slurmstepd makes one socket per step,
  `<node>_<job>.<step>`, what `scontrol listpids` reads). Nothing a user can place in either. A GPU fault
  usually kills the rank, and the step with it, before the drain: the prolog's record is what remains.
* The controller: one munge-signed datagram (slurm_ft/wake.py); it then reads Slurm at once. A prolog
  that fails its node (Slurm drains it, not us) wakes it too, naming the job (`prolog_failed`).
"""
from __future__ import annotations

import logging
import os
import re
import socket
import stat
from typing import TYPE_CHECKING, Iterable, List, Mapping, Optional

from slurm_ft import wake
from slurm_ft.errors import SlurmFTError
from slurm_ft.slurm import parse
from slurm_ft.vocab import event_line

if TYPE_CHECKING:
    from slurm_ft.config import Config
    from slurm_ft.slurm.api import SlurmApi

log = logging.getLogger(__name__)

MAX_JOBS = 256                    # a node runs a handful; a spool dir with more is not what we think it is
_STEP_SOCKET = re.compile(r"(?P<node>.+)_(?P<job>\d{1,10})\.\d+(?:\.\d+)?")


def jobs_in_spool(spool_dir: str, node: str) -> List[int]:
    """Jobs with a step on `node`, from the step sockets in slurmd's spool directory (sorted, distinct)."""
    names = []
    try:
        with os.scandir(spool_dir) as it:
            for e in it:
                try:
                    if stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode):
                        names.append(e.name)
                except OSError:            # the step ended between the listing and the look
                    continue
    except OSError as exc:
        log.warning("cannot list the jobs on %s: %s: %s", node, spool_dir, exc.strerror or exc)
        return []
    jobs = set()
    for name in names:
        m = _STEP_SOCKET.fullmatch(name)
        if m and m.group("node") == node:
            jobs.add(int(m.group("job")))
    return sorted(jobs)[:MAX_JOBS]


def after_drain(client: SlurmApi, config: Config, node: str, reason: str, running: Iterable[int] = (),
                kind: str = "failed") -> List[int]:
    """Tell this node's jobs (`running`: the state file's, and those with a step here) and the controller
    that slurm-ft drained `node` (`kind`: failed, or degraded for a planned swap); the jobs told."""
    try:
        conf = client.running_config()
    except SlurmFTError as exc:
        log.warning("%s drained; jobs and controller not told (slurmctld's config unreadable: %s)", node, exc)
        return []
    told = []
    spool = parse.slurmd_spool_dir(conf, node, socket.gethostname().split(".")[0])
    for job in sorted({*running, *(jobs_in_spool(spool, node) if spool else [])})[:MAX_JOBS]:
        try:
            client.notify(job, event_line(kind, node, reason))
            told.append(job)
        except SlurmFTError as exc:       # the job ended meanwhile, or slurmctld is slow: its backstop sees it
            log.warning("job %s not told of %s's drain: %s", job, node, exc)
    _wake(config, conf, node)
    return told


def prolog_failed(client: SlurmApi, config: Config, node: str, job_id: int) -> None:
    """This node's prolog fails job `job_id`: wake the controller with the job's id. Slurm requeues the
    job held and forgets where it was to run; the controller learns it here."""
    try:
        conf = client.running_config()
    except SlurmFTError as exc:
        log.warning("prolog of job %s failed on %s; controller not woken (slurmctld's config unreadable: %s)",
                    job_id, node, exc)
        return
    _wake(config, conf, node, job_id)


def _wake(config: Config, conf: Mapping[str, str], node: str, prolog_job: Optional[int] = None) -> None:
    cc = config.controller
    host = cc.wake_host or parse.controller_host(conf)
    if cc.wake_port and host:
        try:
            wake.send(host, cc.wake_port, node, parse.munge_socket(conf), prolog_job)
        except (SlurmFTError, OSError) as exc:
            log.warning("controller at %s:%s not woken: %s", host, cc.wake_port, exc)
