"""A health run end to end without daemons: deadline, crashing probes, state file, drain decisions."""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import replace

import pytest

from slurm_ft.config import Config, HealthConfig, LifecycleConfig, NodeType
from slurm_ft.errors import ConfigError, UsageError
from slurm_ft.node import drain as dr
from slurm_ft import vocab
from slurm_ft.node import host, levels, run, state as st
from slurm_ft.node.probes import ProbeContext
from slurm_ft.finding import Action, Finding, Severity
from slurm_ft.gpu.sample import EccCounts, GpuSample, NodeSample, Pcie, RowRemap, XidEvent
from slurm_ft.slurm.types import Node
from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path


def gpus(changes=None, n=8):
    changes = changes or {}
    out = []
    for i in range(n):
        g = GpuSample(index=i, pci_bus_id=f"00000000:{0x18 + i:02x}:00.0", ecc=EccCounts(0, 0, 0, 0),
                      remap=RowRemap(), pcie=Pcie(5, 5, 16, 16), temperature_c=40, clock_event_reasons=0)
        out.append(replace(g, **changes.get(i, {})))
    return tuple(out)


def config(tmp_path, **health) -> Config:
    """A node's config in tmp_path; the drain-rate breaker off (its tests give it a fleet to count)."""
    health.setdefault("node_types", {"default": NodeType(nvlinks_per_gpu=0)})   # samples carry no NVLinks
    hc = HealthConfig(kmsg_path=str(tmp_path / "{node}.kmsg"), state_file=str(tmp_path / "state" / "{node}.json"),
                      disk_paths=(str(tmp_path),), **health)
    return Config(health=hc, state_dir=str(tmp_path / "fleet"),
                  lifecycle=LifecycleConfig(breaker_max_share=0.0, breaker_max_nodes=0))


def reader_for(sample_gpus):
    return lambda node, parts: NodeSample(node=node, gpus=sample_gpus)


def test_level_check_lists_and_unknown_level():
    assert levels.checks_for("quick") == ("inventory", "xid", "ecc", "remap", "retired", "pcie", "recovery_action")
    assert "processes" in levels.checks_for("epilog") and "processes" not in levels.checks_for("prolog")
    assert levels.checks_for("burnin")[-1] == "burnin"
    with pytest.raises(UsageError):
        levels.checks_for("deep")
    with pytest.raises(UsageError, match="unknown check"):
        levels.checks_for("quick", {"quick": ("inventory", "nope")})
    assert "nvlink_errors" not in levels.nvml_parts(levels.checks_for("prolog"), "prolog")
    assert "nvlink_errors" in levels.nvml_parts(levels.checks_for("full"), "full")


def test_healthy_node_reports_ok_line_per_check(tmp_path):
    (tmp_path / "gpu001.kmsg").write_text("")      # a missing kernel log is an error finding
    rep = run.run_level("quick", "gpu001", config(tmp_path), reader=reader_for(gpus()), now=1000.0)
    assert rep.healthy and rep.exit_code == 0
    assert [f.check for f in rep.findings] == list(levels.checks_for("quick"))
    assert all(f.severity is Severity.OK for f in rep.findings)
    d = rep.to_dict()
    assert set(d) >= {"node", "level", "healthy", "elapsed_s", "findings"}


def test_fail_finding_gives_exit_1(tmp_path):
    rep = run.run_level("quick", "gpu001", config(tmp_path),
                        reader=reader_for(gpus({2: {"ecc": EccCounts(0, 3, 0, 3)}})), now=1000.0)
    assert not rep.healthy and rep.exit_code == 1
    assert [(f.code, f.gpu) for f in rep.findings if f.severity is Severity.FAIL] == [("ECC_DBE", 2)]


def test_hung_nvml_call_is_an_error_finding_within_the_deadline(tmp_path):
    release = threading.Event()

    def hung(node, parts):
        release.wait(30)
        return NodeSample(node=node)

    t0 = time.monotonic()
    rep = run.run_level("quick", "gpu001", config(tmp_path), reader=hung, deadline_s=0.3)
    release.set()
    assert time.monotonic() - t0 < 1.5
    assert rep.hung and rep.healthy        # an error, never a drain
    assert [(f.severity, f.code) for f in rep.findings] == [(Severity.ERROR, "NVML_HUNG")]
    assert "NVML call hung" in rep.findings[0].reason


def test_reader_crash_is_an_error_finding(tmp_path):
    def broken(node, parts):
        raise RuntimeError("boom")
    rep = run.run_level("quick", "gpu001", config(tmp_path), reader=broken)
    assert rep.healthy and rep.findings[0].severity is Severity.ERROR and "boom" in rep.findings[0].reason


def test_crashing_probe_is_error_not_fail(monkeypatch):
    import slurm_ft.node.run as r

    def bad(sample, ctx):
        raise ZeroDivisionError("x")
    monkeypatch.setattr(r, "get_probe", lambda name: bad if name == "ecc" else (lambda s, c: []))
    out = r.judge(NodeSample(node="n"), ("inventory", "ecc"), ProbeContext())
    assert [(f.check, f.severity) for f in out] == [("inventory", Severity.OK), ("ecc", Severity.ERROR)]


def test_unreadable_kernel_log_is_an_error_for_xid_only(tmp_path):
    cfg = config(tmp_path)
    (tmp_path / "gpu001.kmsg").mkdir()          # a directory where the log should be: unreadable
    rep = run.run_level("quick", "gpu001", cfg, reader=reader_for(gpus()))
    by = {f.check: f for f in rep.findings}
    assert by["xid"].severity is Severity.ERROR and by["ecc"].severity is Severity.OK


def _kmsg_line(t: float, code: int, pci: str = "0000:1b:00") -> str:
    from slurm_ft.node import host
    usec = int((t - host.boot_time()) * 1e6)
    return f"4,1,{usec},-;NVRM: Xid (PCI:{pci}): {code}, pid=1, name=python, something\n"


def test_xid_in_kernel_log_is_mapped_to_its_gpu(tmp_path):
    now = time.time()
    (tmp_path / "gpu001.kmsg").write_text(_kmsg_line(now - 5, 79, "0000:1b:00") + _kmsg_line(now - 5, 13, "0000:18:00"))
    rep = run.run_level("quick", "gpu001", config(tmp_path), reader=reader_for(gpus()), now=now)
    xids = {f.code: f for f in rep.findings if f.check == "xid"}
    assert xids["XID79"].gpu == 3 and xids["XID79"].severity is Severity.FAIL
    assert xids["XID13"].gpu == 0 and xids["XID13"].severity is Severity.OK


def test_nvml_event_and_its_kernel_log_line_are_one_fault_a_later_one_is_another(tmp_path):
    now = time.time()
    (tmp_path / "gpu001.kmsg").write_text(_kmsg_line(now - 1, 79, "0000:1b:00"))
    same = XidEvent(79, gpu=3, source="nvml", timestamp=now - 0.5)
    rep = run.run_level("quick", "gpu001", config(tmp_path), reader=reader_for(gpus()), now=now, extra_xids=[same])
    assert [f.reason for f in rep.findings if f.code == "XID79"] == ["GPU has fallen off the bus"]
    later = XidEvent(79, gpu=3, source="nvml", timestamp=now + 30)
    rep = run.run_level("quick", "gpu001", config(tmp_path), reader=reader_for(gpus()), now=now + 30,
                        extra_xids=[later])
    assert [f.reason for f in rep.findings if f.code == "XID79"] == ["GPU has fallen off the bus x2"]


def test_epilog_judges_only_xids_since_the_job_started(tmp_path):
    cfg = config(tmp_path)
    t_job = time.time() - 100
    (tmp_path / "gpu001.kmsg").write_text(_kmsg_line(t_job - 50, 79))
    run.check_node("prolog", "gpu001", cfg, reader=reader_for(gpus()), job_id="42", now=t_job)
    rep = run.check_node("epilog", "gpu001", cfg, reader=reader_for(gpus()), job_id="42")
    assert not [f for f in rep.findings if f.code == "XID79"]     # before the job: not this job's fault
    with open(tmp_path / "gpu001.kmsg", "a") as fh:
        fh.write(_kmsg_line(t_job + 10, 79))
    rep = run.check_node("epilog", "gpu001", cfg, reader=reader_for(gpus()), job_id="42")
    assert [f.code for f in rep.findings if f.severity is Severity.FAIL] == ["XID79"]


def test_state_file_is_root_only_and_unsafe_one_refused(tmp_path):
    cfg = config(tmp_path)
    run.check_node("quick", "gpu001", cfg, reader=reader_for(gpus({1: {"remap": RowRemap(pending=True)}})))
    p = tmp_path / "state" / "gpu001.json"
    assert oct(p.stat().st_mode & 0o777) == "0o600"
    data = json.loads(p.read_text())
    assert [(a["code"], a["gpu"], a["level"]) for a in data["active"]] == [("REMAP_PENDING", 1, "quick")]
    os.chmod(p, 0o666)
    with pytest.raises(ConfigError, match="writable by others"):
        st.load(p)


def test_state_keeps_findings_a_level_could_not_recheck():
    s = st.empty("n")
    st.record(s, "epilog", levels.checks_for("epilog"),
              [Finding("processes", Severity.FAIL, "left", "GPU_PROC_LEFT", 0, Action.DRAIN)], 1.0)
    st.record(s, "quick", levels.checks_for("quick"), [], 2.0)
    assert [f.code for f in st.active(s)] == ["GPU_PROC_LEFT"]       # quick cannot see processes
    st.record(s, "epilog", levels.checks_for("epilog"), [], 3.0)
    assert st.active(s) == []


def test_app_xid_history_counts_distinct_jobs():
    s = st.empty("n")
    f = Finding("xid", Severity.OK, "app", "XID13", 3, Action.NONE)
    for job in ("1", "2", "2", "3"):
        st.record(s, "epilog", ("xid",), [f], 1.0, job_id=job)
    assert st.xid_history(s) == {(3, 13): 3}


def test_node_type_by_hostlist_and_glob():
    hc = HealthConfig(node_types={"default": NodeType(), "a100": NodeType(gpus=4, nvlinks_per_gpu=12)},
                      node_type_of={"gpu[001-004]": "a100", "cpu*": "default"})
    assert run.node_type_for("gpu003", hc)[0] == "a100"
    assert run.node_type_for("gpu005", hc)[0] == "default"
    bad = replace(hc, node_type_of={"gpu*": "h200"})
    with pytest.raises(ConfigError, match="unknown node type"):
        run.node_type_for("gpu001", bad)


# --- drain decisions, against a stub client (the Slurm side is covered by the lab tests) -----------

def one_node(node: Node, others=()) -> FakeSlurm:
    """The shared fake holding `node` (and `others`), in no partition."""
    s = FakeSlurm(train=(), spares=(), others=[x.name for x in (node, *others)])
    s.n.update({x.name: x for x in (node, *others)})
    return s


def decide_and_apply(c: FakeSlurm, findings, *, checks, active=(), config=None, now=0.0) -> dr.Outcome:
    """A check's drain step for gpu001: decide over the node as Slurm shows it, then write that."""
    plan = dr.decide(c.node("gpu001"), findings, checks=checks, active=active)
    return dr.apply(c, "gpu001", plan, config=config, now=now)


XID79 = Finding("xid", Severity.FAIL, "GPU has fallen off the bus", "XID79", 3, Action.REBOOT)
ECC = Finding("ecc", Severity.FAIL, "uncorrectable ECC errors (volatile 2)", "ECC_DBE", 5, Action.RESET_GPU)


def test_reason_names_code_gpu_and_cause_and_fits():
    assert dr.reason_text([ECC, XID79]) == "slurm-ft: XID79 gpu3 GPU has fallen off the bus (+1 more)"
    long = Finding("disk", Severity.FAIL, "x" * 300 + "=|\u00e9", "DISK_FULL", None, Action.DRAIN)
    r = dr.reason_text([long])
    assert len(r) <= vocab.REASON_MAX and r.startswith("slurm-ft: DISK_FULL ") and r.isascii()


def test_fail_drains_a_healthy_node_once():
    c = one_node(Node("gpu001", "IDLE"))
    out = decide_and_apply(c, [XID79], checks=("xid",))
    assert out.action == "drained" and c.calls == [("drain", ("gpu001",), "slurm-ft: XID79 gpu3 GPU has fallen off the bus")]
    out = decide_and_apply(c, [XID79], checks=("xid",))
    assert out.action == "kept" and len(c.calls) == 1


def test_admin_drain_is_never_touched():
    c = one_node(Node("gpu001", "IDLE", frozenset({"DRAIN"}), reason="bad DIMM, ticket 42"))
    assert decide_and_apply(c, [XID79], checks=("xid",)).action == "left"
    assert decide_and_apply(c, [], checks=levels.checks_for("full")).action == "none"
    assert c.calls == []


def test_an_admins_down_node_keeps_its_reason_slurms_own_down_gets_ours():
    """`scontrol update State=DOWN Reason="admin: ..."`: the admin's node, even when a check finds a fault
    there (the check reports it); a node Slurm set DOWN for not answering is drained with the finding."""
    c = one_node(Node("gpu001", "DOWN", reason="admin: DIMM swap, ticket 4711"))
    assert decide_and_apply(c, [XID79], checks=("xid",)).action == "left" and c.calls == []
    assert dr.decide(Node("gpu001", "DOWN", reason="Not responding"), [XID79], checks=("xid",)).action == "drain"


def test_prolog_error_drain_gets_the_exact_reason():
    c = one_node(Node("gpu001", "IDLE", frozenset({"DRAIN"}), reason="Prolog error"))
    out = decide_and_apply(c, [], checks=("inventory",), active=[ECC])
    assert out.action == "reason_updated" and c.node("gpu001").reason.startswith("slurm-ft: ECC_DBE gpu5")


def test_resume_only_own_drain_and_only_when_the_level_saw_it_clear():
    c = one_node(Node("gpu001", "IDLE", frozenset({"DRAIN"}), reason="slurm-ft: NVLINK_DOWN gpu1 17 of 18"))
    assert decide_and_apply(c, [], checks=levels.checks_for("quick")).action == "kept"   # quick has no nvlink
    assert decide_and_apply(c, [], checks=levels.checks_for("full")).action == "resumed"
    assert c.calls == [("resume", ("gpu001",))]


def test_active_finding_from_another_level_blocks_resume():
    c = one_node(Node("gpu001", "IDLE", frozenset({"DRAIN"}), reason="slurm-ft: GPU_PROC_LEFT gpu0 left"))
    left = Finding("processes", Severity.FAIL, "left", "GPU_PROC_LEFT", 0, Action.DRAIN)
    out = decide_and_apply(c, [], checks=levels.checks_for("quick"), active=[left])
    assert out.action == "kept" and c.calls == []


@pytest.mark.parametrize("state, reason, findings, action", [
    (frozenset(), "", [XID79], "drain"),
    (frozenset({"DRAIN"}), "slurm-ft: XID79 gpu3 GPU has fallen off the bus", [XID79], "kept"),
    (frozenset({"DRAIN"}), "slurm-ft: ECC_DBE gpu5 old", [XID79], "reason_updated"),
    (frozenset({"DRAIN"}), "Epilog error", [XID79], "reason_updated"),
    (frozenset({"DRAIN"}), "slurm-ft: QUARANTINED incident 4", [XID79], "kept"),
    (frozenset({"DRAIN"}), "bad DIMM, ticket 42", [XID79], "left"),
    (frozenset({"DRAIN"}), "slurm-ft: XID79 gpu3 GPU has fallen off the bus", [], "resumed"),
    (frozenset({"DRAIN"}), "slurm-ft: QUARANTINED incident 4", [], "kept"),
    (frozenset(), "", [], "none"),
])
def test_the_drain_decision_is_a_function_of_the_node_as_slurm_shows_it(state, reason, findings, action):
    node = Node("gpu001", "IDLE", state, reason=reason)
    assert dr.decide(node, findings, checks=levels.checks_for("quick")).action == action


def test_gate_refusal_leaves_node_in_service(tmp_path):
    cfg = replace(config(tmp_path), lifecycle=LifecycleConfig(breaker_max_share=0.0, breaker_max_nodes=1))
    c = one_node(Node("gpu001", "IDLE"), [Node("gpu002", "IDLE", frozenset({"DRAIN"}), reason="slurm-ft: XID79 gpu0 x")])
    out = decide_and_apply(c, [XID79], checks=("xid",), config=cfg, now=time.time())
    assert out.action == "refused" and "limit 1" in out.message and c.calls == []


def test_builtin_gate_counts_slurm_ft_drains_in_slurm():
    cfg = Config(lifecycle=replace(LifecycleConfig(), breaker_max_share=0.0, breaker_max_nodes=2))
    drained = [Node(f"gpu00{i}", "IDLE", frozenset({"DRAIN"}), reason="slurm-ft: XID79 gpu0 x") for i in (2, 3)]
    c = one_node(Node("gpu001", "IDLE"), drained)
    g = dr.may_drain("gpu001", client=c, config=cfg, now=0.0)
    assert not g.allowed and "limit 2" in g.why


def test_builtin_gate_refuses_when_slurm_cannot_be_read():
    cfg = Config(lifecycle=replace(LifecycleConfig(), breaker_max_share=0.5, breaker_max_nodes=0))
    c = FakeSlurm(train=(), spares=(), others=["gpu001"])
    c.fleet_reads_fail = True
    out = decide_and_apply(c, [XID79], checks=("xid",), config=cfg, now=0.0)
    assert out.action == "refused" and "unknown" in out.message and c.calls == []


def test_unchanged_result_does_not_rewrite_the_state_file(tmp_path):
    cfg = config(tmp_path)
    (tmp_path / "gpu001.kmsg").write_text("")
    run.check_node("quick", "gpu001", cfg, reader=reader_for(gpus()), now=1.0)
    p = tmp_path / "state" / "gpu001.json"
    first = p.stat().st_mtime_ns, p.read_text()
    time.sleep(0.01)
    run.check_node("quick", "gpu001", cfg, reader=reader_for(gpus()), now=2.0)
    assert (p.stat().st_mtime_ns, p.read_text()) == first
    run.check_node("quick", "gpu001", cfg, reader=reader_for(gpus({0: {"remap": RowRemap(failure=True)}})), now=3.0)
    assert json.loads(p.read_text())["last"]["quick"] == {"healthy": False, "codes": ["REMAP_FAILURE"], "since": 3.0}


def test_healthy_drain_run_asks_slurm_only_while_a_drain_of_ours_may_be_on(tmp_path):
    cfg = config(tmp_path)
    c = one_node(Node("gpu001", "IDLE"))
    asked = []
    real_node = c.node
    c.node = lambda name: asked.append(name) or real_node(name)
    run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()))
    run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()))
    assert len(asked) == 1                       # first run learns there is no drain of ours
    bad = reader_for(gpus({2: {"ecc": EccCounts(0, 1, 0, 1)}}))
    rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=bad)
    assert rep.drain["action"] == "drained" and c.node("gpu001").reason.startswith("slurm-ft: ECC_DBE gpu2")
    rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()))
    assert rep.drain["action"] == "resumed" and not c.node("gpu001").drained
    n = len(asked)
    run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()))
    assert len(asked) == n


def test_a_keep_off_node_is_checked_and_reported_but_never_drained_or_failed(tmp_path, caplog):
    cfg = replace(config(tmp_path), keep_off="gpu[001-002]")
    c = one_node(Node("gpu001", "IDLE"))
    bad = reader_for(gpus({2: {"ecc": EccCounts(0, 1, 0, 1)}}))
    rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=bad)
    assert not rep.healthy and rep.drain["action"] == "left"
    assert rep.drain["message"].startswith("gpu001 is in keep_off: slurm-ft leaves it alone (would be: drain gpu001")
    assert not c.node("gpu001").drained and not [x for x in c.calls if x[0] == "drain"]
    assert "keep_off: gpu001 is in keep_off" in caplog.text
    # the hooks' verdict: no VERDICT line, so Slurm does not drain it for us either
    assert run.takes_the_node_out(rep, cfg, "gpu001", drain=False) == (
        False, "gpu001 is in keep_off: slurm-ft does not take it out")
    # an earlier drain of ours stays as it is: no resume either
    c.drain(["gpu001"], "slurm-ft: ECC_DBE gpu2 old")
    plan = dr.decide(c.node("gpu001"), [], checks=levels.checks_for("full"), keep_off=True)
    assert plan.action == "left" and "(would be: resumed gpu001" in plan.message


def test_example_config_loads_equals_defaults_and_documents_every_key():
    import dataclasses
    from pathlib import Path as P

    import yaml as _yaml

    from slurm_ft.config import load_config
    path = P(__file__).resolve().parents[2] / "etc" / "slurm-ft.yaml"
    cfg = load_config(str(path))
    assert dataclasses.replace(cfg, path=None) == Config()
    data = _yaml.safe_load(path.read_text())

    def walk(cls, mapping, where):
        for f in dataclasses.fields(cls):
            if f.name == "path" and cls is Config:
                continue
            assert f.name in mapping, f"etc/slurm-ft.yaml lacks {where}{f.name}"
            value = getattr(cls(), f.name)
            if dataclasses.is_dataclass(value):
                walk(type(value), mapping[f.name], f"{where}{f.name}.")
    walk(Config, data, "")
    walk(NodeType, data["health"]["node_types"]["default"], "health.node_types.default.")


def test_config_values_the_types_cannot_check(tmp_path):
    bad = config(tmp_path)
    bad = replace(bad, health=replace(bad.health, deadline_s={"quik": 1.0}))
    with pytest.raises(ConfigError, match="health.deadline_s.quik"):
        run.run_level("quick", "n", bad, reader=reader_for(gpus()))
    from slurm_ft.config import BurninConfig
    bad = config(tmp_path)
    bad = replace(bad, health=replace(bad.health, burnin=BurninConfig(backend="cuda")))
    with pytest.raises(ConfigError, match="health.burnin.backend"):
        run.run_level("quick", "n", bad, reader=reader_for(gpus()))


def test_nvml_query_error_is_an_error_finding_for_its_check(tmp_path):
    sample = gpus({4: {"errors": ("ecc: Insufficient Permissions",), "ecc": None}})
    rep = run.run_level("quick", "gpu001", config(tmp_path), reader=reader_for(sample))
    ecc = [f for f in rep.findings if f.check == "ecc"]
    assert [(f.severity, f.gpu, f.code) for f in ecc] == [(Severity.ERROR, 4, "NVML_QUERY_ERROR")]
    assert rep.healthy


def test_watch_runs_the_quick_check_only_for_a_fatal_xid(tmp_path):
    from slurm_ft.node.watch import Watcher
    calls = []

    def fake_check(level, node, cfg, **kw):
        calls.append((level, node, kw["drain"], [e.xid for e in kw["extra_xids"]]))
        return run.Report(node, level, [], 0.0)

    w = Watcher("gpu001", config(tmp_path), use_nvml=False, use_kmsg=False, check=fake_check)
    h = w.handle([XidEvent(13, "0000:18:00", 0), XidEvent(31, "0000:18:00", 0)])
    assert not h.fatal and calls == []
    for e in (XidEvent(13, gpu=0), XidEvent(79, gpu=2), XidEvent(48, gpu=5)):
        w.events.put(e)
    assert w.run(once=True, timeout=2.0) == 1
    assert calls == [("quick", "gpu001", True, [79, 48])]      # one check for the burst


def test_watch_follows_a_growing_kernel_log(tmp_path):
    from slurm_ft.node.watch import Watcher
    cfg = config(tmp_path)
    log = tmp_path / "gpu001.kmsg"
    log.write_text(_kmsg_line(time.time() - 3600, 79))          # old: before the watcher started
    seen = []
    w = Watcher("gpu001", cfg, use_nvml=False, poll_s=0.02,
                check=lambda level, node, c, **kw: seen.append(kw["extra_xids"]) or run.Report(node, level, [], 0))
    w.start()                   # returns once it follows the log: what is written next is seen
    try:
        with open(log, "a") as fh:
            fh.write(_kmsg_line(time.time(), 74, "0000:1a:00"))
        assert w.run(once=True, timeout=5.0) == 1
    finally:
        w.stop()
    assert [[(e.xid, e.pci_bus_id) for e in batch] for batch in seen] == [[(74, "0000:1a:00")]]


def test_the_hooks_check_never_imports_click(tmp_path):
    """`slurm-ft check` is what slurmd starts on every node at every job start and end: click's import
    was a third of its start-up."""
    import subprocess
    import sys
    cfg = tmp_path / "slurm-ft.yaml"
    cfg.write_text(f"health:\n  kmsg_path: {tmp_path}/k\n  state_file: {tmp_path}/s.json\n")
    os.chmod(cfg, 0o644)
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('click' in sys.modules, file=sys.stderr))\n"
            "from slurm_ft.cli import main\n"
            "main(['check', '--level', 'prolog', '--json', '--node', 'n1'])\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, SLURM_FT_CONFIG=str(cfg)))
    assert json.loads(p.stdout)["level"] == "prolog" and p.stderr.splitlines()[-1] == "False", p.stderr


def test_cli_exits_on_a_hung_nvml_call_without_waiting_for_it(tmp_path):
    import subprocess
    import sys
    cfg = tmp_path / "slurm-ft.yaml"
    cfg.write_text(f"health:\n  deadline_s: {{quick: 0.5}}\n  kmsg_path: {tmp_path}/k\n"
                   f"  state_file: {tmp_path}/s.json\n")
    os.chmod(cfg, 0o644)
    code = ("import time, slurm_ft.node.gather as g\n"
            "g.nvml_reader = lambda node, parts: time.sleep(3600)\n"
            "from slurm_ft.cli import main\n"
            f"main(['--config', {str(cfg)!r}, 'check', '--level', 'quick', '--json', '--node', 'n1'])\n")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert time.monotonic() - t0 < 10
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["findings"][0]["code"] == "NVML_HUNG" and out["healthy"] is True


def test_cli_check_json_and_exit_codes_on_the_fake_nvml(fake_nvml_env):
    """The real pynvml over the lab's fake libnvidia-ml.so.1: healthy -> 0, an injected fault -> 1."""
    import subprocess
    import sys
    env, state = fake_nvml_env
    argv = [sys.executable, "-m", "slurm_ft", "check", "--level", "quick", "--json", "--node", "n1"]
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["healthy"] and out["node"] == "n1" and out["level"] == "quick" and out["elapsed_s"] < 5
    state.write_text("gpu 6 remap_failure 1\n")
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 1
    fails = [(f["code"], f["gpu"], f["action"]) for f in json.loads(p.stdout)["findings"] if f["severity"] == "fail"]
    assert fails == [("REMAP_FAILURE", 6, "rma")]
    bad = subprocess.run(argv[:-2] + ["--level", "deep"], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2


def test_without_nvml_gpu_checks_say_not_checked_but_kernel_log_xids_still_count(tmp_path):
    now = time.time()
    (tmp_path / "gpu001.kmsg").write_text(_kmsg_line(now - 5, 79))
    no_nvml = lambda node, parts: NodeSample(node=node, nvml_error="NVIDIA kernel driver not loaded")  # noqa: E731
    (tmp_path / "slurm.conf").write_text("NodeName=gpu001 Gres=gpu:8\n")    # a GPU node: no NVML is a fault
    rep = run.run_level("quick", "gpu001", config(tmp_path), reader=no_nvml, now=now,
                        env={"SLURM_CONF": str(tmp_path / "slurm.conf")})
    by = {}
    for f in rep.findings:
        by.setdefault(f.check, []).append(f)
    assert by["inventory"][0].code == "NVML_INIT" and by["ecc"][0].code == "NOT_CHECKED"
    assert by["xid"][0].code == "XID79" and by["xid"][0].severity is Severity.FAIL


def test_watch_checks_at_once_when_nvml_stops_delivering_events(tmp_path):
    from slurm_ft.node.watch import CHECK_NOW, Watcher
    calls = []
    w = Watcher("gpu001", config(tmp_path), use_nvml=False, use_kmsg=False,
                check=lambda level, node, c, **kw: calls.append(kw["extra_xids"]) or run.Report(node, level, [], 0))
    h = w.handle([CHECK_NOW])
    assert h.fatal and calls == [[]]


def test_lifecycle_reasons_are_neither_rewritten_nor_resumed():
    c = one_node(Node("gpu001", "IDLE", frozenset({"DRAIN"}), reason="slurm-ft: QUARANTINED after XID79 (job 12)"))
    assert decide_and_apply(c, [ECC], checks=("ecc",)).action == "kept"
    assert decide_and_apply(c, [], checks=levels.checks_for("burnin")).action == "kept"
    assert c.calls == [] and c.node("gpu001").reason.startswith("slurm-ft: QUARANTINED")


def test_xids_before_an_admin_resume_are_acknowledged_new_ones_drain_again(tmp_path):
    cfg = config(tmp_path)
    now = time.time()
    kmsg = tmp_path / "gpu001.kmsg"
    kmsg.write_text(_kmsg_line(now - 60, 79))
    c = one_node(Node("gpu001", "IDLE"))
    rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()), now=now - 50)
    assert rep.drain["action"] == "drained"
    c.n["gpu001"] = replace(c.n["gpu001"], flags=frozenset(), reason="")          # an admin reset the GPU and resumed the node
    rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()), now=now - 40)
    assert rep.healthy and not c.node("gpu001").drained, rep.findings
    rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()), now=now - 30)
    assert rep.healthy and not c.node("gpu001").drained
    with open(kmsg, "a") as fh:                                 # the fault comes back
        fh.write(_kmsg_line(now - 20, 79))
    rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()), now=now - 10)
    assert rep.drain["action"] == "drained" and c.node("gpu001").reason.startswith("slurm-ft: XID79")


def test_the_node_sides_drain_plan_is_a_function_of_report_state_file_and_slurms_node(tmp_path):
    cfg = config(tmp_path)
    now = time.time()
    (tmp_path / "gpu001.kmsg").write_text(_kmsg_line(now - 60, 79))
    rep = run.run_level("quick", "gpu001", cfg, reader=reader_for(gpus()), now=now)
    ours = Node("gpu001", "IDLE", frozenset({"DRAIN"}), reason=dr.reason_text(rep.findings))
    resumed = Node("gpu001", "IDLE")
    # still drained by us: keep it, acknowledge nothing
    plan = run.drain_plan(rep, {"slurm_ft_drained": True, "drained_seen": now - 50}, ours, [], cfg, now)
    assert plan.acknowledged is None and plan.decision.action == "kept" and dr.fails(plan.findings)
    # resumed behind our back: the Xid logged before our drain was last seen no longer counts
    plan = run.drain_plan(rep, {"slurm_ft_drained": True, "drained_seen": now - 50}, resumed, [], cfg, now)
    assert plan.acknowledged == now - 50 and not dr.fails(plan.findings) and plan.decision.action == "none"
    # no drain of ours, nothing wrong: nothing to ask Slurm, which need not have been read
    healthy = run.run_level("quick", "gpu001", config(tmp_path / "clean"), reader=reader_for(gpus()), now=now)
    assert run.drain_plan(healthy, {"slurm_ft_drained": False}, None, [], cfg, now).decision is None


def test_epilog_counts_only_gpu_processes_that_outlive_the_grace_period(tmp_path):
    cfg = config(tmp_path, process_grace_s=0.6)
    t0 = time.monotonic()

    def reader(node, parts):      # pid 111 exits 0.3 s in (a job tearing down); pid 222 never does
        procs = (111, 222) if time.monotonic() - t0 < 0.3 else (222,)
        return NodeSample(node=node, gpus=gpus({1: {"processes": procs}}))

    rep = run.run_level("epilog", "gpu001", cfg, reader=reader)
    [f] = [f for f in rep.findings if f.check == "processes"]
    assert f.severity is Severity.FAIL and "222" in f.reason and "111" not in f.reason
    t0 = time.monotonic() - 10                                   # both gone: nothing left
    rep = run.run_level("epilog", "gpu001", cfg,
                        reader=lambda node, parts: NodeSample(node=node, gpus=gpus({1: {"processes": ()}})))
    assert [f.severity for f in rep.findings if f.check == "processes"] == [Severity.OK]


@pytest.mark.parametrize("rc,verdict,prolog_rc", [(0, False, 0), (1, True, 1), (1, False, 0), (2, False, 0),
                                                   (3, False, 0), (70, True, 0)])
def test_shims_fail_slurm_only_on_a_fail_finding(tmp_path, rc, verdict, prolog_rc):
    """Only exit 1 with a verdict line (a fail finding within the breaker) fails a prolog/epilog; slurm-ft's
    own errors must not drain nodes; the HealthCheckProgram always exits 0. Minimal environment."""
    import subprocess
    from pathlib import Path as P
    root = P(__file__).resolve().parents[2]
    fake = tmp_path / "slurm-ft"
    say = "echo 'slurm-ft-verdict: FAIL slurm-ft: XID79 gpu1 x'\n" if verdict else ""
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/argv\n{say}exit {rc}\n")
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "SLURM_FT_BIN": str(fake), "SLURM_JOB_ID": "7"}
    for shim, want, level in (("prolog.d/50-slurm-ft", prolog_rc, "prolog"),
                              ("epilog.d/50-slurm-ft", prolog_rc, "epilog"),
                              ("healthcheck/slurm-ft-healthcheck", 0, "quick")):
        p = subprocess.run([str(root / shim)], env=env, capture_output=True, text=True, timeout=30)
        assert p.returncode == want, (shim, rc, p.stderr)
        assert (tmp_path / "argv").read_text().splitlines()[-1].startswith(f"check --level {level}")
    assert "--drain" in (tmp_path / "argv").read_text().splitlines()[-1]
    assert "--drain" not in (tmp_path / "argv").read_text().splitlines()[0]   # prologs never call Slurm


def test_infiniband_read_from_a_sysfs_tree_under_the_configured_root(tmp_path):
    root = tmp_path / "gpu001-root"
    for dev, state, phys in (("mlx5_0", "4: ACTIVE", "5: LinkUp"), ("mlx5_1", "1: DOWN", "3: Disabled")):
        port = root / "sys/class/infiniband" / dev / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "phys_state").write_text(phys + "\n")
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
        (port / "link_layer").write_text("InfiniBand\n")
    cfg = config(tmp_path, sysfs_root=str(tmp_path / "{node}-root"),
                 node_types={"default": NodeType(nvlinks_per_gpu=0, ib_ports=2, ib_rate_gbps=400)})
    rep = run.run_level("full", "gpu001", replace(cfg, health=replace(cfg.health, thresholds=replace(
        cfg.health.thresholds, clock_event_samples=1))), reader=reader_for(gpus()))
    [ib] = [f for f in rep.findings if f.check == "infiniband"]
    assert ib.severity is Severity.FAIL and "1 of 2 IB ports up" in ib.reason and "mlx5_1:1 DOWN/Disabled" in ib.reason


def test_a_host_reader_that_breaks_is_an_error_of_its_checks_alone_never_a_drain(tmp_path, monkeypatch):
    """A reader that raises (a bug, a hung mount the reader did not expect) leaves the checks that name
    it an error finding; the run goes on, the other checks judge, nothing is drained."""
    def boom(ctx):
        raise OSError(5, "Input/output error")
    monkeypatch.setitem(host.READERS, "disk", boom)
    cfg = config(tmp_path)
    c = one_node(Node("gpu001", "IDLE"))
    rep = run.check_node("prolog", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()))
    [disk] = [f for f in rep.findings if f.check == "disk"]
    assert (disk.severity, disk.code) == (Severity.ERROR, "CHECK_ERROR") and "Input/output error" in disk.reason
    assert rep.healthy and c.calls == [] and {f.check for f in rep.findings} >= {"ecc", "nvlink", "temperature"}


def test_a_new_xid_right_after_a_resume_drains_at_once(tmp_path):
    """The watcher's case: drained, resumed by an admin, the fault recurs, the next check runs before
    any healthy one: the new Xid is not acknowledged with the old ones."""
    cfg = config(tmp_path)
    now = time.time()
    kmsg = tmp_path / "gpu001.kmsg"
    kmsg.write_text(_kmsg_line(now - 60, 79))
    c = one_node(Node("gpu001", "IDLE"))
    run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()), now=now - 50)
    c.n["gpu001"] = replace(c.n["gpu001"], flags=frozenset(), reason="")           # resumed
    with open(kmsg, "a") as fh:
        fh.write(_kmsg_line(now - 20, 79, "0000:1c:00"))
    rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()), now=now - 10)
    assert rep.drain["action"] == "drained" and c.node("gpu001").reason.startswith("slurm-ft: XID79 gpu4"), rep.findings


def test_a_resume_by_somebody_else_drops_findings_only_another_level_could_clear(tmp_path):
    cfg = config(tmp_path)
    c = one_node(Node("gpu001", "IDLE"))
    left = gpus({1: {"processes": (4242,)}})
    run.check_node("epilog", "gpu001", replace(cfg, health=replace(cfg.health, process_grace_s=0.0)),
                   reader=reader_for(left), job_id="5")
    rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()))
    assert rep.drain["action"] == "drained" and "GPU_PROC_LEFT" in c.node("gpu001").reason   # quick cannot clear it
    rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()))
    assert rep.drain["action"] == "kept"
    c.n["gpu001"] = replace(c.n["gpu001"], flags=frozenset(), reason="")           # an admin killed it and resumed the node
    rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()))
    assert not c.node("gpu001").drained and st.active(st.load(tmp_path / "state" / "gpu001.json")) == []


def test_overlapping_checks_neither_undo_a_drain_nor_hide_its_xid(tmp_path):
    """Two --drain checks on one node at once (its HealthCheckProgram and a manual check): the older
    one sampled the node before an XID79, the newer one after. The older run must not resume the drain
    the newer one makes, or the next check takes that resume for an admin's, acknowledges the Xid and
    reports the faulty node healthy (seen in the lab with 8 checks at once, every node at XID79)."""
    cfg = config(tmp_path)
    now = time.time()
    kmsg = tmp_path / "gpu001.kmsg"
    kmsg.write_text("")
    asking, drained, old_done = threading.Event(), threading.Event(), threading.Event()

    class RacingSlurm(FakeSlurm):
        def node(self, name):
            if threading.current_thread().name == "old-check":
                asking.set()
                drained.wait(1.0)        # the old run reads the node just after the new run drained it
            return super().node(name)

        def drain(self, nodes, reason):
            super().drain(nodes, reason)
            drained.set()
            old_done.wait(1.0)           # ... and acts before the new run notes its drain in the state

    c = RacingSlurm(train=(), spares=(), others=["gpu001"])
    old = {}

    def old_check():
        try:
            old["report"] = run.check_node("quick", "gpu001", cfg, drain=True, client=c,
                                           reader=reader_for(gpus()), now=now)
        finally:
            old_done.set()

    t = threading.Thread(target=old_check, name="old-check")
    t.start()
    assert asking.wait(10)                                   # the old run has its (healthy) sample
    kmsg.write_text(_kmsg_line(now + 0.5, 79))               # the fault
    new = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()), now=now + 1)
    t.join(10)
    assert old["report"].healthy and not new.healthy
    assert c.node("gpu001").drained and c.node("gpu001").reason.startswith("slurm-ft: XID79 gpu3"), c.calls
    assert ("resume", ("gpu001",)) not in c.calls
    nxt = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()), now=now + 2)
    assert not nxt.healthy and nxt.drain["action"] == "kept", (nxt.findings, nxt.drain)


def test_a_healthy_run_older_than_our_drain_does_not_resume_it(tmp_path):
    """Serialised, the older run may still decide last: its sample predates the drain another check saw."""
    cfg = config(tmp_path)
    now = time.time()
    c = one_node(Node("gpu001", "IDLE"))
    (tmp_path / "gpu001.kmsg").write_text(_kmsg_line(now + 0.5, 79))
    assert run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()),
                          now=now + 1).drain["action"] == "drained"
    (tmp_path / "gpu001.kmsg").write_text("")                # what the older run saw: no Xid yet
    rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()), now=now)
    assert rep.healthy and rep.drain["action"] == "kept" and "started 1.0 s after this one" in rep.drain["message"]
    assert c.node("gpu001").drained and ("resume", ("gpu001",)) not in c.calls
    assert st.load(tmp_path / "state" / "gpu001.json")["drained_seen"] == now + 1   # not moved back


def test_without_a_known_drain_time_a_resume_acknowledges_no_xid(tmp_path):
    """A state that believes in a drain of ours but not when it was seen (a file from before
    `drained_seen`, or left over from before a repair) must not acknowledge a fault logged just now."""
    cfg = config(tmp_path)
    now = time.time()
    p = tmp_path / "state" / "gpu001.json"
    st.save(p, {**st.empty("gpu001"), "slurm_ft_drained": True})
    (tmp_path / "gpu001.kmsg").write_text(_kmsg_line(now - 1, 79))
    c = one_node(Node("gpu001", "IDLE"))                      # resumed (or never drained in this life)
    rep = run.check_node("quick", "gpu001", cfg, drain=True, client=c, reader=reader_for(gpus()), now=now)
    assert not rep.healthy and rep.drain["action"] == "drained" and c.node("gpu001").reason.startswith("slurm-ft: XID79")
    assert (st.load(p).get("xid_ack") or 0) < now - 1


def test_a_fail_verdict_takes_the_node_out_only_within_the_breaker(tmp_path):
    report = run.Report("gpu001", "prolog", [XID79], 0.1)
    # --drain: what the drain did decides
    assert run.takes_the_node_out(replace(report, drain={"action": "drained"}), config(tmp_path), "gpu001", True) == (True, "")
    assert run.takes_the_node_out(replace(report, drain={"action": "refused"}), config(tmp_path), "gpu001", True)[0] is False
    assert run.takes_the_node_out(report, config(tmp_path), "gpu001", True)[0] is False
    # a manual check's verdict is for a person: nothing acts on it
    assert run.takes_the_node_out(replace(report, level="full"), config(tmp_path), "gpu001", False) == (True, "")
    # a hook's asks the breaker: one node out already at a limit of one, so this one is not failed, and says why
    cfg = replace(config(tmp_path), lifecycle=LifecycleConfig(breaker_max_share=0.0, breaker_max_nodes=1))
    c = one_node(Node("gpu001", "IDLE"), [Node("gpu002", "IDLE", frozenset({"DRAIN"}), reason="slurm-ft: XID79 gpu0 x")])
    out, why = run.takes_the_node_out(report, cfg, "gpu001", False, client=c)
    assert out is False and "limit 1" in why
    assert run.takes_the_node_out(report, replace(cfg, lifecycle=LifecycleConfig(breaker_max_share=0.0, breaker_max_nodes=2)),
                                  "gpu001", False, client=c) == (True, "")
