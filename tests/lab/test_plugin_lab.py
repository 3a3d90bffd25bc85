"""slurm-ft's Slurm plugins on a real Slurm: the SPANK plugin (plain `sbatch --ft-*`) and the job_submit policy.

A lab of its own (`lab up --plugin`: 8 nodes + 2 spares, ports from $SLURM_FT_TEST_PORT_BASE + 300), since
the session lab runs without the plugins. What a user and an admin would check: the options in `sbatch
--help`, a bad value refused at submit time with its reason, the tag in AdminComment (the grammar of
`slurm-ft sbatch`, byte for byte), a job recovered onto a spare and resumed from its newest checkpoint,
a user-forged tag in Comment ignored, and ordinary jobs untouched, with the plugin's .so there or not.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import TEST_LAB_DIR, TEST_PORT_BASE, lab_session, work_dir
from ctl_helpers import PY, controller_config, fail_node, incidents, once, wait_job
from slurm_ft_lab.cluster import LabSpec
from slurm_ft_lab.scenario import Scenario
from slurm_ft_lab.trainer import read_log
from slurm_ft.job.tag import FtSpec, decode, encode
from slurm_ft.slurm.hostlist import expand
from slurm_ft_lab.waits import wait_for

OPTIONS = ("--ft-ckpt-dir", "--ft-hot-spares", "--ft-max-restarts", "--ft-hang-timeout", "--ft-min-nodes")


@pytest.fixture(scope="module")
def plab():
    yield from lab_session(f"{TEST_LAB_DIR}-plugin", LabSpec(nodes=8, spares=2, gpus_per_node=8,
                                                             port_base=TEST_PORT_BASE + 300, plugin=True))


@pytest.fixture
def pwork(plab, request):
    """As the session lab's `work`: a directory of the job user's, on the plugin lab."""
    plab.reset()
    d = work_dir(plab, request)
    yield d
    plab.reset()
    shutil.rmtree(d, ignore_errors=True)


def sbatch(lab, *args, user=None):
    """Plain sbatch as the lab's job user (or `user`): the plugins meet a user's options."""
    return lab.run_as(["sbatch", "--parsable", *args], user=user, timeout=60)


def job_count(lab) -> int:
    return len(lab.client.jobs())


def test_sbatch_and_srun_help_list_the_options(plab):
    for cmd in ("sbatch", "srun"):
        p = subprocess.run([cmd, "--help"], capture_output=True, text=True, timeout=30, env=plab.env)
        assert p.returncode == 0, p.stderr
        for opt in OPTIONS:
            assert opt + "=" in p.stdout, f"{cmd} --help lacks {opt}"


@pytest.mark.parametrize("args,message", [
    (["--ft-max-restarts=abc"], "slurm-ft: --ft-max-restarts abc: must be a whole number from 0 to 1000"),
    (["--ft-hang-timeout=0"], "slurm-ft: --ft-hang-timeout 0: must be a whole number from 1 to 604800"),
    (["--ft-ckpt-dir=ckpt/run7"], "slurm-ft: --ft-ckpt-dir ckpt/run7: the checkpoint directory must be an absolute path"),
    (["--ft-ckpt-dir=/tmp/a/../../etc"], "contains a '..' component"),
    (["--ft-ckpt-dir=/var/lib/run7"], "slurm-ft: --ft-ckpt-dir /var/lib/run7: not under this site's checkpoint roots"),
    (["--ft-ckpt-dir=/tmp/run7", "--ft-hot-spares=1"],
     "slurm-ft: --ft-hot-spares 1: hot spares and replica groups need slurm-ft's supervisor in the batch step: "
     "submit with `slurm-ft sbatch --hot-spares` or `--replica-groups`"),
    (["-p", "spares", "--ft-ckpt-dir=/tmp/run7"],
     "slurm-ft: fault-tolerant jobs (--ft-*) run only in partition(s) train here, not spares"),
    # review finding 12: restarts in place are counted in the checkpoint directory; without one they never end
    (["--ft-hang-timeout=60"], "slurm-ft: --ft-hang-timeout needs --ft-ckpt-dir"),
    # finding 11: tagged ckpt=/tmp/%FF%FE, then silently ignored by the controller (strict UTF-8 decoding)
    ([os.fsdecode(b"--ft-ckpt-dir=/tmp/run\xff\xfe")],
     "slurm-ft: --ft-ckpt-dir: the checkpoint directory is not valid UTF-8"),
])
def test_a_bad_value_is_refused_at_submit_time_with_its_reason(pwork, plab, args, message):
    before = job_count(plab)
    p = sbatch(plab, *args, "--wrap", "true")
    assert p.returncode != 0
    assert message in p.stderr
    assert "Traceback" not in p.stderr
    assert job_count(plab) == before                 # nothing reached the queue


def test_the_sites_own_job_submit_rule_runs_beside_slurm_fts_policy(pwork, plab):
    """The lab's job_submit.lua is a site's (etc/job_submit.lua) with a rule of its own beside the calls to
    slurm-ft's module (slurm_ft_policy.lua): slurmctld runs both, for plain and fault-tolerant jobs."""
    from slurm_ft_lab.plugin import SITE_REFUSED_NAME
    before = job_count(plab)
    for ft in ([], ["--ft-ckpt-dir=/tmp/run7"]):
        p = sbatch(plab, "-J", SITE_REFUSED_NAME, *ft, "--wrap", "true")
        assert p.returncode != 0 and f"site rule: no job may be named {SITE_REFUSED_NAME} here" in p.stderr, p.stderr
    assert job_count(plab) == before
    p = sbatch(plab, "--hold", "-J", "allowed", f"--ft-ckpt-dir={plab.give(pwork / 'ck')}", "--wrap", "true")
    assert p.returncode == 0, p.stderr
    assert plab.client.job(int(p.stdout.split(";")[0])).admin_comment.startswith("slurm-ft:v1 ckpt=")


def test_the_tag_in_admin_comment_is_the_wrappers_grammar_and_users_cannot_edit_it(pwork, plab):
    ck = plab.give(pwork / "my run %41 \u00fc=x")
    spec = FtSpec(ckpt_dir=str(ck), min_nodes=2, hang_timeout=600, max_restarts=7)
    p = sbatch(plab, "--hold", f"--ft-ckpt-dir={ck}", "--ft-min-nodes=2", "--ft-hot-spares=0",
               "--ft-hang-timeout=600", "--ft-max-restarts=7", "-N", "2", "--wrap", "true")
    assert p.returncode == 0, p.stderr
    job = plab.client.job(int(p.stdout.split(";")[0]))
    assert job.admin_comment == encode(spec)         # job_submit.lua and tag.py: one grammar
    assert decode(job.admin_comment, noted=True) == spec
    assert job.comment == "" and job.requeue
    assert job.user == plab.user
    # the job's owner may edit Comment, never AdminComment
    q = plab.run_as(["scontrol", "update", f"JobId={job.job_id}", "AdminComment=slurm-ft:v1 ckpt=/etc"], timeout=30)
    assert q.returncode != 0
    assert plab.client.job(job.job_id).admin_comment == encode(spec)
    # ... nor move it out of the partitions the site allows FT jobs in
    q = plab.run_as(["scontrol", "update", f"JobId={job.job_id}", "Partition=spares"], timeout=30)
    assert q.returncode != 0, q.stdout
    assert plab.client.job(job.job_id).partition == "train"
    # `slurm-ft sbatch` here goes through the plugin and makes the same tag (the starter holds no tag)
    w = plab.run_as([PY, "-m", "slurm_ft", "sbatch", "--parsable", "--hold", "--ckpt-dir", str(ck),
                     "--min-nodes", "2", "--hang-timeout", "600", "--max-restarts", "7", "-N", "2", "/bin/true"],
                    env={"SLURM_FT_CONFIG": str(plab.config_path)}, timeout=60)
    assert w.returncode == 0, w.stderr
    assert "submitted through the slurm-ft plugin" in w.stderr
    wrapped = plab.client.job(int(w.stdout.strip()))
    assert wrapped.admin_comment == encode(spec) and wrapped.comment == "" and wrapped.requeue


def test_plain_sbatch_job_is_recovered_onto_a_spare_from_its_newest_checkpoint(pwork, plab):
    sc = Scenario(plab.cluster, plab.dir / "demo", step_time=0.3, ckpt_every=3)   # its job runs as plab.user
    sc.prepare()
    cfg = yaml.safe_load(sc.config_path.read_text())
    cfg.setdefault("lifecycle", {})["breaker_max_share"] = 0.5     # 10 nodes: one drain would open 0.1
    sc.config_path.write_text(yaml.safe_dump(cfg))
    sc.start_controller()
    try:
        job_id = sc.submit(4, via="plugin")
        job = plab.client.job(job_id)
        assert job.admin_comment == encode(FtSpec(ckpt_dir=str(sc.ckpt_dir), max_restarts=100))
        res = sc.fault(victim_index=1, timeout=240)
        recovered = plab.client.job(job_id)
        train = plab.client.partition("train").nodes
    finally:
        sc.stop()
    assert res.spare_node in plab.spare_nodes
    starts = [e for e in sc.events() if e.get("event") == "start"]
    assert [s.get("restart") for s in starts][:2] == [0, 1]
    # resumed from the newest complete checkpoint written before the fault (every 3 steps)
    assert res.resumed_from_step and res.resumed_from_step % 3 == 0
    assert res.last_step_before - 3 < res.resumed_from_step <= res.last_step_before
    log = (sc.ckpt_dir / "slurm-ft-starts.jsonl").read_text().splitlines()
    assert len(log) == 2 and f"step_{res.resumed_from_step:06d}" in log[1]
    # the job runs without the failed node, which left `train`; the spare took its place there
    assert res.failed_node not in recovered.nodes and recovered.state == "RUNNING"
    assert res.spare_node in train and res.failed_node not in train


def test_through_the_plugin_a_hang_is_restarted_in_place_from_the_newest_checkpoint(pwork, plab):
    """`slurm-ft sbatch --hang-timeout` where the plugins are installed: the tag goes through the policy
    into AdminComment, and the batch step supervises the training step as without the plugin: a rank
    stalls with no Xid, no culprit is found, the step restarts in place from the newest checkpoint (the
    plugin resolved {ckpt} once, at the start; the supervisor resolves it again for the restart)."""
    ck = pwork / "ck"
    p = plab.run_as([PY, "-m", "slurm_ft", "sbatch", "--ckpt-dir", str(ck), "--hang-timeout", "10", "-N", "2",
                     "--ntasks-per-node=1", "-o", str(pwork / "job.out"), PY, "-m", "slurm_ft_lab.trainer",
                     "--ckpt-dir", str(ck), "--resume", "{ckpt}", "--step-time", "0.3", "--ckpt-every", "5",
                     "--stall-at", "8", "--stall-rank", "1", "--gpu-check", "off"], timeout=120, cwd=pwork,
                    env={"LD_LIBRARY_PATH": str(plab.dir / "lib")})   # the nodes' fake NVML
    assert p.returncode == 0 and "through the slurm-ft plugin" in p.stderr, p.stderr
    job_id = int(p.stdout.split()[-1])
    try:
        assert decode(plab.client.job(job_id).admin_comment).hang_timeout == 10
        wait_for(lambda: _stepped_past(ck, 1, 1), 180, "the first step after the restart in place")
        records = [json.loads(x) for x in (ck / "slurm-ft-starts.jsonl").read_text().splitlines()]
        launches = [r for r in records if r["event"] == "launch"]
        assert [r["event"] for r in records if r["event"] in ("jobstart", "launch")][:3] == ["jobstart", "launch", "launch"]
        assert launches[1]["nodes"] == launches[0]["nodes"] and "restart in place after a hang" in launches[1]["reason"]
        assert launches[1]["step"] == 5 and launches[1]["ckpt"].endswith("step_000005")
        assert not launches[1].get("passed_over")          # the plugin's record and launch 0 are one start
        assert plab.client.job(job_id).restart_count == 0
    except BaseException:
        print((pwork / "job.out").read_text(errors="replace")[-3000:] if (pwork / "job.out").exists() else "(no output)")
        raise
    finally:
        plab.client.cancel(job_id)


def test_through_the_plugin_hot_spares_meet_a_fault_inside_the_allocation(pwork, plab):
    """`slurm-ft sbatch --hot-spares 1 -N 2` where the plugins are installed: the policy writes
    hot_spares and train_nodes into AdminComment (tag.py's bytes), the job holds 3 nodes, and a fault on
    a node of the training step is met by its supervisor: relaunched on the hot spare from a complete
    checkpoint, no requeue."""
    ck = pwork / "ck"
    p = plab.run_as([PY, "-m", "slurm_ft", "sbatch", "--ckpt-dir", str(ck), "--hot-spares", "1", "-N", "2",
                     "--ntasks-per-node=1", "-o", str(pwork / "job.out"), PY, "-m", "slurm_ft_lab.trainer",
                     "--ckpt-dir", str(ck), "--resume", "{ckpt}", "--step-time", "0.3", "--ckpt-every", "5",
                     "--gpu-check", "off"], timeout=120, cwd=pwork)
    assert p.returncode == 0 and "through the slurm-ft plugin" in p.stderr, p.stderr
    job_id = int(p.stdout.split()[-1])
    try:
        job = wait_job(plab, job_id, "RUNNING", timeout=180)
        assert len(job.nodes) == 3
        assert job.admin_comment == encode(FtSpec(ckpt_dir=str(ck), hot_spares=1, train_nodes=2, max_restarts=5))
        wait_for(lambda: _stepped_past(ck, 0, 7), 120, "launch 0 past its first checkpoint")
        launch0 = [r for r in _starts(ck) if r["event"] == "launch"][0]
        victim = next(x for x in expand(launch0["nodes"]) if x != job.batch_host)
        fail_node(plab, victim)
        start = wait_for(lambda: _start_of_launch(ck, 1), 90, "the relaunch on the hot spare")
        assert start["resumed_from"] and start["step"] >= 5
        relaunched = [r for r in _starts(ck) if r["event"] == "launch"][1]
        assert victim not in expand(relaunched["nodes"]) and len(expand(relaunched["nodes"])) == 2
        assert plab.client.job(job_id).restart_count == 0 and plab.client.job(job_id).state == "RUNNING"
    except BaseException:
        print((pwork / "job.out").read_text(errors="replace")[-3000:] if (pwork / "job.out").exists() else "(no output)")
        raise
    finally:
        plab.client.cancel(job_id)


def _starts(ck: Path) -> list:
    return [json.loads(x) for x in (ck / "slurm-ft-starts.jsonl").read_text().splitlines()]


def _stepped_past(ck: Path, launch: int, step: int) -> bool:
    return any(e["event"] == "step" and e.get("launch", 0) == launch and e["step"] >= step for e in read_log(str(ck)))


def _start_of_launch(ck: Path, launch: int):
    return next((e for e in read_log(str(ck)) if e["event"] == "start" and e.get("launch", 0) == launch), None)


def test_a_tag_the_user_writes_into_comment_is_ignored(pwork, plab, tmp_path):
    config = controller_config(plab, tmp_path)
    p = sbatch(plab, "-N", "2", "-o", str(pwork / "o-%j.txt"), "--wrap", "sleep 600")
    assert p.returncode == 0, p.stderr
    job_id = int(p.stdout.split(";")[0])
    job = wait_job(plab, job_id)
    forged = encode(FtSpec(ckpt_dir="/etc"))
    u = plab.run_as(["scontrol", "update", f"JobId={job_id}", f"Comment={forged}"], timeout=30)   # the user's own
    assert u.returncode == 0, u.stderr
    assert plab.client.job(job_id).comment == forged
    fail_node(plab, job.nodes[0])
    out = once(plab, config, budget=20)
    assert incidents(plab, config) == [], out.stdout
    after = plab.client.job(job_id)
    assert after.state == "RUNNING" and after.restart_count == 0
    assert set(plab.client.partition("spares").nodes) == set(plab.spare_nodes)


def _ordinary_jobs_complete(lab, work: Path) -> None:
    p = sbatch(lab, "-N", "2", "-o", str(work / "plain-%j.txt"), "--wrap", "srun hostname")
    assert p.returncode == 0, p.stderr
    job_id = int(p.stdout.split(";")[0])
    wait_job(lab, job_id, "COMPLETED", timeout=60)
    assert lab.client.job(job_id).admin_comment == ""
    s = lab.run_as(["srun", "-N", "2", "/bin/echo", "ok"], cwd=work, timeout=60)
    assert s.returncode == 0 and s.stdout.split() == ["ok", "ok"], s.stderr


def test_ordinary_jobs_run_with_the_plugin_and_without_its_shared_object(pwork, plab):
    _ordinary_jobs_complete(plab, pwork)
    so = plab.dir / "lib" / "slurm_ft.so"
    aside = so.with_name("slurm_ft.so.aside")
    shutil.move(str(so), str(aside))                 # plugstack.conf says `optional`
    try:
        _ordinary_jobs_complete(plab, pwork)
    finally:
        shutil.move(str(aside), str(so))
        time.sleep(0.1)
