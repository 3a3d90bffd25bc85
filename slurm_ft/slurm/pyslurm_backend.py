"""Backend 2: pyslurm, for sites whose pyslurm release matches their Slurm.

pyslurm's major.minor must equal Slurm's (pyslurm 25.11.x speaks to Slurm 25.11 only). Debian ships
no Slurm 25.11: CI runs this backend in its bookworm-25.11 room (Slurm built from source, pyslurm
25.11.2 against it), where its 18 contract tests pass; the Debian rooms skip them with that reason.

Reads of every node (and of a job's nodes, filtered from them) and node drains/resumes go through the
library: one RPC, no process start, no text to parse (the cost of each read both ways at fleet size:
bench/scale.py, README). One node, one job and the partitions stay with the commands backend, whose
calls this class inherits: the library saves little there. The behaviour users see stays the same:
the same fields of every node (tests/lab/test_client_contract.py compares both backends' reads field by
field), the same nodes resumed, and each call bounded by the client's timeout (a libslurm call cannot be
interrupted: it is left to finish in a daemon thread while the caller gets SlurmTimeout).
"""
from __future__ import annotations

import importlib.util
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Optional, TypeVar

from slurm_ft.errors import CommandError, UsageError
from slurm_ft.slurm.types import Node
from slurm_ft.slurm import parse
from slurm_ft.slurm.api import SlurmApi
from slurm_ft.slurm.client import SlurmClient, SlurmError, SlurmTimeout
from slurm_ft.vocab import slurm_time

T = TypeVar("T")


DEFAULT_CONF = "/etc/slurm/slurm.conf"   # libslurm's own default (a build's sysconfdir; Debian's and ours)
_imported_with: Optional[str] = None      # the config pyslurm read at its import (it reads one, once)


class Unreadable(ImportError):
    """pyslurm is installed, but cannot read the config asked for in this process."""


def _import(conf: Optional[str]) -> Any:
    """pyslurm, imported to read `conf` (else $SLURM_CONF, else the default path). Importing it reads the
    Slurm config in libslurm, which ends the whole process (exit 1) where it finds none: so a config that
    is not a file here is refused first (Unreadable), and so is a second config once pyslurm read another."""
    global _imported_with
    path = conf or os.environ.get("SLURM_CONF") or DEFAULT_CONF
    if _imported_with is not None:
        if path != _imported_with:
            raise Unreadable(f"pyslurm already read {_imported_with}, not {path}")
    elif importlib.util.find_spec("pyslurm") is None:
        raise ImportError("no module named pyslurm")
    elif not os.path.isfile(path):
        raise Unreadable(f"no Slurm config at {path} for pyslurm to read (importing it would end this process)")
    elif conf:
        os.environ["SLURM_CONF"] = conf    # read by libslurm at pyslurm's import
    # lazy: an optional dependency (the pyslurm extra); without it the commands backend serves
    import pyslurm  # noqa: F401  (optional dependency)
    _imported_with = path
    return pyslurm


def unusable_reason(commands: SlurmClient) -> Optional[str]:
    """None when pyslurm imports (reading the config `commands` uses) and matches the Slurm that
    `commands` talks to; else why not."""
    try:
        pyslurm = _import(commands.env.get("SLURM_CONF"))
    except Unreadable as exc:
        return f"pyslurm not usable: {exc}"
    except ImportError:
        try:
            major, minor, _ = commands.version()
            return f"pyslurm not importable (no release matches Slurm {major}.{minor:02d})"
        except CommandError:
            return "pyslurm not importable"
    version = getattr(pyslurm, "__version__", "") or getattr(pyslurm, "version", lambda: "")()
    try:
        mine = parse.parse_version(str(version))[:2]
        slurm = commands.version()[:2]
    except (ValueError, CommandError) as exc:
        return f"cannot compare pyslurm and Slurm versions: {exc}"
    if mine != slurm:
        return f"pyslurm {version} does not match Slurm {slurm[0]}.{slurm[1]:02d}"
    return None


def reason_time(node: Any) -> str:
    """A pyslurm Node's ReasonTime as the commands print it (`2026-11-29T16:30:05`, local), "" for none.
    pyslurm releases differ: `reason_time` is epoch seconds in some, formatted text beside
    `reason_time_raw` in others. Without it the breaker would count every slurm-ft drain of any age as
    taken out now (review 2026-12-07 #1)."""
    raw = getattr(node, "reason_time_raw", None)
    if raw is None:
        raw = getattr(node, "reason_time", None)
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return parse.format_epoch(int(raw))
    text = str(raw or "").replace(" ", "T", 1)
    return text if slurm_time(text) is not None else ""


class PySlurmClient(SlurmClient):
    backend = "pyslurm"

    def fleet_nodes(self, among: Optional[Iterable[str]] = None) -> List[Node]:
        wanted = None if among is None else set(among)
        return [n for n in self._all_nodes() if wanted is None or n.name in wanted]

    def _bounded(self, what: List[str], call: Callable[[], T]) -> T:
        """`call()` within self.timeout; past it SlurmTimeout (the call goes on in its daemon thread)."""
        value: List[T] = []
        error: List[Exception] = []

        def target() -> None:
            try:
                value.append(call())
            except Exception as exc:            # pyslurm.RPCError and friends
                error.append(exc)

        worker = threading.Thread(target=target, name=f"slurm-ft {what[0]}", daemon=True)
        worker.start()
        worker.join(self.timeout)
        if worker.is_alive():
            raise SlurmTimeout(what, None, "", f"`{' '.join(what)}` timed out after {self.timeout:g} s")
        if error:
            raise SlurmError(what, None, str(error[0])) from None
        return value[0]

    def _all_nodes(self) -> List[Node]:
        pyslurm = _import(self.env.get("SLURM_CONF"))
        loaded = self._bounded(["pyslurm.Nodes.load"], pyslurm.Nodes.load)
        out = []
        for n in loaded.values():            # a map of name -> Node (pyslurm 25.11)
            state, flags = parse.parse_node_state(str(n.state or "UNKNOWN"))
            out.append(Node(
                name=n.name, state=state, flags=flags, reason=n.reason or "",
                reason_user=(n.reason_user or "") if n.reason else "",   # pyslurm names one with no reason
                reason_time=reason_time(n) if n.reason else "",
                partitions=tuple(n.partitions or ()),
                gres=",".join(f"{k}:{v}" for k, v in (n.configured_gres or {}).items()),
                cpus=int(n.total_cpus or 0), real_memory_mb=int(n.real_memory or 0),
                comment=n.comment or "", addr=n.address or "",
            ))
        return out

    def _set_state(self, names: List[str], state: str, reason: Optional[str] = None) -> None:
        pyslurm = _import(self.env.get("SLURM_CONF"))
        changes = {"state": state, **({"reason": reason} if reason is not None else {})}
        for name in names:                   # one RPC per node: Nodes("a,b") splits a hostlist's commas
            def modify(name: str = name) -> None:
                pyslurm.Node(name).modify(pyslurm.Node(**changes))
            self._bounded(["pyslurm.Node.modify", name], modify)


__all__ = ["PySlurmClient", "unusable_reason", "UsageError"]


if TYPE_CHECKING:                        # mypy: this backend is a SlurmApi
    def _is_api(c: PySlurmClient) -> SlurmApi:
        return c
