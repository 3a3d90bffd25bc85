"""The requeue path: the whole job stops and starts again on a spare from the pool, from its latest
complete checkpoint. Every fault no other policy claims takes it (the batch host failed, a supervisor's
spares are used up, a job without a supervisor).

  quarantine  the failed nodes leave the job partitions and stay drained with their reason
  swap        the best healthy spares move from the pool into the job's partition (or an elastic job
              shrinks: min_nodes; or, with none free, the job is requeued held and waits)
  requeue     `scontrol requeue` at once (held when it must wait for a spare, or gives up)
  exclude     ExcNodeList += failed nodes (NumNodes lowered when an elastic job shrinks, N + K again
              for a job whose supervisor shrank it)
  start       StartTime=now once Slurm shows PENDING/BeginTime (or release when held)
  confirm     the job runs again on healthy nodes: the incident closes as recovered
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

from slurm_ft.fleet.recovery.policies.base import IncidentView
from slurm_ft.fleet.recovery.policies.common import (
    HELD_REASONS, PENDING_STATES, of_job, quarantined, reason_in, refill_size, swapped)
from slurm_ft.fleet.recovery.records import Incident, Step
from slurm_ft.job.ckptscan import HOLD_PREFIX
from slurm_ft.job.paths import REQUEUE
from slurm_ft.job.tag import FtSpec
from slurm_ft.slurm.types import Job
from slurm_ft.vocab import slurm_time


class RequeueSwap:
    path = REQUEUE
    phases: Mapping[str, str] = {
        "open": "incident", "quarantine": "quarantine", "swap": "swap", "requeue": "requeue",
        "exclude": "pending, exclude", "start": "start now", "confirm": "running",
    }

    supervised, closes_as = False, "recovered"

    def claims(self, job: Job, spec: Optional[FtSpec], failed: Sequence[str]) -> bool:
        return True                     # the fallback: whatever no other policy takes

    def gives_up(self, v: IncidentView, max_restarts: int) -> bool:
        return restarts_without_progress(v.inc, v.incidents, v.job) >= max_restarts

    def note(self, spec: FtSpec) -> str:
        return ""

    def advance(self, v: IncidentView) -> List[Step]:
        inc, job, spec, base, snap, policy = v.inc, v.job, v.spec, v.base, v.snap, v.policy
        max_restarts = spec.max_restarts if spec else 0
        giving_up = self.gives_up(v, max_restarts)
        if not quarantined(inc, snap, policy):
            return [Step("quarantine", **base, reason="out of the job partitions, drained with its reason")]
        if inc.note.startswith(HOLD_PREFIX):
            # its checkpoints could not be read as complete (or not in time): a restart would start from
            # scratch over them. Held until someone looks; released by hand, it is confirmed like any other.
            if not inc.done("hold"):
                return [Step("hold", **base, hold=True, reason=inc.note[len(HOLD_PREFIX):])]
            if job.running and restarted(inc, job) and not any(n in job.nodes for n in inc.nodes):
                return [Step("confirm", **base, reason=f"released by hand, running on {len(job.nodes)} nodes")]
            return []
        if giving_up:
            if not inc.done("requeue"):
                return [Step("requeue", **base, hold=True,
                             reason="held, gives up: " + give_up_reason(inc, v.incidents, max_restarts, job))]
            return [Step("give_up", **base, reason=give_up_reason(inc, v.incidents, max_restarts, job))]

        pool = v.pool
        # nodes that joined after the swap (plan._late_failures) want spares of their own
        joined_short = inc.done("swap") and not inc.shrink_to and len(inc.spares) < len(inc.nodes)
        if not swapped(inc, snap, policy) or joined_short:
            need = len(inc.nodes) - len(inc.spares)
            chosen = list(inc.spares)
            fresh = [s for s in pool if s not in chosen][:max(need, 0)]
            for s in fresh:
                pool.remove(s)
            chosen += fresh
            short = len(inc.nodes) - len(chosen)
            if short <= 0:
                return [Step("swap", **base, spares=tuple(chosen),
                             reason=f"{len(chosen)} spare(s) from {policy.spare_partition} into {inc.partition}")]
            if spec is not None and _can_shrink(inc, spec, short):
                size = inc.job_nodes - short
                return [Step("swap", **base, spares=tuple(chosen), num_nodes=size,
                             reason=f"pool short by {short}: shrink the job to {size} nodes (min_nodes "
                                    f"{spec.min_nodes})")]
            for s in fresh:  # not enough: take none, so the pool serves whoever can run
                pool.insert(0, s)
            pool.sort()
            if not inc.done("requeue"):   # the gang is dead anyway: stop it, held until a spare is free
                return [Step("requeue", **base, hold=True, reason="held until a spare is free")]
            if inc.status != "waiting":
                return [Step("wait", **base, reason=f"waiting for a spare: {policy.spare_partition} has "
                                                      f"{len(chosen)} healthy idle node(s), {len(inc.nodes)} needed")]
            return []

        # requeue: only a job still running on the fault needs it (Slurm may have requeued it already)
        if not inc.done("requeue"):
            return [Step("requeue", **base, reason="at once, without waiting for a collective timeout")]

        if job.running:
            if restarted(inc, job):
                if any(n in job.nodes for n in inc.nodes):
                    return [Step("poll", **base, reason="running again, but on a failed node")]
                return [Step("confirm", **base, reason=f"running on {len(job.nodes)} nodes")]
            return [Step("poll", **base, reason="requeue not seen by Slurm yet")]
        if job.state not in PENDING_STATES:
            return [Step("poll", **base, reason=f"job is {job.state}")]
        if not inc.done("exclude"):
            num_nodes = inc.shrink_to or refill_size(spec)
            return [Step("exclude", **base, num_nodes=num_nodes,
                         reason="exclude the failed nodes" + (f", NumNodes={num_nodes}" if num_nodes else ""))]
        if job.held or reason_in(job.reason, HELD_REASONS):
            return [Step("start", **base, hold=True, reason=f"release ({job.reason or 'held'}) and StartTime=now")]
        eligible = slurm_time(job.eligible_time)
        if job.reason == "BeginTime" or (eligible is not None and eligible > v.now + 1.0):
            wait = _completing(v)
            if wait:    # StartTime=now sent while the old run's epilogs run does not stick: say so, send it once after
                if not inc.note.startswith("waiting for Slurm"):
                    return [Step("note", **base, reason=wait)]
                return [Step("poll", **base, reason=wait)]
            # Only once Slurm shows the requeue finished: StartTime=now sent earlier does not stick.
            return [Step("start", **base, reason="StartTime=now: skip Slurm's requeue delay")]
        started = inc.step("start")
        waited = v.now - (started.done_at or started.intent_at) if started else 0.0
        if waited > policy.running_timeout_s and "not running after" not in inc.note:
            return [Step("note", **base, reason=f"not running after {waited:.0f} s: pending ({job.reason})")]
        return [Step("poll", **base, reason=f"pending ({job.reason})")]


def restarts_without_progress(inc: Incident, incidents: Sequence[Incident], job: Optional[Job] = None) -> int:
    """Earlier recoveries of this job that found the same latest checkpoint (no step saved since)."""
    return sum(1 for i in of_job(incidents, inc.job_id, job)
               if i.id < inc.id and i.status == "recovered" and i.ckpt_step == inc.ckpt_step)


def give_up_reason(inc: Incident, incidents: Sequence[Incident], max_restarts: int, job: Optional[Job]) -> str:
    n = restarts_without_progress(inc, incidents, job)
    where = f"checkpoint step {inc.ckpt_step}" if inc.ckpt_step is not None else "no checkpoint"
    return f"{n} restart(s) without progress ({where}), max_restarts={max_restarts}"


def restarted(inc: Incident, job: Job) -> bool:
    """The job runs again after the incident's requeue: its restart count moved if we requeued it;
    if Slurm had requeued it before us (the requeue step was skipped), running at all is enough."""
    requeue = inc.step("requeue")
    if requeue is not None and requeue.outcome == "ok":
        return job.restart_count > inc.restart_count
    return True


def _can_shrink(inc: Incident, spec: FtSpec, short: int) -> bool:
    return bool(spec.min_nodes and inc.job_nodes - short >= spec.min_nodes)


def _completing(v: IncidentView) -> str:
    """What Slurm is still finishing of the old run: its nodes' epilogs (COMPLETING in the job's
    partition), or "" when nothing (or when that has lasted past running_timeout_s: start anyway)."""
    inc, snap, now = v.inc, v.snap, v.now
    part = snap.partitions.get(inc.partition)
    if part is None:
        return ""
    busy = [n for n in part.nodes if n in snap.nodes and "COMPLETING" in snap.nodes[n].flags]
    if not busy:
        return ""
    requeue = inc.step("requeue")
    since = (requeue.done_at or requeue.intent_at) if requeue else inc.opened_at
    if now - since > v.policy.running_timeout_s:
        return ""
    return (f"waiting for Slurm to complete job {inc.job_id}'s old run: epilogs on {len(busy)} node(s), "
            f"COMPLETING since the requeue {now - since:.0f} s ago")
