"""The remediation policy as a pure function over snapshots, its config, the GPU reset seam, and the
validation script's reset step (the lab test drives the real reboot and reset)."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from slurm_ft.cli.check import own_validation_job
from slurm_ft.config import RemediationConfig, load_config
from slurm_ft.errors import CommandTimeout, ConfigError
from slurm_ft.node.gpu_reset import reset_gpu
from slurm_ft.breaker import rules as brk
from slurm_ft.fleet.lifecycle.remedy_plan import (
    action_for, attempts, budget_lines, describe, finding_in, in_remediation, plan, plan_and_budget, pool_limit,
    pool_of)
from slurm_ft.fleet.lifecycle.transitions import Event, HistoryEntry, State, next_state
from slurm_ft.fleet.lifecycle.sweep import validation_script
from slurm_ft.slurm.types import Node
from slurm_ft.runner import Result

NOW = 1_800_000_000.0
DAY = 86400.0
ON = RemediationConfig(mode="on")


def h(event: Event, cause: str, t: float = NOW - 100, frm=State.IN_SERVICE, to=State.FAILED, node="n1"):
    return HistoryEntry(node, t, event, frm, to, cause, "sweep")


def drained(name="n1", reason="slurm-ft: QUARANTINED XID79 gpu2 GPU has fallen off the bus", state="IDLE",
            flags=("DRAIN",)):
    return Node(name, state, frozenset(flags), reason=reason)


def one(history, node=None, policy=ON, state=State.QUARANTINED, since=NOW - 50, fleet=None, **kw):
    node = node or drained()
    steps = plan({node.name: state}, {node.name: since}, {node.name: history}, [node], fleet, NOW, policy, **kw)
    assert len(steps) == 1
    return steps[0]


FAULT79 = h(Event.FAULT, "slurm-ft: XID79 gpu2 GPU has fallen off the bus")


@pytest.mark.parametrize("text,code,gpu", [
    ("slurm-ft: XID79 gpu2 GPU has fallen off the bus (+1 more)", "XID79", 2),
    ("slurm-ft: QUARANTINED NVLINK_DOWN gpu7 link 3 down", "NVLINK_DOWN", 7),
    ("XID48 gpu5 Double Bit ECC Error; ECC_DBE gpu5 volatile", "XID48", 5),
    ("slurm-ft: GPU_COUNT 7 of 8 GPUs", "GPU_COUNT", None),
    ("job 12 ended FAILED without a verdict", None, None),
    ("FAIL burnin exit 1", None, None),
])
def test_the_finding_is_read_from_drain_reasons_and_validation_verdicts(text, code, gpu):
    f = finding_in(text)
    assert (f.code if f else None, f.gpu if f else None) == (code, gpu)


def test_xid_actions_come_from_the_catalog_and_config_overrides_them():
    assert action_for("XID79", ON) == "reboot"
    assert action_for("XID48", ON) == "reset_gpu"
    assert action_for("XID64", ON) == "rma"
    assert action_for("XID54", ON) == "manual"          # catalog action drain: a person looks at the cabling
    # an NVLink5 Xid drains on its line's Fatal token alone: what that token needs, not the row's "none"
    assert action_for("XID147", ON) == action_for("XID144", ON) == "reset_gpu"
    assert action_for("NVLINK_DOWN", ON) == "manual"    # not an Xid: only what the admin configures
    assert action_for("NVLINK_DOWN", replace(ON, actions={"NVLINK_DOWN": "reset_gpu"})) == "reset_gpu"
    assert action_for("XID79", replace(ON, actions={"XID79": "rma"})) == "rma"


def test_first_xid79_is_rebooted_and_the_second_within_the_window_goes_to_rma():
    first = one([FAULT79, h(Event.QUARANTINE, "drained", frm=State.FAILED, to=State.QUARANTINED)])
    assert (first.act, first.attempt, first.max_attempts) == ("reboot", 1, 1)
    assert first.finding.label() == "XID79 gpu2"
    again = [FAULT79, h(Event.REMEDIATE, "reboot: XID79 gpu2: reboot (attempt 1 of 1)", NOW - 90),
             h(Event.PASS, "passed", NOW - 80), h(Event.FAULT, "slurm-ft: XID79 gpu2 again", NOW - 10)]
    second = one(again)
    assert second.act == "rma" and "again after 1 reboot within 30 days (at most 1)" in second.why


def test_a_keep_off_node_is_left_for_a_person_whatever_its_fault():
    for state in (State.QUARANTINED, State.REMEDIATING):
        step = one([FAULT79], state=state, keep_off={"n1"})
        assert (step.act, step.acts, step.why) == ("manual", False, "in keep_off: slurm-ft leaves it alone")


def test_attempts_outside_the_window_or_before_a_release_do_not_count():
    old = [h(Event.REMEDIATE, "reboot: XID79 gpu2", NOW - 40 * DAY), FAULT79]
    assert one(old).act == "reboot"
    released = [h(Event.REMEDIATE, "reboot: XID79 gpu2", NOW - 5 * DAY),
                h(Event.RELEASE, "vendor swapped the board", NOW - 4 * DAY, State.RMA, State.REPAIRED), FAULT79]
    assert one(released).act == "reboot"
    assert attempts(released, "reboot", NOW, 30 * DAY) == 0


def test_reset_twice_and_failing_again_goes_to_rma():
    fault = h(Event.FAULT, "slurm-ft: XID48 gpu5 Double Bit ECC Error")
    fail = h(Event.FAIL, "XID48 gpu5 Double Bit ECC Error", frm=State.VALIDATING, to=State.QUARANTINED)
    node = drained(reason="slurm-ft: QUARANTINED validation failed: XID48 gpu5")
    assert one([fault], node).act == "reset_gpu"
    r1 = h(Event.REMEDIATE, "reset_gpu: XID48 gpu5: reset_gpu (attempt 1 of 2)")
    s = one([fault, r1, fail], node)
    assert (s.act, s.attempt) == ("reset_gpu", 2)
    r2 = h(Event.REMEDIATE, "reset_gpu: XID48 gpu5: reset_gpu (attempt 2 of 2)")
    s = one([fault, r1, fail, r2, fail], node)
    assert s.act == "rma" and "after 2 reset_gpu" in s.why


def test_a_reset_without_a_gpu_index_becomes_a_reboot():
    s = one([h(Event.FAULT, "slurm-ft: GPU_COUNT 7 of 8")], drained(reason="slurm-ft: GPU_COUNT 7 of 8"),
            replace(ON, actions={"GPU_COUNT": "reset_gpu"}))
    assert s.act == "reboot"


def test_no_code_and_manual_codes_are_left_for_a_person():
    assert one([h(Event.FAIL, "job 9 ended FAILED without a verdict")], drained(reason="by an admin")).act == "manual"
    s = one([h(Event.FAULT, "slurm-ft: DISK_FULL /tmp 99%")], drained(reason="slurm-ft: DISK_FULL"))
    assert s.act == "manual" and not s.acts


def test_rma_action_and_nodes_not_quarantined():
    assert one([h(Event.FAULT, "slurm-ft: XID64 gpu1 row remap failure")]).act == "rma"
    node = drained()
    for state in (State.IN_SERVICE, State.SPARE, State.VALIDATING, State.RMA, State.REPAIRED):
        assert plan({"n1": state}, {}, {"n1": [FAULT79]}, [node], None, NOW, ON) == []


def test_a_reboot_in_progress_waits_then_is_done_or_times_out():
    rebooting = drained(state="DOWN", flags=("DRAIN", "REBOOT_ISSUED"))
    assert one([FAULT79], rebooting, state=State.REMEDIATING, since=NOW - 30).act == "wait"
    late = one([FAULT79], rebooting, state=State.REMEDIATING, since=NOW - 4000)
    assert late.act == "timeout" and "reboot_timeout_s 1800" in late.why
    back = drained(state="DOWN", flags=(), reason="slurm-ft: REBOOT XID79 gpu2 : reboot issued : reboot complete")
    assert one([FAULT79], back, state=State.REMEDIATING).act == "done"
    timed_out = drained(state="DOWN", flags=(), reason="reboot timed out")
    assert one([FAULT79], timed_out, state=State.REMEDIATING).act == "timeout"


def test_reboots_count_against_the_breaker_one_plan_at_a_time():
    nodes = [drained(f"n{i}") for i in range(1, 4)]
    others = [Node(f"w{i}", "IDLE") for i in range(7)]
    fleet = brk.view(others, NOW)                     # 10 nodes, none out: limit 2 at a share of 0.2
    fleet = replace(fleet, total=10)
    steps = plan({n.name: State.QUARANTINED for n in nodes}, {}, {n.name: [replace(FAULT79, node=n.name)] for n in nodes},
                 nodes, fleet, NOW, ON, breaker_share=0.2, breaker_window_s=3600)
    assert [s.act for s in steps] == ["reboot", "reboot", "hold"]
    assert "drain-rate breaker" in steps[2].why
    assert [s.act for s in plan({"n1": State.QUARANTINED}, {}, {"n1": [FAULT79]}, nodes[:1], None, NOW, ON)] == ["reboot"]


def test_describe_says_what_would_be_done():
    s = one([FAULT79])
    assert describe(s) == "n1: reboot (scontrol reboot ASAP nextstate=DOWN): XID79 gpu2: reboot (attempt 1 of 1)"
    assert s.to_dict() == {"node": "n1", "action": "reboot", "why": "XID79 gpu2: reboot (attempt 1 of 1)",
                           "finding": "XID79 gpu2", "attempt": 1, "max_attempts": 1, "pool": "(no domain)",
                           "held_by": None, "until": None}


def test_lifecycle_transitions_of_remediation():
    assert next_state(State.QUARANTINED, Event.REMEDIATE) is State.REMEDIATING
    assert next_state(State.REMEDIATING, Event.REMEDIATED) is State.REPAIRED
    assert next_state(State.REMEDIATING, Event.FAIL) is State.QUARANTINED
    assert next_state(State.QUARANTINED, Event.SEND_RMA) is State.RMA
    assert next_state(State.REMEDIATING, Event.FAIL, incident_count=3, lemon_k=3) is State.RMA


def _cfg(tmp_path, text):
    d = tmp_path / "cfg"
    d.mkdir(mode=0o755, exist_ok=True)
    p = d / "slurm-ft.yaml"
    p.write_text(text)
    p.chmod(0o644)
    return p


@pytest.mark.parametrize("text,words", [
    ("mode: yes", "mode: 'yes' is not one of off, dry_run, on"),     # YAML 1.2: a word, not True
    ("mode: true", 'mode must be a string, not true: write "true" in quotes'),
    ("mode: always", "'always' is not one of off, dry_run, on"),
    ("actions: {XID79: format_disk}", "actions.XID79: 'format_disk' is not one of"),
    ("actions: {'rm -rf': reboot}", "is not a finding code"),
    ("max_attempts: {rma: 2}", "only reset_gpu, reboot and retest are attempted"),
    ("max_attempts: {reboot: 0}", "max_attempts.reboot must be at least 1"),
    ("reset_command: []", "reset_command must name a program"),
    ("reboot_timeout_s: 0", "reboot_timeout_s must be more than 0 seconds"),
    ("window_days: -1", "must be a finite number, not negative"),
    ("typo: 1", "unknown key lifecycle.remediation.typo"),
])
def test_bad_remediation_config_is_one_clear_error(tmp_path, text, words):
    p = _cfg(tmp_path, "lifecycle:\n  remediation:\n    " + text + "\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(p))
    assert words in str(exc.value)


def test_remediation_config_is_read(tmp_path):
    p = _cfg(tmp_path, "lifecycle:\n  remediation:\n    mode: dry_run\n    actions: {NVLINK_DOWN: reset_gpu}\n"
                       "    max_attempts: {reboot: 2}\n")
    rc = load_config(str(p)).lifecycle.remediation
    assert (rc.mode, rc.actions, rc.max_attempts["reboot"]) == ("dry_run", {"NVLINK_DOWN": "reset_gpu"}, 2)
    assert load_config(str(_cfg(tmp_path, "{}\n"))).lifecycle.remediation.mode == "off"   # off unless asked


def test_the_reset_seam_runs_argv_with_a_timeout_and_reports_failures():
    calls = []

    def runner(argv, **kw):
        calls.append((argv, kw["timeout"], kw["check"]))
        return Result(tuple(argv), 0, "GPU 00000000:18:00.0 was successfully reset.\n", "", 0.1)

    r = reset_gpu(3, ("nvidia-smi", "-r", "-i"), 120.0, runner=runner)
    assert r.ok and "successfully reset" in r.detail
    assert calls == [(["nvidia-smi", "-r", "-i", "3"], 120.0, False)]

    def busy(argv, **kw):
        return Result(tuple(argv), 255, "", "Unable to reset GPU: in use by another client\n", 0.1)

    r = reset_gpu(3, ("nvidia-smi", "-r", "-i"), 120.0, runner=busy)
    assert not r.ok and "exited 255" in r.detail and "in use" in r.detail

    def hangs(argv, **kw):
        raise CommandTimeout(argv, kw["timeout"])

    assert not reset_gpu(0, ("nvidia-smi", "-r", "-i"), 5.0, runner=hangs).ok
    assert not reset_gpu(0, ("/nonexistent/nvidia-smi", "-r", "-i"), 5.0).ok   # the real runner: missing program


def test_gpu_reset_command_exit_codes(tmp_path):
    ok = _cfg(tmp_path, f"health:\n  state_file: {tmp_path}/state/{{node}}.json\nlifecycle:\n  remediation:\n"
                        f"    reset_command: [{sys.executable}, -c, 'import sys; print(\"reset\", sys.argv[1])']\n")
    p = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(ok), "gpu-reset", "--gpu", "4",
                        "--node", "n1"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "gpu4: reset: reset 4" in p.stdout, p.stderr
    assert '"xid_ack"' in (tmp_path / "state" / "n1.json").read_text()   # Xids before the reset are dealt with
    (tmp_path / "cfg" / "slurm-ft.yaml").unlink()
    bad = _cfg(tmp_path, "lifecycle:\n  remediation:\n    reset_command: [\"false\"]\n")
    p = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(bad), "gpu-reset", "--gpu", "1",
                        "--no-such"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    p = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(bad), "gpu-reset", "--gpu", "1", "--json",
                        "--node", "n1"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and '"ok": false' in p.stdout


def test_the_validation_script_resets_first_and_stops_on_a_failed_reset(tmp_path):
    script = validation_script("n1", ["full"], ["slurm-ft", "check"], reset_gpus=[5],
                               reset_argv=["slurm-ft", "gpu-reset", "--gpu"])
    lines = script.splitlines()
    assert lines.index("slurm-ft gpu-reset --gpu 5") < lines.index("slurm-ft check --level full --json --node n1")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "slurm-ft").write_text("#!/bin/sh\n[ \"$1\" = gpu-reset ] && exit 1\nexit 0\n")
    (fake / "slurm-ft").chmod(0o755)
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                         env={"PATH": f"{fake}:/usr/bin:/bin"})
    assert out.returncode == 1 and "slurm-ft-validate: FAIL reset_gpu gpu5 exit 1" in out.stdout
    assert "level full" not in out.stdout


def test_only_roots_job_in_a_maintenance_reservation_skips_the_prolog_check():
    assert own_validation_job({"SLURM_JOB_UID": "0", "SLURM_JOB_RESERVATION": "slurm-ft-maint-gpu001"}, "slurm-ft-maint")
    assert not own_validation_job({"SLURM_JOB_UID": "1000", "SLURM_JOB_RESERVATION": "slurm-ft-maint-gpu001"},
                                  "slurm-ft-maint")
    assert not own_validation_job({"SLURM_JOB_UID": "0", "SLURM_JOB_RESERVATION": "maint"}, "slurm-ft-maint")
    assert not own_validation_job({"SLURM_JOB_UID": "0"}, "slurm-ft-maint")


def test_retest_validates_as_is_and_after_its_attempts_leaves_the_node_to_a_person():
    policy = replace(ON, actions={"TEMP_HIGH": "retest"}, max_attempts={"retest": 2})
    node = drained(reason="slurm-ft: QUARANTINED TEMP_HIGH gpu1 96 C")
    fault = h(Event.FAULT, "slurm-ft: TEMP_HIGH gpu1 96 C")
    assert one([fault], node, policy).act == "retest"
    tried = [fault, h(Event.REMEDIATE, "retest: TEMP_HIGH gpu1"), h(Event.REMEDIATE, "retest: TEMP_HIGH gpu1"), fault]
    s = one(tried, node, policy)
    assert s.act == "manual" and "after 2 retests" in s.why


def test_a_drain_reason_cut_at_the_limit_never_ends_in_a_space():
    """Slurm refuses such a reason: a validation verdict naming findings was cut right after a word."""
    from slurm_ft.vocab import fit
    text = "slurm-ft: validation failed: " + "x" * 70 + " ECC_DBE gpu5 uncorrectable"
    assert len(fit(text)) <= 100 and not fit(text).endswith(" ")
    assert fit("a" * 99 + " b") == "a" * 99


# --- the remediation budget (issue 22 item 6, review finding 7) ---------------------------------------

def fleet_of(total: int, quarantined: dict, pools=None, recent=(), policy=ON, records=None, histories=None,
             fleet=None):
    """`total` nodes n0000..; `quarantined`: name -> (since, history) of the quarantined ones."""
    nodes = [drained(f"n{i:04d}") if f"n{i:04d}" in quarantined else Node(f"n{i:04d}", "IDLE")
             for i in range(total)]
    recs = {name: State.QUARANTINED for name in quarantined}
    recs.update(records or {})
    hist = {name: hist for name, (_, hist) in quarantined.items()}
    hist.update(histories or {})
    return plan_and_budget(recs, {name: t for name, (t, _) in quarantined.items()}, hist, nodes, fleet, NOW, policy,
                           pools=pools, recent=recent)


def xid79(name, t=NOW - 100):
    return [replace(FAULT79, node=name, time=t)]


def test_r7_one_sweep_no_longer_reboots_every_quarantined_node():
    """R7: 1,000 nodes, 100 quarantined for Xid 79 in the last 50 minutes: the old plan rebooted all 100 at
    once. Now at most max_concurrent (3) start; the rest wait, oldest quarantine first, and say why."""
    q = {f"n{i:04d}": (NOW - 3000 + 30 * i, xid79(f"n{i:04d}")) for i in range(100)}
    steps, budget = fleet_of(1000, q)
    acts = [s.act for s in steps]
    assert acts.count("reboot") == 3 and acts.count("hold") == 97
    assert [s.node for s in steps if s.act == "reboot"] == ["n0000", "n0001", "n0002"]   # quarantined first
    held = next(s for s in steps if s.act == "hold")
    assert held.held_by == "concurrency" and held.until is None
    assert "3 of at most 3 nodes in remediation at once (lifecycle.remediation.max_concurrent)" in held.why
    assert budget.in_remediation == ["n0000", "n0001", "n0002"] and len(budget.waiting) == 97


def test_a_pool_starts_at_most_max_3_or_10_percent_repairs_per_hour_and_says_until_when():
    """A 20-node domain: max(3, 10% of 20) = 3 repairs an hour. Two started 50 and 10 minutes ago leave
    one; the next slot is when the older leaves the window."""
    rack = [f"n{i:04d}" for i in range(20)]
    pools = {n: "rack1" for n in rack}
    started = [h(Event.REMEDIATE, "reboot: XID79 gpu2", NOW - 3000, State.QUARANTINED, State.REMEDIATING, "n0010"),
               h(Event.REMEDIATE, "reset_gpu: XID48 gpu5", NOW - 600, State.QUARANTINED, State.REMEDIATING, "n0011")]
    q = {n: (NOW - 100 + i, xid79(n)) for i, n in enumerate(rack[:4])}
    steps, budget = fleet_of(40, q, pools=pools, recent=started, policy=replace(ON, max_concurrent=0))
    assert [s.act for s in steps] == ["reboot", "hold", "hold", "hold"]
    held = steps[1]
    assert held.held_by == "repair_budget" and held.until == NOW - 3000 + 3600
    assert "3 repairs started in pool rack1 within 1 h (at most 3 = max(3, 0.1 x 20 nodes))" in held.why
    p = budget.pools["rack1"]
    assert (p.size, p.limit, len(p.repairs)) == (20, 3, 3)
    assert budget.pools["(no domain)"].size == 20 and not budget.pools["(no domain)"].repairs
    # the other pool is not held by rack1's budget
    other = {"n0030": (NOW - 50, xid79("n0030"))}
    steps, _ = fleet_of(40, {**q, **other}, pools=pools, recent=started, policy=replace(ON, max_concurrent=0))
    assert {s.node: s.act for s in steps}["n0030"] == "reboot"


def test_the_pool_budget_grows_with_the_pool_and_both_zero_means_none():
    big = {n: "big" for n in (f"n{i:04d}" for i in range(200))}
    q = {f"n{i:04d}": (NOW - 100, xid79(f"n{i:04d}")) for i in range(30)}
    steps, budget = fleet_of(200, q, pools=big, policy=replace(ON, max_concurrent=0))
    assert budget.pools["big"].limit == 20 and [s.act for s in steps].count("reboot") == 20
    steps, budget = fleet_of(200, q, pools=big, policy=replace(ON, max_concurrent=0, budget_nodes=0, budget_share=0))
    assert budget.pools["big"].limit is None and [s.act for s in steps].count("reboot") == 30
    assert budget_lines(budget.to_dict())[1] == ("pool big (200 nodes): 30 repairs started within 1 h; "
                                                 "0 RMA listings (no budget)")


def test_nodes_in_remediation_until_validated_count_against_max_concurrent():
    """Rebooting, and reset/rebooted but not yet through validation: in remediation. A retest, a passed
    validation or an admin's repair is not."""
    t = NOW - 500
    rebooted = [h(Event.REMEDIATE, "reboot: XID79 gpu2", t, State.QUARANTINED, State.REMEDIATING, "r1"),
                h(Event.REMEDIATED, "back", t + 1, State.REMEDIATING, State.REPAIRED, "r1"),
                h(Event.VALIDATE, "validation job 7", t + 2, State.REPAIRED, State.VALIDATING, "r1")]
    reset = [h(Event.REMEDIATE, "reset_gpu: XID48 gpu5", t, State.QUARANTINED, State.REMEDIATING, "r2"),
             h(Event.REMEDIATED, "the validation job resets gpu5 first", t, State.REMEDIATING, State.REPAIRED, "r2")]
    retest = [h(Event.REMEDIATE, "retest: NVLINK_DOWN gpu1", t, State.QUARANTINED, State.REMEDIATING, "r3"),
              h(Event.REMEDIATED, "as it is", t, State.REMEDIATING, State.REPAIRED, "r3")]
    admin = [*reset[:1], h(Event.FAIL, "reboot timed out", t + 5, State.REMEDIATING, State.QUARANTINED, "r4"),
             h(Event.REPAIRED, "admin", t + 9, State.QUARANTINED, State.REPAIRED, "r4")]
    assert in_remediation(State.VALIDATING, rebooted) and in_remediation(State.REPAIRED, reset)
    assert in_remediation(State.REMEDIATING, [])
    assert not in_remediation(State.REPAIRED, retest) and not in_remediation(State.REPAIRED, admin)
    passed = [*rebooted, h(Event.PASS, "passed", t + 9, State.VALIDATING, State.SPARE, "r1")]
    assert not in_remediation(State.SPARE, passed)
    # two of three slots taken: one quarantined node starts, the next waits
    q = {"n0001": (NOW - 90, xid79("n0001")), "n0002": (NOW - 80, xid79("n0002"))}
    steps, budget = fleet_of(10, q, records={"n0005": State.VALIDATING, "n0006": State.REPAIRED},
                             histories={"n0005": rebooted, "n0006": reset})
    assert [s.act for s in steps] == ["reboot", "hold"] and steps[1].held_by == "concurrency"
    assert budget.in_remediation == ["n0005", "n0006", "n0001"]


def test_rma_listing_is_slowed_by_the_same_budget():
    """A burst of RMA verdicts is more likely our bug than hardware: at most the pool's budget an hour
    (the policy's listings and the lemon rule's count alike); the rest stay quarantined and wait."""
    q = {f"n{i:04d}": (NOW - 100 + i, [h(Event.FAULT, "slurm-ft: XID64 gpu1 row remap failure", node=f"n{i:04d}")])
         for i in range(5)}
    lemon = h(Event.FAIL, "lemon: 3 incidents within 30 days", NOW - 1200, State.VALIDATING, State.RMA, "n0009")
    steps, budget = fleet_of(10, q, recent=[lemon])
    assert [s.act for s in steps] == ["rma", "rma", "hold", "hold", "hold"]
    assert steps[2].held_by == "rma_budget" and steps[2].until == NOW - 1200 + 3600
    assert "RMA listing waits for the remediation budget: 3 RMA listings in pool (no domain)" in steps[2].why
    assert len(budget.pools["(no domain)"].rma) == 3
    assert budget.in_remediation == []          # an RMA listing is no repair in flight


def test_budget_holds_are_visible_in_json_and_lines():
    q = {f"n{i:04d}": (NOW - 100 + i, xid79(f"n{i:04d}")) for i in range(5)}
    steps, budget = fleet_of(10, q, policy=replace(ON, max_concurrent=0))
    held = steps[3]
    d = held.to_dict()
    assert (d["action"], d["held_by"], d["until"], d["pool"]) == ("hold", "repair_budget", NOW + 3600, "(no domain)")
    assert describe(held).startswith("n0003: hold: XID79 gpu2: reboot waits for the remediation budget: 3 repairs")
    doc = budget.to_dict()
    assert doc["pools"]["(no domain)"] == {"nodes": 10, "limit": 3, "repairs_in_window": 3, "rma_in_window": 0,
                                          "next_repair_slot": NOW + 3600, "next_rma_slot": None}
    assert [w["node"] for w in doc["waiting"]] == ["n0003", "n0004"]
    lines = budget_lines(json.loads(json.dumps(doc)))        # as `slurm-ft report` reads it back from the journal
    assert lines[0] == "in remediation: 3 (no cap) (n0000, n0001, n0002)"
    assert lines[1].startswith("pool (no domain) (10 nodes): 3 of 3 repairs started within 1 h (next slot ")
    assert lines[2].startswith("waiting: n0003 (reboot, repair_budget until ")


@pytest.mark.parametrize("text,words", [
    ("budget_share: 1.5", "budget_share is a share: at most 1"),
    ("budget_window_s: 0", "budget_window_s must be more than 0 seconds"),
    ("max_concurrent: -1", "must be a finite number, not negative"),
    ("budget_nodes: 2.5", "must be a number (integer)"),
])
def test_bad_budget_config_is_one_clear_error(tmp_path, text, words):
    p = _cfg(tmp_path, "lifecycle:\n  remediation:\n    " + text + "\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(p))
    assert words in str(exc.value)


def test_budget_defaults_are_gke_auto_repairs():
    rc = RemediationConfig()
    assert (rc.budget_nodes, rc.budget_share, rc.budget_window_s, rc.max_concurrent) == (3, 0.1, 3600.0, 3)
    assert pool_limit(20, rc) == 3 and pool_limit(1000, rc) == 100 and pool_limit(39, rc) == 3
    assert pool_of({"rack1": ["a", "b"], "rack2": ["c"]}) == {"a": "rack1", "b": "rack1", "c": "rack2"}
