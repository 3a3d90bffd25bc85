"""Hang detection, stragglers and culprits (job/hang.py), pure over progress reports and check output."""
from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ft.job import hang

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
AT = hang.Launch(job="7", restart=1, launch=2, started_t=1000.0)


def rep(rank, step, t, job="7", restart=1, launch=2, host="n1"):
    return {"rank": rank, "step": step, "t": t, "job": job, "restart": restart, "launch": launch, "host": host}


def test_a_launch_that_reports_is_not_hung_until_the_timeout_passes_without_a_report():
    records = {0: rep(0, 50, 1100.0), 1: rep(1, 49, 1099.5)}
    assert hang.stalled(records, AT, now=1109.9, timeout_s=10) is None
    why = hang.stalled(records, AT, now=1111.0, timeout_s=10)
    assert why is not None and "no progress for 11 s" in why and "last step 50" in why and "rank 0" in why


def test_reports_of_earlier_launches_restarts_or_jobs_do_not_count():
    old = {0: rep(0, 50, 1200.0, launch=1), 1: rep(1, 50, 1200.0, restart=0), 2: rep(2, 50, 1200.0, job="8")}
    assert hang.current(old, AT) == {}
    # none of the current launch: counted from the launch, with the start-up grace (timeout again by default)
    assert hang.stalled(old, AT, now=1019.0, timeout_s=10) is None
    why = hang.stalled(old, AT, now=1021.0, timeout_s=10)
    assert why is not None and "no progress report 21 s after the launch" in why
    assert hang.stalled(old, AT, now=1021.0, timeout_s=10, grace_s=30) is None


def test_a_report_older_than_the_launch_counts_from_the_launch():
    # a rank's clock a little behind: its first report predates the launch; quiet time starts at the launch
    assert hang.stalled({0: rep(0, 1, 990.0)}, AT, now=1009.0, timeout_s=10) is None


def test_a_straggler_is_a_rank_behind_the_others_for_the_window():
    records = {0: rep(0, 100, 1100.0), 1: rep(1, 100, 1099.8), 2: rep(2, 60, 1085.0, host="slow")}
    got = hang.stragglers(records, AT, timeout_s=20)
    assert got == [{"rank": 2, "host": "slow", "step": 60, "ahead_step": 100, "behind_s": 15.0}]
    # within the window (max(10 s, timeout / 4)): not yet
    assert hang.stragglers(records, AT, timeout_s=80) == []
    # the same step (a throttled report): not behind
    assert hang.stragglers({0: rep(0, 100, 1100.0), 1: rep(1, 100, 1080.0)}, AT, timeout_s=20) == []
    assert hang.stragglers({0: rep(0, 100, 1100.0)}, AT, timeout_s=20) == []


def check_line(node, *findings):
    return json.dumps({"node": node, "level": "prolog", "healthy": not findings,
                       "findings": [{"check": "inventory", "severity": s, "gpu": g, "code": c, "reason": r}
                                    for s, g, c, r in findings]})


def test_culprits_are_the_nodes_with_a_fail_finding_in_the_checks_output():
    out = "\n".join([
        check_line("gpu001"),
        check_line("gpu002", ("fail", 0, "GPU_LOST", "GPU 0 is lost"), ("warn", 1, "TEMP", "hot")),
        check_line("gpu003", ("error", None, "PROBE_CRASH", "probe crashed")),   # not a verdict on the node
        "srun: error: gpu004: task 3: Exited with exit code 1",
        "{not json", "[1, 2]", json.dumps({"node": 5, "findings": []}),
    ])
    got = hang.culprits(out)
    assert list(got) == ["gpu002"]
    assert got["gpu002"].startswith("slurm-ft: hang check: GPU_LOST gpu0 GPU 0 is lost")
    assert hang.culprits("") == {}


def labelled(outputs: dict, cut: list, order: list) -> str:
    """srun --label's output of tasks {task: text}: each line of a task cut in pieces at the `cut` offsets
    (slurmstepd forwards at most 1 KiB at a time), each piece a labelled line, the pieces of all tasks
    merged in `order` (each task's in its own order)."""
    width = len(str(max(outputs)))
    queues = {}
    for task, text in outputs.items():
        queues[task] = []
        for line in text.split("\n"):
            bounds = sorted({0, len(line), *(c % (len(line) + 1) for c in cut)})
            queues[task] += [line[a:b] for a, b in zip(bounds, bounds[1:])]
    lines = []
    for pick in order + list(outputs) * max(map(len, queues.values())):
        live = [t for t in sorted(queues) if queues[t]]
        if not live:
            break
        task = live[pick % len(live)]
        lines.append(f"{task:>{width}}: {queues[task].pop(0)}")
    return "\n".join(lines)


def test_culprits_are_read_from_a_labelled_output_whose_long_lines_interleave():
    reports = {0: check_line("gpu001"), 1: check_line("gpu002", ("fail", 0, "GPU_LOST", "GPU 0 is lost")),
               2: check_line("gpu003"), 3: check_line("gpu004", ("fail", 5, "NVLINK_DOWN", "link 3 down"))}
    out = labelled(reports, cut=[1024, 2048], order=[0, 1, 2, 3, 0, 1])
    assert any(not line.split(": ", 1)[1].endswith("}") for line in out.splitlines())   # lines were cut
    got = hang.culprits(out)
    assert sorted(got) == ["gpu002", "gpu004"] and "NVLINK_DOWN gpu5" in got["gpu004"]


def test_culprits_of_a_real_hang_check_on_slurm_22_05():
    # captured by tests/data/slurm/capture.py: 4 nodes, gpu002's GPU lost; each report came in 2 pieces,
    # those of gpu003 and gpu004 crossed
    out = (DATA / "22.05" / "srun_label_hang_check.txt").read_text()
    unlabelled = [line.split(": ", 1)[1] for line in out.splitlines()]
    assert sum(1 for line in unlabelled if line.startswith('{"node"') and line.endswith("}")) == 0
    got = hang.culprits(out)
    assert got == {"gpu002": "slurm-ft: hang check: GPU_LOST gpu0 GPU lost (name: GPU is lost)"}


@settings(max_examples=200, deadline=None)
@given(findings=st.lists(st.tuples(st.sampled_from(["ok", "warn", "fail", "error"]),
                                   st.one_of(st.none(), st.integers(0, 7)), st.text(max_size=8),
                                   st.text(max_size=400)), max_size=12),
       nodes=st.integers(1, 12), cut=st.lists(st.integers(1, 4000), max_size=6),
       order=st.lists(st.integers(0, 50), max_size=80), noise=st.text(max_size=60))
def test_culprits_of_any_interleaving_are_the_failing_nodes(findings, nodes, cut, order, noise):
    reports, expected = {}, set()
    for task in range(nodes):
        mine = findings[task::nodes]
        reports[task] = check_line(f"gpu{task:03d}", *mine) + "\n" + noise
        if any(f[0] == "fail" for f in mine):
            expected.add(f"gpu{task:03d}")
    assert set(hang.culprits(labelled(reports, cut, order))) == expected


def test_restarts_in_place_count_with_slurms_requeues():
    assert hang.restarts_left(5, 2, 2)
    assert not hang.restarts_left(5, 2, 3)
    assert not hang.restarts_left(0, 0, 0)


def test_the_checks_run_beside_the_hung_step_on_each_of_its_nodes_once():
    from slurm_ft.job.supervisor import check_argv
    argv = check_argv(["gpu001", "gpu002", "gpu007"], python="/py")
    assert argv[:8] == ["srun", "--overlap", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1",
                        "--nodelist=gpu[001-002,007]", "--kill-on-bad-exit=0", "--label"]
    assert argv[8:] == ["/py", "-m", "slurm_ft", "check", "--level", "prolog", "--json", "--no-state"]   # looks only
    assert "--drain" in check_argv(["gpu002"], python="/py", drain=True)                                # then acts


def test_most_of_a_step_failing_alike_is_not_believed():
    why = "slurm-ft: hang check: NVML_INIT NVML unusable: NVML library libnvidia-ml.so.1 not found"
    assert hang.systemic({f"gpu{i:03d}": why for i in range(1, 64)}, 63).startswith("the checks failed 63 of 63")
    assert hang.systemic({"gpu001": why, "gpu002": why}, 3) is not None
    assert hang.systemic({"gpu002": why}, 3) is None                 # one of three: a culprit
    assert hang.systemic({"gpu002": why}, 2) is None and hang.systemic({"gpu001": why}, 1) is None  # small steps
    assert hang.systemic({"gpu001": why, "gpu002": why}, 2) is not None                  # ... but all alike
    lost = "slurm-ft: hang check: GPU_LOST gpu0 GPU lost"
    assert hang.systemic({"gpu001": why, "gpu002": lost}, 2) is None
    assert hang.systemic({}, 63) is None
