"""What a fault campaign (bench/chaos.py) checks after each fault: pure functions over one snapshot of the
lab (`World`) and the faults injected so far. Each broken invariant comes back as a `Violation` with its
evidence, in words a person can act on. `self_test()` plants one violation per invariant in a healthy
world and shows each is caught (a check that cannot fail is a defect).

The invariants (issue 40):
  runs_again          every job a fatal fault hit starts again and, in that run, steps past where it was at
                      the fault (its old ranks stepping on until Slurm kills them are not a recovery); a
                      fault on a job's idle hot spare stops no rank: the job steps on, STEPPING_ON_S later
  newest_checkpoint   ... resumed from the newest complete checkpoint written before it started again (at
                      the fault, or later by the ranks it did not hit): never older, never from scratch
  healthy_in_service  no node slurm-ft (or a hook's fail) took out that no fault of the campaign hit
  user_xid_no_drain   an application's Xid (13, 31, 43, ...) drains nothing
  pool_disjoint       no node both in a job partition and in the spare pool
  quarantine_out      a node quarantined by slurm-ft is in no partition (job or pool)
  one_incident        one incident per fatal fault on a job (a node of the run failing meanwhile joins
                      it), and none open past its settle time; a partition Slurm recovers from by itself
                      (it requeues the job, the node answers again) may have none: no node is faulty
  breaker_count       `slurm-ft breaker status` counts what Slurm shows
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.breaker import rules
from slurm_ft.slurm.parse import format_epoch
from slurm_ft.slurm.types import Job, Node

STEPPING_ON_S = 10.0        # a job whose idle hot spare failed still steps this long after the fault

INVARIANTS = ("runs_again", "newest_checkpoint", "healthy_in_service", "user_xid_no_drain", "pool_disjoint",
              "quarantine_out", "one_incident", "breaker_count")


@dataclass(frozen=True)
class Fault:
    id: int
    kind: str                       # xid79, xid79_pair, user_xid, partition_batch, ... (bench/chaos.py)
    t: float                        # when it was injected (epoch s)
    job_id: Optional[int]           # the job it hit, if any
    nodes: Tuple[str, ...]          # the nodes it hit
    fatal: bool                     # the job must be recovered (an application Xid: must not be)
    settle_s: float                 # by then its job runs again and its incident is closed
    repaired: bool = False          # its nodes were repaired and put back since (the campaign's doing)
    slurm_recovers: bool = False    # Slurm itself requeues the job (a partition of a job without --no-kill)
    restarts: bool = True           # the fault stops a rank: the job starts again (not so on an idle hot spare)


@dataclass(frozen=True)
class World:
    """The lab as read at `now`: Slurm's nodes, partitions and jobs, the journal's incidents (`slurm-ft
    incidents --json`), each job's training runs (slurm_ft_lab.trainer.runs, with their checkpoints and
    steps and times), the breaker's status (`slurm-ft breaker status --json`)."""
    now: float
    nodes: Mapping[str, Node]
    partitions: Mapping[str, Tuple[str, ...]]
    jobs: Mapping[int, Job]
    incidents: Sequence[Mapping[str, object]]
    steps: Mapping[int, Sequence[Tuple[float, int]]]      # job -> (t, step) of every training step logged
    ckpts: Mapping[int, Sequence[Tuple[float, int]]]      # job -> (t, step) of every complete checkpoint
    starts: Mapping[int, Sequence[Tuple[float, Optional[int]]]]   # job -> (t, resumed step or None) per start
    breaker: Mapping[str, object]
    spare_partition: str = "spares"
    job_partitions: Tuple[str, ...] = ("train",)
    window_s: float = 3600.0


@dataclass(frozen=True)
class Violation:
    invariant: str
    fault: Optional[int]            # the fault it is about, if one
    evidence: str


def check(world: World, faults: Sequence[Fault]) -> List[Violation]:
    """Every invariant over the world as it stands after `faults` (those whose settle time has passed)."""
    settled = [f for f in faults if world.now >= f.t + f.settle_s]
    out: List[Violation] = []
    for f in settled:
        if f.fatal and f.job_id is not None:
            out += _runs_again(world, f) + _one_incident(world, f, faults)
        if not f.fatal:
            out += _user_xid(world, f, faults)
    out += _healthy(world, faults) + _pool(world) + _quarantine(world) + _stuck(world, faults) + _breaker(world)
    return out


def _last_before(points: Sequence[Tuple[float, int]], t: float) -> Optional[int]:
    before = [s for at, s in points if at <= t]
    return max(before) if before else None


def _runs_again(w: World, f: Fault) -> List[Violation]:
    jid = f.job_id
    assert jid is not None
    was = _last_before(w.steps.get(jid, ()), f.t)
    restarts = [(t, r) for t, r in w.starts.get(jid, ()) if t > f.t]
    out = []
    if was is not None and not f.restarts and not restarts:
        later = [s for t, s in w.steps.get(jid, ()) if t > f.t + STEPPING_ON_S]
        if not later or max(later) <= was:
            out.append(Violation("runs_again", f.id, f"job {jid}: at step {was} at a fault on its idle spare, no "
                                                     f"step past it {STEPPING_ON_S:.0f} s later"))
    elif was is not None:
        after = [s for t, s in w.steps.get(jid, ()) if restarts and t > restarts[0][0]]
        if not after or max(after) <= was:
            since = "it never started again" if not restarts else (
                "no step since it started again" if not after else f"last step {max(after)} since it started again")
            out.append(Violation("runs_again", f.id, f"job {jid}: at step {was} at the fault, {since}"))
    if restarts:
        t, resumed = restarts[0]
        # the newest before it started again: ranks the fault did not hit may checkpoint on until Slurm stops them
        newest = _last_before(w.ckpts.get(jid, ()), t)
        if newest is not None and resumed != newest:
            out.append(Violation("newest_checkpoint", f.id, f"job {jid}: newest complete checkpoint when it "
                                                          f"started again was step {newest}; it started from "
                                                          f"{'scratch' if resumed is None else f'step {resumed}'}"))
    return out


def _faulted_out(faults: Sequence[Fault]) -> Dict[str, int]:
    """Nodes a fatal fault hit and the campaign has not repaired since: slurm-ft may keep them out."""
    return {n: f.id for f in faults if f.fatal and not f.repaired for n in f.nodes}


def _ours(node: Node) -> bool:
    reason = node.reason.strip()
    return (node.drained or node.down) and (reason.startswith("slurm-ft") or reason in rules.HOOK_FAULT_REASONS)


def _healthy(w: World, faults: Sequence[Fault]) -> List[Violation]:
    expected = _faulted_out(faults)
    return [Violation("healthy_in_service", None, f"{n.name} is out ({n.state}, {n.reason!r}) and no fault of "
                                                  f"the campaign hit it")
            for n in w.nodes.values() if _ours(n) and n.name not in expected]


def _user_xid(w: World, f: Fault, faults: Sequence[Fault]) -> List[Violation]:
    hit = _faulted_out(faults)
    return [Violation("user_xid_no_drain", f.id, f"{n}: drained after an application's Xid ({w.nodes[n].reason!r})")
            for n in f.nodes if n in w.nodes and _ours(w.nodes[n]) and n not in hit]


def _pool(w: World) -> List[Violation]:
    pool = set(w.partitions.get(w.spare_partition, ()))
    both = sorted(n for p in w.job_partitions for n in w.partitions.get(p, ()) if n in pool)
    return [Violation("pool_disjoint", None, f"{n} is in {w.spare_partition} and a job partition") for n in both]


def _quarantine(w: World) -> List[Violation]:
    return [Violation("quarantine_out", None, f"{n.name} is quarantined ({n.reason!r}) and in "
                                              f"{', '.join(p for p, ns in w.partitions.items() if n.name in ns)}")
            for n in w.nodes.values() if n.drained and "QUARANTINED" in n.reason
            and any(n.name in ns for ns in w.partitions.values())]


def _incidents_of(w: World, f: Fault) -> List[Mapping[str, object]]:
    return [i for i in w.incidents if i.get("job_id") == f.job_id and float(str(i.get("opened_at", 0))) >= f.t - 1
            and set(f.nodes) & set(_nodes_of(i))]


def _nodes_of(inc: Mapping[str, object]) -> List[str]:
    nodes = inc.get("nodes", [])
    return [str(n) for n in nodes] if isinstance(nodes, (list, tuple)) else []


def _one_incident(w: World, f: Fault, faults: Sequence[Fault]) -> List[Violation]:
    mine = _incidents_of(w, f)
    if len(mine) == 1 and set(f.nodes) <= set(_nodes_of(mine[0])):
        return []
    if not mine and f.slurm_recovers and all(n in w.nodes and not _ours(w.nodes[n]) for n in f.nodes):
        return []      # Slurm's own requeue, the node back in service: nothing for slurm-ft to do
    named = "; ".join(f"#{i.get('id')} {','.join(_nodes_of(i))} {i.get('status')}" for i in mine) or "none"
    return [Violation("one_incident", f.id, f"job {f.job_id}, fault on {','.join(f.nodes)}: incidents {named}")]


def _stuck(w: World, faults: Sequence[Fault]) -> List[Violation]:
    longest = max((f.settle_s for f in faults), default=600.0)
    def age(i: Mapping[str, object]) -> float:
        return w.now - float(str(i.get("opened_at", w.now)))
    return [Violation("one_incident", None, f"incident #{i.get('id')} of job {i.get('job_id')} open "
                                            f"{age(i):.0f} s ({i.get('status')})")
            for i in w.incidents if i.get("closed_at") is None and age(i) > longest]


def _breaker(w: World) -> List[Violation]:
    fleet = rules.view(list(w.nodes.values()), w.now)
    slurm_count = len({n for n, t in fleet.out if w.now - t <= w.window_s})
    said = w.breaker.get("drains_in_window")
    if said is None or int(str(said)) == slurm_count:
        return []
    out = sorted(n for n, t in fleet.out if w.now - t <= w.window_s)
    return [Violation("breaker_count", None, f"breaker status counts {said}; Slurm shows {slurm_count} "
                                             f"({', '.join(out) or 'none'})")]


# --- the self-test -------------------------------------------------------------------------------

def _healthy_world(now: float = 10_000.0) -> Tuple[World, List[Fault]]:
    """Job 7 on n1-n3; a fatal fault on n2 at t=1000, recovered: n2 quarantined and out, spare s1 in."""
    names = ["n1", "n2", "n3", "n4", "s1", "s2"]
    nodes = {n: Node(n, "ALLOCATED" if n in ("n1", "n3", "s1") else "IDLE") for n in names}
    nodes["n2"] = Node("n2", "IDLE", frozenset({"DRAIN"}), reason="slurm-ft: QUARANTINED XID79 gpu3 fell off",
                       reason_time=format_epoch(1000))      # drained at the fault, out of the breaker's window
    parts = {"train": ("n1", "n3", "n4", "s1"), "spares": ("s2",)}
    job = Job(7, "train", "RUNNING", nodes=("n1", "n3", "s1"), restart_count=1)
    fault = Fault(1, "xid79", 1000.0, 7, ("n2",), fatal=True, settle_s=300.0)
    world = World(now=now, nodes=nodes, partitions=parts, jobs={7: job},
                  incidents=[{"id": 1, "job_id": 7, "nodes": ["n2"], "status": "recovered", "opened_at": 1000.5,
                              "closed_at": 1010.0}],
                  steps={7: [(990.0, 40), (999.0, 44), (1015.0, 41), (1100.0, 90)]},
                  ckpts={7: [(950.0, 35), (995.0, 40)]}, starts={7: [(900.0, None), (1012.0, 40)]},
                  breaker={"drains_in_window": 0}, window_s=3600.0)
    return world, [fault]


def self_test() -> List[Tuple[str, bool, str]]:
    """(invariant, caught, evidence) for one planted violation of each invariant; the healthy world first."""
    world, faults = _healthy_world()
    results = [("(healthy world)", not check(world, faults), "; ".join(v.evidence for v in check(world, faults)))]
    planted: Dict[str, Tuple[World, List[Fault]]] = {
        "runs_again": (replace(world, steps={7: [(990.0, 40), (999.0, 44), (1005.0, 46), (1015.0, 41)]}), faults),
        "newest_checkpoint": (replace(world, starts={7: [(900.0, None), (1012.0, 35)]}), faults),
        "healthy_in_service": (replace(world, nodes={**world.nodes, "n4": Node("n4", "IDLE", frozenset({"DRAIN"}),
                                                                             reason="slurm-ft: XID79 gpu1 x")}),
                               faults),
        "user_xid_no_drain": (replace(world, nodes={**world.nodes, "n4": Node("n4", "IDLE", frozenset({"DRAIN"}),
                                                                            reason="slurm-ft: XID13 gpu1 x")}),
                              faults + [Fault(2, "user_xid", 2000.0, 7, ("n4",), fatal=False, settle_s=60.0)]),
        "pool_disjoint": (replace(world, partitions={**world.partitions, "spares": ("s2", "s1")}), faults),
        "quarantine_out": (replace(world, partitions={**world.partitions, "train": ("n1", "n2", "n3", "n4", "s1")}),
                           faults),
        "one_incident": (replace(world, incidents=list(world.incidents) + [
            {"id": 2, "job_id": 7, "nodes": ["n2"], "status": "recovered", "opened_at": 1003.0, "closed_at": 1020}]),
            faults),
        "breaker_count": (replace(world, breaker={"drains_in_window": 3}), faults),
    }
    for name in INVARIANTS:
        w, fs = planted[name]
        caught = [v for v in check(w, fs) if v.invariant == name]
        results.append((name, bool(caught), caught[0].evidence if caught else "NOT CAUGHT"))
    return results


__all__ = ["INVARIANTS", "Fault", "World", "Violation", "check", "self_test"]
