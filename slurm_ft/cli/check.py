"""`slurm-ft check`: run one health level on this node; optionally drain/resume it through Slurm.

What slurmd runs on every node (HealthCheckProgram, prolog, epilog): argparse, not click (see cli/__init__).

Exit codes: 0 healthy, 1 a fail finding, 2 usage, config or install error (a Python package missing),
3 the drain/resume command failed. Error findings (a crashed probe, a hung NVML call) are reported and
never change the exit code.

The prolog/epilog hooks fail a job's node only on the positive signal VERDICT ("slurm-ft-verdict: FAIL
<reason>" on stdout): printed only when the check ran to a verdict with a node fault AND the breaker
lets the node go (`--drain`: this run drained it or keeps our drain; prolog/epilog: the fleet's drain
count, read then, has room: see slurm_ft.breaker.guard). Any other end (an import error, a
config error, a kill, a refused drain) has no such line and the hooks exit 0.
"""
from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from slurm_ft.vocab import LEVELS

if TYPE_CHECKING:          # annotations only: the hooks' start-up imports none of these
    import argparse
    from typing import Callable, Mapping, Optional, Sequence, TextIO, Tuple

    from slurm_ft.config import Config
    from slurm_ft.slurm.api import SlurmApi
    from slurm_ft.node.query_socket import Query
    from slurm_ft.node.run import Report

VERDICT = "slurm-ft-verdict: FAIL"


def own_validation_job(env: Mapping[str, str], reservation_prefix: str) -> bool:
    """A job of root in a slurm-ft maintenance reservation (only root creates reservations and submits
    as uid 0): the sweep's validation job. Read from what slurmd gives the prolog (22.05+)."""
    return env.get("SLURM_JOB_UID") == "0" and env.get("SLURM_JOB_RESERVATION", "").startswith(f"{reservation_prefix}-")


def node_name(explicit: "str | None", env: "Mapping[str, str] | None" = None) -> str:
    """--node, else $SLURMD_NODENAME (set by slurmd for every entry point), else the short hostname."""
    env = os.environ if env is None else env
    if explicit or env.get("SLURMD_NODENAME"):
        return explicit or env["SLURMD_NODENAME"]
    import socket  # lazy: only when slurmd did not name the node: socket costs import time
    return socket.gethostname().split(".")[0]


def parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    import argparse  # lazy: watch and gpu-reset import this module for node_name/answer only
    ap = argparse.ArgumentParser(
        prog="slurm-ft check", description="Check this node's GPUs and host at LEVEL and print the findings.",
        epilog="Exit: 0 healthy, 1 a fail finding, 2 usage/config/install error, 3 drain command failed. "
               '"slurm-ft-verdict: FAIL <reason>" on stdout: the node may be taken out (the prolog/epilog\'s signal).')
    ap.add_argument("--level", "-l", choices=LEVELS, default="quick",
                    help="Which checks: quick (HealthCheckProgram), prolog, epilog, full, burnin (default: quick).")
    ap.add_argument("--json", dest="as_json", action="store_true", help="Print one JSON object instead of text.")
    ap.add_argument("--drain", action="store_true",
                    help="Drain this node on a fail finding (reason 'slurm-ft: CODE gpuN ...'); resume it when "
                         "healthy again, only if slurm-ft drained it.")
    ap.add_argument("--node", metavar="NAME", help="Node name (default $SLURMD_NODENAME, else the hostname).")
    ap.add_argument("--job-id", metavar="ID", default=env.get("SLURM_JOB_ID"),
                    help="Job the prolog/epilog runs for (default $SLURM_JOB_ID).")
    ap.add_argument("--no-state", action="store_true",
                    help="Do not read or write the node state file (implied when not root: the file is root's).")
    ap.add_argument("--local", action="store_true",
                    help="Run the check in this process even where `slurm-ft watch` serves checks.")
    return ap


def run(argv: Sequence[str], config_path: "str | None" = None, unanswered: str = "") -> int:
    """`slurm-ft check ARGV` in this process: its exit status (argparse exits 2 itself on a usage error).
    `unanswered`: why the node's watcher did not answer this user's check (cli/__init__)."""
    code, hung = answer(argv, sys.stdout, sys.stderr, os.environ, config_path, unanswered=unanswered)
    sys.stdout.flush()
    sys.stderr.flush()
    if hung:
        os._exit(code)     # the gather thread is stuck inside the driver: leave without joining it
    return code


def answer(argv: Sequence[str], out: TextIO, err: TextIO, env: Mapping[str, str],
           config_path: "str | None" = None, load: "Callable[[str | None], Config] | None" = None,
           unanswered: str = "", on_report: "Callable[[Report], None] | None" = None) -> Tuple[int, bool]:
    """Run `check ARGV` with the hook's environment `env`, print to `out`/`err`: (exit status, whether
    an NVML call hung). Here for a hook's own process and for the watcher serving it (watch.py), which
    passes `load` (a ConfigCache's: the config parsed again only when it changed) and `on_report` (its
    textfile notes each check's end)."""
    args = parser(env).parse_args(argv)
    from slurm_ft.config import load_config  # lazy: hook start-up: yaml only once the arguments parsed
    from slurm_ft.node.levels import HOOK_LEVELS  # lazy: hook start-up: the probes only once the arguments parsed
    from slurm_ft.node.run import check_node, takes_the_node_out  # lazy: as above

    level, as_json, drain, job_id = args.level, args.as_json, args.drain, args.job_id
    config = (load or load_config)(config_path)
    name = node_name(args.node, env)
    if level == "prolog" and own_validation_job(env, config.lifecycle.maintenance_reservation):
        # the sweep's validation job judges the node itself, after the GPU reset the remediation asked
        # for: a prolog failing it first would leave nothing to reset and no verdict naming the findings
        print(f"{name}: slurm-ft validation job {job_id or '?'}: the job checks the node itself", file=out)
        return 0, False
    client: Optional[SlurmApi] = None
    if drain:
        from slurm_ft.slurm.backend import client_from_config  # lazy: hook start-up: only with --drain
        client = client_from_config(config)
    progress = _progress_bar() if level == "burnin" and err.isatty() and not as_json else None
    job = None
    if level == "epilog":
        from slurm_ft.node.jobscope import JobScope  # lazy: hook start-up: only the epilog judges a job's GPUs
        job = JobScope.from_env({**env, "SLURM_JOB_ID": job_id or ""})
    report = check_node(level, name, config, drain=drain, client=client, job_id=job_id,
                        record=not args.no_state and os.geteuid() == 0, progress=progress, job=job, env=env)
    if on_report is not None:
        on_report(report)
    if as_json:
        print(json.dumps(report.to_dict(), indent=None), file=out)
    else:
        _print_text(report, out)
    _say_blind(report, unanswered, err)
    code = report.exit_code
    if report.drain and report.drain.get("action") == "error":
        print(f"slurm-ft: error: drain failed: {report.drain['message']}", file=err)
        code = 3
    if report.install_error:
        print(f"slurm-ft: error: {report.install_error} (slurm-ft's install, not the node: nothing drained)",
              file=err)
        code = 2
    elif not report.healthy and not as_json:
        if report.level in HOOK_LEVELS and client is None:
            from slurm_ft.breaker.guard import hook_client  # lazy: hook start-up: only a failing hook asks Slurm
            client = hook_client(config)
        out_, why_not = takes_the_node_out(report, config, name, drain, client)
        if why_not:
            print(f"slurm-ft: error: fail finding reported, node not failed: {why_not}", file=err)
        if out_:
            from slurm_ft.node.drain import reason_text  # lazy: hook start-up: only on a fail verdict
            print(f"{VERDICT} {reason_text(report.findings)}", file=out)
            if level == "prolog" and job_id and job_id.isdigit() and client is not None:
                _wake_for_prolog(client, config, name, int(job_id), err)
    return code, report.hung


def _wake_for_prolog(client: SlurmApi, config: Config, node: str, job_id: int, err: TextIO) -> None:
    """The controller learns which node this job's run had before Slurm requeues it with none (best effort)."""
    from slurm_ft.errors import SlurmFTError  # lazy: only a failing prolog
    from slurm_ft.node import tell  # lazy: only a failing prolog
    try:
        tell.prolog_failed(client, config, node, job_id)
    except (SlurmFTError, OSError) as exc:   # the verdict stands; the controller's poll finds the job
        print(f"slurm-ft: warning: controller not woken: {exc}", file=err)


def _say_blind(report: Report, unanswered: str, err: TextIO) -> None:
    """A user's check that could not read the kernel log, run here because the watcher did not answer:
    it cannot see Xids, and says so (a check as root reads the log itself)."""
    if os.geteuid() == 0:
        return
    from slurm_ft.finding import Severity  # lazy: only a user's own run gets here
    if any(f.check == "xid" and f.severity is Severity.ERROR for f in report.findings):
        print(f"slurm-ft: warning: kernel log not readable as uid {os.geteuid()}; the node's watcher did not answer "
              f"({unanswered or 'not asked'}): this check cannot see Xids", file=err)


def answer_user(query: Query, out: TextIO, err: TextIO, config: Config, may_drain: bool = True) -> Tuple[int, bool]:
    """A local user's question (node/query_socket.py), answered by the watcher as root: the check at the
    query's level on this node, printed as the user's own `slurm-ft check` would print it. A look writes
    nothing; a drain is a check with --drain as the health check runs it, on node/query.py's terms
    (evidence no user can write, never a resume). No VERDICT line: that is the hooks' signal."""
    from slurm_ft.node import query as policy  # lazy: only the watcher answers users
    from slurm_ft.node.run import check_node  # lazy: the watcher has the probes loaded by now

    drain = query.drain and may_drain
    if query.drain and not may_drain:
        print("slurm-ft: this node's watcher drains nothing (`slurm-ft watch --no-drain`): looked only", file=err)
    client = None
    if drain:
        from slurm_ft.slurm.backend import client_from_config  # lazy: only a drain asks Slurm
        config = policy.checks_for_user(config, query.level, drain=True)
        client = client_from_config(config)
    report = check_node(query.level, query.node, config, drain=drain, client=client, record=drain, read_state=True)
    if query.json:
        print(json.dumps(report.to_dict(), indent=None), file=out)
    else:
        _print_text(report, out)
    code = report.exit_code
    if report.drain and report.drain.get("action") == "error":
        print(f"slurm-ft: error: drain failed: {report.drain['message']}", file=err)
        code = 3
    if report.install_error:
        print(f"slurm-ft: error: {report.install_error} (slurm-ft's install on this node's watcher)", file=err)
        code = 2
    return code, report.hung


_MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "error": "ERR "}


def _print_text(report: Report, out: TextIO) -> None:
    verdict = "healthy" if report.healthy else "UNHEALTHY"
    print(f"{report.node} {report.level}: {verdict} ({report.elapsed_s:.2f} s, node type {report.node_type})", file=out)
    for f in report.findings:
        gpu = f"gpu{f.gpu}" if f.gpu is not None else "-"
        action = f" -> {f.action.value}" if f.action.value != "none" else ""
        code = f" {f.code}" if f.code and f.severity.value != "ok" or f.code.startswith(("XID", "BURNIN_T")) else ""
        print(f"  {_MARK[f.severity.value]} {f.check:<11} {gpu:<5}{code} {f.reason}{action}", file=out)
    if report.drain:
        print(f"drain: {report.drain['action']}: {report.drain['message']}", file=out)


def _progress_bar() -> Callable[[int, int, str], None]:
    def show(done: int, total: int, msg: str) -> None:
        filled = int(40 * done / total) if total else 40
        print(f"\r\033[K[{'#' * filled:<40}] {msg}", end="\n" if msg == "done" else "", file=sys.stderr,
              flush=True)

    return show
