"""The hot-spare supervisor's launch line carries the last step the launch before it reached (with its
time), read before the new launch's ranks replace the reports: what `slurm-ft status --job` counts as
redone steps after a relaunch inside the allocation, as it does after a requeue (jobstart's `before`)."""
from __future__ import annotations

import json

from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path
from slurm_ft.fleet.report.goodput import Start, compute
from slurm_ft.fleet.report.job_progress import parse_point
from slurm_ft.heartbeat import DIR_NAME
from slurm_ft.job import supervisor as sv

ALLOC = ("n1", "n2", "n3", "n4")


def test_a_relaunch_says_where_the_launch_before_it_got_to(tmp_path, monkeypatch):
    # reproduced in the lab (tests/lab/test_goodput_sim_lab.py): status counted 0 redone steps for every
    # relaunch on a hot spare unless a read of the reports happened to fall just before the fault
    monkeypatch.setattr(sv.subprocess, "Popen", lambda argv, env: None)        # no srun here
    ck = tmp_path / "ck"
    (ck / DIR_NAME).mkdir(parents=True)
    for rank, step in ((0, 24), (1, 23)):            # the previous launch's ranks, where they stopped
        (ck / DIR_NAME / f"rank-{rank}.json").write_text(json.dumps(
            {"step": step, "t": 1000.0 + step, "rank": rank, "job": "7", "restart": 0, "launch": 1}))
    sup = sv.Supervisor(FakeSlurm(train=ALLOC, spares=()), 7, 3, str(ck), ["train", "--resume", "{ckpt}"],
                        env={"SLURM_RESTART_COUNT": "0"}, say=lambda m: None)
    sup.launches = 2
    assert sup.launch(("n1", "n3", "n4"), "relaunch without n2") is None
    [line] = [json.loads(x) for x in (ck / "slurm-ft-starts.jsonl").read_text().splitlines()]
    assert line["event"] == "launch" and line["launch"] == 2
    assert line["before"] == {"step": 24, "t": 1024.0, "job": "7", "restart": 0, "launch": 1}
    # goodput reads it as the last point of launch 1: 24 - the resumed step are the redone steps
    before = parse_point(line["before"], "7")
    g = compute(7, gpus=8, now=2000.0, starts=[Start(900.0, 0, 1, 10), Start(1030.0, 0, 2, 20, before)],
                points=[], faults=[(1, 1025.0)])
    assert [x.redone_steps for x in g.losses] == [4]
