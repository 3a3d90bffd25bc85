"""Waiting on Slurm, for the lab, its tests and the benches: the product never waits on a condition in
a loop (it hears of events), so these live here, not in the client."""
from __future__ import annotations

import time
from typing import Callable, Iterable, List, Optional, TypeVar, Union

from slurm_ft.errors import CommandError, UsageError
from slurm_ft.slurm.api import SlurmApi
from slurm_ft.slurm.types import Job

T = TypeVar("T")


class WaitTimeout(CommandError):
    """A wait ran out of time; the message says what it waited for and what it saw."""

    def __init__(self, what: str, timeout: float, last: object = None):
        seen = f"; last seen: {last}" if last is not None else ""
        super().__init__(["wait"], None, "", f"{what}: not reached within {timeout:g} s{seen}")


def wait_for(predicate: Callable[[], Optional[T]], timeout: float, what: str = "condition",
             interval: float = 0.2) -> T:
    """Call predicate() until it returns something truthy; return that. WaitTimeout otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise WaitTimeout(what, timeout)
        time.sleep(interval)


def wait_job_state(client: SlurmApi, job_id: int, states: Union[str, Iterable[str]], timeout: float = 30.0) -> Job:
    wanted = {states} if isinstance(states, str) else set(states)
    what = f"job {job_id} in {'/'.join(sorted(wanted))}"
    seen: List[Job] = []

    def check() -> Optional[Job]:
        job = client.job(job_id)
        seen[:] = [job]
        return job if job.state in wanted else None

    try:
        return wait_for(check, timeout, what)
    except WaitTimeout:
        last = seen[0] if seen else None
        raise WaitTimeout(what, timeout, f"{last.state} ({last.reason})" if last else None) from None


def start_now(client: SlurmApi, job_id: int, timeout: float = 15.0) -> float:
    """After a requeue or release: wait until the job is PENDING on BeginTime, then StartTime=now
    (nothing to do when it is RUNNING again: Slurm's expedited requeue). Returns the seconds spent.

    StartTime=now set earlier does not stick: the requeue finishes asynchronously and then sets the
    begin time again."""
    t0 = time.monotonic()
    seen: List[Job] = []

    def on_begin_time() -> Optional[Job]:
        job = client.job(job_id)
        seen[:] = [job]
        if job.held:
            raise UsageError(f"job {job_id} is held ({job.reason}); release it first")
        # RUNNING: an expedited requeue (>= 25.11) is eligible at once and may have started already
        return job if job.state == "RUNNING" or job.state == "PENDING" and job.reason == "BeginTime" else None

    def begin_time_cleared() -> bool:
        job = client.job(job_id)
        return not (job.state == "PENDING" and job.reason == "BeginTime")

    try:
        job = wait_for(on_begin_time, timeout, f"job {job_id} pending on BeginTime")
    except WaitTimeout:
        last = seen[0] if seen else None
        raise WaitTimeout(f"job {job_id} pending on BeginTime", timeout,
                          f"{last.state} ({last.reason or 'no reason'})" if last else None) from None
    if job.state == "RUNNING":
        return time.monotonic() - t0
    for _ in range(5):                   # confirm it stuck: a late requeue step may reset it
        client.update_job(job_id, StartTime="now")
        try:
            wait_for(begin_time_cleared, 2.0, f"job {job_id} BeginTime cleared")
            return time.monotonic() - t0
        except WaitTimeout:
            continue
    raise WaitTimeout(f"job {job_id}: StartTime=now did not stick", time.monotonic() - t0)
