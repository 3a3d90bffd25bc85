"""`slurm-ft config check`: every error of a config file in one run, its warnings, and the effective config.

A command's load (config.py) stops at the first error; here the same rules collect (config.Problems).
Added to them: what the file's safety checks refuse (reported, and the file still read for the rest),
the rules a health check applies only when it runs (node/levels.validate: level and check names, the
burn-in backend), and what only this host can tell: the kernel log the xid check reads exists here, and
the slurm-ft SPANK plugin that plugstack.conf loads was built for this host's Slurm release.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import socket
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from slurm_ft.config import JOURNAL_SOURCE, Config, Problems, config_path, parse_collecting
from slurm_ft.errors import ConfigError
from slurm_ft.fsutil import refuse_unsafe
from slurm_ft.node import levels
from slurm_ft.slurm import spank_build
from slurm_ft.slurm.client import SlurmClient, SlurmError
from slurm_ft.slurm.pyslurm_backend import DEFAULT_CONF


@dataclass
class CheckResult:
    file: str
    config: Optional[Config]            # None: not read at all (missing, not YAML, not a mapping)
    errors: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    defaults: bool = False              # no file at the default path: every command runs on the defaults


def this_node() -> str:
    """The name `{node}` in a path stands for on this host, as `slurm-ft check` picks it."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def check_file(path: Optional[str] = None, node: Optional[str] = None) -> CheckResult:
    """Check the config a command would read (`path`, $SLURM_FT_CONFIG or the default path)."""
    p, explicit = config_path(path)
    if not p.exists():
        if explicit:
            return CheckResult(str(p), None, [f"{p}: config file not found"])
        cfg = Config()
        result = CheckResult(str(p), cfg, defaults=True)
    elif p.is_dir():
        return CheckResult(str(p), None, [f"{p}: is a directory, not a config file"])
    else:
        result = CheckResult(str(p), None)
        for target, what in ((p, "config file"), (p.resolve().parent, "config directory")):
            try:
                refuse_unsafe(target, what)
            except ConfigError as exc:      # every command refuses it: an error, and the rest still read
                result.errors.append(str(exc))
        problems = Problems(collect=True)
        try:
            cfg = parse_collecting(p, problems)
        except ConfigError as exc:          # the file as a whole: no YAML, no mapping, unreadable
            result.errors.append(str(exc))
            return result
        result.config = cfg
        result.errors += problems.errors
        result.warnings += problems.warnings
        try:
            levels.validate(cfg.health, str(p))
        except ConfigError as exc:
            result.errors.append(str(exc))
    _check_host(result, cfg, node or this_node())
    return result


def _check_host(result: CheckResult, cfg: Config, node: str) -> None:
    """Paths a health check reads, as this host (node `node`) would find them."""
    hc = cfg.health
    file = result.file
    if hc.kmsg_path == JOURNAL_SOURCE:
        if shutil.which("journalctl") is None:
            result.errors.append(f"{file}: health.kmsg_path: journal, but journalctl is not installed on this host "
                                 f"(the xid check reports an error and sees no Xid)")
    elif hc.kmsg_path.startswith("/"):      # a relative one is already an error
        log = hc.on(node, hc.kmsg_path)
        if not os.path.exists(log):
            result.errors.append(f"{file}: health.kmsg_path: {log} does not exist on this host ({node}): the xid "
                                 f"check reports an error finding and sees no Xid")
    for i, d in enumerate(hc.disk_paths):
        where = hc.on(node, d)
        if d.startswith("/") and not os.path.exists(where):   # a mount a GPU node may have and this host not
            result.warnings.append(f"{file}: health.disk_paths[{i}]: {where} does not exist on this host ({node}): "
                                   f"the disk check fails a node without it (DISK_UNREADABLE, a drain)")
    _check_spank(result, cfg)


def _check_spank(result: CheckResult, cfg: Config) -> None:
    """A slurm_ft.so in plugstack.conf built for another Slurm release (Slurm refuses to load it)."""
    conf = cfg.slurm.conf or os.environ.get("SLURM_CONF") or DEFAULT_CONF
    if not spank_build.plugins_named(conf):
        return                          # no plugin here (most hosts): not even `scontrol --version` is run
    try:
        version = SlurmClient(conf=conf, timeout=cfg.slurm.timeout_s).version()
    except (SlurmError, OSError) as exc:
        result.warnings.append(f"plugstack.conf loads {spank_build.PLUGIN}, but Slurm's version is unknown here "
                               f"({exc}): its build is not checked")
        return
    result.errors += [f"plugstack.conf: {line}" for line in spank_build.mismatches(conf, version)]


def effective(cfg: Config) -> Dict[str, Any]:
    """The config every key filled in, as a slurm-ft.yaml would write it (lists, no internal `path`)."""
    data = _plain(dataclasses.asdict(cfg))
    assert isinstance(data, dict)
    data.pop("path", None)
    return data


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
