"""Mixed clusters (issue 39 item 3): whether a node without NVML is expected to have GPUs (node/expect.py),
and what the health run makes of it: a CPU node skips its GPU checks, a GPU node without a driver still
fails, a node nobody can tell about reports an error and drains nothing."""
from __future__ import annotations

import time

import pytest

from slurm_ft.config import Config, HealthConfig, LifecycleConfig, NodeType, SlurmConfig
from slurm_ft.finding import Severity
from slurm_ft.gpu.sample import NodeSample
from slurm_ft.node import expect, run
from slurm_ft.node.expect import Expectation, SlurmGres

CONF = """\
# a mixed cluster
NodeName=DEFAULT CPUs=64 Gres=gpu:h100:8(S:0-1)   # GPU nodes first
NodeName=gpu[001-004] RealMemory=900000
NodeName=DEFAULT Gres=
NodeName=cpu[01-02],login1 CPUs=32 \\
    RealMemory=256000
nodename=mig01 gres=gpu:1g.10gb:7,nic:1
NodeName=nic01 Gres=nic:2
NodeName=bad[3-1] Gres=gpu:1
PartitionName=train Nodes=gpu[001-004] Default=YES
"""


@pytest.mark.parametrize("gres, n", [
    ("gpu:8", 8), ("gpu:h100:8(S:0-1)", 8), ("gpu:a100:2,gpu:h100:2", 4), ("gpu", 1), ("gpu:h100", 1),
    ("gpu:h100:4(S:0,1),nic:1", 4), ("nic:1", 0), ("", 0), ("(null)", 0), ("gpu:0", 0), ("mps:100", 0),
    ("gpu:1K", 1024), ("GPU:2", 2),
])
def test_gpu_count_reads_slurms_gres_values(gres, n):
    assert expect.gpu_count(gres) == n


@pytest.mark.parametrize("node, gres", [
    ("gpu001", "gpu:h100:8(S:0-1)"), ("gpu004", "gpu:h100:8(S:0-1)"),   # NodeName=DEFAULT's Gres
    ("cpu02", ""), ("login1", ""),                                      # DEFAULT reset; a continued line
    ("mig01", "gpu:1g.10gb:7,nic:1"), ("nic01", "nic:2"),
    ("gpu005", None), ("cpu", None),                                    # in no NodeName line
    ("bad2", None),                                                     # a line Slurm would refuse names none
])
def test_a_nodes_gres_from_slurm_conf(node, gres):
    assert expect.node_gres(node, expect.logical_lines(CONF)) == gres


def test_comments_and_continuations_are_read_as_slurm_reads_them():
    assert expect.logical_lines("a=1 # no\nb=\\#2\nc=3 \\\n d=4\n") == ["a=1", "b=#2", "c=3   d=4"]


@pytest.mark.parametrize("name, gpus, want", [
    ("cpu", 0, False), ("default", 0, False),          # gpus: 0, named or the default type: none
    ("h100", 8, True),                                 # a named type with GPUs: the override, whatever Slurm says
    ("default", 8, None),                              # the default type: Slurm's record decides
])
def test_the_node_type_decides_first(name, gpus, want):
    got = expect.from_type(name, gpus)
    assert (got.gpus if got else None) is want


@pytest.mark.parametrize("slurm, want, words", [
    (SlurmGres("gpu:8", "/etc/slurm/slurm.conf"), True, "Gres=gpu:8"),
    (SlurmGres("", "/etc/slurm/slurm.conf"), False, "Slurm gives it no gpu GRES"),
    (SlurmGres("nic:1", "/etc/slurm/slurm.conf"), False, "no gpu GRES"),
    (SlurmGres(None, "/etc/slurm/slurm.conf"), None, "cpu001 is in no NodeName line of /etc/slurm/slurm.conf"),
    (SlurmGres(None, "", "no slurm.conf at /x"), None, "no slurm.conf at /x"),
])
def test_slurms_record_decides_else(slurm, want, words):
    got = expect.from_slurm("cpu001", slurm)
    assert got.gpus is want and words in got.why


def test_the_first_slurm_conf_there_is_read_with_its_includes(tmp_path):
    (tmp_path / "nodes.d").mkdir()
    (tmp_path / "nodes.d" / "gpu.conf").write_text("NodeName=gpu[01-02] Gres=gpu:4\n")
    (tmp_path / "nodes.d" / "cpu.conf").write_text("NodeName=cpu01\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nInclude nodes.d/*.conf\n")
    paths = expect.conf_paths({"SLURM_CONF": str(tmp_path / "absent.conf")}, str(conf))
    assert paths == [str(tmp_path / "absent.conf"), str(conf), expect.DEFAULT_CONF]
    assert expect.read_slurm("gpu02", paths) == SlurmGres("gpu:4", str(conf))
    assert expect.read_slurm("cpu01", paths) == SlurmGres("", str(conf))
    assert expect.read_slurm("cpu09", paths) == SlurmGres(None, str(conf))
    assert expect.read_slurm("cpu01", [str(tmp_path / "none")]).error.startswith("no slurm.conf at")
    (tmp_path / "loop.conf").write_text("Include loop.conf\n")
    assert "Include nested deeper" in expect.read_slurm("cpu01", [str(tmp_path / "loop.conf")]).error


def test_the_skip_line_names_the_node_and_why():
    e = Expectation(False, "Slurm gives it no gpu GRES")
    assert e.skip_line("cpu001") == "no GPUs expected on cpu001 (Slurm gives it no gpu GRES): GPU checks skipped"


# --- the health run on a node without NVML ---------------------------------------------------------

def _config(tmp_path, conf_text=CONF, **health) -> Config:
    conf = tmp_path / "slurm.conf"
    conf.write_text(conf_text)
    hc = HealthConfig(kmsg_path=str(tmp_path / "{node}.kmsg"), state_file=str(tmp_path / "{node}.json"),
                      disk_paths=(str(tmp_path),), **health)
    return Config(health=hc, state_dir=str(tmp_path / "fleet"), slurm=SlurmConfig(conf=str(conf)),
                  lifecycle=LifecycleConfig(breaker_max_share=0.0, breaker_max_nodes=0))


def _no_driver(node, parts):
    return NodeSample(node=node, nvml_error="NVML library libnvidia-ml.so.1 not found")


def _run(level, node, cfg, env=None):
    return run.run_level(level, node, cfg, reader=_no_driver, now=time.time(), env=env or {})


@pytest.mark.parametrize("level", ["quick", "prolog", "epilog"])
def test_a_node_slurm_gives_no_gpu_skips_its_gpu_checks_in_one_line(tmp_path, level):
    (tmp_path / "cpu01.kmsg").write_text("")
    rep = _run(level, "cpu01", _config(tmp_path))
    assert rep.healthy and rep.exit_code == 0
    skipped = [f for f in rep.findings if f.code == "NO_GPUS_EXPECTED"]
    assert [f.reason for f in skipped] == ["no GPUs expected on cpu01 (Slurm gives it no gpu GRES): GPU checks skipped"]
    assert not {f.check for f in rep.findings} & (run.GPU_CHECKS - {"inventory"})     # no NOT_CHECKED lines
    assert not [f for f in rep.findings if f.severity is Severity.ERROR]
    assert {"xid"} <= {f.check for f in rep.findings}                               # the kernel log still read


def test_a_node_slurm_gives_gpus_still_fails_without_a_driver(tmp_path):
    rep = _run("quick", "gpu003", _config(tmp_path))
    assert not rep.healthy
    assert [(f.check, f.code) for f in rep.findings if f.severity is Severity.FAIL] == [("inventory", "NVML_INIT")]


def test_hooks_slurm_conf_is_read_before_slurm_fts_own(tmp_path):
    cfg = _config(tmp_path)                            # slurm-ft's file: cpu01 has no GPUs
    slurmd = tmp_path / "slurmd.conf"
    slurmd.write_text("NodeName=cpu01 Gres=gpu:2\n")    # ... slurmd's own says it has two
    assert not _run("quick", "cpu01", cfg, env={"SLURM_CONF": str(slurmd)}).healthy


def test_a_node_nobody_can_tell_about_reports_an_error_and_drains_nothing(tmp_path):
    rep = _run("quick", "dyn07", _config(tmp_path))
    assert rep.healthy
    unknown = [f for f in rep.findings if f.check == "inventory"]
    assert [(f.severity, f.code) for f in unknown] == [(Severity.ERROR, "GPUS_UNKNOWN")]
    assert "NVML unusable" in unknown[0].reason and "dyn07 is in no NodeName line" in unknown[0].reason
    assert "not drained" in unknown[0].reason


def test_no_slurm_conf_anywhere_is_unknown_too(tmp_path, monkeypatch):
    monkeypatch.setattr(expect, "DEFAULT_CONF", str(tmp_path / "etc-slurm.conf"))    # whatever this machine has
    cfg = _config(tmp_path)
    cfg = Config(health=cfg.health, state_dir=cfg.state_dir, lifecycle=cfg.lifecycle,
                 slurm=SlurmConfig(conf=str(tmp_path / "absent.conf")))
    rep = _run("quick", "cpu01", cfg, env={"SLURM_CONF": str(tmp_path / "absent2.conf")})
    assert rep.healthy and [f.code for f in rep.findings if f.check == "inventory"] == ["GPUS_UNKNOWN"]
    assert "no slurm.conf at" in rep.findings[0].reason


def test_node_types_override_slurm_both_ways(tmp_path):
    types = {"default": NodeType(), "cpu": NodeType(gpus=0), "h100": NodeType(gpus=8)}
    cfg = _config(tmp_path, node_types=types, node_type_of={"gpu004": "cpu", "cpu02": "h100"})
    gpu = _run("quick", "gpu004", cfg)                  # Slurm gives it GPUs; its type says none
    assert gpu.healthy and "node type cpu has gpus: 0" in gpu.findings[0].reason
    cpu = _run("quick", "cpu02", cfg)                   # no gpu GRES; its type says 8 GPUs: a fault
    assert [f.code for f in cpu.findings if f.severity is Severity.FAIL] == ["NVML_INIT"]


def test_a_gpu_node_whose_nvml_answers_reads_no_slurm_conf(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("slurm.conf read on a node whose NVML answers")
    monkeypatch.setattr(expect, "read_slurm", boom)
    rep = run.run_level("quick", "cpu01", _config(tmp_path), reader=lambda n, p: NodeSample(node=n), now=time.time(),
                        env={})
    assert not rep.healthy       # no GPUs visible where 8 are expected: as before, nothing new asked
