"""Pure parsers of what Slurm prints: `scontrol show ... -o`, `squeue --json`, `sinfo --json`, sbatch.

The JSON outputs (openapi v0.0.38 in 22.05) are unambiguous and preferred for nodes and jobs. The
`scontrol show X -o` one-liners are stable across versions but free text (Reason=, Comment=,
JobName=, Command= with arguments) may hold spaces and `=`; they are split only at the keys Slurm
itself prints (collected from real 22.05 output), so `Comment=ft=1 note="a b"` stays one value.
Every parser raises ValueError on input it cannot read; the client turns that into a SlurmError.
"""
from __future__ import annotations

import functools
import json
import re
import time
from dataclasses import replace
from typing import (Any, Callable, Collection, Dict, FrozenSet, Iterable, List, Mapping, Optional, Pattern, Sequence, Set,
                    Tuple)

from slurm_ft.errors import UsageError
from slurm_ft.slurm.types import Job, Node, Partition, Reservation
from slurm_ft.slurm.hostlist import expand

Json = Dict[str, Any]        # one object of Slurm's --json output: foreign data, read field by field

# Keys of `scontrol show node -o` in 22.05 (plus a few other versions print), in print order.
NODE_KEYS = frozenset("""
NodeName Arch CoresPerSocket CPUAlloc CPUEfctv CPUTot CPULoad AvailableFeatures ActiveFeatures Gres
GresDrain GresUsed NodeAddr NodeHostName Port Version OS RealMemory AllocMem FreeMem Sockets Boards
MemSpecLimit State ThreadsPerCore TmpDisk Weight Owner MCS_label Partitions BootTime SlurmdStartTime
LastBusyTime ResumeAfterTime CfgTRES AllocTRES CapWatts CurrentWatts AveWatts ExtSensorsJoules
ExtSensorsWatts ExtSensorsTemp Reason Comment Extra NextState InstanceId InstanceType CpuBind
CoreSpecCount CPUSpecList LowestJoules ConsumedJoules Features
ReservationName SuspendTime
""".split())

JOB_KEYS = frozenset("""
JobId ArrayJobId ArrayTaskId ArrayTaskThrottle JobName UserId GroupId MCS_label Priority Nice Account
QOS JobState Reason Dependency Requeue Restarts BatchFlag Reboot ExitCode DerivedExitCode RunTime
TimeLimit TimeMin SubmitTime EligibleTime AccrueTime StartTime EndTime Deadline SuspendTime
SecsPreSuspend LastSchedEval Scheduler Partition AllocNode:Sid ReqNodeList ExcNodeList NodeList
BatchHost NumNodes NumCPUs NumTasks CPUs/Task ReqB:S:C:T TRES Socks/Node NtasksPerN:B:S:C CoreSpec
MinCPUsNode MinMemoryNode MinMemoryCPU MinTmpDiskNode Features DelayBoot OverSubscribe Contiguous
Licenses Network Command WorkDir Comment AdminComment SystemComment StdErr StdIn StdOut Power
TresPerNode TresPerJob TresPerTask CpusPerTres MemPerTres TresBind TresFreq Reservation
MailUser MailType Prefer ReqNodes ExcNodes Nodes CPU_IDs Mem GRES KillOInInvalidDependent
CpusPerTask Container ContainerID HetJobId HetJobOffset HetJobIdSet Partitions
ReqTRES AllocTRES Exclusive LicensesAlloc SubmitLine ExpeditedRequeue
""".split())   # (last line: keys 24.11 and 26.05 add, from tests/data/slurm/<version>/)

# The same keys in the order Slurm prints them (slurm/src/api/job_info.c; 24.11 and 26.05 insert theirs): a job record's free text
# (JobName, Command, Comment, ...) is the user's, so the fields are told apart by this order too.
JOB_ORDER = tuple("""
JobId ArrayJobId ArrayTaskId ArrayTaskThrottle HetJobId HetJobOffset HetJobIdSet JobName UserId GroupId
MCS_label Priority Nice Account QOS JobState Reason Dependency Requeue Restarts BatchFlag Reboot ExitCode
DerivedExitCode RunTime TimeLimit TimeMin SubmitTime EligibleTime AccrueTime StartTime EndTime Deadline
SuspendTime SecsPreSuspend LastSchedEval Scheduler Partition Partitions AllocNode:Sid ReqNodeList
ExcNodeList NodeList BatchHost NumNodes NumCPUs NumTasks CPUs/Task CpusPerTask ReqB:S:C:T ReqTRES AllocTRES TRES Socks/Node
NtasksPerN:B:S:C CoreSpec Nodes CPU_IDs Mem GRES MinCPUsNode MinMemoryNode MinMemoryCPU MinTmpDiskNode
Features Prefer DelayBoot Reservation OverSubscribe Exclusive Contiguous Licenses LicensesAlloc Network Command SubmitLine WorkDir
AdminComment SystemComment Comment StdErr StdIn StdOut ExpeditedRequeue Power CpusPerTres MemPerTres TresBind TresFreq
TresPerJob TresPerNode TresPerTask MailUser MailType ReqNodes ExcNodes KillOInInvalidDependent Container
ContainerID
""".split())
JOB_FREE_TEXT = frozenset("JobName Command SubmitLine WorkDir AdminComment SystemComment Comment StdErr StdIn StdOut "
                          "Container".split())
_MAX_CANDIDATES = 1000    # ` Key=` spots in one record; more is not a record Slurm printed

PARTITION_KEYS = frozenset("""
PartitionName AllowGroups AllowAccounts AllowQos AllocNodes Default QoS DefaultTime DisableRootJobs
ExclusiveUser GraceTime Hidden MaxNodes MaxTime MinNodes LLN MaxCPUsPerNode Nodes PriorityJobFactor
PriorityTier RootOnly ReqResv OverSubscribe OverTimeLimit PreemptMode State TotalCPUs TotalNodes
SelectTypeParameters JobDefaults DefMemPerNode MaxMemPerNode TRES DenyAccounts DenyQos
MaxCPUsPerSocket PowerDownOnIdle ResumeTimeout SuspendTimeout SuspendTime TRESBillingWeights
ExclusiveTopo Exclusive
""".split())

RESERVATION_KEYS = frozenset("""
ReservationName StartTime EndTime Duration Nodes NodeCnt CoreCnt Features PartitionName Flags TRES
Users Groups Accounts Licenses State BurstBuffer Watts MaxStartDelay Comment
AllowedPartitions QOS
""".split())

# Node state suffixes of sinfo/scontrol short forms -> the flag they stand for.
STATE_SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "%": "POWERING_DOWN",
    "$": "MAINTENANCE", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED", "-": "PLANNED", "!": "POWER_DOWN",
}
# sinfo -o %T long names that fold a flag into the base state.
SINFO_STATES = {
    "alloc": ("ALLOCATED", ()), "allocated": ("ALLOCATED", ()), "mix": ("MIXED", ()), "mixed": ("MIXED", ()),
    "drained": ("IDLE", ("DRAIN",)), "drain": ("IDLE", ("DRAIN",)), "draining": ("ALLOCATED", ("DRAIN",)),
    "drng": ("ALLOCATED", ("DRAIN",)), "comp": ("IDLE", ("COMPLETING",)), "completing": ("IDLE", ("COMPLETING",)),
    "maint": ("IDLE", ("MAINTENANCE",)), "resv": ("IDLE", ("RESERVED",)), "reserved": ("IDLE", ("RESERVED",)),
    "unk": ("UNKNOWN", ()), "npc": ("ALLOCATED", ("NO_RESPOND",)),
}
_REASON_RE = re.compile(r"^(.*) \[([^@\]\s]*)@([^\]\s]*)\]$", re.S)
_NULLS = {"(null)", "N/A", "None", "Unknown", "n/a"}


# --- key=value one-liners --------------------------------------------------------------------------

_FIRST_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_:/]*=")


@functools.lru_cache(maxsize=8)
def _key_splitter(keys: FrozenSet[str]) -> Pattern[str]:
    """` Key=` for these keys: one regex split per line instead of a Python step per field (a controller
    reads every node's line each cycle)."""
    return re.compile(r"(\s)(" + "|".join(map(re.escape, sorted(keys))) + r")=")


def parse_kv_line(line: str, keys: Iterable[str]) -> Dict[str, str]:
    """Split a `scontrol show X -o` line at ` Key=` for the keys Slurm prints; values keep spaces.

    A field a newer Slurm adds (a key not in `keys`) stays inside the previous value: harmless for
    the fields slurm-ft reads, and the price of never splitting `Comment=a=b c=d` in two. The line's
    first word is a key whatever its name.
    """
    line = line.rstrip("\n")
    first = _FIRST_KEY.match(line)
    if first is None:
        raise ValueError(f"not a key=value line: {line[:80]!r}")
    # [value, gap, key, value, gap, key, value...]: a key's value runs to the next key, gap included
    parts = _key_splitter(keys if isinstance(keys, frozenset) else frozenset(keys)).split(line[first.end():])
    names = [first.group()[:-1], *parts[2::3]]
    values = parts[0::3]
    gaps = [*parts[1::3], ""]
    # fields are separated by one space, sometimes two (after CoresPerSocket=, Comment=); job lines end
    # in a space too; only a node's trailing Reason is kept verbatim
    out = {key: (value + gap).rstrip(" ") for key, value, gap in zip(names, values, gaps)}
    if names[-1] == "Reason":
        out["Reason"] = values[-1]
    return out


def parse_records(text: str, keys: Iterable[str],
                  parse_line: Optional[Callable[[str], Dict[str, str]]] = None) -> List[Dict[str, str]]:
    """One dict per record of `scontrol show X -o`. "No ... in the system" -> [].

    Records are split at newlines only (not at U+2028 and the other breaks str.splitlines knows, which
    free text may hold), and a line that does not start with the first record's first key continues
    the record before it (a newline inside a comment). A record name seen twice is refused (ValueError):
    a newline in one record's free text followed by `JobId=<another job>` would read as that job's record.
    """
    parse_line = parse_line or (lambda line: parse_kv_line(line, keys))
    lines: List[str] = []
    first = ""
    for line in text.split("\n"):
        if not first and (not line.strip() or line.startswith("No ") and " in the system" in line):
            continue
        if not first:
            first = line.split("=", 1)[0] + "="
        if line.startswith(first) or not lines:
            lines.append(line)
        else:
            lines[-1] += "\n" + line
    records = [parse_line(line) for line in lines if line.strip()]
    key = first[:-1]
    seen: Set[str] = set()
    for rec in records:
        name = rec.get(key)
        if name is not None:
            if name in seen:
                raise ValueError(f"{key}={name} twice in one read: a record forged in free text?")
            seen.add(name)
    return records


def parse_job_line(line: str, order: Tuple[str, ...] = JOB_ORDER,
                   free: FrozenSet[str] = JOB_FREE_TEXT) -> Dict[str, str]:
    """Split one `scontrol show job -o` record, whose free-text fields may hold ` Key=Value` text.

    Slurm prints each key once, in `order`; only free-text values may hold spaces (a key a newer Slurm
    adds may follow a value). Of the ways to split the line that respect this, the one that finds the
    most keys is the record: a comment holding ` JobState=RUNNING NodeList=gpu050` splits into fewer
    keys when read as fields than as text. Two best splits are ambiguous: ValueError (fail safe), as
    for a line no split explains but that holds some key twice.
    """
    rank = {k: i for i, k in enumerate(order)}
    line = line.rstrip("\n")
    cands = [(m.start(), m.end(), rank[m.group(1)])
             for m in re.finditer(r"(?:^|(?<= ))([A-Za-z][A-Za-z0-9_:/]*)=", line) if m.group(1) in rank]
    if not cands or cands[0][0] != 0 or order[cands[0][2]] != order[0]:
        raise ValueError(f"not a job record: {line[:80]!r}")
    if len(cands) > _MAX_CANDIDATES:
        raise ValueError(f"job record with {len(cands)} key-like fields: not read")
    n = len(cands)
    # best[i] = (keys found, ways) splitting line[cands[i][0]:] with cands[i] a key; ways capped at 2
    best: List[Tuple[int, int, int]] = [(0, 0, -1)] * n     # (count, ways, next candidate or n for the end)
    for i in range(n - 1, -1, -1):
        key_rank = cands[i][2]
        top, ways, nxt = 0, 0, -1
        for j in (range(i + 1, n + 1) if order[key_rank] in free else (i + 1,)):
            if j < n and (cands[j][2] <= key_rank or best[j][1] == 0):
                continue
            if order[key_rank] not in free and not _plain_value(line[cands[i][1]:cands[j][0] if j < n else len(line)], rank):
                continue
            count = 1 + (best[j][0] if j < n else 0)
            if count > top:
                top, ways, nxt = count, (best[j][1] if j < n else 1), j
            elif count == top:
                ways = min(2, ways + (best[j][1] if j < n else 1))
        best[i] = (top, ways, nxt)
    if best[0][1] == 0:
        return _unambiguous_fallback(line, cands, order)
    if best[0][1] > 1:
        raise ValueError(f"ambiguous job record (free text holds Slurm keys): {line[:80]!r}")
    out: Dict[str, str] = {}
    i = 0
    while i < n:
        j = best[i][2]
        key = order[cands[i][2]]
        value = line[cands[i][1]:cands[j][0] if j < n else len(line)].rstrip(" ")
        out[key] = value if key in free else value.split(" ")[0]
        i = j
    return out


def records_of(text: str, key: str, names: Collection[str]) -> str:
    """The records of `scontrol show X -o` output whose first field `key=` names one of `names`
    (continuation lines included), unparsed: what a caller wanting a few records out of thousands parses."""
    out: List[str] = []
    keep = False
    head = key + "="
    for line in text.split("\n"):
        if line.startswith(head):
            keep = line[len(head):].split(" ", 1)[0] in names
        if keep:
            out.append(line)
    return "\n".join(out) + ("\n" if out else "")


def _plain_value(value: str, rank: Dict[str, int]) -> bool:
    """A non-free-text value: one word, then only ` Key=word` of keys this parser does not know."""
    words = value.rstrip(" ").split(" ")
    return all(re.fullmatch(r"[A-Za-z][A-Za-z0-9_:/]*=\S*", w) and w.split("=", 1)[0] not in rank
               for w in words[1:])


def _unambiguous_fallback(line: str, cands: Sequence[Tuple[int, int, int]], order: Sequence[str]) -> Dict[str, str]:
    """A record the order does not explain (keys of another Slurm version): split at every key, but
    only when no key occurs twice (then no free text can have forged one)."""
    ranks = [c[2] for c in cands]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"job record that no field order explains and that repeats a key: {line[:80]!r}")
    return parse_kv_line(line, order)


def _val(d: Dict[str, str], key: str) -> str:
    v = d.get(key, "")
    return "" if v in _NULLS else v


def _free_text(d: Dict[str, str], key: str) -> str:
    """A field users write (Comment): only Slurm's own "(null)" means unset; "None" or "n/a" are theirs."""
    value = d.get(key, "")
    return "" if value == "(null)" else value


def _int(text: object, default: int = 0) -> int:
    try:
        return int(str(text).split("-")[0])
    except (TypeError, ValueError):
        return default


def _names(expr: str) -> Tuple[str, ...]:
    expr = expr.strip()
    if not expr or expr in _NULLS:
        return ()
    return tuple(expand(expr))


# --- node states --------------------------------------------------------------------------------

def parse_node_state(text: str) -> Tuple[str, FrozenSet[str]]:
    """`IDLE+DRAIN`, `MIXED+DRAIN+NOT_RESPONDING`, `DOWN*`, `drained*`, `idle~` -> (base, flags)."""
    raw = text.strip()
    if not raw:
        raise ValueError("empty node state")
    flags = set()
    while raw and raw[-1] in STATE_SUFFIX_FLAGS:
        flags.add(STATE_SUFFIX_FLAGS[raw[-1]])
        raw = raw[:-1]
    parts = [p for p in raw.split("+") if p]
    if not parts:
        raise ValueError(f"bad node state {text!r}")
    base = parts[0]
    if base.lower() in SINFO_STATES and not base.isupper():
        base, extra = SINFO_STATES[base.lower()]
        flags.update(extra)
    flags.update(p.upper() for p in parts[1:])
    base = base.upper()
    if base == "ALLOC":
        base = "ALLOCATED"
    if base == "MIX":
        base = "MIXED"
    return base, frozenset(flags)


def split_reason(text: str) -> Tuple[str, str, str]:
    """`why it drained [root@2026-11-29T16:28:44]` -> (reason, user, time)."""
    m = _REASON_RE.match(text)
    if not m:
        return text, "", ""
    return m.group(1), m.group(2), m.group(3)


# --- nodes ----------------------------------------------------------------------------------------

def _required(d: Dict[str, str], key: str) -> str:
    """The record's own name: a record without it is not Slurm's (ValueError, like any bad line)."""
    if key not in d:
        raise ValueError(f"record without {key}=: {' '.join(d)[:80]!r}")
    return d[key]


def node_from_kv(d: Dict[str, str]) -> Node:
    state, flags = parse_node_state(d.get("State", "UNKNOWN"))
    reason, user, when = split_reason(d.get("Reason", ""))
    return Node(
        name=_required(d, "NodeName"),
        state=state,
        flags=flags,
        reason=reason if reason not in _NULLS else "",
        reason_user=user,
        reason_time=when,
        partitions=tuple(p for p in _val(d, "Partitions").split(",") if p),
        gres=_val(d, "Gres"),
        cpus=_int(d.get("CPUTot")),
        real_memory_mb=_int(d.get("RealMemory")),
        comment=_val(d, "Comment"),
        addr=_val(d, "NodeAddr"),
    )


def parse_nodes_kv(text: str) -> List[Node]:
    """`scontrol show node -o` -> nodes."""
    return [node_from_kv(d) for d in parse_records(text, NODE_KEYS)]


# `sinfo -N -O` fields for one node (SlurmClient.node): sinfo with exactly one host asks slurmctld for
# that node alone. The two free-text fields come last, so a separator inside the reason cannot shift the others.
SINFO_NODE_FIELDS = ("NodeList", "StateComplete", "Timestamp", "User", "NodeAddr", "CPUs", "Memory", "Gres",
                     "Partition", "Comment", "Reason")
SINFO_SEP = "\x1f"     # ASCII unit separator: printed after every field


def sinfo_node_format() -> str:
    """The `-O` argument for SINFO_NODE_FIELDS (no width: sinfo pads nothing and cuts nothing)."""
    return ",".join(f"{f}:{SINFO_SEP}" for f in SINFO_NODE_FIELDS)


def parse_sinfo_nodes(text: str) -> List[Node]:
    """`sinfo -N -h -O <sinfo_node_format()>` -> nodes. sinfo prints a node once per partition: those
    rows are one Node with every partition (the default partition's `*` dropped). A node in no partition
    is not printed at all."""
    nodes: Dict[str, Node] = {}
    n_fields = len(SINFO_NODE_FIELDS)
    for line in text.split("\n"):
        if not line.strip():
            continue
        head = line.split(SINFO_SEP, n_fields - 2)
        if len(head) != n_fields - 1:
            raise ValueError(f"not a sinfo node row: {line[:80]!r}")
        comment, sep, reason = head[-1].partition(SINFO_SEP)   # the reason may hold anything but a newline
        if not sep or not reason.endswith(SINFO_SEP):
            raise ValueError(f"not a sinfo node row: {line[:80]!r}")
        reason = reason[:-len(SINFO_SEP)]
        name, state_text, when, user, addr, cpus, memory, gres, partition = (v.strip() for v in head[:-1])
        if not name or name in _NULLS:
            raise ValueError(f"sinfo row without a node name: {line[:80]!r}")
        state, flags = parse_node_state(state_text.upper())
        part = partition.rstrip("*")
        if name in nodes:
            old = nodes[name]
            if part and part not in old.partitions:
                nodes[name] = replace(old, partitions=old.partitions + (part,))
            continue
        if reason == "none" and when in ("Unknown", ""):     # what sinfo prints for no reason at all
            reason = ""
        nodes[name] = Node(
            name=name, state=state, flags=flags,
            reason=reason if reason not in _NULLS else "",
            reason_user=user if user not in _NULLS else "",
            reason_time=when if when not in _NULLS else "",
            partitions=(part,) if part and part not in _NULLS else (),
            gres=gres if gres not in _NULLS else "",
            cpus=_int(cpus), real_memory_mb=_int(memory),
            comment=comment if comment not in _NULLS else "",
            addr=addr if addr not in _NULLS else "",
        )
    return list(nodes.values())


def node_from_json(n: Json) -> Node:
    """One node of 22.05's `sinfo --json` (state a string, flags apart) or of the data_parser JSON of
    `scontrol show node --json` (>= 23.02: state a list, base state first, then its flags)."""
    state = n.get("state", "unknown")
    if isinstance(state, list):
        parts = [str(p).upper() for p in state] or ["UNKNOWN"]
        base, flags = parts[0], frozenset(parts[1:])
    else:
        base = str(state).upper()
        flags = frozenset(str(f).upper() for f in (n.get("state_flags") or ()))
    return Node(
        name=n["name"],
        state=base,
        flags=flags,
        reason=n.get("reason") or "",
        reason_user=n.get("reason_set_by_user") or "",
        reason_time=format_epoch(n.get("reason_changed_at")),
        partitions=tuple(n.get("partitions") or ()),
        gres=n.get("gres") or "",
        cpus=_number(n.get("cpus")),
        real_memory_mb=_number(n.get("real_memory")),
        comment=n.get("comment") or "",
        addr=n.get("address") or "",
    )


def parse_nodes_json(text: str) -> List[Node]:
    """`sinfo --json` (22.05) or `scontrol show node --json` (>= 23.02) -> nodes (every node: filter
    afterwards). The sinfo --json of >= 23.02 has no `nodes` list and is refused."""
    data = _load_json(text, "nodes")
    return [node_from_json(n) for n in data["nodes"]]


# --- jobs -----------------------------------------------------------------------------------------

def job_from_kv(d: Dict[str, str]) -> Job:
    reason = _val(d, "Reason")
    priority = _int(d.get("Priority"))
    return Job(
        job_id=int(_required(d, "JobId")),
        name=d.get("JobName", ""),
        state=d.get("JobState", "UNKNOWN"),
        reason=reason,
        user=d.get("UserId", "").split("(")[0],
        partition=_val(d, "Partition"),
        nodes=_names(d.get("NodeList", "")),
        num_nodes=_int(d.get("NumNodes")),
        excluded_nodes=_names(d.get("ExcNodeList", "")),
        comment=_free_text(d, "Comment"),
        admin_comment=_free_text(d, "AdminComment"),
        restart_count=_int(d.get("Restarts")),
        requeue=d.get("Requeue") == "1",
        held=_is_held(priority, reason, d.get("JobState", "")),
        command=_val(d, "Command"),
        work_dir=_val(d, "WorkDir"),
        std_out=_val(d, "StdOut"),
        submit_time=_val(d, "SubmitTime"),
        start_time=_val(d, "StartTime"),
        eligible_time=_val(d, "EligibleTime"),
        tres_per_node=_val(d, "TresPerNode"),
        batch_host=_val(d, "BatchHost"),
        exit_code=d.get("ExitCode", ""),
        priority=priority,
    )


def parse_jobs_kv(text: str) -> List[Job]:
    """`scontrol show job -o` -> jobs."""
    return [job_from_kv(d) for d in parse_records(text, JOB_KEYS, parse_job_line)]


def job_from_json(j: Json) -> Job:
    """One job of 22.05's `squeue --json` or of the data_parser JSON (>= 23.02: `scontrol show job
    --json`, `squeue --json`), where states are lists and numbers {"set", "infinite", "number"}."""
    # squeue prints state_description where Slurm set one: state_reason alone says JobHeldUser for
    # both a launch-failed requeue ("launch failed requeued held") and a requeuehold.
    reason = (j.get("state_description") or "").strip() or j.get("state_reason") or ""
    if reason == "None":
        reason = ""
    priority = _number(j.get("priority"))
    state = _job_state(j.get("job_state"))
    return Job(
        job_id=int(j["job_id"]),
        name=j.get("name") or "",
        state=state,
        reason=reason,
        user=j.get("user_name") or "",
        partition=j.get("partition") or "",
        nodes=_names(j.get("nodes") or ""),
        num_nodes=_number(j.get("node_count")),
        excluded_nodes=_names(j.get("excluded_nodes") or ""),
        comment=j.get("comment") or "",
        admin_comment=j.get("admin_comment") or "",
        restart_count=_number(j.get("restart_cnt")),
        requeue=bool(j.get("requeue")),
        held=_is_held(priority, reason, state) or (state in ("PENDING", "REQUEUE_HOLD") and j.get("hold") is True),
        command=j.get("command") or "",
        work_dir=j.get("current_working_directory") or "",
        std_out=j.get("standard_output") or "",
        submit_time=format_epoch(j.get("submit_time")),
        start_time=format_epoch(j.get("start_time")),
        eligible_time=format_epoch(j.get("eligible_time")),
        tres_per_node=j.get("tres_per_node") or "",
        batch_host=j.get("batch_host") or "",
        exit_code=_exit_code_json(j.get("exit_code")),
        priority=priority,
        base_state=_job_base_state(j.get("job_state")),
    )


# Job state flags that scontrol and 22.05's JSON print instead of the base state, in Slurm's own order
# (job_state_string()); the data_parser JSON lists them after the base state.
_JOB_STATE_FLAGS = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED",
                    "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING")


def _job_state(value: object) -> str:
    if not isinstance(value, list):
        return str(value or "UNKNOWN")
    parts = [str(p).upper() for p in value]
    for flag in _JOB_STATE_FLAGS:
        if flag in parts:
            return flag
    return parts[0] if parts else "UNKNOWN"


def _job_base_state(value: object) -> str:
    """The base state where Slurm lists it first (data_parser JSON), else "": a single word may be a flag
    standing in for it (22.05 prints COMPLETING for a requeued PENDING job and an ended one alike)."""
    if isinstance(value, list) and value:
        return str(value[0]).upper()
    return ""


def _number(value: Any, default: int = 0) -> int:
    """An int, or the data_parser's {"set": bool, "infinite": bool, "number": N} (unset -> default)."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return default
        value = value.get("number")
    if isinstance(value, bool) or value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"not a number: {str(value)[:40]!r}") from None


def parse_jobs_json(text: str) -> List[Job]:
    """`squeue --json` -> jobs (22.05 ignores squeue's filters with --json: filter afterwards)."""
    data = _load_json(text, "jobs")
    return [job_from_json(j) for j in data["jobs"]]


def _is_held(priority: int, reason: str, state: str) -> bool:
    # A held job is PENDING with priority 0 (JobHeldAdmin/JobHeldUser, or requeued held); from 25.11 a job
    # requeued held shows REQUEUE_HOLD until released.
    if state not in ("PENDING", "REQUEUE_HOLD"):
        return False
    return priority == 0 or reason.startswith("JobHeld") or "held" in reason.lower()


def _exit_code_json(value: Any) -> str:
    """22.05 JSON gives the raw wait status, the data_parser JSON {"return_code", "signal": {"id"}};
    print either as scontrol does: `exit:signal`."""
    if value is None or value == "":
        return ""
    if isinstance(value, dict):
        sig = value.get("signal") or {}
        return f"{_number(value.get('return_code'))}:{_number(sig.get('id') if isinstance(sig, dict) else 0)}"
    status = int(value)
    return f"{(status >> 8) & 0xFF}:{status & 0x7F}"


# --- partitions and reservations -----------------------------------------------------------------

def parse_partitions_kv(text: str) -> List[Partition]:
    out = []
    for d in parse_records(text, PARTITION_KEYS):
        out.append(Partition(
            name=_required(d, "PartitionName"),
            nodes=_names(d.get("Nodes", "")),
            state=d.get("State", "UP"),
            default=d.get("Default") == "YES",
        ))
    return out


def parse_reservations_kv(text: str) -> List[Reservation]:
    out = []
    for d in parse_records(text, RESERVATION_KEYS):
        out.append(Reservation(
            name=_required(d, "ReservationName"),
            nodes=_names(d.get("Nodes", "")),
            flags=frozenset(f for f in _val(d, "Flags").split(",") if f),
            start_time=_val(d, "StartTime"),
            end_time=_val(d, "EndTime"),
            state=_val(d, "State"),
        ))
    return out


# --- small outputs ---------------------------------------------------------------------------------

def parse_sbatch_parsable(text: str) -> int:
    """`sbatch --parsable` prints `JOBID` or `JOBID;CLUSTER` (possibly after warnings on stderr)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("sbatch printed no job id")
    first = lines[-1].split(";")[0]
    if not first.isdigit():
        raise ValueError(f"sbatch printed {lines[-1]!r}, not a job id")
    return int(first)


def parse_step_ids(text: str, job_id: int, name: Optional[str] = None, on: Collection[str] = ()) -> List[int]:
    """`squeue --steps --jobs=JID --noheader --format=%i %N %j` prints `JID.STEP NODELIST NAME` a line:
    the numbered steps (srun's), sorted, those named `name` alone when given, those running on one of
    the nodes `on` alone when given; `JID.batch`, `JID.extern` and anything else are not those. A step's
    name is its user's (srun --job-name): the rest of the line, compared whole, never parsed."""
    steps = set()
    for line in text.splitlines()[:10_000]:
        sid, _, rest = line.strip().partition(" ")
        nodelist, _, step_name = rest.partition(" ")
        job, sep, step = sid.partition(".")
        if not (sep and job == str(job_id) and step.isascii() and step.isdigit() and len(step) <= 10
                and (name is None or step_name.strip() == name)):
            continue
        if on and not _runs_on(nodelist, on):
            continue
        steps.add(int(step))
    return sorted(steps)


def _runs_on(nodelist: str, nodes: Collection[str]) -> bool:
    try:
        return not set(nodes).isdisjoint(expand(nodelist))
    except (UsageError, ValueError):     # not a hostlist: not a step we can place
        return False


def parse_version(text: str) -> Tuple[int, int, int]:
    """`slurm 22.05.8` / `slurm-wlm 22.05.8` -> (22, 5, 8)."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise ValueError(f"no version in {text.strip()[:60]!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def parse_config(text: str) -> Dict[str, str]:
    """`scontrol show config` -> {Key: value} (`Key = value` lines; other lines are skipped)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*(\[\d+\])?", key):
            out.setdefault(key, value.strip())
    if not out:
        raise ValueError("no `Key = value` lines in `scontrol show config`")
    return out


_PING_RE = re.compile(r"Slurmctld\((primary|backup\d*)\) at \S+ is (UP|DOWN)\Z")


def config_before_failed_ping(text: str) -> bool:
    """`scontrol show config` printed the whole configuration, then only its controllers' ping results,
    every one DOWN (its exit status 1): the configuration itself arrived."""
    lines = [ln.strip() for ln in text.splitlines()]
    if not lines or not lines[0].startswith("Configuration data as of "):
        return False
    pings = [m for m in map(_PING_RE.match, lines) if m]
    return bool(pings) and all(m.group(2) == "DOWN" for m in pings)


def munge_socket(config: Mapping[str, str]) -> Optional[str]:
    """The munge socket slurmctld authenticates with (`AuthInfo = socket=PATH,...`), or None: munge's default."""
    for part in config.get("AuthInfo", "").split(","):
        key, _, value = part.strip().partition("=")
        if key == "socket" and value:
            return value
    return None


def controller_host(config: Mapping[str, str]) -> str:
    """Where the primary slurmctld runs: `SlurmctldHost[0] = name(addr)` -> addr (else name); "" unknown."""
    m = re.fullmatch(r"\s*([^()\s]+)(?:\(([^()\s]+)\))?\s*", config.get("SlurmctldHost[0]", ""))
    return (m.group(2) or m.group(1)) if m else ""


def slurmd_spool_dir(config: Mapping[str, str], node: str, host: str) -> str:
    """SlurmdSpoolDir with slurmd's %n (node name) and %h (host name) filled in; "" when unset."""
    spool = config.get("SlurmdSpoolDir", "")
    if spool in _NULLS:
        return ""
    return spool.replace("%n", node).replace("%h", host)


def format_epoch(value: Any) -> str:
    """Epoch seconds -> local `YYYY-MM-DDTHH:MM:SS`, as scontrol prints; 0/None -> ""."""
    if value in (None, "", 0):
        return ""
    if isinstance(value, dict):                 # openapi >= 0.0.39: {"set":..., "number":...}
        if not value.get("set", True):
            return ""
        value = value.get("number", 0)
        if not value:
            return ""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(int(value)))


def _load_json(text: str, key: str) -> Json:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise ValueError(f"JSON without a {key!r} list")
    errors = data.get("errors") or []
    if errors:
        e = errors[0] if isinstance(errors[0], dict) else {"error": str(errors[0])}
        words = [str(e[k]) for k in ("description", "source", "error") if e.get(k)]
        hint = " (is slurmctld up? `scontrol ping`)" if "Unspecified" in str(e.get("error")) else ""
        raise ValueError(f"Slurm reported: {': '.join(words) or e}{hint}")
    return data
