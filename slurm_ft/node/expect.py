"""Does this node have GPUs at all? Asked only when NVML is unusable (mixed clusters: docs/health.md).

HealthCheckProgram, Prolog and Epilog are global in slurm.conf, so the check also runs on CPU, login and
service nodes, which have no NVIDIA driver. There "NVML unusable" is no fault; on a node that Slurm gives
GPUs it is one (a driver that did not load). A GPU node whose NVML answers reads nothing of this.

The answer, first that applies:
  1. the node's type (health.node_type_of): `gpus: 0` -> none; a type other than `default` with gpus > 0
     -> expected, whatever Slurm says (the override for sites that schedule GPUs without a gpu GRES)
  2. the node's record in slurm.conf, read on the node (the file slurmd names in $SLURM_CONF, else
     slurm.conf in slurm-ft's config, else /etc/slurm/slurm.conf; its Include files too): a gpu GRES ->
     expected; none -> none. A local file: no RPC to slurmctld from every node's every check.
  3. neither (the node in no file read: a dynamic node, configless without a local copy): unknown. The
     check then reports NVML unusable as an error finding, never a drain (fail safe, never silent).
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Mapping, Optional, Sequence, Tuple

from slurm_ft.errors import UsageError
from slurm_ft.slurm.hostlist import expand

DEFAULT_CONF = "/etc/slurm/slurm.conf"
MAX_CONF_BYTES = 16 << 20      # a slurm.conf (with its includes) bigger than this is not read
MAX_INCLUDE_DEPTH = 8
_COUNT_RE = re.compile(r"(\d+)([KMGTP]?)", re.IGNORECASE)
_UNIT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


@dataclass(frozen=True)
class SlurmGres:
    """The node's Gres as slurm.conf gives it to slurmd: `gres` "" when it has none, None when the node
    is in no NodeName line of `source` (or nothing could be read: `error`)."""
    gres: Optional[str]
    source: str = ""
    error: str = ""


@dataclass(frozen=True)
class Expectation:
    gpus: Optional[bool]     # True expected, False none, None unknown
    why: str                 # the reason, for the report's line

    def skip_line(self, node: str) -> str:
        return f"no GPUs expected on {node} ({self.why}): GPU checks skipped"


def from_type(type_name: str, type_gpus: int) -> Optional[Expectation]:
    """What the node's configured type says, or None: Slurm's record decides."""
    if type_gpus == 0:
        return Expectation(False, f"node type {type_name} has gpus: 0")
    if type_name != "default":
        return Expectation(True, f"node type {type_name} has gpus: {type_gpus}")
    return None


def from_slurm(node: str, slurm: SlurmGres) -> Expectation:
    """What the node's Slurm record says."""
    if slurm.gres is None:
        where = slurm.error or f"{node} is in no NodeName line of {slurm.source}"
        return Expectation(None, f"cannot tell whether Slurm gives {node} GPUs: {where}")
    n = gpu_count(slurm.gres)
    if n > 0:
        return Expectation(True, f"Slurm gives it Gres={slurm.gres}")
    return Expectation(False, "Slurm gives it no gpu GRES")


def gpu_count(gres: str) -> int:
    """GPUs in a Slurm Gres value: 'gpu:8', 'gpu:h100:8(S:0-1)', 'gpu:a100:2,gpu:h100:2', 'gpu' (1),
    'gpu:h100' (1), 'nic:1' and '(null)' (0)."""
    total = 0
    for item in _split_outside(gres, "()"):
        parts = [p.strip() for p in re.sub(r"\([^)]*\)", "", item).split(":")]
        if parts[0].lower() != "gpu":
            continue
        m = _COUNT_RE.fullmatch(parts[-1]) if len(parts) > 1 else None
        total += int(m.group(1)) * _UNIT[m.group(2).upper()] if m else 1
    return total


def _split_outside(text: str, pair: str) -> List[str]:
    """`text` split at the commas outside `pair` ("()", "[]")."""
    out: List[str] = []
    cur: List[str] = []
    depth = 0
    for ch in text:
        depth += (ch == pair[0]) - (ch == pair[1])
        if ch == "," and depth <= 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [s for s in (x.strip() for x in out) if s]


def logical_lines(text: str) -> List[str]:
    """slurm.conf's lines as Slurm reads them: `#` starts a comment (`\\#` is a literal one), a line
    ending in `\\` goes on in the next."""
    out: List[str] = []
    cur = ""
    for raw in text.splitlines():
        line = re.sub(r"(?<!\\)#.*", "", raw).replace("\\#", "#").rstrip()
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    if cur:
        out.append(cur)
    return out


def node_gres(node: str, lines: Iterable[str]) -> Optional[str]:
    """The Gres of `node` in slurm.conf's logical lines: "" for a node defined without one, None for a
    node no NodeName line names. `NodeName=DEFAULT Gres=...` applies to the lines after it."""
    default = ""
    for line in lines:
        pairs = _pairs(line)
        if not pairs or pairs[0][0] != "nodename":
            continue
        given = {k: v for k, v in pairs}
        names = pairs[0][1]
        if names.lower() == "default":
            default = given.get("gres", default)
            continue
        if _names(node, names):
            return str(given.get("gres", default))
    return None


def _names(node: str, names: str) -> bool:
    """Does the hostlist `names` name `node`? Only an element whose prefix fits is expanded: a
    4,096-node gpu[0001-4096] costs a CPU node nothing."""
    for element in _split_outside(names, "[]"):
        if "[" not in element:
            if element == node:
                return True
            continue
        if not node.startswith(element[:element.index("[")]):
            continue
        try:
            if node in expand(element):
                return True
        except UsageError:             # Slurm would refuse this line too; it names no node we can tell
            continue
    return False


def _pairs(line: str) -> List[Tuple[str, str]]:
    out = []
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            out.append((key.lower(), value.strip('"')))
    return out


def conf_paths(env: Mapping[str, str], configured: str) -> List[str]:
    """Where slurmd's slurm.conf is, most direct first: $SLURM_CONF (slurmd sets it for the prolog and
    epilog: its own file, the config cache when configless), slurm-ft's slurm.conf, Slurm's default."""
    return list(dict.fromkeys(p for p in (env.get("SLURM_CONF", ""), configured, DEFAULT_CONF) if p))


def read_slurm(node: str, paths: Sequence[str]) -> SlurmGres:
    """The node's Gres from the first of `paths` that exists (with its Include files): the seam that
    reads files."""
    for path in paths:
        if not os.path.exists(path):
            continue
        try:
            text = _read_with_includes(Path(path), 0, [0])
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            return SlurmGres(None, path, f"cannot read {path}: {exc}")
        return SlurmGres(node_gres(node, logical_lines(text)), path)
    return SlurmGres(None, "", f"no slurm.conf at {', '.join(paths)}")


def _read_with_includes(path: Path, depth: int, size: List[int]) -> str:
    """The file with each `Include PATH` line replaced by the files it names (relative to this file's
    directory, wildcards allowed), as Slurm reads them in place."""
    if depth > MAX_INCLUDE_DEPTH:
        raise ValueError(f"Include nested deeper than {MAX_INCLUDE_DEPTH} at {path}")
    text = path.read_text()
    size[0] += len(text)
    if size[0] > MAX_CONF_BYTES:
        raise ValueError(f"over {MAX_CONF_BYTES >> 20} MiB with its Include files")
    out = []
    for line in text.splitlines():
        m = re.match(r"\s*include\s+(\S+)", line, re.IGNORECASE)
        if not m:
            out.append(line)
            continue
        target = m.group(1)
        pattern = target if os.path.isabs(target) else str(path.parent / target)
        for inc in sorted(glob.glob(pattern)):
            out.append(_read_with_includes(Path(inc), depth + 1, size))
    return "\n".join(out)
