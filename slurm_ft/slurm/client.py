"""SlurmClient: the one seam through which slurm-ft reads and changes Slurm.

Backend "commands": scontrol/sinfo/squeue/sbatch/scancel argv lists through `slurm_ft.runner.run`,
a timeout on every call, pure parsers in `parse.py`. Reads prefer JSON (unambiguous): `scontrol show
node|job --json` where the version has it (>= 23.02), `sinfo --json`/`squeue --json` on 22.05, and
fall back to `scontrol show ... -o` where --json is missing. What differs by version is decided in
`versions.py`, from the version asked once per client.

Input is checked before Slurm sees it: unknown nodes, malformed hostlists, partitions that do not
exist, and strings Slurm would mangle are refused with a UsageError that names the value. What
survives scontrol unchanged (tested against 22.05.8): quotes, `=`, `;`, `$`, backslashes, non-ASCII,
and long reasons (100 000 characters came back intact). What does not: a newline splits the record
in `scontrol show -o` and `sinfo -R`; so control characters are refused.
"""
from __future__ import annotations

import logging
import os
from dataclasses import replace
import re
import tempfile
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, TypeVar, Union

from slurm_ft.errors import CommandError, CommandTimeout, UsageError
from slurm_ft.slurm.api import NodeSpec, SlurmApi
from slurm_ft.slurm.types import Job, Node, Partition, Reservation
from slurm_ft.runner import Result, run
from slurm_ft.slurm import parse, versions
from slurm_ft.slurm.hostlist import compress, expand

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0
MAX_REASON_LEN = 1024   # ours, not Slurm's (22.05 has none): keeps `sinfo -R` and logs readable
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_FIELD_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+\Z")


class SlurmError(CommandError):
    """A Slurm command failed: `command` (argv), `returncode` (its exit status), `stderr`."""

    @property
    def command(self) -> List[str]:
        return self.argv


class SlurmTimeout(SlurmError):
    """A Slurm command ran past the client's timeout (slurmctld hung or unreachable) and was killed."""


class JobNotFound(UsageError):
    """The job id is not (or no longer) known to slurmctld."""


class SlurmClient:
    """Everything slurm-ft asks of Slurm, over the Slurm commands.

    env: variables laid over os.environ for every command (the lab passes SLURM_CONF here);
    timeout: seconds for each command (a hung slurmctld must not hang the caller).
    """

    backend = "commands"
    backend_reason = "the Slurm commands"

    def __init__(self, env: Optional[Mapping[str, str]] = None, timeout: float = DEFAULT_TIMEOUT_S,
                 conf: Optional[str] = None):
        self.env: Dict[str, str] = dict(env or {})
        if conf:
            self.env["SLURM_CONF"] = str(conf)
        self.timeout = float(timeout)
        self._version: Optional[Tuple[int, int, int]] = None
        self._json_ok = True
        self._expedite: Optional[bool] = None
        self._running_config: Optional[Dict[str, str]] = None

    # --- plumbing ------------------------------------------------------------------------------
    def _environ(self, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        if extra:
            env.update(extra)
        return env

    def _run(self, argv: Sequence[str], *, check: bool = True, input: Optional[str] = None,
             env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
             timeout: Optional[float] = None) -> Result:
        try:
            res = run(argv, timeout=timeout or self.timeout, input=input, env=self._environ(env), cwd=cwd,
                      check=False)
        except CommandTimeout as exc:
            raise SlurmTimeout(exc.argv, None, "", str(exc)) from None
        except CommandError as exc:          # the program is missing
            raise SlurmError(exc.argv, None, exc.stderr,
                             f"cannot run `{exc.argv[0]}`: is Slurm installed? (apt-get install -y slurm-wlm)") from None
        if check and res.returncode != 0:
            raise SlurmError(res.argv, res.returncode, res.stderr or res.stdout)
        return res

    def _parse(self, res: Result, parser: Callable[[str], T]) -> T:
        try:
            return parser(res.stdout)
        except ValueError as exc:
            raise SlurmError(res.argv, res.returncode, res.stderr,
                             f"`{' '.join(res.argv)}`: {exc}") from None

    def version(self) -> Tuple[int, int, int]:
        """Slurm's version, asked once per client (`scontrol --version`)."""
        if self._version is None:
            self._version = self._parse(self._run(["scontrol", "--version"]), parse.parse_version)
            warning = versions.untested_warning(self._version)
            if warning and self._version not in _WARNED:
                _WARNED.add(self._version)
                log.warning("%s", warning)
        return self._version

    def features(self) -> versions.Features:
        """What this Slurm offers slurm-ft (slurm_ft.slurm.versions), from the version asked once."""
        return versions.features(self.version())

    # --- reads ---------------------------------------------------------------------------------
    def nodes(self, names: Optional[NodeSpec] = None) -> List[Node]:
        """Nodes in Slurm's order, or the named ones in the order given; an unknown name -> UsageError.
        One name asks slurmctld for that node alone (`node`); any other selection reads every node once:
        Slurm has no multi-node filter (a hostlist is expanded and matched client side)."""
        wanted = _node_list(names) if names is not None else None
        if wanted is not None and len(wanted) == 1:
            return [self.node(wanted[0])]
        all_nodes = self.fleet_nodes(wanted)
        if wanted is None:
            return all_nodes
        by_name = {n.name: n for n in all_nodes}
        missing = [n for n in wanted if n not in by_name]
        if missing:
            raise UsageError(f"unknown node{'s' if len(missing) > 1 else ''}: {compress(missing)}")
        return [by_name[n] for n in wanted]

    def fleet_nodes(self, among: Optional[Iterable[str]] = None) -> List[Node]:
        """Every node (or those `among` them) from `scontrol show node -o`: one node-info RPC and no JSON
        to render; the same Nodes as the JSON reads on 22.05, 24.11 and 26.05
        (tests/unit/test_slurm_versions.py). `among`: only those records are parsed (a job's few nodes
        out of a fleet's thousands cost the parse of a few)."""
        res = self._run(["scontrol", "show", "node", "-o"])
        text = res.stdout if among is None else parse.records_of(res.stdout, "NodeName", set(among))
        return self._parse(replace(res, stdout=text), parse.parse_nodes_kv)

    def node(self, name: str) -> Node:
        """One node. `sinfo -n NAME` is the one read that asks slurmctld for a single node
        (REQUEST_NODE_INFO_SINGLE, plus the partition table); `scontrol show node NAME` packs every node.
        sinfo lists nodes by partition: a node in none (one the controller quarantined) is read from the
        whole table instead. Unknown -> UsageError."""
        names = _node_list(name)
        if len(names) != 1:
            raise UsageError(f"one node expected, got {name!r}")
        res = self._run(["sinfo", "-N", "-h", "-O", parse.sinfo_node_format(), "-n", names[0]])
        found = [n for n in self._parse(res, parse.parse_sinfo_nodes) if n.name == names[0]]
        if not found:
            found = self.fleet_nodes([names[0]])
        if not found:
            raise UsageError(f"unknown node: {names[0]}")
        return found[0]

    def _json_or_none(self, argv: List[str]) -> Optional[Result]:
        """Run a --json read; None (and -o from now on) when this Slurm has no --json (< 21.08).
        Any other failure (slurmctld down) is an error, not a reason to change parsers."""
        res = self._run(argv, check=False)
        if res.returncode == 0 and res.stdout.lstrip().startswith("{"):
            return res
        text = (res.stderr + res.stdout).lower()
        if "unrecognized option" in text or "invalid option" in text or "unknown option" in text \
                or (res.returncode == 0 and not res.stdout.lstrip().startswith("{")):
            self._json_ok = False
            return None
        raise SlurmError(res.argv, res.returncode, res.stderr or res.stdout)

    def jobs(self, job_ids: Optional[Iterable[int]] = None) -> List[Job]:
        """Jobs slurmctld still knows (pending, running, and finished within MinJobAge)."""
        jobs: List[Job] = []
        if self._json_ok:
            # scontrol lists every job slurmctld knows, as 22.05's squeue --json does (its filters ignored)
            argv = ["scontrol", "show", "job", "--json"] if self.features().scontrol_json else ["squeue", "--json"]
            res = self._json_or_none(argv)
            if res is not None:
                jobs = self._parse(res, parse.parse_jobs_json)
        if not self._json_ok:
            res = self._run(["scontrol", "show", "job", "-o"])
            jobs = self._parse(res, parse.parse_jobs_kv)
        if job_ids is None:
            return jobs
        wanted = [_job_id(j) for j in job_ids]
        by_id = {j.job_id: j for j in jobs}
        return [by_id[j] for j in wanted if j in by_id]

    def job(self, job_id: int) -> Job:
        """One job: `scontrol show job -o JID` asks slurmctld for that job alone (REQUEST_JOB_INFO_SINGLE;
        the JSON reads of 22.05 dump every job), and gives StdOut expanded on every version. Unknown (or
        long finished) -> JobNotFound."""
        jid = _job_id(job_id)
        res = self._run(["scontrol", "show", "job", "-o", str(jid)], check=False)
        if res.returncode != 0 and "invalid job id" in (res.stderr + res.stdout).lower():
            raise JobNotFound(f"job {jid} not found (unknown id, or finished more than MinJobAge ago)")
        if res.returncode != 0:
            raise SlurmError(res.argv, res.returncode, res.stderr or res.stdout)
        found = [j for j in self._parse(res, parse.parse_jobs_kv) if j.job_id == jid]
        if not found:
            raise JobNotFound(f"job {jid} not found (unknown id, or finished more than MinJobAge ago)")
        return found[0]

    def notify(self, job_id: int, message: str) -> None:
        """`scontrol notify JOB MESSAGE`: one RPC; the job's batch step prints the line on its stderr (its
        output file). The job's owner or root may send it."""
        jid = _job_id(job_id)
        if not message or len(message) > 1000 or _CONTROL_RE.search(message):
            raise UsageError(f"notify: a message of 1-1000 printable characters, got {message[:40]!r}")
        self._run(["scontrol", "notify", str(jid), message])

    def partitions(self, timeout: Optional[float] = None) -> List[Partition]:
        return self._parse(self._run(["scontrol", "show", "partition", "-o"], timeout=timeout),
                           parse.parse_partitions_kv)

    def partition(self, name: str, timeout: Optional[float] = None) -> Partition:
        parts = self.partitions(timeout)
        for p in parts:
            if p.name == name:
                return p
        raise UsageError(f"no partition {name!r} (partitions: {', '.join(p.name for p in parts) or 'none'})")

    def reservations(self) -> List[Reservation]:
        return self._parse(self._run(["scontrol", "show", "reservation", "-o"]), parse.parse_reservations_kv)

    # --- node changes --------------------------------------------------------------------------
    def drain(self, nodes: NodeSpec, reason: str) -> List[str]:
        """DRAIN the nodes with `reason`, which comes back from Slurm exactly as given."""
        names = _node_list(nodes)
        check_reason(reason)
        self.nodes(names)                    # unknown names -> UsageError before anything changes
        self._set_state(names, "DRAIN", reason)
        return names

    def resume(self, nodes: NodeSpec) -> List[str]:
        """Clear DRAIN/DOWN; returns the nodes that needed it. Others are left alone (Slurm refuses a
        whole RESUME call with one idle node in it). A resumed node shows NOT_RESPONDING (`IDLE*`)
        until its slurmd answers the next ping: that is not a reason to resume it again."""
        names = _node_list(nodes)
        for attempt in range(3):
            todo = [n.name for n in self.nodes(names) if _resumable(n)]
            if not todo:
                return []
            try:
                self._set_state(todo, "RESUME")
                return todo
            except SlurmError as exc:        # a node changed state between our read and the update
                if "Invalid node state" not in exc.stderr or attempt == 2:
                    raise
        return []

    def _set_state(self, names: List[str], state: str, reason: Optional[str] = None) -> None:
        """The one write of a node state (DRAIN with its reason, RESUME): what a backend changes."""
        self._run(["scontrol", "update", f"NodeName={compress(names)}", f"State={state}",
                   *([f"Reason={reason}"] if reason is not None else [])])

    def reboot(self, nodes: NodeSpec, reason: str) -> List[str]:
        """`scontrol reboot ASAP nextstate=DOWN reason=...`: drained now, rebooted once idle (Slurm runs
        RebootProgram), DOWN with `reason` when back, so that nothing lands on it before validation."""
        names = _node_list(nodes)
        check_reason(reason)
        self.nodes(names)
        self._run(["scontrol", "reboot", "ASAP", "nextstate=DOWN", f"reason={reason}", compress(names)])
        return names

    def update_node(self, name: str, **fields: object) -> None:
        """`scontrol update NodeName=name Key=Value...`, e.g. Comment="...", Weight=10."""
        self.nodes([name])
        if "Reason" in fields:
            check_reason(str(fields["Reason"]))
        self._run(["scontrol", "update", f"NodeName={name}", *_fields(fields)])

    def set_partition_nodes(self, partition: str, nodes: NodeSpec) -> None:
        """Replace the partition's node list (the spare swap); every node must exist.

        An empty list (or "") empties the partition (`Nodes=`, which Slurm accepts): the swap
        needs it when the last spare is taken."""
        names = [] if nodes == "" or (not isinstance(nodes, str) and not list(nodes)) else _node_list(nodes)
        self.partition(partition)
        if names:
            self.nodes(names)
        self._run(["scontrol", "update", f"PartitionName={partition}", f"Nodes={compress(names)}"])

    # --- job changes ---------------------------------------------------------------------------
    def requeue(self, job_id: int, hold: bool = False) -> None:
        """Kill the job now and queue it again (`scontrol requeue`, or `requeuehold` with hold=True).

        Slurm puts the requeued job behind a BeginTime of about 121 s; `start_now` clears that once
        the requeue has finished. From Slurm 25.11 a job submitted with `sbatch --requeue=expedite`
        is requeued by Slurm itself on node failure and is eligible at once, at top priority, which
        makes `start_now` unnecessary for such jobs (see `expedited_requeue_available`).
        """
        jid = _job_id(job_id)
        self._run(["scontrol", "requeuehold" if hold else "requeue", str(jid)])

    def expedited_requeue_available(self) -> bool:
        """`sbatch --requeue=expedite` is accepted here: Slurm >= 25.11 AND slurmctld runs with
        SlurmctldParameters=enable_expedited_requeue (without it Slurm refuses such a job). The running
        config is read once per client (`scontrol show config`)."""
        if self._expedite is None:
            params = self.running_config().get("SlurmctldParameters", "") if self.features().expedite else ""
            self._expedite = versions.expedite_enabled(self.version(), params)
        return self._expedite

    def running_config(self) -> Dict[str, str]:
        """slurmctld's running configuration (`scontrol show config`), read once per client.

        scontrol pings slurmctld after printing the configuration and exits 1 when that ping goes
        unanswered, which a loaded slurmctld does: a configuration it printed whole is still the one it
        answered with, so it is taken (with a warning)."""
        if self._running_config is None:
            res = self._run(["scontrol", "show", "config"], check=False)
            if res.returncode != 0 and not parse.config_before_failed_ping(res.stdout):
                raise SlurmError(res.argv, res.returncode, res.stderr or res.stdout)
            config = self._parse(res, parse.parse_config)
            if res.returncode != 0:
                log.warning("slurmctld sent its configuration but missed scontrol's closing ping (loaded?): "
                            "configuration taken")
            self._running_config = config
        return self._running_config

    def job_submit_plugins(self) -> List[str]:
        """slurmctld's JobSubmitPlugins (e.g. ["lua"]); [] where it runs none."""
        value = self.running_config().get("JobSubmitPlugins", "")
        return [p.strip() for p in value.split(",") if p.strip() and p.strip() != "(null)"]

    def requeue_option(self) -> str:
        """The sbatch option slurm-ft submits with: `--requeue=expedite` where the cluster allows it."""
        return "--requeue=expedite" if self.expedited_requeue_available() else "--requeue"

    def release(self, job_id: int) -> None:
        """Release a held job (after `requeuehold`, or a prolog failure). It still waits for its BeginTime."""
        self._run(["scontrol", "release", str(_job_id(job_id))])

    def update_job(self, job_id: int, **fields: object) -> None:
        """`scontrol update JobId=N Key=Value...`: StartTime="now", ExcNodeList=[...], Comment="..."."""
        self._run(["scontrol", "update", f"JobId={_job_id(job_id)}", *_fields(fields)])

    def shrink(self, job_id: int, keep: NodeSpec, timeout: Optional[float] = None) -> None:
        """Give a running job's other nodes back to Slurm: `scontrol update JobId=N NodeList=keep`.

        The owner may do it (no root). scontrol writes slurm_job_N_resize.{sh,csh} (the new SLURM_*
        values) into its working directory: run it in a directory of its own, not the job's."""
        names = _node_list(keep)
        with tempfile.TemporaryDirectory(prefix="slurm-ft-shrink-") as tmp:
            self._run(["scontrol", "update", f"JobId={_job_id(job_id)}", f"NodeList={compress(names)}"], cwd=tmp,
                      timeout=timeout)

    def submit(self, argv_or_script: Union[Sequence[str], str], *, env: Optional[Mapping[str, str]] = None,
               cwd: Optional[str] = None, timeout: Optional[float] = None) -> int:
        """sbatch: a list is sbatch options + script + its arguments (no shell); a string with a
        newline is a batch script given on stdin. env is laid over the client's environment."""
        if isinstance(argv_or_script, str):
            if "\n" not in argv_or_script:
                raise UsageError("submit: give an argv list, or a whole batch script (text with #!)")
            argv, stdin = ["sbatch", "--parsable"], argv_or_script
        else:
            argv, stdin = ["sbatch", "--parsable", *[str(a) for a in argv_or_script]], None
        if cwd is not None and not os.path.isdir(cwd):
            raise UsageError(f"submit: working directory {cwd} does not exist")
        res = self._run(argv, input=stdin, env=env, cwd=cwd, timeout=timeout)
        return self._parse(res, parse.parse_sbatch_parsable)

    def cancel(self, job_id: int, signal: Optional[str] = None) -> None:
        argv = ["scancel"]
        if signal:
            argv.append(f"--signal={signal}")
        self._run([*argv, str(_job_id(job_id))])

    def steps(self, job_id: int, name: Optional[str] = None, on: Sequence[str] = ()) -> List[int]:
        """The job's numbered steps now running (srun's; not batch, not extern), those named `name` alone
        when given (srun --job-name; squeue's --name does not select steps), those running on one of the
        nodes `on` alone when given: one REQUEST_JOB_STEP_INFO for this job alone."""
        jid = _job_id(job_id)
        res = self._run(["squeue", "--steps", f"--jobs={jid}", "--noheader", "--format=%i %N %j"])
        return parse.parse_step_ids(res.stdout, jid, name, on)

    def cancel_step(self, job_id: int, step: int) -> None:
        """`scancel JOB.STEP`: the step's tasks are killed, the job runs on."""
        if not isinstance(step, int) or step < 0:
            raise UsageError(f"bad step {step!r}")
        self._run(["scancel", f"{_job_id(job_id)}.{step}"])

    # --- reservations --------------------------------------------------------------------------
    def create_reservation(self, nodes: NodeSpec, *, name: Optional[str] = None, start: str = "now",
                           duration: str = "UNLIMITED", users: Sequence[str] = ("root",),
                           flags: Sequence[str] = ("MAINT", "IGNORE_JOBS")) -> str:
        """Reserve nodes (e.g. for repair or burn-in); returns the reservation's name."""
        names = _node_list(nodes)
        self.nodes(names)
        argv = ["scontrol", "create", "reservation"]
        if name:
            _check_value("reservation name", name)
            argv.append(f"ReservationName={name}")
        argv += [f"Nodes={compress(names)}", f"StartTime={start}", f"Duration={duration}",
                 f"Users={','.join(users)}"]
        if flags:
            argv.append(f"Flags={','.join(flags)}")
        res = self._run(argv)
        m = re.search(r"Reservation created:\s*(\S+)", res.stdout)
        if not m:
            raise SlurmError(res.argv, res.returncode, res.stdout, "scontrol did not name the reservation")
        return m.group(1)

    def delete_reservation(self, name: str) -> None:
        _check_value("reservation name", name)
        self._run(["scontrol", "delete", f"ReservationName={name}"])


_WARNED: Set[Tuple[int, int, int]] = set()     # versions already warned about in this process: one warning, not one per client


# --- input checks (pure) ----------------------------------------------------------------------------

def check_reason(reason: str) -> str:
    """A drain reason Slurm keeps exactly: non-empty, one line, no edge whitespace, bounded length."""
    if not isinstance(reason, str) or not reason.strip():
        raise UsageError("a drain reason is required (Slurm refuses DRAIN without one)")
    if _CONTROL_RE.search(reason):
        raise UsageError(f"drain reason {reason!r} contains a newline or control character; "
                         "Slurm would print it split across lines")
    if reason != reason.strip():
        raise UsageError(f"drain reason {reason!r} starts or ends with whitespace")
    if len(reason) > MAX_REASON_LEN:
        raise UsageError(f"drain reason is {len(reason)} characters; at most {MAX_REASON_LEN}")
    return reason


def _check_value(what: str, value: str) -> None:
    if _CONTROL_RE.search(value):
        raise UsageError(f"{what} {value!r} contains a newline or control character")


def _fields(fields: Mapping[str, object]) -> List[str]:
    if not fields:
        raise UsageError("nothing to update: give at least one Field=value")
    out = []
    for key, value in fields.items():
        if not _FIELD_RE.match(key):
            raise UsageError(f"bad Slurm field name {key!r}")
        if isinstance(value, (list, tuple, set, frozenset)):
            names = [str(v) for v in value]
            value = compress(names) if names else ""
        text = str(value)
        _check_value(key, text)
        out.append(f"{key}={text}")
    return out


def _node_list(nodes: NodeSpec) -> List[str]:
    """A hostlist string or names -> names (checked); an empty selection is an error."""
    if isinstance(nodes, str):
        names = expand(nodes)
    else:
        names = []
        for n in nodes:
            if not isinstance(n, str) or not _NAME_RE.match(n):
                raise UsageError(f"bad node name {n!r}")
            names.append(n)
    if not names:
        raise UsageError("no nodes given")
    return names


def _resumable(node: Node) -> bool:
    return node.drained or node.state in ("DOWN", "FAIL") or "FAIL" in node.flags


def _job_id(job_id: object) -> int:
    try:
        jid = int(str(job_id).strip())
    except ValueError:
        raise UsageError(f"bad job id {job_id!r}") from None
    if jid <= 0:
        raise UsageError(f"bad job id {job_id!r}")
    return jid


if TYPE_CHECKING:                        # mypy: this backend is a SlurmApi
    def _is_api(c: SlurmClient) -> SlurmApi:
        return c
