"""The lab scenario reads the trainer's event log incrementally (it polls every 50 ms during a restart)."""
from __future__ import annotations

import json

from slurm_ft_lab.scenario import Scenario
from slurm_ft_lab.trainer import LOG_NAME, read_log


def _scenario(ckpt_dir):
    sc = Scenario.__new__(Scenario)          # no lab needed: only the log reader
    sc.ckpt_dir, sc._log_pos, sc._events = ckpt_dir, 0, []
    return sc


def test_events_read_on_from_the_last_call_and_wait_for_a_torn_line(tmp_path):
    sc = _scenario(tmp_path)
    assert sc.events() == []                                       # no log yet
    log = tmp_path / LOG_NAME
    log.write_text(json.dumps({"event": "start"}) + "\n" + '{"event": "st')
    assert sc.events() == [{"event": "start"}]                     # the torn line is not lost...
    with open(log, "a") as fh:
        fh.write('ep", "step": 1}\n' + json.dumps({"event": "step", "step": 2}) + "\n")
    assert sc.events() == read_log(str(tmp_path)) == [            # ...it is read once complete
        {"event": "start"}, {"event": "step", "step": 1}, {"event": "step", "step": 2}]
    log.write_text(json.dumps({"event": "start", "restart": 0}) + "\n")     # a new run's log
    assert sc.events() == [{"event": "start", "restart": 0}]
