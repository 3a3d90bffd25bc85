"""Planned swaps on the real lab (issue 24): no fault, a GPU announcing one. Corrected ECC errors climbing on
one GPU of a hot-spare job's node (the fake driver counts them at a rate: `lab inject --ecc-sbe-rate`):
the node's own `slurm-ft watch` sees the soft signal and drains it gracefully, the job's supervisor asks the
trainer for a checkpoint and moves the step to its hot spare from it (no step redone, no requeue), the
controller quarantines the node and the sweep validates it. With the signal off, or with noise under its
limit over several windows, nothing happens. A straggler (`lab inject --slow 0.5`) is moved off the same
way by the job's own progress reports, and its node's watcher (a slow clock with no reason) sends it to
validation, which fails it: a confirmed signal in `slurm-ft report`.

Who does what, as on a cluster: the job is the lab's unprivileged job user's (`slurm-ft sbatch
--hot-spares` run as them, its output and checkpoints in their `work` directory; its supervisor's shrink,
notices and checkpoint ask need nothing more than the job's owner may do). Root only for the admin's side:
the node's `slurm-ft watch` (a root daemon on every node: it reads NVML and drains), the controller, the
sweep and `report` (root's config and journal in tmp_path), and `lab inject` (the fake driver: the GPU
itself). The job reads a world-readable copy of the config (as /etc/slurm-ft/slurm-ft.yaml is on a cluster)
for its node type's straggler settings."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from slurm_ft.slurm.hostlist import expand
from slurm_ft_lab.inject import inject
from slurm_ft_lab.trainer import read_log, runs
from slurm_ft_lab.waits import wait_for
from tests.lab.ctl_helpers import PY, controller_config, incidents, slurm_ft, wait_job

pytestmark = pytest.mark.lab

SOFT = {"window_s": 30.0, "ecc_corrected": 100, "clock_window_s": 6.0, "clock_slow_ratio": 0.7,
        "straggler_ratio": 0.7, "straggler_window_s": 8.0}


def planned_config(lab, root: Path, name: str = "slurm-ft.yaml", **soft) -> Path:
    """The lab's config, a journal of this test's own (in root's `root`), soft signals read every second
    over 30 s windows."""
    path = controller_config(lab, root)
    data = yaml.safe_load(path.read_text())
    data.setdefault("health", {})["soft_period_s"] = 1.0
    data["health"].setdefault("node_types", {}).setdefault("default", {})["soft"] = {**SOFT, **soft}
    data.setdefault("lifecycle", {}).update(planned_swaps_per_hour=10, quarantine_grace_s=0, validate_wait_s=240)
    out = root / name
    out.write_text(yaml.safe_dump(data))
    os.chmod(out, 0o644)
    return out


@pytest.fixture
def config(lab, tmp_path):
    return planned_config(lab, tmp_path)


@pytest.fixture
def controller(lab, work, tmp_path, config):
    proc = subprocess.Popen([PY, "-m", "slurm_ft", "controller", "run"], env=dict(lab.env, SLURM_FT_CONFIG=str(config)),
                            stdout=open(tmp_path / "controller.log", "w"), stderr=subprocess.STDOUT)
    yield config
    proc.terminate()
    try:
        proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    # shown by pytest only when the test failed: what the controller, the watcher, the job and its supervisor said
    for name in ("controller.log", "watch.log", "job.out", "ck/slurm-ft-starts.jsonl", "ck/trainer-log.jsonl"):
        f = (tmp_path if name in ("controller.log", "watch.log") else work) / name
        print(f"== {name}", *(f.read_text(errors="replace").splitlines()[-60:] if f.exists() else ["(none)"]), sep="\n")


class Watch:
    """`slurm-ft watch` on one lab node, as its systemd service runs it there."""

    def __init__(self, lab, root: Path, node: str, config: Path):
        env = dict(lab.env, SLURM_FT_CONFIG=str(config), SLURMD_NODENAME=node, LD_LIBRARY_PATH=str(lab.dir / "lib"),
                   PYTHONUNBUFFERED="1")
        self.log = root / "watch.log"
        self.proc = subprocess.Popen([PY, "-m", "slurm_ft", "watch", "--node", node, "--json", "--no-nvml"],
                                     env=env, stdout=open(self.log, "a"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while "slurm-ft watch on" not in self.log.read_text(errors="replace"):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.2)

    def lines(self) -> list:
        return [json.loads(x) for x in self.log.read_text(errors="replace").splitlines() if x.startswith("{")]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


@pytest.fixture
def watches():
    started = []
    yield lambda *a: started.append(Watch(*a)) or started[-1]
    for w in started:
        w.stop()


def submit(lab, work: Path, config: Path, n: int = 2, k: int = 1) -> tuple:
    """The job user's hot-spare trainer; its supervisor reads a world-readable copy of root's config."""
    ck = work / "ck"
    readable = work / "slurm-ft.yaml"
    readable.write_text(config.read_text())
    os.chmod(readable, 0o644)
    p = slurm_ft(lab, None, "sbatch", "--ckpt-dir", str(ck), "--hot-spares", str(k), "-N", str(n),
                 "--ntasks-per-node=1", "--gres=gpu:8", "-o", str(work / "job.out"), "--open-mode=append",
                 PY, "-m", "slurm_ft_lab.trainer", "--ckpt-dir", str(ck), "--resume", "{ckpt}",
                 "--step-time", "0.3", "--ckpt-every", "5", "--gpu-check", "on",
                 env={"SLURM_FT_CONFIG": str(readable), "LD_LIBRARY_PATH": str(lab.dir / "lib")})
    assert lab.client.job(int(p.stdout.split()[-1])).user == lab.user   # the lab user's job, not root's
    return int(p.stdout.split()[-1]), ck


def supervisor(ck: Path, event: str) -> list:
    path = ck / "slurm-ft-starts.jsonl"
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["event"] == event]


def training(lab, ck: Path, job_id: int, past: int = 7):
    """The job's step nodes once it trained past a checkpoint; the victim: one of them, not the batch host."""
    job = wait_job(lab, job_id, "RUNNING", timeout=180)
    wait_for(lambda: any(e["event"] == "step" and e["step"] >= past for e in read_log(str(ck))), 180,
             f"step {past}")
    step_nodes = list(expand(supervisor(ck, "launch")[0]["nodes"]))
    return job, next(x for x in step_nodes if x != job.batch_host)


def test_corrected_ecc_climbing_swaps_at_a_checkpoint_with_no_step_redone_and_the_node_goes_to_validation(
        lab, work, tmp_path, controller, watches):
    job_id, ck = submit(lab, work, controller)
    job, victim = training(lab, ck, job_id)
    w = watches(lab, tmp_path, victim, controller)
    t0 = time.time()
    inject(lab.dir, victim, "ecc_sbe_rate", gpu=3, value="6000/min")
    second = wait_for(lambda: [r for r in runs(read_log(str(ck))) if r["launch"] == 1
                               and r["first_step"] is not None], 180, "the step relaunched")[0]
    first = runs(read_log(str(ck)))[0]
    # the trainer's own log: it stopped after the checkpoint it was asked for, the next launch began there
    assert first["end"] == "stop" and first["last_ckpt"] == first["last_step"]
    assert second["resumed_from_step"] == first["last_step"] and second["steps_lost"] == 0
    relaunch = supervisor(ck, "launch")[1]
    assert victim not in expand(relaunch["nodes"]) and relaunch["reason"] == f"planned swap without {victim}"
    assert [e["phase"] for e in supervisor(ck, "planned")] == ["asked", "swap"]
    assert not supervisor(ck, "fault")
    node = lab.client.node(victim)
    assert node.drained and node.reason.startswith("slurm-ft: PLANNED ECC_SBE_RATE gpu3 corrected ECC errors +")
    wait_for(lambda: [x["planned"]["action"] for x in w.lines() if x.get("planned")][:1] == ["drained"],
             30, "the watcher saying it drained the node")
    now = lab.client.job(job_id)
    assert now.state == "RUNNING" and now.restart_count == 0 and victim not in now.nodes
    inc = wait_for(lambda: [i for i in incidents(lab, controller) if i["status"] == "planned"], 90,
                   "the planned incident closed")[0]
    assert inc["nodes"] == [victim] and inc["note"].startswith("planned, hot spare:")
    assert [s["name"] for s in inc["steps"]][:2] == ["open", "quarantine"] and "requeue" not in str(inc["steps"])
    print(f"soft signal -> first step on the spare: {second['first_step_t'] - t0:.2f} s after the errors began")
    # the node in validation: the sweep records it, retests it as it is, and the report counts the swap
    inject(lab.dir, victim, "ecc_sbe_rate", gpu=3, value=0)
    sweep = slurm_ft(lab, controller, "sweep", "--json", timeout=600)
    changes = json.loads(sweep.stdout)["changes"]
    assert any(c.startswith(f"{victim}: quarantined -> repaired (ECC_SBE_RATE gpu3: retest") for c in changes), changes
    assert any(c.startswith(f"{victim}: repaired -> validating") for c in changes), changes
    report = json.loads(slurm_ft(lab, controller, "report", "--json").stdout)
    row = report["by_soft_signal"]["ECC_SBE_RATE"]
    assert row["swaps"] == 1 and row["confirmed"] + row["false_alarms"] + row["open"] == 1


def test_with_the_signal_off_or_noise_under_its_limit_over_several_windows_nothing_happens(lab, work, tmp_path,
                                                                                          controller, watches):
    job_id, ck = submit(lab, work, controller)
    job, victim = training(lab, ck, job_id)
    # noise: 100 corrected errors a minute, 50 in any 30 s window against a limit of 100, for four windows
    w = watches(lab, tmp_path, victim, controller)
    inject(lab.dir, victim, "ecc_sbe_rate", gpu=3, value="100/min")
    time.sleep(120)
    assert not [x for x in w.lines() if x.get("soft")], w.lines()
    w.stop()
    # the signal off: 100 a second, and nothing
    off = planned_config(lab, tmp_path, "off.yaml", ecc_corrected=0)
    w = watches(lab, tmp_path, victim, off)
    inject(lab.dir, victim, "ecc_sbe_rate", gpu=3, value="6000/min")
    time.sleep(20)
    assert not [x for x in w.lines() if x.get("soft")], w.lines()
    assert not lab.client.node(victim).drained
    assert not supervisor(ck, "planned") and len(supervisor(ck, "launch")) == 1
    assert incidents(lab, controller) == []
    now = lab.client.job(job_id)
    assert now.state == "RUNNING" and now.restart_count == 0


def test_a_straggler_is_moved_off_at_a_checkpoint_and_its_own_watcher_sends_it_to_validation(lab, work, tmp_path,
                                                                                              controller, watches):
    job_id, ck = submit(lab, work, controller)
    job, victim = training(lab, ck, job_id)
    inject(lab.dir, victim, "slow", gpu=0, value=0.5)        # its GPU at half speed: the gang waits for it
    second = wait_for(lambda: [r for r in runs(read_log(str(ck))) if r["launch"] == 1
                               and r["first_step"] is not None], 180, "the step relaunched")[0]
    [slow] = supervisor(ck, "straggler")
    assert slow["node"] == victim and slow["reason"].startswith("STRAGGLER: 0.")
    first = runs(read_log(str(ck)))[0]
    assert first["end"] == "stop" and second["steps_lost"] == 0
    assert victim not in expand(supervisor(ck, "launch")[1]["nodes"])
    assert [r["nodes"] for r in supervisor(ck, "release") if r["ok"]] == [victim]   # nobody quarantines a straggler
    assert not lab.client.node(victim).drained                  # a job's word drains no node ...
    w = watches(lab, tmp_path, victim, controller)              # ... the node's own watcher does
    wait_for(lambda: lab.client.node(victim).drained, 60, "the watcher's planned drain")
    assert lab.client.node(victim).reason.startswith("slurm-ft: PLANNED CLOCK_SLOW gpu0 SM clock at 50% of max")
    wait_for(lambda: any(x.get("planned", {}).get("action") == "drained" for x in w.lines()), 30,
             "the watcher saying so")
    sweep = json.loads(slurm_ft(lab, controller, "sweep", "--json", timeout=600).stdout)
    assert any(c.startswith(f"{victim}: validating -> quarantined (BURNIN") for c in sweep["changes"]), sweep
    row = json.loads(slurm_ft(lab, controller, "report", "--json").stdout)["by_soft_signal"]["CLOCK_SLOW"]
    assert (row["swaps"], row["confirmed"], row["false_alarms"]) == (1, 1, 0)
