"""What the node's watcher answers a local user (query_socket.py), decided here, pure.

Any local user may ask; on a cluster that is someone with a job on the node. Each question is bounded
in what it reads, what it writes and how often a user may ask:

* levels: quick and prolog only. The epilog's leftover-process check reads every process on the node's
  GPUs (other users' pids and names); full and burnin take minutes of the node.
* writes: a look writes nothing (the node's state file is read, so an Xid acknowledged at a resume
  stays acknowledged, never written). A drain request is a check with --drain as the health check runs
  it (state file, the node's drain lock, the breaker), with two limits: it drains only on checks whose
  evidence no user can write (USER_DRAIN_CHECKS), and it never resumes a node.
* answers: the report of this node, with any `pid=`/`name=` token scrubbed (no check answered here
  names processes; this is the second line of that guarantee), and none of the watcher's log lines.
* rate: a token bucket per uid (BURST questions, then one every REFILL_S), at most PER_UID questions
  of one user in flight and MAX_IN_FLIGHT in all, one check at a time on the node (the watcher's lock,
  shared with its own checks and the hooks', the watcher's fault drain first in line), and a question
  answered from a cache for CACHE_S (a drain too: a drain request runs the check a drain does, and the
  watcher drains a fault it sees itself): users cannot make the node check itself more than once per
  CACHE_S and question, nor hold the socket from others.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Dict, Optional, Tuple

from slurm_ft.config import Config
from slurm_ft.node import levels

# Checks whose evidence no user can write: the kernel's own Xid lines (kernel-origin records of a log only
# root reads; a user's syslog line is "forged" and never counts) and NVML's hardware state (GPU present,
# ECC, row remapping, retired pages, PCIe link, the driver's recovery action, NVLink state). Not these:
# temperature and clock events (a user's load heats a GPU and brakes its clocks), disk (a user fills /tmp).
USER_DRAIN_CHECKS = frozenset({"inventory", "xid", "ecc", "remap", "retired", "pcie", "recovery_action", "nvlink"})

BURST = 10               # questions a user may ask at once ...
REFILL_S = 2.0           # ... then one every REFILL_S seconds
PER_UID = 2              # one user's questions in flight (each may wait for the node's check lock)
MAX_IN_FLIGHT = 8        # everyone's: each holds a thread of the watcher
CACHE_S = 2.0            # the same question is answered from the last check this long
MAX_UIDS = 4096          # users with a bucket; a full bucket is forgotten first

_TOKEN = re.compile(r"\b(pid|name)=[^\s,;\"')]+")


def checks_for_user(config: Config, level: str, drain: bool) -> Config:
    """The config a user's question runs with: for a drain, the level's checks narrowed to those whose
    evidence no user can write, and no resume (a user's request never puts a node back)."""
    if not drain:
        return config
    hc = config.health
    trusted = tuple(c for c in levels.checks_for(level, hc.levels) if c in USER_DRAIN_CHECKS)
    return replace(config, health=replace(hc, levels={**hc.levels, level: trusted}, auto_resume=False))


def scrub(text: str) -> str:
    """`text` with every `pid=...` and `name=...` value replaced by '-'."""
    return _TOKEN.sub(r"\1=-", text)


class Limits:
    """Who may ask now: a token bucket per uid and the questions in flight. Pure: the caller passes the time."""

    def __init__(self, burst: int = BURST, refill_s: float = REFILL_S, per_uid: int = PER_UID,
                 max_in_flight: int = MAX_IN_FLIGHT, max_uids: int = MAX_UIDS) -> None:
        self.burst, self.refill_s, self.per_uid = burst, refill_s, per_uid
        self.max_in_flight, self.max_uids = max_in_flight, max_uids
        self._buckets: Dict[int, Tuple[float, float]] = {}      # uid -> (tokens, at)
        self._in_flight: Dict[int, int] = {}

    def tokens(self, uid: int, now: float) -> float:
        tokens, at = self._buckets.get(uid, (float(self.burst), now))
        return min(float(self.burst), tokens + max(0.0, now - at) / self.refill_s)

    def admit(self, uid: int, now: float) -> str:
        """"" and the question counts (release it when answered), or why it is refused."""
        if sum(self._in_flight.values()) >= self.max_in_flight:
            return "busy: too many questions in flight"
        if self._in_flight.get(uid, 0) >= self.per_uid:
            return f"uid {uid} has {self.per_uid} questions in flight already"
        tokens = self.tokens(uid, now)
        if tokens < 1.0:
            return f"uid {uid} asked too often (one question every {self.refill_s:g} s after {self.burst})"
        self._forget_full(now)
        self._buckets[uid] = (tokens - 1.0, now)
        self._in_flight[uid] = self._in_flight.get(uid, 0) + 1
        return ""

    def release(self, uid: int) -> None:
        left = self._in_flight.get(uid, 0) - 1
        if left > 0:
            self._in_flight[uid] = left
        else:
            self._in_flight.pop(uid, None)

    def _forget_full(self, now: float) -> None:
        """Bound the table: a bucket that has refilled is the same as none."""
        if len(self._buckets) < self.max_uids:
            return
        for uid in [u for u in self._buckets if self.tokens(u, now) >= self.burst and u not in self._in_flight]:
            del self._buckets[uid]
        if len(self._buckets) >= self.max_uids:        # all busy or draining: the oldest goes
            del self._buckets[min(self._buckets, key=lambda u: self._buckets[u][1])]


class Cache:
    """The last answer per question (level, json, drain), for `ttl` seconds. Pure: the caller passes the time."""

    def __init__(self, ttl: float = CACHE_S) -> None:
        self.ttl = ttl
        self._answers: Dict[Tuple[str, bool, bool], Tuple[float, Dict[str, object]]] = {}

    def get(self, key: Tuple[str, bool, bool], now: float) -> Optional[Dict[str, object]]:
        hit = self._answers.get(key)
        if hit is None or not 0 <= now - hit[0] < self.ttl:
            return None
        return hit[1]

    def put(self, key: Tuple[str, bool, bool], reply: Dict[str, object], now: float) -> None:
        self._answers[key] = (now, reply)
