"""Prometheus textfile output: format, histogram arithmetic, atomic replacement."""
from __future__ import annotations

import os
import re

from fakeslurm import FakeSlurm   # same directory: pytest puts it on sys.path
from slurm_ft.fleet.report import metrics

LINE = re.compile(r'^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+]+$')


def snapshot(**kw):
    base = dict(nodes_by_state={"in_service": 63, "spare": 3, "quarantined": 1, "rma": 1},
                pool_size=3, pool_target=4, incidents_total=5, incidents_open=1,
                phase_seconds={"requeue": [0.4, 0.6, 1.2], "running": [1.5, 2.5, 40.0]},
                breaker_open=True, breaker_drains_in_window=6, breaker_limit=6,
                last_sweep_time=1764433000.5, last_sweep_duration_s=2.25)
    base.update(kw)
    return metrics.Readings(**base)


def values(text):
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        assert LINE.match(line), line
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def test_every_line_is_valid_exposition_format_with_help_and_type():
    text = metrics.render(snapshot())
    v = values(text)
    names = {re.sub(r"\{.*", "", k) for k in v}
    for n in names:
        base = re.sub(r"_(bucket|sum|count)$", "", n)
        assert f"# TYPE {base} " in text, n
        assert f"# HELP {base} " in text, n


def test_lifecycle_gauge_lists_every_state_with_zeroes():
    v = values(metrics.render(snapshot()))
    assert v['slurm_ft_nodes{state="in_service"}'] == 63
    assert v['slurm_ft_nodes{state="rma"}'] == 1
    assert v['slurm_ft_nodes{state="validating"}'] == 0
    assert v["slurm_ft_spare_pool_short"] == 1
    assert v["slurm_ft_breaker_open"] == 1


def test_histogram_is_cumulative_and_sums():
    v = values(metrics.render(snapshot()))
    h = 'slurm_ft_recovery_phase_seconds'
    assert v[f'{h}_bucket{{phase="requeue",le="0.5"}}'] == 1
    assert v[f'{h}_bucket{{phase="requeue",le="1"}}'] == 2
    assert v[f'{h}_bucket{{phase="requeue",le="2"}}'] == 3
    assert v[f'{h}_bucket{{phase="running",le="30"}}'] == 2
    assert v[f'{h}_bucket{{phase="running",le="+Inf"}}'] == 3
    assert v[f'{h}_count{{phase="running"}}'] == 3
    assert abs(v[f'{h}_sum{{phase="running"}}'] - 44.0) < 1e-9
    buckets = [v[k] for k in v if k.startswith(f'{h}_bucket{{phase="running"')]
    assert buckets == sorted(buckets)


def test_write_is_atomic_and_readable(tmp_path):
    path = tmp_path / "textfile" / "slurm_ft.prom"
    metrics.write(str(path), snapshot())
    first = path.read_text()
    metrics.write(str(path), snapshot(pool_size=4))
    assert path.read_text() != first and "slurm_ft_spare_pool_short 0" in path.read_text()
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in path.parent.iterdir()) == ["slurm_ft.prom"]   # no temp files left


def test_no_sweep_yet_leaves_the_timestamp_out():
    text = metrics.render(snapshot(last_sweep_time=None, last_sweep_duration_s=None))
    assert "last_sweep" not in text


def test_recovery_phases_come_from_the_controllers_journal(tmp_path):
    """Seconds from the fault to the end of each step, as the controller journaled them."""
    from slurm_ft.config import Config
    from slurm_ft.fleet.report.fleet_view import snapshot, view
    from slurm_ft.fleet.lifecycle.node_history import Store
    from slurm_ft.slurm.types import Node
    from slurm_ft.fleet.recovery import journal as jn

    slurm = FakeSlurm(train=("gpu001",), spares=("gpu002",))
    slurm.n["gpu001"] = Node("gpu001", "ALLOCATED")
    cfg = Config(state_dir=str(tmp_path))
    with Store(cfg.state_dir) as store:
        jn.ensure(store.db)             # the controller's tables, as its journal writes them
        inc = jn.open_incident(store.db, job_id=7, nodes=["gpu003"], faults=["slurm-ft: XID79"], partition="train",
                               restart_count=0, job_nodes=2, ckpt_step=None, fault_at=100.0, now=100.5)
        for name, done in (("requeue", 101.0), ("swap", 101.5), ("start", 103.0)):
            sid = jn.record_intent(store.db, inc, name, done - 0.2)
            jn.record_result(store.db, sid, "ok", done)
        jn.close_incident(store.db, inc, "recovered", 104.0)
        v = view(cfg, slurm, store, with_target=False)
    assert v.phase_seconds == {"requeue": [1.0], "swap": [1.5], "start": [3.0], "total": [4.0]}
    text = metrics.render(snapshot(v))
    assert 'slurm_ft_recovery_phase_seconds_bucket{phase="start",le="2"} 0' in text
    assert 'slurm_ft_recovery_phase_seconds_bucket{phase="start",le="5"} 1' in text
    assert "slurm_ft_incidents_total 1" in text and "slurm_ft_incidents_open 0" in text
