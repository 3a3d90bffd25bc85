"""An admin's hold on the drain-rate breaker (issue 39 item 5c): parsed and bounded, logged, shown by
`breaker status`, honoured by the guard every drain asks, and over by itself when its time is up."""
from __future__ import annotations

import json
import os
import time

import pytest
import yaml

from slurm_ft.breaker import guard, hold
from slurm_ft.cli import main
from slurm_ft.config import Config, LifecycleConfig, RemediationConfig
from slurm_ft.errors import UsageError
from slurm_ft.fleet.lifecycle.remedy_plan import plan as remedy
from slurm_ft.fleet.lifecycle.transitions import Event, HistoryEntry, State
from slurm_ft.slurm.types import Node

from test_fleet_breaker import NOW, fleet, out   # same directory: pytest puts it on sys.path


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("30m", 1800), ("30min", 1800), ("2h", 7200),
                                           ("1h30m", 5400), ("1d", 86400), ("1.5h", 5400)])
def test_durations(text, seconds):
    assert hold.parse_duration(text) == seconds


@pytest.mark.parametrize("text, words", [("2 hours", "not a duration"), ("", "not a duration"), ("h", "not a duration"),
                                         ("0s", "more than 0"), ("25h", "at most 24 h"), ("2d", "at most 24 h")])
def test_bad_durations_say_why(text, words):
    with pytest.raises(UsageError, match=words):
        hold.parse_duration(text)


def config(tmp_path, **lc):
    lc.setdefault("breaker_max_share", 0.0)
    lc.setdefault("breaker_max_nodes", 1)
    return Config(state_dir=str(tmp_path / "state"), lifecycle=LifecycleConfig(**lc))


def test_held_open_refuses_every_drain_held_closed_lifts_the_limit_and_both_expire(tmp_path):
    cfg = config(tmp_path, breaker_window_s=86400.0)
    full = fleet(out("a", "slurm-ft: XID79 gpu1 x"))          # the limit (1) reached: the breaker is open
    assert not guard.may_take_out(cfg, ["b"], snapshot=full, now=NOW).allowed
    hold.set_hold(cfg, "closed", 3600, "driver rolled back, INC-42", "alice", now=NOW)
    d = guard.may_take_out(cfg, ["b"], snapshot=full, now=NOW + 10)
    assert d.allowed and "held closed by alice" in d.reason and "driver rolled back, INC-42" in d.reason
    assert not guard.may_take_out(cfg, ["b"], snapshot=full, now=NOW + 3600).allowed   # expired by itself
    hold.set_hold(cfg, "open", 600, "driver roll-out", "bob", now=NOW)
    d = guard.may_take_out(cfg, ["b"], snapshot=fleet(), now=NOW + 10)      # room, and still no
    assert not d.allowed and d.reason.startswith("drain-rate breaker held open by bob (uid ")
    assert guard.may_take_out(cfg, ["b"], snapshot=fleet(), now=NOW + 601).allowed
    # with no limit at all (both 0), a hold open still holds
    off = config(tmp_path, breaker_max_nodes=0)
    assert not guard.may_take_out(off, ["b"], snapshot=fleet(), now=NOW + 10).allowed


def test_the_hold_is_root_only_logged_and_audited_a_file_others_can_write_is_ignored(tmp_path, caplog):
    cfg = config(tmp_path)
    hold.set_hold(cfg, "open", 60, "roll-out", "alice", now=NOW)
    p = hold.path(cfg)
    assert oct(p.stat().st_mode & 0o777) == "0o600" and oct(p.parent.stat().st_mode & 0o777) == "0o700"
    assert "drain-rate breaker held open by alice (uid" in caplog.text and "roll-out" in caplog.text
    assert hold.current(cfg, NOW + 1).who == "alice"
    os.chmod(p, 0o666)
    assert hold.current(cfg, NOW + 1) is None and "writable by others" in caplog.text
    os.chmod(p, 0o600)
    assert hold.release(cfg, "bob", now=NOW + 1).state == "open" and not p.exists()
    audit = [json.loads(x) for x in (p.parent / hold.AUDIT).read_text().splitlines()]
    assert [(a["event"], a["who"]) for a in audit] == [("hold", "alice"), ("release", "bob")]


def test_a_reason_is_required_and_one_line(tmp_path):
    with pytest.raises(UsageError, match="--reason"):
        hold.set_hold(config(tmp_path), "open", 60, "two\nlines", "alice")


def test_remediation_reboots_wait_while_held_open():
    node = Node("n1", "IDLE", frozenset({"DRAIN"}), reason="slurm-ft: QUARANTINED XID79 gpu2 GPU has fallen off the bus")
    hist = [HistoryEntry("n1", NOW - 100, Event.FAULT, State.IN_SERVICE, State.FAILED,
                         "slurm-ft: XID79 gpu2 GPU has fallen off the bus")]
    args = ({"n1": State.QUARANTINED}, {"n1": NOW - 50}, {"n1": hist}, [node], None, NOW, RemediationConfig(mode="on"))
    assert remedy(*args)[0].act == "reboot"
    step = remedy(*args, breaker_hold="open")[0]
    assert (step.act, step.held_by) == ("hold", "breaker") and "held open" in step.why


# --- the commands, as an admin runs them --------------------------------------------------------

@pytest.fixture
def env(tmp_path, monkeypatch):
    from test_lifecycle_sweep import ModelSlurm
    d = tmp_path / "etc"
    d.mkdir(mode=0o755)
    cfg = d / "slurm-ft.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"),
                                   "lifecycle": {"breaker_max_nodes": 1, "breaker_max_share": 0}}))
    os.chmod(cfg, 0o644)
    slurm = ModelSlurm()
    monkeypatch.setattr("slurm_ft.cli.node.client_from_config", lambda config: slurm)
    monkeypatch.setenv("SLURM_FT_CONFIG", str(cfg))
    return slurm


def cli(capsys, *argv):
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    o = capsys.readouterr()
    return exc.value.code, o.out, o.err


def test_hold_status_release_from_the_command_line(env, capsys):
    rc, out_, err = cli(capsys, "breaker", "hold", "open", "--for", "48h", "--reason", "x")
    assert rc == 2 and err.strip() == "slurm-ft: error: --for '48h': at most 24 h (set it again when it runs out)"
    rc, out_, _ = cli(capsys, "breaker", "hold", "open", "--for", "2h", "--reason", "driver roll-out")
    assert rc == 0 and out_.startswith("breaker held open until ")
    rc, out_, _ = cli(capsys, "breaker", "status")
    assert rc == 1 and out_.startswith("breaker OPEN since") and "(HELD open by " in out_ and "driver roll-out" in out_
    rc, out_, _ = cli(capsys, "breaker", "status", "--json")
    b = json.loads(out_)
    assert b["open"] and b["hold"]["state"] == "open" and b["hold"]["until"] > time.time() + 7000
    rc, out_, _ = cli(capsys, "status", "--json")
    assert json.loads(out_)["breaker"]["hold"]["reason"] == "driver roll-out"
    rc, out_, _ = cli(capsys, "breaker", "release")
    assert rc == 0 and out_.startswith("breaker hold released (was held open by ")
    rc, out_, _ = cli(capsys, "breaker", "status", "--json")
    assert rc == 0 and json.loads(out_)["hold"] is None
    rc, out_, _ = cli(capsys, "breaker", "release")
    assert rc == 0 and out_.strip() == "no breaker hold in force"
