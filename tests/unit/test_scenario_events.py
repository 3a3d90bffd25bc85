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


def test_a_drain_seen_late_by_the_scenarios_poll_is_dated_by_its_first_reaction():
    from slurm_ft_lab.scenario import FaultResult, Phase, _drained_no_later_than_its_reactions
    from slurm_ft_lab.recovery_summary import summary
    r = FaultResult("hot-spare", 1, "gpu002", 0, fault_t=100.0,
                    phases=[Phase("fault", 100.0), Phase("drain", 100.50), Phase("step fault seen", 100.47),
                            Phase("step stopped", 101.0), Phase("first step after", 103.0)])
    _drained_no_later_than_its_reactions(r, "drain")
    assert abs(r.at("drain") - 0.47) < 1e-9
    assert summary([r], hot=True)["segments"]["see: drained -> supervisor sees it (poll)"]["p50_s"] == 0.0
    # seen in time: unchanged; a drain never dated before its fault
    r = FaultResult("hot-spare", 1, "gpu002", 0, fault_t=100.0,
                    phases=[Phase("fault", 100.0), Phase("drain", 100.2), Phase("step fault seen", 100.3)])
    _drained_no_later_than_its_reactions(r, "drain")
    assert abs(r.at("drain") - 0.2) < 1e-9
