"""Drain episodes and their accounting from lifecycle histories (pure), and their Prometheus lines."""
from __future__ import annotations

import re

from slurm_ft.fleet.report import metrics
from slurm_ft.fleet.report.drain_stats import episodes, metric_rows, summarize
from slurm_ft.fleet.lifecycle.transitions import Event, HistoryEntry, State
from slurm_ft.fleet.recovery.records import Incident

H = 3600.0
T0 = 1_800_000_000.0


def e(node, t, event, to, cause="", frm=None, actor="sweep"):
    return HistoryEntry(node, T0 + t, event, frm, to, cause, actor)


def lap(node, code, repairs, end_event=Event.PASS, t=0.0, hours=2.0):
    out = [e(node, t, Event.FAULT, State.FAILED, f"slurm-ft: {code} gpu1 x"),
           e(node, t + 60, Event.QUARANTINE, State.QUARANTINED)]
    for i, r in enumerate(repairs):
        if r == "admin":
            out.append(e(node, t + 100 + i, Event.REPAIRED, State.REPAIRED, "reseated", actor="admin:bob"))
        elif r == "failed_validation":
            out.append(e(node, t + 100 + i, Event.FAIL, State.QUARANTINED, f"{code} gpu1 still"))
        else:
            out.append(e(node, t + 100 + i, Event.REMEDIATE, State.REMEDIATING, f"{r}: {code} gpu1: {r}"))
    to = State.SPARE if end_event is Event.PASS else State.RMA
    out.append(e(node, t + hours * H, end_event, to, "passed"))
    return out


def test_outcomes_follow_what_was_done_between_the_drain_and_the_pass():
    hist = (lap("a", "TEMP_HIGH", ["retest"]) + lap("b", "XID48", ["reset_gpu"]) + lap("c", "XID79", ["reboot"])
            + lap("d", "XID79", ["admin"]) + lap("e", "XID48", ["reset_gpu", "failed_validation", "reset_gpu"])
            + lap("f", "XID64", [], Event.SEND_RMA))
    got = {ep.node: ep.outcome for ep in episodes(hist)}
    assert got == {"a": "probable_false_positive", "b": "probable_false_positive", "c": "confirmed",
                   "d": "confirmed", "e": "confirmed", "f": "confirmed"}


def test_summary_per_check_and_per_xid_with_hours_and_spare_hours():
    hist = lap("a", "TEMP_HIGH", ["retest"], hours=2) + lap("c", "XID79", ["reboot"], hours=3) \
        + [e("g", 0, Event.FAULT, State.FAILED, "slurm-ft: XID79 gpu0 x")]          # still out
    swap = Incident(1, 42, "recovered", ("c",), spares=("s1",), opened_at=T0 + 30)
    eps = episodes(hist, [swap])
    s = summarize(eps, now=T0 + 10 * H)
    assert s["by_check"]["temperature"] == {"drains": 1, "confirmed": 0, "probable_false_positives": 1, "open": 0,
                                            "node_hours_out": 2.0, "spare_node_hours": 0.0, "false_positive_rate": 1.0}
    x79 = s["by_xid"]["79"]
    assert (x79["drains"], x79["confirmed"], x79["open"]) == (2, 1, 1)
    assert x79["node_hours_out"] == 13.0 and x79["spare_node_hours"] == 3.0   # only c's recovery took a spare
    assert x79["false_positive_rate"] == 0.0
    assert s["total"]["drains"] == 3
    assert list(s["by_check"]) == ["temperature", "xid"]


def test_a_second_finding_during_one_drain_is_one_episode_and_a_cause_without_code_is_unknown():
    hist = [e("a", 0, Event.FAULT, State.FAILED, "slurm-ft: XID79 gpu0 x"),
            e("a", 5, Event.FAULT, State.FAILED, "slurm-ft: XID48 gpu0 y", frm=State.FAILED),
            e("a", 10, Event.QUARANTINE, State.QUARANTINED), e("a", 20, Event.REPAIRED, State.REPAIRED, actor="admin:x"),
            e("a", 30, Event.PASS, State.SPARE),
            e("b", 0, Event.FAULT, State.FAILED, "Not responding")]
    eps = episodes(hist)
    assert [(ep.node, ep.code, ep.check) for ep in eps] == [("a", "XID79", "xid"), ("b", "", "unknown")]


def test_metrics_have_a_counter_per_check_and_per_xid():
    s = summarize(episodes(lap("a", "TEMP_HIGH", ["retest"]) + lap("c", "XID79", ["reboot"])), now=T0 + 10 * H)
    text = metrics.render(metrics.Readings(drains=metric_rows(s)))
    assert 'slurm_ft_drains_total{check="temperature"} 1' in text
    assert 'slurm_ft_drains_probable_false_positive_total{check="temperature"} 1' in text
    assert 'slurm_ft_xid_drains_confirmed_total{xid="79"} 1' in text
    assert 'slurm_ft_drain_out_of_service_node_seconds_total{check="xid"} 7200' in text   # 2 node-hours
    assert "slurm_ft_drains_total" not in metrics.render(metrics.Readings())


def test_each_metric_family_has_one_label_set_so_sum_counts_each_drain_once():
    """Review 2026-12-07: check= and xid= samples in one family made sum(slurm_ft_drains_total) count every
    Xid drain twice. Every family of the textfile carries one set of label names."""
    s = summarize(episodes(lap("a", "TEMP_HIGH", ["retest"]) + lap("c", "XID79", ["reboot"])
                           + lap("d", "XID79", [])), now=T0 + 10 * H)
    text = metrics.render(metrics.Readings(drains=metric_rows(s), phase_seconds={"requeue": [1.0]},
                                           jobs=[(7, {"goodput_ratio": 0.9, "elapsed_gpu_hours": 1.0,
                                                      "lost_gpu_hours": {"startup": 0.1}, "redone_steps": 3})]))
    label_sets: dict = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        family = re.sub(r"_(bucket|sum|count)$", "", name.split()[0])
        names = frozenset(re.findall(r'(\w+)="', rest)) - {"le"}
        label_sets.setdefault(family, set()).add(names)
    assert {f: sets for f, sets in label_sets.items() if len(sets) > 1} == {}
    total = sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("slurm_ft_drains_total{"))
    assert total == 3.0                                        # three drains, each counted once
