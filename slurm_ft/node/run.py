"""One health run: pick the checks of a level, gather under a deadline, judge, and give a verdict.

The gather step runs in a worker thread with the level's deadline (`health.deadline_s`): an NVML call
that hangs in the driver (a wedged GPU does that) cannot hold up slurmd. On the deadline the run
reports an `error` finding "NVML call hung" and returns; the caller exits without waiting for the
thread (the CLI uses os._exit). A probe that raises becomes an `error` finding for its check, never a
drain. `healthy` means no `fail` finding, which is also the exit code: 0 healthy, 1 not.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.config import Config, HealthConfig, NodeType
from slurm_ft.errors import CommandError, ConfigError
from slurm_ft.node import drain as dr, levels, soft, state as st
from slurm_ft.node.gather import Reader, gather
from slurm_ft.node.jobscope import JobScope
from slurm_ft.node.probes import ProbeContext, get as get_probe, query_check
from slurm_ft.finding import Action, Finding, Severity
from slurm_ft.gpu.sample import NodeSample, XidEvent
from slurm_ft import vocab

if TYPE_CHECKING:
    from pathlib import Path

    from slurm_ft.slurm.api import SlurmApi
    from slurm_ft.slurm.types import Node

log = logging.getLogger(__name__)


@dataclass
class Report:
    node: str
    level: str
    findings: List[Finding]
    elapsed_s: float
    checks: Tuple[str, ...] = ()
    hung: bool = False
    node_type: str = "default"
    drain: Optional[Dict[str, str]] = None  # what --drain did (drain.Outcome.to_dict())
    planned: Optional[Dict[str, object]] = None  # what --drain did for a planned code (planned.Outcome.to_dict())
    sample: Optional[NodeSample] = field(default=None, repr=False)

    @property
    def healthy(self) -> bool:
        return not any(f.severity is Severity.FAIL for f in self.findings)

    @property
    def install_error(self) -> str:
        """slurm-ft's own install is broken (a package missing): exit 2, never a drain or a resume."""
        return next((f.reason for f in self.findings if f.code == "INSTALL_ERROR"), "")

    @property
    def exit_code(self) -> int:
        return 0 if self.healthy else 1

    def to_dict(self) -> Dict[str, object]:
        d: Dict[str, object] = {"node": self.node, "level": self.level, "healthy": self.healthy,
                                "elapsed_s": round(self.elapsed_s, 4), "node_type": self.node_type,
                                "findings": [f.to_dict() for f in self.findings]}
        if self.drain is not None:
            d["drain"] = self.drain
        if self.planned is not None:
            d["planned"] = self.planned
        return d


def node_type_for(node: str, hc: HealthConfig) -> "tuple[str, NodeType]":
    """The node type whose `node_type_of` pattern (hostlist expression or glob) names this node."""
    return hc.type_of(node)


# checks that judge NVML readings (the kernel-log Xids stay meaningful without NVML)
_NVML_JUDGED = frozenset(c for c, parts in levels.NVML_PARTS.items() if parts - {"identity"})
# what a node with no GPUs skips: those and the GPU count
GPU_CHECKS = _NVML_JUDGED | {"inventory"}


def judge(sample: NodeSample, checks: Sequence[str], ctx: ProbeContext) -> List[Finding]:
    """Run each check's probe on the sample; a crash is an error finding; silence is an ok line."""
    errors = sample.unread
    out: List[Finding] = []
    for check in checks:
        if sample.nvml_error and check in _NVML_JUDGED and check != "inventory":
            out.append(Finding(check, Severity.ERROR, "not checked: NVML unusable (see inventory)", "NOT_CHECKED"))
            continue
        if check in errors:
            out.append(Finding(check, Severity.ERROR, errors[check], "CHECK_ERROR"))
            continue
        try:
            found = list(get_probe(check)(sample, ctx))
        except Exception as exc:  # noqa: BLE001 - a probe bug must never drain a node
            log.debug("probe %s crashed", check, exc_info=True)
            found = [Finding(check, Severity.ERROR, f"probe crashed: {type(exc).__name__}: {exc}", "PROBE_ERROR")]
        found += _query_errors(sample, check)
        out.extend(found or [Finding(check, Severity.OK, "ok")])
    return out


def _judge_gpus_expected(sample: NodeSample, checks: Sequence[str], ctx: ProbeContext, node: str, type_name: str,
                         config: Config, env: Optional[Mapping[str, str]]) -> List[Finding]:
    """judge(), and where NVML is unusable, whether that is a fault: not on a node with no GPUs (a CPU,
    login or service node under the same HealthCheckProgram), which skips its GPU checks and says so in one
    line; an error, never a drain, where nobody can tell (node/expect.py)."""
    if not sample.nvml_error or sample.install_error or not GPU_CHECKS & set(checks):
        return judge(sample, checks, ctx)           # a GPU node whose NVML answers reads nothing more
    from slurm_ft.node import expect   # lazy: only a node without NVML asks
    verdict = expect.from_type(type_name, ctx.node_type.gpus)
    if verdict is None:
        paths = expect.conf_paths(os.environ if env is None else env, config.slurm.conf)
        verdict = expect.from_slurm(node, expect.read_slurm(node, paths))
    if verdict.gpus is False:
        skip = Finding("inventory", Severity.OK, verdict.skip_line(node), "NO_GPUS_EXPECTED")
        return [skip, *judge(sample, [c for c in checks if c not in GPU_CHECKS], ctx)]
    found = judge(sample, checks, ctx)
    if verdict.gpus is None:
        found = [Finding(f.check, Severity.ERROR, f"{f.reason}; {verdict.why}: not drained (name its node type "
                                                  f"in health.node_type_of)", "GPUS_UNKNOWN")
                 if f.code == "NVML_INIT" else f for f in found]
    return found


def _query_errors(sample: NodeSample, check: str) -> List[Finding]:
    """NVML answers other than not-supported/lost (no permission, ...): the check could not see; say so."""
    out = []
    for g in sample.gpus:
        for err in getattr(g, "errors", ()) or ():
            query = err.split(":", 1)[0]
            if query_check(query) == check:
                out.append(Finding(check, Severity.ERROR, f"NVML query failed: {err}", "NVML_QUERY_ERROR", g.index))
    return out


def run_level(level: str, node: str, config: Config, *, now: Optional[float] = None,
              reader: Optional[Reader] = None, xid_since: Optional[float] = None,
              xid_history: Optional[Mapping[Tuple[int, int], int]] = None, xid_untimed: bool = True,
              extra_xids: Sequence[XidEvent] = (), deadline_s: Optional[float] = None,
              progress: Optional[Callable[[int, int, str], None]] = None, job: Optional[JobScope] = None,
              env: Optional[Mapping[str, str]] = None) -> Report:
    """One level on this node. `job`: the job an epilog runs for (its GPUs and user, from the hook's
    environment); its leftover processes are the only ones the epilog judges. Other levels judge all.
    `env`: the hook's environment (default: this process's): where slurmd's slurm.conf is (SLURM_CONF)."""
    t0 = time.monotonic()
    now = time.time() if now is None else now
    hc = config.health
    levels.validate(hc, config.path or "config")
    checks = levels.checks_for(level, hc.levels)
    type_name, node_type = node_type_for(node, hc)
    deadline = deadline_s if deadline_s is not None else hc.deadline_s.get(level, 60.0)
    job = job if job is not None and level == "epilog" else JobScope()

    box: Dict[str, Any] = {}                # "sample": NodeSample, or "error": BaseException

    def work() -> None:
        try:
            box["sample"] = gather(node, checks, hc, node_type, level=level, now=now, reader=reader,
                                   extra_xids=extra_xids, progress=progress, job=job)
        except BaseException as exc:  # noqa: BLE001 - reported below as an error finding
            box["error"] = exc

    worker = threading.Thread(target=work, name=f"gather-{level}", daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        f = Finding("gather", Severity.ERROR, f"NVML call hung: no answer within {deadline:g} s "
                                              f"(a wedged GPU or driver; see `nvidia-smi`, dmesg)", "NVML_HUNG")
        return Report(node, level, [f], time.monotonic() - t0, checks, hung=True, node_type=type_name)
    if "error" in box:
        exc: BaseException = box["error"]
        log.debug("gather failed", exc_info=exc)
        f = Finding("gather", Severity.ERROR, f"could not read the node: {type(exc).__name__}: {exc}", "GATHER_ERROR")
        return Report(node, level, [f], time.monotonic() - t0, checks, node_type=type_name)
    sample: NodeSample = box["sample"]
    ctx = ProbeContext(node_type=node_type, thresholds=hc.thresholds, level=level, now=now,
                       xid_since=xid_since if xid_since is not None else now - hc.xid_lookback_s,
                       xid_untimed=xid_untimed,
                       ignore_processes=tuple(hc.ignore_processes), xid_history=xid_history or {}, job=job)
    # the node type's planned codes warn instead of failing: a planned swap, never a fault drain
    findings = soft.downgrade(_judge_gpus_expected(sample, checks, ctx, node, type_name, config, env), node_type.soft)
    return Report(node, level, findings, time.monotonic() - t0, checks, node_type=type_name, sample=sample)


def check_node(level: str, node: str, config: Config, *, drain: bool = False, client: Optional[SlurmApi] = None,
               job_id: Optional[str] = None, record: bool = True, reader: Optional[Reader] = None,
               extra_xids: Sequence[XidEvent] = (), progress: Optional[Callable[[int, int, str], None]] = None,
               now: Optional[float] = None, job: Optional[JobScope] = None,
               read_state: Optional[bool] = None, env: Optional[Mapping[str, str]] = None) -> Report:
    """A whole node check as the entry points use it: state file in, run, state file out, drain/resume.

    The prolog notes the job's start (the epilog then judges only Xids logged during the job) and the
    epilog keeps the per-GPU history of application Xids. `client` is a SlurmClient (only with drain).
    `job`: the epilog's job (jobscope.JobScope.from_env of the hook's environment), see run_level.
    `read_state` (default: `record`): read the state file without writing it (a user's look through
    the watcher: Xids acknowledged at a resume stay acknowledged). `env`: the hook's (see run_level).
    """
    now = time.time() if now is None else now
    path = st.path_for(config.health, node)
    before = st.load(path, node) if (record if read_state is None else read_state) else st.empty(node)
    xid_since = now - config.health.xid_lookback_s
    if level == "epilog" and job_id:
        started = st.job_start(before, job_id)    # this job's prolog here: on a shared node, not the last one's
        if started is not None:
            xid_since = started
    # Xids logged before somebody resumed a node slurm-ft had drained were dealt with (GPU reset, ...):
    # they stay in the kernel log until a reboot, but must not drain the node again
    xid_since = max(xid_since, float(before.get("xid_ack") or 0.0))
    report = run_level(level, node, config, now=now, reader=reader, xid_since=xid_since,
                       xid_untimed=not before.get("xid_ack"),   # an untimed line is older than a resume
                       xid_history=st.xid_history(before), extra_xids=extra_xids, progress=progress, job=job,
                       env=env)
    active: List[Finding] = []
    if report.hung:
        _count_hang(report, config, path, node, record)
    if record and not report.hung:
        try:
            with st.locked(path, node) as state:
                if level == "prolog" and job_id:
                    state["job"] = {"id": str(job_id), "start": now}
                    st.job_started(state, job_id, now)
                elif level == "epilog" and job_id:
                    st.job_ended(state, job_id)
                st.record(state, level, report.checks, report.findings, now,
                          job_id=job_id if level == "epilog" else None)
                if state.get("nvml_hangs"):
                    state["nvml_hangs"] = 0       # NVML answered: the hangs were not in a row
                active = st.active(state)
        except PermissionError as exc:
            log.warning("state file %s not written: %s", path, exc)
            active = st.active(before)
    else:
        active = st.active(before)
    if report.install_error:
        return report          # our install is broken: it saw nothing, so it drains and resumes nothing
    if drain and (not report.hung or not report.healthy):
        # one drain decision at a time per node (the HealthCheckProgram, `watch` and a manual check may
        # overlap): what the state says about our drain and what Slurm shows must not change in between
        with st.drain_lock(path) if record else contextlib.nullcontext():
            report = _drain_step(report, node, config, client, path, before, record, active, now)
        if record and report.healthy:
            _planned_step(report, node, config, client, now)
    return report


def _planned_step(report: Report, node: str, config: Config, client: Optional[SlurmApi], now: float) -> None:
    """A planned code found (the node type takes it by planned swap): the graceful drain the watcher's
    soft pass would make, so that it happens where no watcher runs too (node/planned.py: budgeted,
    at most one try per planned.RETRY_S)."""
    _, node_type = node_type_for(node, config.health)
    found = [f for f in report.findings if f.severity is Severity.WARN and f.code in node_type.soft.planned_codes]
    if not found or client is None:
        return
    from slurm_ft.node import planned   # lazy: only a node with a planned code; the hooks' start-up does not load it
    report.planned = planned.act(client, config, node, found, now, node_type.soft.planned_codes).to_dict()


def _count_hang(report: Report, config: Config, path: Path, node: str, record: bool) -> None:
    """One more hung NVML check in a row; at `health.nvml_hung_drain_after` the hang is a fail finding.

    A GPU degrading under load hangs NVML instead of answering with an error; one hang may be a blip.
    Without a writable state file the count cannot grow, so a hang only reports (fail safe)."""
    after = config.health.nvml_hung_drain_after
    if not record or after <= 0:
        return
    try:
        with st.locked(path, node) as state:
            state["nvml_hangs"] = hangs = int(state.get("nvml_hangs") or 0) + 1
    except (OSError, ConfigError) as exc:
        log.warning("hung NVML not counted (state file %s: %s)", path, exc)
        return
    if hangs >= after:
        report.findings.append(Finding("inventory", Severity.FAIL, f"NVML hung in {hangs} checks in a row "
                                       f"(a GPU degrading under load)", "NVML_HUNG", None, Action.REBOOT))


def _drain_step(report: Report, node: str, config: Config, client: Optional[SlurmApi], path: Path,
                before: Dict[str, Any], record: bool, active: List[Finding], now: float) -> Report:
    """Drain or resume the node for this run's findings (called under the node's drain lock): read what
    the decision needs, decide (`drain_plan`, pure), then write: the state file, Slurm, the state file."""
    state = _reload(path, node) if record else before
    assert client is not None       # --drain comes with a client (see check_node)
    believed = state.get("slurm_ft_drained")
    slurm_node = None
    if not _quiet(report.healthy, active, believed):
        try:
            slurm_node = client.node(node)
        except CommandError as exc:
            return _unreachable(report, exc)
    plan = drain_plan(report, state, slurm_node, active, config, now)
    report.findings = plan.findings
    if plan.acknowledged is not None:
        log.info("%s was resumed since slurm-ft drained it: Xids logged before %s are acknowledged",
                 node, plan.acknowledged)
        if record:
            try:
                with st.locked(path, node) as state:
                    state["xid_ack"] = plan.acknowledged
                    state["active"] = [st.finding_to_dict(f, report.level, now) for f in dr.fails(plan.findings)]
                    state["slurm_ft_drained"] = False
            except PermissionError as exc:
                log.warning("state file %s not written: %s", path, exc)
    if plan.decision is None:
        report.drain = {"action": "none", "message": f"{node} healthy (no slurm-ft drain outstanding)",
                        "reason": ""}
        return report
    if plan.decision.action == "left" and config.keeps_off(node):
        log.warning("keep_off: %s", plan.decision.message)     # once per check: the grep an operator runs
    try:
        outcome = dr.apply(client, node, plan.decision, config=config, now=now)
        report.drain = outcome.to_dict()
        if outcome.action == "drained":
            report.drain["at"] = f"{time.time():.3f}"     # when Slurm had it: what the jobs' and controller's latencies count from
    except CommandError as exc:
        return _unreachable(report, exc)
    if outcome.action == "drained" or (outcome.action == "reason_updated" and slurm_node is not None
                                       and vocab.planned(slurm_node.reason)):
        # a new drain, or a fault on a node out for a planned swap: its jobs move now, not at a checkpoint
        from slurm_ft.node import tell   # lazy: a new drain only; the hooks' start-up does not load it
        tell.after_drain(client, config, node, outcome.reason, st.running_jobs(state))
    ours_now = outcome.action in ("drained", "reason_updated", "kept") and vocab.owned(outcome.reason)
    if record and (ours_now or believed is not ours_now):
        try:
            with st.locked(path, node) as state:
                state["slurm_ft_drained"] = ours_now
                if ours_now:      # the last time slurm-ft saw its drain on the node (see drain_plan)
                    state["drained_seen"] = max(now, float(state.get("drained_seen") or 0.0))
        except PermissionError as exc:
            log.warning("state file %s not written: %s", path, exc)
    return report


@dataclass(frozen=True)
class DrainPlan:
    findings: List[Finding]          # the run's, judged again without acknowledged Xids where that applies
    acknowledged: Optional[float]    # a resume behind our back: Xids logged before this no longer count
    decision: Optional[dr.Outcome]   # what to ask of Slurm (drain.decide); None: nothing, no read needed


def drain_plan(report: Report, state: Mapping[str, Any], slurm_node: Optional[Node], active: List[Finding],
               config: Config, now: float) -> DrainPlan:
    """The node side's whole drain decision, pure over this run's report, the state file and Slurm's node
    (None only when the node is quiet: see _quiet).

    The node was resumed behind our back (an admin, the lifecycle sweep) after slurm-ft drained it: what
    made us drain it was dealt with. Xids logged before slurm-ft last saw its drain on the node no longer
    count (the sample is judged again without them), and findings left active by other levels are
    dropped: the level that can see them re-checks at its next run. An Xid logged later is new and counts."""
    believed = state.get("slurm_ft_drained")
    # the last time a check saw slurm-ft's drain on the node; 0: not known (then no Xid is acknowledged)
    seen = float(state.get("drained_seen") or 0.0)
    findings, acknowledged = report.findings, None
    if believed and report.sample is not None and slurm_node is not None and not slurm_node.drained:
        acknowledged = max(seen, float(state.get("xid_ack") or 0.0))
        findings = _without_xids_before(report, config, acknowledged, now)
        active = dr.fails(findings)
    if _quiet(not dr.fails(findings), active, believed):
        return DrainPlan(findings, acknowledged, None)
    assert slurm_node is not None    # _drain_step reads it whenever the node is not quiet
    # a check that started after this one saw our drain on the node: this run's healthy sample may
    # predate the fault it found, so it must not resume that drain
    hold = (f"a check started {seen - now:.1f} s after this one saw slurm-ft's drain"
            if believed and seen > now else "")
    return DrainPlan(findings, acknowledged,
                     dr.decide(slurm_node, findings, checks=report.checks, active=active,
                               auto_resume=config.health.auto_resume, hold=hold,
                               keep_off=config.keeps_off(slurm_node.name)))


def _quiet(healthy: bool, active: List[Finding], believed: object) -> bool:
    """Nothing wrong and no drain of ours outstanding: no need to ask Slurm (an RPC per node per
    interval spared)."""
    return healthy and not active and believed is False


def _unreachable(report: Report, exc: CommandError) -> Report:
    """Slurm did not answer: the verdict stands, the drain is reported failed."""
    report.drain = {"action": "error", "message": str(exc), "reason": dr.reason_text(report.findings)}
    return report


def _reload(path: Path, node: str) -> Dict[str, Any]:
    try:
        return st.load(path, node)
    except ConfigError:
        return {}


def _without_xids_before(report: Report, config: Config, since: float, now: float) -> List[Finding]:
    """The run's findings with its Xids judged again counting only those logged after `since`."""
    hc = config.health
    _, node_type = node_type_for(report.node, hc)
    ctx = ProbeContext(node_type=node_type, thresholds=hc.thresholds, level=report.level, now=now, xid_since=since,
                       xid_untimed=False, ignore_processes=tuple(hc.ignore_processes))
    assert report.sample is not None          # drain_plan acknowledges only a run that read the node
    xid_findings = judge(report.sample, ("xid",), ctx)
    merged: List[Finding] = []
    for f in report.findings:                 # keep the checks' order: xid lines where they were
        if f.check != "xid":
            merged.append(f)
        elif xid_findings:
            merged += xid_findings
            xid_findings = []
    return merged


def takes_the_node_out(report: Report, config: Config, node: str, drain: bool,
                       client: Optional[SlurmApi] = None) -> Tuple[bool, str]:
    """Does this report's fail verdict take the node out (the hooks' VERDICT line)? Only within the breaker:
    with --drain when this run drained it or keeps our drain; a manual check's verdict is for a person; a
    hook's asks the breaker; a node in keep_off is never taken out. The answer, and why not when it is not."""
    if config.keeps_off(node):      # a hook must not fail it either: Slurm would drain it for us
        return False, f"{node} is in keep_off: slurm-ft does not take it out"
    if drain:
        return (report.drain or {}).get("action") in ("drained", "reason_updated", "kept"), ""
    if report.level not in levels.HOOK_LEVELS:
        return True, ""
    from slurm_ft.breaker import guard  # lazy: hook start-up: only a hook's fail verdict asks the breaker
    decision = guard.hook_decision(config, node, client=client)
    return decision.allowed, "" if decision.allowed else decision.reason
