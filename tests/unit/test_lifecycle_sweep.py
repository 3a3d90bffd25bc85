"""The sweep's decisions and acts over an in-memory Slurm model (no daemons; the lab test drives real ones).

The model keeps nodes, partitions, reservations and jobs; a validation job "runs" the moment it is
submitted and writes what `slurm-ft check` would, pass or fail by the node's health in the model.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_ft.config import Config, ControllerConfig, LifecycleConfig
from slurm_ft.errors import Busy
from slurm_ft.filelock import FileLock
from slurm_ft.fleet.lifecycle.transitions import Event, State
from slurm_ft.fleet.lifecycle.node_history import Store
from slurm_ft.fleet.lifecycle.sweep import Sweeper, read_verdict, sweep_locked, validation_script
from slurm_ft.slurm.types import Job, Node
from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path


class ModelSlurm(FakeSlurm):
    """The shared fake, whose batch scripts are the sweep's validation jobs: a node in `sick` fails its
    check, the others pass; with `slow`, they stay RUNNING until finish_jobs()."""

    def __init__(self, train=("gpu001", "gpu002", "gpu003", "gpu004"), spares=("gpu005", "gpu006")):
        super().__init__(train=train, spares=spares)
        self.sick = set()
        self.slow = False
        self.pending_out = {}          # job -> (output file, text, end state) while slow

    def submit(self, script):
        opts = dict(re.findall(r"^#SBATCH --([a-z]+)=(\S+)$", script, re.M))
        node = opts["nodelist"]
        assert node in self.resv.get(opts["reservation"], []), "validation must run inside its reservation"
        assert node in self.parts[opts["partition"]] and "DRAIN" not in self.n[node].flags
        jid = 100 + len(self.j)
        level = re.findall(r"--level '?(\w+)'?", script)[0]
        if node in self.sick:
            doc = {"node": node, "level": level, "healthy": False, "findings": [
                {"check": "ecc", "severity": "fail", "gpu": 2, "code": "ECC_DBE", "reason": "double-bit ECC errors",
                 "action": "drain"}]}
            text = json.dumps(doc) + f"\nslurm-ft-validate: FAIL {level} exit 1\n"
            state = "FAILED"
        else:
            text = "\n".join(json.dumps({"node": node, "level": lv, "healthy": True, "findings": []})
                             for lv in re.findall(r"--level '?(\w+)'?", script)) + "\nslurm-ft-validate: PASS\n"
            state = "COMPLETED"
        if self.slow:
            self.pending_out[jid] = (opts["output"], text, state)
            self.j[jid] = Job(jid, "v", "RUNNING")
            return jid
        Path(opts["output"]).write_text(text)
        self.j[jid] = Job(jid, "v", state)
        return jid

    def finish_jobs(self, forget=False):
        for jid, (out, text, state) in self.pending_out.items():
            Path(out).write_text(text)
            if forget:                       # gone from squeue (MinJobAge): the output file decides
                del self.j[jid]
            else:
                self.j[jid] = Job(jid, "v", state)
        self.pending_out = {}

    # what the controller would do after a fault on `bad` running a job: swap `spare` in
    def recover(self, bad, spare, reason="slurm-ft: XID79 gpu3 fell off the bus"):
        self.drain([bad], reason)
        self.parts["train"] = [x for x in self.parts["train"] if x != bad] + [spare]
        self.parts["spares"].remove(spare)


def config(tmp_path, **lc):
    base = dict(spare_recheck_s=0, quarantine_grace_s=0, pool_target=2, metrics_path=str(tmp_path / "m.prom"),
                breaker_max_share=0, breaker_max_nodes=3)
    base.update(lc)
    return Config(state_dir=str(tmp_path / "state"), controller=ControllerConfig(job_partitions=("train",)),
                  lifecycle=LifecycleConfig(**base))


def sweep(cfg, slurm):
    with Store(cfg.state_dir) as store:
        return Sweeper(cfg, slurm, store, sleep=lambda s: None).run(wait_s=5)


def admin(cfg, node, event):
    with Store(cfg.state_dir) as store:
        return store.apply(node, event, time.time(), default=State.IN_SERVICE, actor="admin:test",
                           lemon_k=cfg.lifecycle.lemon_incidents,
                           lemon_window_s=cfg.lifecycle.lemon_window_days * 86400)


def test_a_full_lap(tmp_path):
    cfg, s = config(tmp_path), ModelSlurm()
    assert sweep(cfg, s).changes == []          # the first sweep records the spares, silently
    s.recover("gpu002", "gpu005")
    r = sweep(cfg, s)
    assert r.changes[:3] == ["gpu002: in_service -> failed (slurm-ft: XID79 gpu3 fell off the bus)",
                             "gpu002: failed -> quarantined (drained and out of the partitions)",
                             "gpu005: spare -> in_service (in train)"]
    assert r.alerts == ["spare pool short: 1 of 2 (lifecycle.pool_target)"]
    assert sweep(cfg, s).changes == [] and sweep(cfg, s).alerts == []     # nothing new: silent
    admin(cfg, "gpu002", Event.REPAIRED)
    r = sweep(cfg, s)
    assert r.changes[0].startswith("gpu002: repaired -> validating (job 100, full + burnin)")
    assert r.changes[1] == "gpu002: validating -> spare (passed (job 100))"
    assert r.changes[2] == "spare pool back to 2 of 2"
    n = s.node("gpu002")
    assert n.partitions == ("spares",) and not n.drained and s.resv == {}
    # the second fault's recovery can take the same node
    s.recover("gpu003", "gpu002")
    r = sweep(cfg, s)
    assert "gpu002: spare -> in_service (in train)" in r.changes
    with Store(cfg.state_dir) as st:
        events = [e.event for e in st.history("gpu002")]
    assert events == [Event.FAULT, Event.QUARANTINE, Event.REPAIRED, Event.VALIDATE, Event.PASS, Event.SWAP_IN]


def test_a_lemon_ends_on_the_rma_list(tmp_path):
    cfg, s = config(tmp_path), ModelSlurm()
    s.recover("gpu001", "gpu005")
    s.sick.add("gpu001")
    sweep(cfg, s)
    for expected in (State.QUARANTINED, State.RMA):
        admin(cfg, "gpu001", Event.REPAIRED)
        r = sweep(cfg, s)
        with Store(cfg.state_dir) as st:
            assert st.record("gpu001").state is expected
        assert f"gpu001: validating -> {expected.value} (ECC_DBE gpu2 double-bit ECC errors" in r.changes[1]
        n = s.node("gpu001")
        tag = "RMA" if expected is State.RMA else "QUARANTINED"
        assert n.drained and n.reason.startswith(f"slurm-ft: {tag} validation failed: ECC_DBE gpu2")
        assert n.partitions == ()
    assert any("on the RMA list" in a for a in r.alerts)
    with pytest.raises(Exception, match="node release"):
        admin(cfg, "gpu001", Event.REPAIRED)


def test_failed_node_still_in_train_is_quarantined_by_the_sweep(tmp_path):
    cfg, s = config(tmp_path), ModelSlurm()
    s.drain(["gpu004"], "slurm-ft: ECC_DBE gpu0 double-bit")       # no FT job there: the controller did nothing
    r = sweep(cfg, s)
    assert "gpu004: failed -> quarantined" in r.changes[1]
    assert "gpu004" not in s.parts["train"]
    # a healthy health check must not resume it: the reason no longer carries a re-checkable code
    assert s.node("gpu004").reason == "slurm-ft: QUARANTINED ECC_DBE gpu0 double-bit"


def test_the_sweep_leaves_keep_off_nodes_alone_and_logs_it(tmp_path, caplog):
    cfg, s = config(tmp_path), ModelSlurm()
    cfg = replace(cfg, keep_off="gpu[004-005]")
    s.drain(["gpu004"], "slurm-ft: ECC_DBE gpu0 double-bit")       # drained before it was kept off
    r = sweep(cfg, s)
    assert not any(c.startswith(("gpu004", "gpu005")) for c in r.changes)
    assert "gpu004" in s.parts["train"] and s.node("gpu004").drained and s.resv == {}
    assert "keep_off: gpu004: the sweep leaves it alone (would record fault, record quarantine" in caplog.text
    assert r.pool_size == 1           # gpu005 is no spare the controller may take


def test_admin_drain_is_left_alone(tmp_path):
    cfg, s = config(tmp_path), ModelSlurm()
    s.drain(["gpu004"], "bios update")
    assert sweep(cfg, s).changes == []
    assert "gpu004" in s.parts["train"]


def test_spare_recheck_quarantines_a_bad_spare_and_is_silent_for_good_ones(tmp_path):
    cfg, s = config(tmp_path, spare_recheck_s=3600), ModelSlurm()
    s.sick.add("gpu006")
    r = sweep(cfg, s)
    assert [c for c in r.changes if "-> spare" in c] == []        # a good spare's routine pass is no news
    assert "gpu006: validating -> quarantined (ECC_DBE gpu2" in r.changes[-1]
    assert s.parts["spares"] == ["gpu005"] and s.node("gpu006").drained
    with Store(cfg.state_dir) as st:
        assert st.record("gpu005").last_pass is not None
    assert sweep(cfg, s).changes == []                            # passed within the hour: not re-checked


def test_spare_recheck_respects_an_open_breaker(tmp_path):
    cfg, s = config(tmp_path, spare_recheck_s=3600, breaker_max_nodes=1), ModelSlurm()
    s.drain(["gpu001"], "slurm-ft: XID79 gpu1 GPU has fallen off the bus")   # Slurm shows the breaker full
    s.sick.update({"gpu005", "gpu006"})
    r = sweep(cfg, s)
    assert not s.node("gpu005").drained and not s.node("gpu006").drained
    assert len([a for a in r.alerts if "failed its re-check" in a and "breaker" in a]) == 2


def test_sweep_writes_metrics_and_holds_a_lock(tmp_path):
    cfg, s = config(tmp_path), ModelSlurm()
    sweep_locked(cfg, s, wait_s=1)
    text = Path(cfg.lifecycle.metrics_path).read_text()
    assert 'slurm_ft_nodes{state="spare"} 2' in text and "slurm_ft_last_sweep_timestamp_seconds" in text
    with FileLock(Path(cfg.state_dir) / "sweep.lock"):
        with pytest.raises(Busy, match=r"another sweep is running \(pid \d+"):
            sweep_locked(cfg, s, wait_s=1)


def test_a_quiet_sweep_reads_every_node_once_and_a_sweep_that_acted_reads_them_again(tmp_path):
    """Each read of every node is one of the whole fleet for slurmctld: a sweep with nothing to do (every
    10 minutes, with its metrics) makes one; one that changed Slurm reads again to count the pool."""
    cfg, s = config(tmp_path), ModelSlurm()
    sweep_locked(cfg, s, wait_s=1)                      # records the spares
    s.reads.clear()
    report = sweep_locked(cfg, s, wait_s=1)
    assert report.changes == [] and s.reads.count(("fleet",)) == 1
    assert 'slurm_ft_nodes{state="spare"} 2' in Path(cfg.lifecycle.metrics_path).read_text()
    s.recover("gpu002", "gpu005")
    s.reads.clear()
    report = sweep_locked(cfg, s, wait_s=1)
    assert "gpu002: failed -> quarantined (drained and out of the partitions)" in report.changes
    assert s.reads.count(("fleet",)) == 3               # the planned retests and the pool read after the quarantine
    assert report.pool_size == 1
    assert 'slurm_ft_nodes{state="quarantined"} 1' in Path(cfg.lifecycle.metrics_path).read_text()


def test_validation_script_quotes_everything():
    text = validation_script("gpu001", ["full", "burnin"], ["/opt/my env/python", "-m", "slurm_ft", "check"],
                             ["--output=/x/gpu001.out"])
    assert "#SBATCH --output=/x/gpu001.out" in text
    assert "'/opt/my env/python' -m slurm_ft check --level full --json --node gpu001" in text
    assert text.index("--level full") < text.index("--level burnin")


def test_read_verdict():
    assert read_verdict("{}\nslurm-ft-validate: PASS\n", "COMPLETED", 7) == (True, "passed (job 7)")
    assert read_verdict("slurm-ft-validate: PASS\n", "FAILED", 7)[0] is False
    assert read_verdict("", "TIMEOUT", 7) == (False, "job 7 ended TIMEOUT without a verdict")
    assert read_verdict("slurm-ft-validate: FAIL burnin exit 1\n", "FAILED", 7) == (False, "FAIL burnin exit 1")


@pytest.mark.parametrize("forget", [False, True])
def test_a_long_validation_is_picked_up_by_the_next_sweep(tmp_path, forget):
    cfg, s = config(tmp_path), ModelSlurm()
    s.recover("gpu002", "gpu005")
    sweep(cfg, s)
    admin(cfg, "gpu002", Event.REPAIRED)
    s.slow = True
    with Store(cfg.state_dir) as store:
        r = Sweeper(cfg, s, store, sleep=lambda x: None).run(wait_s=0)
    assert r.pending == ["gpu002 (job 100)"] and r.changes == ["gpu002: repaired -> validating (job 100, full + burnin)"]
    with Store(cfg.state_dir) as store:
        r = Sweeper(cfg, s, store, sleep=lambda x: None).run(wait_s=0)
    assert r.changes == [] and r.pending == ["gpu002 (job 100)"]        # still running: no news, no second job
    s.finish_jobs(forget=forget)
    r = sweep(cfg, s)
    assert r.changes[0] == "gpu002: validating -> spare (passed (job 100))" and r.pending == []
    assert s.node("gpu002").partitions == ("spares",) and s.resv == {}


def test_pool_target_follows_spares_plan_and_the_planning_section(tmp_path):
    from slurm_ft.config import PlanningConfig
    from slurm_ft.fleet.lifecycle.pool import pool_target
    from slurm_ft.plan.spares import plan_spares
    nodes = [Node(f"gpu{i:03d}", "IDLE", partitions=("train",)) for i in range(1, 65)]
    cfg = Config(lifecycle=LifecycleConfig(pool_target=0))
    target, source = pool_target(cfg, nodes, ("train",))
    assert target == plan_spares(512, 8).spare_nodes and "spares plan for 64 nodes" in source
    slow_repair = Config(lifecycle=LifecycleConfig(pool_target=0), planning=PlanningConfig(repair_hours=24 * 14))
    assert pool_target(slow_repair, nodes, ("train",))[0] > target      # longer repairs need more spares
    assert pool_target(Config(lifecycle=LifecycleConfig(pool_target=7)), nodes, ("train",)) == (7, "lifecycle.pool_target")


def test_a_failed_submit_leaves_no_reservation_and_is_retried(tmp_path):
    from slurm_ft.slurm.client import SlurmError
    cfg, s = config(tmp_path, spare_recheck_s=3600), ModelSlurm()
    real = s.submit

    def broken(script):
        raise SlurmError(["sbatch"], 1, "sbatch: error: Batch job submission failed: slurmctld busy")
    s.submit = broken
    r = sweep(cfg, s)
    assert s.resv == {} and len(r.errors) == 2 and "slurmctld busy" in r.errors[0]
    s.submit = real
    r = sweep(cfg, s)
    assert r.errors == [] and s.resv == {}
    with Store(cfg.state_dir) as st:
        assert st.record("gpu005").last_pass is not None


def test_only_the_latest_validation_output_is_kept(tmp_path):
    cfg, s = config(tmp_path, spare_recheck_s=1e-9), ModelSlurm()
    clock = iter(range(1000, 2000, 7))
    with Store(cfg.state_dir) as store:
        for _ in range(3):
            Sweeper(cfg, s, store, clock=lambda: float(next(clock)), sleep=lambda x: None).run(wait_s=5)
    outs = sorted(p.name for p in (Path(cfg.state_dir) / "validation").iterdir())
    assert len([o for o in outs if o.startswith("gpu005-")]) == 1


def test_three_faults_with_repairs_between_put_the_node_on_the_rma_list(tmp_path):
    """Each repair passes validation, yet the third fault within the window means RMA, not the pool."""
    cfg, s = config(tmp_path), ModelSlurm()
    sweep(cfg, s)
    for round_ in range(3):
        s.drain(["gpu006"], f"slurm-ft: XID79 gpu{round_} GPU has fallen off the bus")   # a fault on the spare
        r = sweep(cfg, s)
        if round_ < 2:
            assert "gpu006: failed -> quarantined" in r.changes[1]
            admin(cfg, "gpu006", Event.REPAIRED)
            assert "gpu006: validating -> spare" in sweep(cfg, s).changes[1]
    assert "gpu006: failed -> rma" in r.changes[1] and "lemon: 3 incidents within 30 days" in r.changes[1]
    assert r.alerts[0].startswith("gpu006: on the RMA list")
    assert s.node("gpu006").reason.startswith("slurm-ft: RMA XID79 gpu2") and s.node("gpu006").partitions == ()


def test_remediation_spends_its_budget_over_sweeps_and_says_who_waits(tmp_path, capsys, monkeypatch):
    """Five nodes quarantined for Xid 79 at once, remediation on with at most 2 in remediation: each sweep
    reboots what the budget allows (2 at once, max(3, 10% of 10) = 3 an hour), one alert names who
    waits, and the report shows the budget as the last sweep spent it."""
    from slurm_ft.cli import main
    from slurm_ft.config import RemediationConfig
    from slurm_ft.fleet.lifecycle.remedy_act import BUDGET_KEY
    train = tuple(f"gpu{i:03d}" for i in range(1, 9))
    s = ModelSlurm(train=train, spares=("gpu009", "gpu010"))
    cfg = config(tmp_path, breaker_max_nodes=0, remediation=RemediationConfig(mode="on", max_concurrent=2))
    sweep(cfg, s)
    bad = train[:5]
    for n in bad:
        s.drain([n], "slurm-ft: XID79 gpu3 GPU has fallen off the bus")
        s.parts["train"].remove(n)
    r = sweep(cfg, s)
    rebooted = [c[1][0] for c in s.calls if c[0] == "reboot"]
    assert rebooted == ["gpu001", "gpu002"]
    waits = [a for a in r.alerts if a.startswith("remediation budget:")]
    assert len(waits) == 1 and "3 node(s) wait: gpu003, gpu004, gpu005" in waits[0]
    assert "2 of at most 2 nodes in remediation at once" in waits[0]
    assert not [a for a in sweep(cfg, s).alerts if a.startswith("remediation budget:")]   # said once
    # the two rebooted are validated and back; the third repair of the hour starts, then the hour is spent
    r = sweep(cfg, s)
    rebooted = [c[1][0] for c in s.calls if c[0] == "reboot"]
    assert rebooted == ["gpu001", "gpu002", "gpu003"]
    with Store(cfg.state_dir) as st:
        assert st.record("gpu001").state is State.SPARE
        doc = st.kv_get_json(BUDGET_KEY)
    pool = doc["pools"]["(no domain)"]
    assert (pool["nodes"], pool["limit"], pool["repairs_in_window"]) == (10, 3, 3)
    assert [(w["node"], w["held_by"]) for w in doc["waiting"]] == [("gpu004", "repair_budget"),
                                                                    ("gpu005", "repair_budget")]
    assert "3 repairs started in pool (no domain) within 1 h" in doc["waiting"][0]["why"]
    cfg_file = tmp_path / "slurm-ft.yaml"
    cfg_file.write_text(f"state_dir: {cfg.state_dir}\nlifecycle:\n  remediation: {{mode: 'on', max_concurrent: 2}}\n")
    cfg_file.chmod(0o644)
    monkeypatch.setattr("slurm_ft.cli.node.client_from_config", lambda config: s)

    def cli(*argv):
        with pytest.raises(SystemExit) as exc:
            main(["--config", str(cfg_file), *argv])
        return exc.value.code, capsys.readouterr().out

    rc, out = cli("report")
    assert rc == 0, out
    assert "remediation budget (the sweep at " in out
    assert "pool (no domain) (10 nodes): 3 of 3 repairs started within 1 h (next slot " in out
    assert "waiting: gpu004 (reboot, repair_budget until " in out
    rc, out = cli("report", "--json")
    assert json.loads(out)["remediation_budget"]["waiting"][1]["node"] == "gpu005"
    # what would be done now, and what waits until when
    rc, out = cli("remediate", "--dry-run")
    assert rc == 0
    assert "would gpu004: hold: XID79 gpu3: reboot waits for the remediation budget: 3 repairs started" in out
    assert "budget: waiting: gpu005 (reboot, repair_budget until " in out
    rc, out = cli("remediate", "--dry-run", "--json")
    doc = json.loads(out)
    held = {st["node"]: st for st in doc["steps"]}["gpu004"]
    assert (held["action"], held["held_by"], held["until"]) == ("hold", "repair_budget",
                                                                 doc["budget"]["pools"]["(no domain)"]["next_repair_slot"])


# --- a node quarantined for not answering, answering again (the controller's REVALIDATE reason) -------

class Scripts(ModelSlurm):
    """ModelSlurm that keeps the validation scripts it ran."""

    def __init__(self):
        super().__init__()
        self.scripts = []

    def submit(self, script):
        self.scripts.append(script)
        return super().submit(script)


def _unresponsive_quarantine(s, node="gpu003", spare="gpu005", seen="DOWN+NOT_RESPONDING"):
    """What the controller did: gpu003 stopped answering, drained, out of train, gpu005 swapped in."""
    s.recover(node, spare, reason=f"slurm-ft: quarantined, {seen}: Not responding during job 100")


def _levels(script):
    return re.findall(r"--level '?(\w+)'?", script)


@pytest.mark.parametrize("seen_before", [True, False])
def test_a_node_that_answers_again_is_validated_before_it_joins_the_pool(tmp_path, seen_before):
    """R13: it went straight back into the pool 30 s after it answered. Handed over by the controller
    (REVALIDATE), it passes the full validation (a lone node's own hang looks like a lost network)
    before the pool gets it; quarantined again when it fails."""
    cfg, s = config(tmp_path), Scripts()
    sweep(cfg, s)
    _unresponsive_quarantine(s)
    if seen_before:                               # a sweep saw the quarantine before it answered
        assert "gpu003: failed -> quarantined" in sweep(cfg, s).changes[1]
        assert s.node("gpu003").reason.startswith("slurm-ft: QUARANTINED quarantined, DOWN")
    s.drain(["gpu003"], "slurm-ft: REVALIDATE answers again; quarantined, DOWN+NOT_RESPONDING: Not responding")
    r = sweep(cfg, s)
    assert "gpu003: quarantined -> repaired (answers again; quarantined, DOWN+NOT_RESPONDING: Not responding)" in r.changes
    assert any(c.startswith("gpu003: repaired -> validating") for c in r.changes)
    assert "gpu003: validating -> spare (passed (job 100))" in r.changes
    assert _levels(s.scripts[-1]) == list(cfg.lifecycle.validate_levels)
    n = s.node("gpu003")
    assert n.partitions == ("spares",) and not n.drained
    with Store(cfg.state_dir) as st:
        assert [e.event for e in st.history("gpu003")][-4:] == [Event.QUARANTINE, Event.REPAIRED, Event.VALIDATE,
                                                               Event.PASS]


def test_a_node_that_answers_again_but_fails_its_validation_is_quarantined(tmp_path):
    cfg, s = config(tmp_path), Scripts()
    sweep(cfg, s)
    _unresponsive_quarantine(s)
    s.sick.add("gpu003")
    s.drain(["gpu003"], "slurm-ft: REVALIDATE answers again; quarantined, DOWN: Not responding during job 100")
    r = sweep(cfg, s)
    assert any(c.startswith("gpu003: validating -> quarantined (ECC_DBE gpu2") for c in r.changes), r.changes
    n = s.node("gpu003")
    assert n.drained and n.reason.startswith("slurm-ft: QUARANTINED validation failed") and n.partitions == ()
    assert sweep(cfg, s).changes == []            # no loop: waits for a person (or remediation) now


def test_a_node_that_stopped_with_a_wave_gets_the_spare_recheck_levels(tmp_path):
    cfg, s = config(tmp_path, spare_recheck_levels=["prolog"]), Scripts()
    sweep(cfg, s)
    _unresponsive_quarantine(s)
    s.drain(["gpu003"], "slurm-ft: REVALIDATE outage, answers again; quarantined, DOWN: Not responding")
    r = sweep(cfg, s)
    assert "gpu003: validating -> spare (passed (job 100))" in r.changes
    assert _levels(s.scripts[-1]) == ["prolog"]


def test_an_admins_reason_on_a_node_we_quarantined_is_never_rewritten_or_remediated(tmp_path):
    """An admin downs a node slurm-ft quarantined (for not answering: no finding code of ours) with their
    own reason naming an Xid: the remediation rebooted it for that Xid. Now it is theirs."""
    from slurm_ft.config import RemediationConfig
    cfg = config(tmp_path, remediation=RemediationConfig(mode="on"))
    s = ModelSlurm()
    sweep(cfg, s)
    _unresponsive_quarantine(s, seen="DOWN")          # Slurm set it DOWN: no code of ours in the history
    assert "gpu003: failed -> quarantined" in sweep(cfg, s).changes[1]
    s.n["gpu003"] = replace(s.n["gpu003"], state="DOWN", reason="admin: XID79 twice this week, RMA ticket 4711")
    s.calls.clear()
    r = sweep(cfg, s)
    assert not [c for c in s.calls if c[0] in ("drain", "reboot", "resume")], s.calls
    assert s.node("gpu003").reason == "admin: XID79 twice this week, RMA ticket 4711"
    assert not any("reboot" in c for c in r.changes)


def test_an_admin_taking_over_a_failed_node_keeps_their_reason_and_partition(tmp_path):
    """Our check drained gpu004 while a job ran there (failed, still in train); an admin re-drains it with
    their reason before the job ends: the sweep no longer takes it out nor rewrites it QUARANTINED."""
    cfg, s = config(tmp_path), ModelSlurm()
    sweep(cfg, s)
    s.n["gpu004"] = replace(s.n["gpu004"], state="ALLOCATED")
    s.drain(["gpu004"], "slurm-ft: XID79 gpu1 fell off the bus")
    assert sweep(cfg, s).changes == ["gpu004: in_service -> failed (slurm-ft: XID79 gpu1 fell off the bus)"]
    s.drain(["gpu004"], "admin: BIOS update")
    s.n["gpu004"] = replace(s.n["gpu004"], state="IDLE")            # the job ended
    s.calls.clear()
    assert sweep(cfg, s).changes == [] and not s.calls
    assert s.node("gpu004").reason == "admin: BIOS update" and "gpu004" in s.parts["train"]
