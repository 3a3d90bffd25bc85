"""The node's side of a planned swap (issue 24): the watcher's soft-signal pass, the graceful PLANNED drain
within its hourly budget and the breaker, the `degraded` notice to the jobs; a fault on a node out for a
planned swap. Over the shared fake Slurm and hand-built NVML samples; the lab runs the real ones
(tests/lab/test_planned_lab.py)."""
from __future__ import annotations

import json
import os
import time
from dataclasses import replace

from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path
from slurm_ft.config import Config, ControllerConfig, HealthConfig, LifecycleConfig, NodeType, SoftSignals
from slurm_ft.finding import Action, Finding, Severity
from slurm_ft.gpu.sample import EccCounts, GpuSample, NodeSample, XidEvent
from slurm_ft.node import drain as dr, planned, run, softpass, state as st
from slurm_ft.node.watch import Watcher
from slurm_ft.vocab import parse_event, planned as is_planned

ECC = Finding("soft", Severity.WARN, "corrected ECC errors +1240 in 10 min (limit 1000 within 60 min)",
              "ECC_SBE_RATE", 3)


def cfg(tmp_path, per_hour=2, share=0.5, soft=None, **health):
    soft = soft or SoftSignals(window_s=600, ecc_corrected=100)
    return Config(state_dir=str(tmp_path / "state"),
                  health=HealthConfig(state_file=str(tmp_path / "{node}.json"), node_types={"default": NodeType(soft=soft)},
                                      **health),
                  controller=ControllerConfig(wake_port=0),
                  lifecycle=LifecycleConfig(planned_swaps_per_hour=per_hour, breaker_max_share=share))


def running_here(config, node, *jobs):
    with st.locked(st.path_for(config.health, node), node) as state:
        for j in jobs:
            st.job_started(state, str(j), 1.0)


def eight(node, **by_gpu):
    """A node's 8 GPUs, healthy but for `by_gpu` (index -> GpuSample fields)."""
    return NodeSample(node, tuple(GpuSample(i, **by_gpu.get(f"g{i}", {})) for i in range(8)))


def notices(s):
    return [(c[1], parse_event(c[2])) for c in s.calls if c[0] == "notify"]


def test_a_soft_finding_drains_the_node_gracefully_and_tells_its_jobs_degraded(tmp_path):
    s = FakeSlurm()
    s.add_job(2)                                   # gpu001, gpu002 ALLOCATED
    c = cfg(tmp_path)
    running_here(c, "gpu002", 100)
    out = planned.act(s, c, "gpu002", [ECC], time.time())
    assert out.action == "drained", out
    reason = "slurm-ft: PLANNED ECC_SBE_RATE gpu3 corrected ECC errors +1240 in 10 min (limit 1000 within 60 min)"
    assert out.reason == reason[:100].rstrip()
    assert [c_ for c_ in s.calls if c_[0] == "drain"] == [("drain", ("gpu002",), out.reason)]
    node = s.node("gpu002")
    assert node.drained and node.state == "ALLOCATED" and is_planned(node.reason)    # DRAINING: the job runs on
    assert s.j[100].state == "RUNNING" and not [c_ for c_ in s.calls if c_[0] in ("requeue", "cancel")]
    assert notices(s) == [(100, ("degraded", "gpu002", out.reason))]


def test_the_hourly_budget_counts_planned_drains_slurm_shows_and_refuses_past_it(tmp_path):
    s = FakeSlurm()
    c = cfg(tmp_path, per_hour=1)
    s.fail("gpu004", "slurm-ft: PLANNED XID_CONTAINED gpu1 Xid 94 x3 in 60 min (limit 3)")
    out = planned.act(s, c, "gpu002", [ECC], time.time())
    assert out.action == "refused" and "planned-swap budget used up: 1 planned drain(s)" in out.message
    assert not s.node("gpu002").drained and not notices(s)
    # a fault drain is the breaker's, not the budget's: it does not count here
    s.resume(["gpu004"])
    s.fail("gpu004")
    assert planned.act(s, c, "gpu003", [ECC], time.time()).action == "drained"


def test_an_old_planned_drain_left_the_hours_window_and_zero_turns_planned_swaps_off(tmp_path):
    s = FakeSlurm()
    s.fail("gpu004", "slurm-ft: PLANNED ECC_SBE_RATE gpu1 x")
    s.n["gpu004"] = replace(s.n["gpu004"], reason_time=time.strftime("%Y-%m-%dT%H:%M:%S",
                                                                        time.localtime(time.time() - 4000)))
    assert planned.budget(s.fleet_nodes(), "gpu002", time.time(), 1).allowed
    d = planned.budget(s.fleet_nodes(), "gpu002", time.time(), 0)
    assert not d.allowed and "off" in d.reason


def test_the_breaker_refuses_a_planned_drain_too(tmp_path):
    s = FakeSlurm()
    c = cfg(tmp_path, per_hour=10, share=0.2)       # 6 nodes: the breaker allows 1
    s.fail("gpu005")
    out = planned.act(s, c, "gpu002", [ECC], time.time())
    assert out.action == "refused" and "breaker" in out.message and not s.node("gpu002").drained


def test_an_unknown_count_drains_nothing(tmp_path):
    s = FakeSlurm()
    s.fleet_reads_fail = True
    out = planned.act(s, cfg(tmp_path), "gpu002", [ECC], time.time())
    assert out.action == "error" and not s.node("gpu002").drained


def test_a_node_drained_already_is_left_as_it_is_and_a_refused_try_waits_before_the_next(tmp_path):
    s = FakeSlurm()
    c = cfg(tmp_path)
    s.fail("gpu002")                                 # a fault drain: never rewritten to a planned one
    out = planned.act(s, c, "gpu002", [ECC], time.time())
    assert out.action == "left" and s.node("gpu002").reason.startswith("slurm-ft: XID79")
    t, reads = time.time(), len(s.reads)
    out = planned.act(s, c, "gpu002", [ECC], t + 60)
    assert out.action == "waiting" and len(s.reads) == reads     # no Slurm read before RETRY_S
    s.resume(["gpu002"])
    s.fail("gpu002", "slurm-ft: PLANNED ECC_SBE_RATE gpu3 y")
    assert planned.act(s, c, "gpu002", [ECC], t + planned.RETRY_S + 1).action == "already"


class Counters:
    """NVML reads of gpu3's corrected ECC count, `per_pass` more each time."""
    def __init__(self, per_pass):
        self.v, self.per_pass, self.parts = 0, per_pass, []

    def __call__(self, node, parts):
        self.parts.append(parts)
        self.v += self.per_pass
        return NodeSample(node, tuple(GpuSample(i, pci_bus_id=f"00000000:{0x18 + i:02x}:00.0",
                                                ecc=EccCounts(volatile_corrected=self.v if i == 3 else 0,
                                                              volatile_uncorrected=0))
                                      for i in range(8)))


def test_the_watchers_pass_reads_nvml_only_on_a_healthy_node_and_keeps_its_history_root_only(tmp_path):
    s = FakeSlurm()
    c = cfg(tmp_path)
    sp = softpass.SoftPass("gpu002", c, s, reader=Counters(per_pass=5))
    for i in range(5):
        res = sp.run(1000.0 + 60 * i)
        assert res.findings == [] and res.outcome is None and not res.error
    assert s.reads == [] and s.calls == []
    assert "nvlink_errors" not in sp.reader.parts[0] or c.health.node_types["default"].soft.nvlink_replay
    sp.save()
    p = softpass.history_path(c, "gpu002")
    assert oct(p.stat().st_mode & 0o777) == "0o600" and oct(p.parent.stat().st_mode & 0o777) == "0o700"
    again = softpass.SoftPass("gpu002", c, s, reader=Counters(per_pass=5)).load()
    assert len(again["samples"]) == 5


def test_a_climbing_count_drains_for_a_planned_swap_once_and_then_the_trend_starts_afresh(tmp_path):
    s = FakeSlurm()
    s.add_job(2)
    c = cfg(tmp_path)
    running_here(c, "gpu002", 100)
    sp = softpass.SoftPass("gpu002", c, s, reader=Counters(per_pass=60))
    results = [sp.run(1000.0 + 60 * i) for i in range(5)]
    # after the drain the trend starts afresh (what was counted is not counted again once the node returns);
    # while it is out, a finding again is not a second drain, nor a second notice
    assert [r.outcome.action if r.outcome else None for r in results] == [None, None, "drained", None, "waiting"]
    assert [f.code for f in results[2].findings] == ["ECC_SBE_RATE"]
    assert notices(s) == [(100, ("degraded", "gpu002", results[2].outcome.reason))]


def test_a_history_someone_else_could_write_is_refused_and_the_trends_start_afresh(tmp_path, caplog):
    c = cfg(tmp_path)
    p = softpass.history_path(c, "gpu002")
    p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    p.write_text(json.dumps({"version": 1, "node": "gpu002", "samples": [[1.0, {"3": [10**9]}]], "xids": []}))
    os.chmod(p, 0o666)
    assert softpass.SoftPass("gpu002", c, None).load()["samples"] == []
    p.write_text("{not json")
    os.chmod(p, 0o600)
    assert softpass.SoftPass("gpu002", c, None).load()["samples"] == []
    assert "start afresh" in caplog.text


def test_a_hung_nvml_read_skips_the_pass(tmp_path):
    c = cfg(tmp_path, deadline_s={"quick": 0.2, "prolog": 20.0, "epilog": 30.0, "full": 120.0, "burnin": 900.0})

    def hangs(node, parts):
        time.sleep(2)
        return NodeSample(node)
    res = softpass.SoftPass("gpu002", c, None, reader=hangs).run(1000.0)
    assert res.error.startswith("NVML read took over 0.2 s") and res.findings == []


def test_warn_class_hardware_xids_feed_the_trend_an_application_xid_does_not(tmp_path):
    s = FakeSlurm()
    c = cfg(tmp_path, soft=SoftSignals(xid_contained=2, ecc_corrected=0))
    sp = softpass.SoftPass("gpu002", c, s, reader=Counters(per_pass=0))
    w = Watcher("gpu002", c, client=s, use_nvml=False, use_kmsg=False, soft=sp,
                check=lambda *a, **k: (_ for _ in ()).throw(AssertionError("no fatal Xid here")))
    ev = lambda xid: XidEvent(xid=xid, pci_bus_id="0000:1b:00", source="kmsg", timestamp=990.0)   # gpu3
    w.handle([ev(94), ev(13), ev(31)])
    assert sp.run(1000.0).findings == []
    w.handle([ev(63)])
    [f] = sp.run(1060.0).findings
    assert (f.code, f.gpu) == ("XID_CONTAINED", 3) and "63, 94" in f.reason


def test_the_node_types_planned_code_warns_in_a_check_and_its_drain_step_takes_it_out_gracefully(tmp_path):
    s = FakeSlurm()
    c = cfg(tmp_path)
    reader = lambda node, parts: eight(node, g0={"recovery_action": 4}, g1={"recovery_action": 0})
    rep = run.check_node("quick", "gpu002", c, drain=True, client=s, reader=reader)
    [f] = [f for f in rep.findings if f.code.startswith("GPU_RECOVERY")]
    assert (f.severity, f.code, f.gpu) == (Severity.WARN, "GPU_RECOVERY_DRAIN_RESET", 0) and rep.healthy
    assert rep.planned["action"] == "drained" and s.node("gpu002").reason.startswith(
        "slurm-ft: PLANNED GPU_RECOVERY_DRAIN_RESET gpu0")
    # a gpu_reset (not a planned code) still fails the check and drains at once
    reader = lambda node, parts: eight(node, g0={"recovery_action": 1})
    assert not run.check_node("quick", "gpu003", c, drain=True, client=s, reader=reader).healthy


def test_a_fault_on_a_node_out_for_a_planned_swap_rewrites_the_reason_and_tells_its_jobs_it_failed(tmp_path):
    s = FakeSlurm()
    s.add_job(2)
    c = cfg(tmp_path)
    running_here(c, "gpu002", 100)
    s.fail("gpu002", "slurm-ft: PLANNED ECC_SBE_RATE gpu3 corrected ECC errors +1240 in 10 min")
    reader = lambda node, parts: eight(node, g3={"ecc": EccCounts(volatile_uncorrected=2)})
    rep = run.check_node("quick", "gpu002", c, drain=True, client=s, reader=reader)
    assert rep.drain["action"] == "reason_updated"
    assert s.node("gpu002").reason.startswith("slurm-ft: ECC_DBE gpu3")
    assert [n[1][0] for n in notices(s)] == ["failed"]


def test_a_lifecycle_reason_still_is_never_rewritten():
    from slurm_ft.slurm.types import Node
    fail = [Finding("ecc", Severity.FAIL, "uncorrectable", "ECC_DBE", 3, Action.RESET_GPU)]
    for reason in ("slurm-ft: QUARANTINED PLANNED ECC_SBE_RATE gpu3 x", "slurm-ft: QUARANTINED XID79 gpu1 y"):
        out = dr.decide(Node("n", "IDLE", frozenset({"DRAIN"}), reason=reason), fail, checks=("ecc",))
        assert out.action == "kept", out
    out = dr.decide(Node("n", "IDLE", frozenset({"DRAIN"}), reason="slurm-ft: PLANNED ECC_SBE_RATE gpu3 x"), fail,
                    checks=("ecc",))
    assert out.action == "reason_updated"
