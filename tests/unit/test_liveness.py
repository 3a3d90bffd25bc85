"""Liveness textfiles: the controller's (controller.metrics_path) and each node watcher's (health.metrics_path),
as an operator reads them through node_exporter; the daemons' log lines under journald; an incident's close."""
from __future__ import annotations

import json
import logging
import os
import re
import sys
import time

import pytest

from slurm_ft.config import Config, ControllerConfig, HealthConfig
from slurm_ft.fleet.recovery import daemon, liveness
from slurm_ft.node import run
from slurm_ft.node.liveness import NodeLiveness
from slurm_ft.node.watch import Watcher


def samples(path):
    """{'name{labels}': value} of a textfile."""
    out = {}
    for line in open(path).read().splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


class Cycles:
    """A controller whose cycles succeed or raise as listed, then stop the loop."""

    def __init__(self, outcomes):
        self.outcomes = list(outcomes)
        self.done = False

    def cycle(self, budget_s=None):
        outcome = self.outcomes.pop(0)
        self.done = not self.outcomes
        if outcome == "fail":
            raise RuntimeError("scontrol: Unable to contact slurm controller")


def test_the_controller_writes_when_its_last_cycle_ended_and_counts_failed_ones(tmp_path):
    path = tmp_path / "textfile" / "slurm_ft_controller.prom"
    ctl = Cycles(["ok", "fail", "fail"])
    before = time.time()
    daemon.serve(ctl, 0.0, None, lambda: ctl.done, liveness=liveness.Writer(str(path)))
    v = samples(path)
    assert before <= v["slurm_ft_controller_last_cycle_timestamp_seconds"] <= time.time()
    assert v["slurm_ft_controller_cycles_failed_total"] == 2          # the last cycle that ended is still the first
    assert v["slurm_ft_controller_start_time_seconds"] <= v["slurm_ft_controller_last_cycle_timestamp_seconds"]
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in path.parent.iterdir()) == ["slurm_ft_controller.prom"]   # no temp file left


def test_a_controller_that_never_finished_a_cycle_writes_no_cycle_time(tmp_path):
    path = tmp_path / "c.prom"
    ctl = Cycles(["fail"])
    daemon.serve(ctl, 0.0, None, lambda: ctl.done, liveness=liveness.Writer(str(path)))
    v = samples(path)
    assert "slurm_ft_controller_last_cycle_timestamp_seconds" not in v    # absent(): the rule's second case
    assert v["slurm_ft_controller_cycles_failed_total"] == 1


def test_the_controller_writes_at_most_every_few_seconds(tmp_path, monkeypatch):
    now = [1000.0]
    writes = []
    monkeypatch.setattr(liveness, "atomic_write", lambda path, text, mode: writes.append(now[0]))
    w = liveness.Writer(str(tmp_path / "c.prom"), clock=lambda: now[0])
    for _ in range(100):                       # a cycle every 0.1 s for 10 s
        w.cycle_done(0.01)
        now[0] += 0.1
    assert len(writes) == 2 and writes[1] - writes[0] >= liveness.WRITE_EVERY_S


def test_an_unwritable_textfile_is_said_once_and_the_controller_goes_on(tmp_path, caplog):
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "textfile").write_text("a file where a directory should be")
    w = liveness.Writer(str(tmp_path / "ro" / "textfile" / "c.prom"), clock=iter(range(0, 1000, 10)).__next__)
    with caplog.at_level(logging.ERROR, logger="slurm_ft.fleet.recovery.liveness"):
        for _ in range(5):
            w.cycle_done(0.1)
    assert len(caplog.records) == 1 and "(controller.metrics_path)" in caplog.records[0].getMessage()


def test_controller_metrics_path_empty_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctl = Cycles(["ok"])
    daemon.serve(ctl, 0.0, None, lambda: ctl.done, liveness=liveness.Writer(""))
    assert list(tmp_path.iterdir()) == []


# --- the node watcher's textfile ---------------------------------------------------------------------

def node_config(tmp_path):
    hc = HealthConfig(kmsg_path=str(tmp_path / "{node}.log"), state_file=str(tmp_path / "st" / "{node}.json"),
                      metrics_path=str(tmp_path / "textfile" / "{node}.prom"))
    (tmp_path / "gpu001.log").write_text("")
    return Config(health=hc, controller=ControllerConfig())


def write_state(tmp_path, active, drained):
    (tmp_path / "st").mkdir(mode=0o700, exist_ok=True)
    state = {"version": 1, "node": "gpu001", "updated": 1.0, "active": active, "last": {}, "job": None,
             "xid_history": {}, "slurm_ft_drained": drained}
    (tmp_path / "st" / "gpu001.json").write_text(json.dumps(state))
    os.chmod(tmp_path / "st" / "gpu001.json", 0o600)


def watch_briefly(tmp_path, cfg, seconds=0.6):
    w = Watcher("gpu001", cfg, use_nvml=False, poll_s=0.02, liveness=NodeLiveness("gpu001", cfg),
                check=lambda level, node, c, **kw: run.Report(node, level, [], 0))
    w.start()
    try:
        w.run(timeout=seconds)
    finally:
        w.stop()
    return samples(tmp_path / "textfile" / "gpu001.prom")


def test_the_watcher_writes_its_loop_its_sources_and_each_checks_result(tmp_path):
    cfg = node_config(tmp_path)
    write_state(tmp_path, [{"check": "ecc", "severity": "fail", "reason": "uncorrectable ECC", "code": "ECC_DBE",
                            "gpu": 3, "action": "reset_gpu", "level": "quick", "time": 1.0}], drained=True)
    before = time.time()
    v = watch_briefly(tmp_path, cfg)
    assert v['slurm_ft_watch_last_loop_timestamp_seconds{node="gpu001"}'] >= before
    assert v['slurm_ft_watch_source_up{node="gpu001",source="kernel_log"}'] == 1
    assert v['slurm_ft_node_check_ok{node="gpu001",check="ecc"}'] == 0
    assert v['slurm_ft_node_check_ok{node="gpu001",check="xid"}'] == 1       # checks of the routine levels: 1
    assert v['slurm_ft_node_drained{node="gpu001"}'] == 1
    assert not any(k.startswith("slurm_ft_node_last_check_timestamp_seconds") for k in v)   # no check seen yet


def test_a_healthy_node_with_no_state_file_yet_shows_every_routine_check_ok(tmp_path):
    v = watch_briefly(tmp_path, node_config(tmp_path))
    ok = {k: x for k, x in v.items() if k.startswith("slurm_ft_node_check_ok")}
    assert len(ok) >= 5 and set(ok.values()) == {1.0}
    assert v['slurm_ft_node_drained{node="gpu001"}'] == 0


def test_an_unsafe_state_file_shows_no_verdict_rather_than_all_ok(tmp_path):
    cfg = node_config(tmp_path)
    write_state(tmp_path, [], drained=False)
    os.chmod(tmp_path / "st" / "gpu001.json", 0o666)
    v = watch_briefly(tmp_path, cfg)
    assert not any(k.startswith("slurm_ft_node_check_ok") for k in v)
    assert 'slurm_ft_watch_last_loop_timestamp_seconds{node="gpu001"}' in v


def test_a_check_the_watcher_ran_or_served_is_timed_per_level(tmp_path):
    from slurm_ft.cli.watch import serve_check
    from slurm_ft.config import ConfigCache
    import io
    cfg = node_config(tmp_path)
    lv = NodeLiveness("gpu001", cfg)
    conf = tmp_path / "slurm-ft.yaml"
    conf.write_text(f"health:\n  kmsg_path: {tmp_path / 'gpu001.log'}\n  state_file: {tmp_path / 'st' / '{node}.json'}\n"
                    f"  deadline_s: {{prolog: 2.0}}\n")
    seen = []
    code, _ = serve_check(["--level", "prolog", "--node", "gpu001", "--no-state"], {"SLURM_FT_CONFIG": str(conf)},
                          io.StringIO(), io.StringIO(), ConfigCache(), on_report=lambda r: seen.append(r.level))
    assert seen == ["prolog"]
    lv.checked("prolog", 1700000000.0)
    lv.write({"kernel_log": True})
    v = samples(tmp_path / "textfile" / "gpu001.prom")
    assert v['slurm_ft_node_last_check_timestamp_seconds{node="gpu001",level="prolog"}'] == 1700000000.0


# --- logs under systemd -------------------------------------------------------------------------------

def test_under_journald_a_log_line_has_no_timestamp_of_its_own_and_a_priority(tmp_path, monkeypatch):
    from slurm_ft.cli import guard
    err = open(tmp_path / "stderr", "w+")
    monkeypatch.setattr(sys, "stderr", err)
    st = os.fstat(err.fileno())
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers[:] = []
    try:
        guard.setup_logging(0, env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
        logging.getLogger("slurm_ft.controller").error("cycle failed: boom")
        logging.getLogger("slurm_ft.controller").warning("incident 3 job 7: recovered in 3.30 s")
        root.handlers[:] = []
        guard.setup_logging(0, env={"JOURNAL_STREAM": "1:2"})          # stderr sent elsewhere by the unit
        logging.getLogger("slurm_ft.controller").warning("not the journal")
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    err.flush()
    lines = (tmp_path / "stderr").read_text().splitlines()
    assert lines[:2] == ["<3>slurm_ft.controller ERROR cycle failed: boom",
                         "<4>slurm_ft.controller WARNING incident 3 job 7: recovered in 3.30 s"]
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ slurm_ft.controller WARNING not the journal$", lines[2])


def test_an_incidents_close_is_logged_with_its_total(tmp_path, caplog):
    from test_controller_cycle import make, model_slurm     # same directory: pytest puts it on sys.path
    s = model_slurm()
    s.fail("gpu002")
    c = make(tmp_path, s)
    with caplog.at_level(logging.WARNING, logger="slurm_ft.fleet.recovery.controller"):
        c.cycle()
        c.cycle()                                  # nothing closes twice
    closes = [r.getMessage() for r in caplog.records if " recovered in " in r.getMessage()]
    assert len(closes) == 1 and re.fullmatch(r"incident 1 job 100: recovered in \d+\.\d\d s( \(\d+\.\d\d s from the "
                                             r"fault\))?", closes[0]), closes


@pytest.mark.parametrize("key", ["controller", "health"])
def test_the_documented_config_names_both_textfiles(key):
    from slurm_ft.config import load_config
    cfg = load_config(os.path.join(os.path.dirname(__file__), "..", "..", "etc", "slurm-ft.yaml"))
    assert getattr(cfg, key).metrics_path.startswith("/var/lib/prometheus/node-exporter/")
