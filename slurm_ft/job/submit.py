"""What `slurm-ft sbatch` submits: pure parsing of its command line and the job starter it generates.

The job Slurm runs is a small generated Python starter (``slurm_ft.job.jobstart``); the user's
SCRIPT and ARGS travel as sbatch's trailing arguments, i.e. as an argv array stored in the job. No shell
of ours ever sees them, so quotes, ``$()``, ``;``, backticks and newlines reach the job unchanged.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.errors import UsageError
from slurm_ft.job.tag import DEFAULT_MAX_RESTARTS, LIMITS, FtSpec, encode

PLACEHOLDER = "{ckpt}"

# sbatch 22.05 options that REQUIRE a value (so `--opt value` consumes the next word). Options whose value
# is optional (--exclusive, --nice, --propagate, --get-user-env) take it only as `--opt=value`, exactly as
# sbatch's getopt_long does, so they are flags here.
SHORT_WITH_VALUE = set("aAbcdDeiJLMmnNopqStwxBCFG")
SHORT_FLAGS = set("hHkOQsvVWI")
LONG_WITH_VALUE = {
    "account", "acctg-freq", "array", "batch", "bb", "bbf", "begin", "burst-buffer", "chdir",
    "cluster-constraint", "clusters", "cluster", "comment", "constraint", "container", "core-spec",
    "cores-per-socket", "cpu-freq", "cpus-per-gpu", "cpus-per-task", "deadline", "delay-boot", "dependency",
    "distribution", "error", "export", "export-file", "extra-node-info", "gid", "gpu-bind", "gpu-freq",
    "gpus", "gpus-per-node", "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "hint", "input",
    "job-name", "kill-on-invalid-dep", "licenses", "mail-type", "mail-user", "mcs-label", "mem",
    "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus", "network", "nodefile", "nodelist", "nodes",
    "ntasks", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node", "ntasks-per-socket", "open-mode",
    "output", "partition", "power", "priority", "profile", "qos", "reservation", "signal", "sockets-per-node",
    "switches", "thread-spec", "threads-per-core", "time", "time-min", "tmp", "tres-per-task", "uid",
    "wait-all-nodes", "wckey", "exclude",
}
LONG_FLAGS = {
    "contiguous", "exclusive", "get-user-env", "hold", "ignore-pbs", "nice", "no-kill", "overcommit",
    "oversubscribe", "propagate", "quiet", "reboot", "spread-job", "test-only", "use-min-nodes", "verbose",
    "immediate", "requeue", "parsable",
}
# ours, or incompatible with what we do
REFUSED = {
    "comment": "slurm-ft sbatch keeps its tag in --comment; it cannot carry yours too",
    "no-requeue": "a fault-tolerant job must be requeueable",
    "wrap": "--wrap runs a string through a shell; give SCRIPT [ARGS...] instead",
    "wait": "--wait is not supported; follow the job with squeue",
    "test-only": "--test-only submits nothing; use plain sbatch --test-only",
    "array": "job arrays are not supported: the tasks would share one checkpoint directory and "
             "the controller follows whole jobs",
    "help": None, "usage": None, "version": None,
}
SHORT_NAMES = {"W": "wait", "h": "help", "V": "version", "J": "job-name", "N": "nodes", "a": "array"}
OUR_OPTIONS = {"ckpt-dir", "min-nodes", "max-restarts", "hot-spares", "hang-timeout", "ckpt-fails"}
CKPT_FAILS_MAX = 1000


@dataclass(frozen=True)
class SbatchRequest:
    spec: FtSpec
    sbatch_options: Tuple[str, ...]   # passed to sbatch as they came (plus ours)
    script: str                       # as resolved at submit time: absolute path, or a command name
    args: Tuple[str, ...]
    parsable: bool = False
    job_name_given: bool = False
    nodes: Optional[int] = None       # -N when it is one number
    fixed_tasks: bool = False         # -n/--ntasks/--ntasks-per-node given to sbatch
    ckpt_fails: Optional[int] = None  # --ckpt-fails M: the starter's, not the tag's (ckptfallback.py)

    def warnings(self) -> List[str]:
        """Advice that does not stop the submission."""
        out = []
        if self.spec.min_nodes is not None and self.fixed_tasks:
            out.append("--min-nodes with a task count fixed in sbatch (-n/--ntasks/--ntasks-per-node): Slurm "
                       "ignores a shrink of such a job (NumNodes) or keeps the old task count; give "
                       "--ntasks-per-node to srun inside the job instead")
        return out


def _int(value: str, what: str, low: int, high: Optional[int] = None) -> int:
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"{what} must be an integer, got {value!r}") from None
    if n < low:
        raise UsageError(f"{what} must be >= {low}, got {n}")
    if high is not None and n > high:
        raise UsageError(f"{what} must be <= {high}, got {n}")
    return n


def _limited(ours: Mapping[str, str], key: str) -> Optional[int]:
    """--min-nodes, --hot-spares, ... within the tag's LIMITS (the plugin's and the policy's)."""
    opt = key.replace("_", "-")
    return _int(ours[opt], f"--{opt}", *LIMITS[key]) if opt in ours else None


def _utf8_dir(path: str) -> None:
    """The tag carries the checkpoint directory as UTF-8 and the controller decodes it strictly: a name
    that is not (argv's undecodable bytes arrive as surrogates) would make a job it silently ignores."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(path).decode("ascii", "backslashreplace")
        raise UsageError(f"--ckpt-dir {shown}: the checkpoint directory is not valid UTF-8 (slurm-ft reads the "
                         f"directory as UTF-8: rename it)") from None


def parse(argv: Sequence[str], cwd: str = ".", file_exists: Callable[[str], bool] = os.path.isfile) -> SbatchRequest:
    """Split ``[our options] [sbatch options] SCRIPT [ARGS...]``; options end at the first word not starting with '-'."""
    ours = {}
    opts: List[str] = []
    parsable = False
    job_name = False
    nodes_value: Optional[str] = None
    fixed_tasks = False
    nodes_at = -1                     # where in opts the node count is (for --hot-spares)
    i = 0
    argv = list(argv)
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            if name in OUR_OPTIONS:
                if not eq:
                    if i + 1 >= len(argv):
                        raise UsageError(f"--{name} needs a value")
                    value = argv[i + 1]
                    i += 1
                ours[name] = value
                i += 1
                continue
            if name in REFUSED:
                raise UsageError(f"--{name}: {REFUSED[name]}" if REFUSED[name] else f"--{name}: see `sbatch --{name}`")
            if name in LONG_WITH_VALUE:
                if eq:
                    opts.append(word)
                else:
                    if i + 1 >= len(argv):
                        raise UsageError(f"sbatch option --{name} needs a value")
                    value = argv[i + 1]
                    opts += [word, value]
                    i += 1
            elif name in LONG_FLAGS:
                if name == "parsable":
                    parsable = True
                elif name != "requeue":                  # we add --requeue ourselves
                    opts.append(word)
            else:
                raise UsageError(f"unknown sbatch option --{name}")
            if name == "job-name":
                job_name = True
            if name == "nodes":
                nodes_value, nodes_at = value, len(opts) - 1
            if name in ("ntasks", "ntasks-per-node"):
                fixed_tasks = True
            i += 1
            continue
        # short options: -N4, -N 4, -vv, -kH
        letters = word[1:]
        j = 0
        consumed_next = False
        while j < len(letters):
            c = letters[j]
            long = SHORT_NAMES.get(c)
            if long in REFUSED:
                raise UsageError(f"-{c}: {REFUSED[long]}" if REFUSED[long] else f"-{c}: see `sbatch -{c}`")
            if c in SHORT_WITH_VALUE:
                value = letters[j + 1:]
                if not value:
                    if i + 1 >= len(argv):
                        raise UsageError(f"sbatch option -{c} needs a value")
                    value = argv[i + 1]
                    consumed_next = True
                opts += [f"-{c}", value]
                if c == "J":
                    job_name = True
                if c == "N":
                    nodes_value, nodes_at = value, len(opts) - 1
                if c == "n":
                    fixed_tasks = True
                break
            if c in SHORT_FLAGS:
                opts.append(f"-{c}")
                j += 1
                continue
            raise UsageError(f"unknown sbatch option -{c}")
        i += 2 if consumed_next else 1
    if i >= len(argv):
        raise UsageError("no SCRIPT given: slurm-ft sbatch [OPTIONS] SCRIPT [ARGS...]")
    script, args = argv[i], tuple(argv[i + 1:])
    if script == ":":
        raise UsageError("heterogeneous jobs (':') are not supported")

    ckpt_dir = ours.get("ckpt-dir", "")
    if ckpt_dir:
        _utf8_dir(ckpt_dir)
        ckpt_dir = os.path.normpath(os.path.join(cwd, ckpt_dir))
        _utf8_dir(ckpt_dir)                  # the working directory it is relative to, too
    if not ckpt_dir and any(PLACEHOLDER in a for a in (script, *args)):
        raise UsageError(f"{PLACEHOLDER} in the command needs --ckpt-dir")
    hang_timeout = _limited(ours, "hang_timeout")
    if not ckpt_dir and hang_timeout is not None:
        raise UsageError("--hang-timeout needs --ckpt-dir: restarts after a hang are counted in the checkpoint "
                         "directory, and without one --max-restarts could never end them")
    min_nodes = _limited(ours, "min_nodes")
    max_restarts = _limited(ours, "max_restarts")
    max_restarts = DEFAULT_MAX_RESTARTS if max_restarts is None else max_restarts
    nodes = None
    if nodes_value is not None and nodes_value.isdigit():
        nodes = int(nodes_value)
        if min_nodes is not None and min_nodes > nodes:
            raise UsageError(f"--min-nodes {min_nodes} is larger than the job's {nodes} nodes")
    hot = _limited(ours, "hot_spares") or 0
    train_nodes = None
    if hot:
        if nodes is None:
            raise UsageError("--hot-spares needs the training size as one number: -N N (the job asks for N + K)")
        if min_nodes is not None:
            raise UsageError("--hot-spares and --min-nodes cannot be combined: a hot-spare job keeps its size")
        if any(w in ("-n", "--ntasks") or w.startswith("--ntasks=") for w in opts):
            raise UsageError("--hot-spares with -n/--ntasks: the supervisor sizes the training step; give "
                             "--ntasks-per-node (or nothing: one task per node)")
        train_nodes = nodes
        opts[nodes_at] = f"--nodes={nodes + hot}" if opts[nodes_at].startswith("--nodes=") else str(nodes + hot)
        nodes += hot

    # sbatch reads a script file; we also accept a command found on PATH at start (e.g. `python`).
    if "/" in script or file_exists(os.path.join(cwd, script)):
        path = os.path.normpath(os.path.join(cwd, script))
        if not file_exists(path):
            raise UsageError(f"SCRIPT {script}: no such file")
        script = path
    return SbatchRequest(
        spec=FtSpec(ckpt_dir=ckpt_dir, min_nodes=min_nodes, max_restarts=max_restarts, hot_spares=hot,
                    train_nodes=train_nodes, hang_timeout=hang_timeout),
        sbatch_options=tuple(opts), script=script, args=args, parsable=parsable,
        job_name_given=job_name, nodes=nodes, fixed_tasks=fixed_tasks,
        ckpt_fails=_int(ours["ckpt-fails"], "--ckpt-fails", 0, CKPT_FAILS_MAX) if "ckpt-fails" in ours else None,
    )


_SBATCH_LINE = re.compile(r"#SBATCH\s")


def script_directives(text: str) -> List[str]:
    """The user script's leading ``#SBATCH`` lines, which sbatch would have read (it stops at the first command)."""
    out = []
    for n, line in enumerate(text.splitlines()):
        s = line.strip()
        if n == 0 and s.startswith("#!"):
            continue
        if not s:
            continue
        if not s.startswith("#"):
            break
        if _SBATCH_LINE.match(s) and "\r" not in s:
            out.append(s)
    return out


# job_submit.lua grants hot spares only to a batch script with this line: the supervisor is in it
STARTER_MARK = "# Generated by `slurm-ft sbatch`: "


def starter_script(directives: Sequence[str] = (), python: str = sys.executable,
                   argv: Optional[Sequence[str]] = None) -> str:
    """The batch script Slurm runs: resolves {ckpt} and execs the user's command (argv in sys.argv, or
    `argv` written into the script itself: see sbatch_argv)."""
    # line 2 is ours: Python reads a `coding[:=]` on line 1 or 2 as the source encoding, and a user's
    # `#SBATCH --job-name=transcoding=x264` there made the starter a SyntaxError
    lines = [f"#!{python}", "# -*- coding: utf-8 -*-"]
    bad = [d for d in directives if not d.isprintable()]
    if bad:
        raise UsageError(f"#SBATCH line with control characters: {bad[0]!r}")
    lines += list(directives)
    lines += [
        STARTER_MARK + "resolves {ckpt} to the latest complete checkpoint at every",
        "# (re)start, then execs the user's SCRIPT with its ARGS (sbatch's trailing arguments, never a shell).",
        "import sys",
        "from slurm_ft.job.jobstart import main",
        "sys.exit(main(sys.argv[1:]))" if argv is None else f"sys.exit(main({list(argv)!r}))",
        "",
    ]
    return "\n".join(lines)


def supervised(spec: FtSpec) -> bool:
    """The batch step supervises the training step (hot spares, hangs): it resolves {ckpt} at every launch."""
    return bool(spec.hot_spares or spec.hang_timeout)


def plugin_options(spec: FtSpec) -> List[str]:
    """The SPANK plugin's options for `spec` (spank/slurm_ft.c); job_submit.lua makes the same tag of them."""
    out = [f"--ft-ckpt-dir={spec.ckpt_dir}"] if spec.ckpt_dir else []
    if spec.hot_spares:         # the policy writes train_nodes from -N (N + K), for the starter only
        out.append(f"--ft-hot-spares={spec.hot_spares}")
    for key in ("min_nodes", "hang_timeout", "max_restarts"):
        if getattr(spec, key) is not None:
            out.append(f"--ft-{key.replace('_', '-')}={getattr(spec, key)}")
    return out


def sbatch_argv(req: SbatchRequest, starter_path: str, requeue: str = "--requeue", via: str = "comment") -> List[str]:
    """The full sbatch argument list after ``sbatch``: options, `requeue` (see SlurmClient.requeue_option),
    the tag, starter, then the starter's arguments. via="comment": our tag in --comment; via="admin_comment":
    the SPANK plugin's --ft-* options, which the job_submit policy turns into the same tag in AdminComment.
    The plugin resolves {ckpt} in the batch step's arguments once, as the job starts: a job without a
    supervisor gets the user's SCRIPT and ARGS there (the starter is not given the directory); a
    supervised one resolves {ckpt} again at every launch, so its arguments (starter_argv) travel inside
    the starter instead, where the plugin leaves them alone (starter_script)."""
    argv = list(req.sbatch_options)
    if not req.job_name_given:
        argv.append("--job-name=" + os.path.basename(req.script))
    if req.spec.hot_spares and "--no-kill" not in argv and "-k" not in argv:
        # a node going DOWN must not kill the job: Slurm takes it out of the allocation, srun says so in
        # the job's output, and the supervisor relaunches the step on a hot spare
        argv.append("--no-kill")
    if via == "admin_comment":
        argv += [requeue, *plugin_options(req.spec), starter_path]
        return argv if inside_starter(req, via) else argv + ["--", req.script, *req.args]
    return argv + [requeue, "--comment=" + encode(req.spec), starter_path, *starter_argv(req)]


def inside_starter(req: SbatchRequest, via: str) -> Optional[List[str]]:
    """The starter's arguments when they travel inside it (starter_script's `argv`), else None."""
    return starter_argv(req) if via == "admin_comment" and supervised(req.spec) else None


def starter_argv(req: SbatchRequest) -> List[str]:
    """The starter's options (jobstart.STARTER_OPTIONS), then `--`, SCRIPT and ARGS."""
    argv = ["--ckpt-dir", req.spec.ckpt_dir]
    if req.spec.hot_spares:
        argv += ["--hot-spares", str(req.spec.hot_spares), "--train-nodes", str(req.spec.train_nodes)]
    if req.spec.hang_timeout:        # the supervisor watches the job's progress (docs/jobs.md, "Hangs")
        argv += ["--hang-timeout", str(req.spec.hang_timeout), "--max-restarts", str(req.spec.max_restarts)]
        if not req.spec.hot_spares and req.nodes is not None:
            argv += ["--train-nodes", str(req.nodes)]
    if req.ckpt_fails is not None:
        argv += ["--ckpt-fails", str(req.ckpt_fails)]
    argv += ["--", req.script, *req.args]
    return argv
