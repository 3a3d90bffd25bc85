"""slurm-ft's own failure never drains a node (issue 10, items 1, 5, 11).

The prolog/epilog/healthcheck scripts run as Slurm runs them, over the real `slurm-ft` (real pynvml
over the fake libnvidia-ml.so.1; no Slurm is involved in these hooks): only a check that ran to a
verdict with a node fault, within the breaker, fails a node. A missing package, a broken import, a
kill or a config error exits 0; a disk a job filled is reported, not drained; NVML that hangs N
checks in a row drains, through the breaker."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_ft.config import Config, HealthConfig, LifecycleConfig, NodeType
from slurm_ft.node import run
from slurm_ft.finding import Severity
from slurm_ft.gpu.sample import NodeSample
from slurm_ft.node.host import DiskSpace, Disks
from slurm_ft.slurm.types import Node
from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path

REPO = Path(__file__).resolve().parents[2]
HOOKS = {"prolog": REPO / "prolog.d" / "50-slurm-ft", "epilog": REPO / "epilog.d" / "50-slurm-ft"}
HEALTHCHECK = REPO / "healthcheck" / "slurm-ft-healthcheck"
SLURM_FT = Path(sys.executable).parent / "slurm-ft"


def stub(tmp_path: Path, rc: int, out: str = "", kill: bool = False) -> Path:
    """A stand-in `slurm-ft` for the hook's own logic: prints `out`, exits `rc` (or is killed)."""
    p = tmp_path / f"stub-{rc}-{abs(hash(out))}"
    body = f"printf '%s\\n' {out!r}\n" + ("kill -9 $$\n" if kill else f"exit {rc}\n")
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return p


def hook(script: Path, binary: Path, env: "dict | None" = None) -> int:
    e = dict(os.environ, SLURM_FT_BIN=str(binary), SLURM_JOB_ID="42", **(env or {}))
    return subprocess.run([str(script)], env=e, capture_output=True, timeout=120).returncode


@pytest.mark.parametrize("level", sorted(HOOKS))
@pytest.mark.parametrize("rc,out,kill,want", [
    (0, "n1 prolog: healthy", False, 0),
    (1, "slurm-ft-verdict: FAIL slurm-ft: XID79 gpu2 GPU has fallen off the bus", False, 1),
    (1, "Traceback (most recent call last):\nModuleNotFoundError: No module named 'click'", False, 0),
    (1, "  FAIL xid  gpu2 XID79 ...\nslurm-ft: error: fail finding reported, node not failed: unknown", False, 0),
    (1, "not a verdict: slurm-ft-verdict: FAIL x", False, 0),       # the signal is a line of its own
    (2, "slurm-ft: error: config: bad key", False, 0),
    (2, "slurm-ft-verdict: FAIL x", False, 0),                       # a verdict needs exit 1 too
    (70, "slurm-ft: internal error: KeyError", False, 0),
    (0, "slurm-ft-verdict: FAIL x", True, 0),                        # killed mid-check
])
def test_hook_fails_the_node_only_on_a_verdict_line_with_exit_1(tmp_path, level, rc, out, kill, want):
    assert hook(HOOKS[level], stub(tmp_path, rc, out, kill)) == want


@pytest.mark.parametrize("level", sorted(HOOKS))
def test_hook_reads_the_verdict_from_stdout_only(tmp_path, level):
    """Finding 16: the hooks grepped stdout and stderr together (2>&1), so a verdict line on stderr failed
    the node. It is read from stdout alone; stderr still reaches the log line, and no file is left."""
    def stub2(name: str, out: str, err: str) -> Path:
        p = tmp_path / name
        p.write_text(f"#!/bin/sh\nprintf '%s\\n' {out!r}\nprintf '%s\\n' {err!r} >&2\nexit 1\n")
        p.chmod(0o755)
        return p

    verdict = "slurm-ft-verdict: FAIL slurm-ft: XID79 gpu2 GPU has fallen off the bus"
    before = set(Path("/tmp").glob(f"slurm-ft-{level}.*"))
    assert hook(HOOKS[level], stub2("on-stderr", "n1: checking", verdict)) == 0
    assert hook(HOOKS[level], stub2("on-stdout", verdict, "a warning on stderr")) == 1
    assert set(Path("/tmp").glob(f"slurm-ft-{level}.*")) == before


def test_hooks_without_slurm_ft_pass(tmp_path):
    for script in (*HOOKS.values(), HEALTHCHECK):
        assert hook(script, tmp_path / "no-such-slurm-ft", {"PATH": "/usr/bin:/bin"}) == 0


@pytest.fixture
def fake_node(tmp_path):
    """The real slurm-ft over the fake NVML with 8 healthy GPUs; `env` for the hooks, `fault` to inject."""
    from slurm_ft_lab.fake_nvml import build
    lib = build(tmp_path / "lib")
    nvml_state = tmp_path / "nvml.state"
    nvml_state.write_text("")
    (tmp_path / "st").mkdir(mode=0o700)

    def write_config(breaker_nodes: int = 2, **extra) -> Path:
        cfg = tmp_path / "slurm-ft.yaml"
        lines = [f"state_dir: {tmp_path}/state", "health:", f"  kmsg_path: {tmp_path}/k",
                 f"  state_file: {tmp_path}/st/{{node}}.json", f"  disk_paths: [{tmp_path}]",
                 "lifecycle:", "  breaker_max_share: 0", f"  breaker_max_nodes: {breaker_nodes}"]
        lines += [f"{k}: {v}" for k, v in extra.items()]
        cfg.write_text("\n".join(lines) + "\n")
        cfg.chmod(0o644)
        return cfg

    class F:
        config = staticmethod(write_config)
        env = {"LD_LIBRARY_PATH": str(lib.parent), "SLURM_FT_FAKE_NVML_STATE": str(nvml_state),
               "SLURM_FT_FAKE_NODE": "n1", "SLURMD_NODENAME": "n1", "SLURM_FT_CONFIG": str(write_config())}

        @staticmethod
        def fault(line: str) -> None:
            nvml_state.write_text(line + "\n")

    return F


def test_real_check_fails_prolog_only_within_a_known_breaker(fake_node):
    """A hook about to fail the node asks Slurm for the breaker's count; where it cannot (no slurmctld
    here) the count is unknown: reported, the node not failed. With the breaker off it fails the node."""
    fake_node.fault("gpu 6 remap_failure 1")
    env = fake_node.env
    assert hook(HOOKS["prolog"], SLURM_FT, env) == 0          # breaker on, Slurm unreachable: no drain
    env = dict(env, SLURM_FT_CONFIG=str(fake_node.config(breaker_nodes=0)))
    assert hook(HOOKS["prolog"], SLURM_FT, env) == 1          # no breaker to ask: the node fails
    p = subprocess.run([str(SLURM_FT), "check", "--level", "epilog"], env=dict(os.environ, **env),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "slurm-ft-verdict: FAIL slurm-ft: REMAP_FAILURE gpu6" in p.stdout


def test_missing_pynvml_is_an_install_error_not_a_node_fault(fake_node, tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "pynvml.py").write_text("raise ImportError('No module named pynvml')\n")
    env = dict(fake_node.env, PYTHONPATH=str(shadow))
    fake_node.config(breaker_nodes=0)                         # no breaker: only the install error can hold it
    p = subprocess.run([str(SLURM_FT), "check", "--level", "prolog"], env=dict(os.environ, **env),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "pynvml is not installed" in p.stderr and "slurm-ft-verdict" not in p.stdout
    assert "NVML_INIT" not in p.stdout
    for script in (*HOOKS.values(), HEALTHCHECK):
        assert hook(script, SLURM_FT, env) == 0


def test_an_import_error_in_slurm_ft_itself_passes_every_hook(fake_node, tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "slurm_ft").mkdir()                             # found first on PYTHONPATH: a broken install
    (shadow / "slurm_ft" / "__init__.py").write_text("raise ImportError('broken slurm_ft')\n")
    wrapper = tmp_path / "slurm-ft"
    wrapper.write_text(f"#!/bin/sh\ncd {tmp_path} && exec {sys.executable} -m slurm_ft \"$@\"\n")   # not the checkout
    wrapper.chmod(0o755)
    env = dict(fake_node.env, PYTHONPATH=str(shadow))
    fake_node.fault("gpu 6 remap_failure 1")
    fake_node.config(breaker_nodes=0)
    p = subprocess.run([str(wrapper), "check", "--level", "prolog"], env=dict(os.environ, **env),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "broken slurm_ft" in p.stderr  # python's own exit 1, before main()
    for script in (*HOOKS.values(), HEALTHCHECK):
        assert hook(script, wrapper, env) == 0


def test_unreadable_config_and_unwritable_state_dir_drain_nothing(fake_node, tmp_path):
    fake_node.fault("gpu 6 remap_failure 1")
    bad = tmp_path / "bad.yaml"
    bad.write_text("health: [not, a, mapping\n")
    bad.chmod(0o644)
    for script in HOOKS.values():
        assert hook(script, SLURM_FT, dict(fake_node.env, SLURM_FT_CONFIG=str(bad))) == 0
    (tmp_path / "st").chmod(0o777)                        # others may write it: refused as unsafe
    try:
        for script in HOOKS.values():
            assert hook(script, SLURM_FT, fake_node.env) == 0
    finally:
        (tmp_path / "st").chmod(0o700)


# --- NVML that hangs, N checks in a row ---------------------------------------------------------------

def fleet() -> FakeSlurm:
    """The shared fake: gpu001 (the node under test) among 20."""
    return FakeSlurm(train=[f"gpu{i:03d}" for i in range(1, 21)], spares=())


def hang_config(tmp_path, after=3, breaker_nodes=2) -> Config:
    hc = HealthConfig(kmsg_path=str(tmp_path / "k"), state_file=str(tmp_path / "state" / "{node}.json"),
                      disk_paths=(str(tmp_path),), node_types={"default": NodeType(gpus=0, nvlinks_per_gpu=0)},
                      deadline_s={"quick": 0.2}, nvml_hung_drain_after=after)
    return Config(health=hc, lifecycle=replace(LifecycleConfig(), breaker_max_share=0.0,
                                               breaker_max_nodes=breaker_nodes))


@pytest.fixture
def release():
    ev = threading.Event()
    yield ev
    ev.set()


def test_nvml_hung_n_checks_in_a_row_drains_through_the_breaker(tmp_path, release):
    def hung(node, parts):
        release.wait(30)
        return NodeSample(node=node)
    ok = lambda node, parts: NodeSample(node=node)   # noqa: E731
    cfg, slurm = hang_config(tmp_path), fleet()
    check = lambda reader: run.check_node("quick", "gpu001", cfg, drain=True, client=slurm, reader=reader)  # noqa
    for _ in range(2):
        r = check(hung)
        assert r.hung and r.healthy and slurm.calls == []
    assert check(ok).healthy                       # NVML answered: the count starts again
    for _ in range(2):
        assert check(hung).healthy
    r = check(hung)
    assert not r.healthy and [f.code for f in r.findings if f.severity is Severity.FAIL] == ["NVML_HUNG"]
    reason = slurm.node("gpu001").reason
    assert slurm.calls == [("drain", ("gpu001",), reason)] and reason.startswith("slurm-ft: NVML_HUNG")


def test_nvml_hung_drain_is_refused_by_a_full_breaker_and_off_at_zero(tmp_path, release):
    def hung(node, parts):
        release.wait(30)
        return NodeSample(node=node)
    slurm = fleet()
    full = [Node(f"x{i}", "IDLE", frozenset({"DRAIN"}), "Prolog error", reason_time="Unknown") for i in range(2)]
    slurm.n.update({x.name: x for x in full})
    cfg = hang_config(tmp_path, after=1)
    r = run.check_node("quick", "gpu001", cfg, drain=True, client=slurm, reader=hung)
    assert not r.healthy and r.drain["action"] == "refused" and slurm.calls == []
    cfg = hang_config(tmp_path / "b", after=0)
    for _ in range(3):
        assert run.check_node("quick", "gpu001", cfg, drain=True, client=slurm, reader=hung).healthy


def test_a_disk_a_job_filled_is_reported_never_drained(tmp_path, monkeypatch):
    full = Disks((DiskSpace("/tmp", 100, 1),))    # 1 % free
    cfg, slurm = hang_config(tmp_path), fleet()
    reader = lambda node, parts: NodeSample(node=node)   # noqa: E731
    hc = replace(cfg.health, levels={"epilog": ("disk",)})
    cfg = replace(cfg, health=hc)
    monkeypatch.setattr("slurm_ft.node.host.disk", lambda paths: full)
    r = run.check_node("epilog", "gpu001", cfg, drain=True, client=slurm, reader=reader)
    assert r.healthy and [(f.code, f.severity) for f in r.findings] == [("DISK_FULL", Severity.WARN)]
    assert slurm.calls == []
