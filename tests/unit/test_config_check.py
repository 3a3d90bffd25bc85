"""`slurm-ft config check`: each broken config of the 2026-12-07 review (rows 7-13) is found, with the
file and the dotted key, exit 2; a file with several errors gets them all in one run; the shipped
example and every slurm-ft config in the docs pass (issue 39, item 4)."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurm_ft.cli.group import cli
from slurm_ft.config import Config, HealthConfig, LifecycleConfig, NodeType, load_config
from slurm_ft.errors import ConfigError
from slurm_ft.finding import Severity
from slurm_ft.gpu.sample import NodeSample
from slurm_ft.node import run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    """Write a config (mode 0644 in a 0755 directory, as the loader wants) whose kernel log exists."""
    monkeypatch.setenv("SLURMD_NODENAME", "gpu001")
    monkeypatch.delenv("SLURM_FT_CONFIG", raising=False)
    d = tmp_path / "etc"
    d.mkdir(mode=0o755)
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")

    def write(text: str) -> Path:
        p = d / "slurm-ft.yaml"
        if "kmsg_path" in text or re.search(r"^health: *\S", text, re.M):
            pass                                      # the test's own, or a health section of the wrong shape
        elif re.search(r"^health:$", text, re.M):
            text = re.sub(r"^health:\n", f"health:\n  kmsg_path: {kmsg}\n", text, flags=re.M)
        else:
            text = f"{text}health:\n  kmsg_path: {kmsg}\n"
        p.write_text(text)
        p.chmod(0o644)
        return p
    return write


def check(*args: str):
    res = CliRunner().invoke(cli, ["config", "check", *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.stdout, res.stderr


def errors(stderr: str):
    return [line for line in stderr.splitlines() if line.startswith("slurm-ft: error: ")]


# --- row 7: a configured kernel log that does not exist ---------------------------------------------

def test_a_missing_kernel_log_is_an_error_of_config_check(cfg, tmp_path):
    p = cfg("health:\n  kmsg_path: /nonexistent/kmsg\n")
    code, out, err = check(str(p))
    assert code == 2 and out == ""
    assert errors(err) == [f"slurm-ft: error: {p}: health.kmsg_path: /nonexistent/kmsg does not exist on this "
                           f"host (gpu001): the xid check reports an error finding and sees no Xid"]
    assert err.splitlines()[-1] == f"slurm-ft: {p}: 1 error"


def test_a_missing_kernel_log_templated_by_node_is_checked_for_the_node_asked(cfg, tmp_path):
    (tmp_path / "gpu002.kmsg").write_text("")
    p = cfg(f"health:\n  kmsg_path: {tmp_path}/{{node}}.kmsg\n")
    assert check("--node", "gpu002", str(p))[0] == 0
    code, _, err = check("--node", "gpu003", str(p))
    assert code == 2 and f"{tmp_path}/gpu003.kmsg does not exist on this host (gpu003)" in err


def test_a_check_reading_a_missing_kernel_log_reports_an_error_finding_and_never_drains(tmp_path):
    hc = HealthConfig(kmsg_path=str(tmp_path / "no-such.kmsg"), state_file=str(tmp_path / "{node}.json"),
                      node_types={"default": NodeType(gpus=0)}, levels={"quick": ("xid",)})
    config = Config(health=hc, state_dir=str(tmp_path / "fleet"),
                    lifecycle=LifecycleConfig(breaker_max_share=0.0, breaker_max_nodes=0))
    rep = run.run_level("quick", "gpu001", config, reader=lambda node, parts: NodeSample(node=node), now=1000.0)
    xid = [f for f in rep.findings if f.check == "xid"]
    assert [(f.severity, f.reason) for f in xid] == [
        (Severity.ERROR, f"kernel log {tmp_path}/no-such.kmsg (health.kmsg_path) does not exist: Xids not seen")]
    assert rep.healthy and rep.exit_code == 0          # reported, not a fail: nothing drains on it
    (tmp_path / "no-such.kmsg").write_text("")
    rep = run.run_level("quick", "gpu001", config, reader=lambda node, parts: NodeSample(node=node), now=1000.0)
    assert [f.severity for f in rep.findings if f.check == "xid"] == [Severity.OK]


# --- row 8: node_type_of naming an undefined node type --------------------------------------------

def test_node_type_of_naming_an_undefined_type_is_an_error_at_load_and_in_config_check(cfg):
    p = cfg('health:\n  node_type_of: {"gpu*": h100}\n')
    code, _, err = check(str(p))
    want = f"{p}: health.node_type_of.gpu*: unknown node type 'h100' (defined in health.node_types: default)"
    assert code == 2 and errors(err) == [f"slurm-ft: error: {want}"]
    with pytest.raises(ConfigError) as exc:          # every command: at its load, not at a node's first check
        load_config(str(p))
    assert str(exc.value) == want


# --- row 9: YAML 1.1 booleans where a string is meant ---------------------------------------------

@pytest.mark.parametrize("word", ["on", "off", "dry_run"])
def test_remediation_mode_written_unquoted_as_the_docs_did_is_the_word(cfg, word):
    p = cfg(f"lifecycle:\n  remediation:\n    mode: {word}\n")
    code, out, _ = check(str(p))
    assert code == 0 and yaml.safe_load(out)["lifecycle"]["remediation"]["mode"] == word
    assert load_config(str(p)).lifecycle.remediation.mode == word


def test_a_boolean_key_still_takes_yes_and_off_and_a_boolean_for_a_string_says_to_quote_it(cfg):
    p = cfg("health:\n  auto_resume: off\ncontroller:\n  read_progress: yes\n")
    c = load_config(str(p))
    assert c.health.auto_resume is False and c.controller.read_progress is True
    p = cfg("controller:\n  spare_partition: true\n")
    code, _, err = check(str(p))
    assert code == 2 and errors(err) == [
        f'slurm-ft: error: {p}: controller.spare_partition must be a string, not true: write "true" in quotes']


# --- row 10: every error at once; `path` is no key a file sets --------------------------------------

def test_a_file_with_several_errors_gets_every_one_in_one_run(cfg):
    p = cfg("state_dir: var/lib/slurm-ft\n"
            "path: /x\n"
            "lifecycle:\n  breaker_max_shar: 0.2\n  breaker_max_share: 1.5\n  remediation: {mode: always}\n"
            "controller:\n  wake_port: 99999\n  interval_s: 0\n  poll_s: abc\n"
            "health:\n  node_type_of: {\"gpu*\": h100}\n  thresholds: {temperature_warn_c: 100, temperature_fail_c: 90}\n"
            "slurm:\n  backend: pyslurmm\n")
    code, out, err = check(str(p))
    got = errors(err)
    assert code == 2 and out == ""
    for words in ("unknown key path (valid: controller, fleet_lock, health, keep_off, lifecycle, planning, slurm, state_dir)",
                  "unknown key lifecycle.breaker_max_shar (valid: breaker_max_nodes, breaker_max_share,",
                  "lifecycle.breaker_max_share is a share: at most 1, got 1.5",
                  "lifecycle.remediation.mode: 'always' is not one of off, dry_run, on",
                  "controller.wake_port must be a UDP port, 1 to 65535 (0 = no wakes), not 99999",
                  "controller.interval_s must be more than 0 seconds",
                  "controller.poll_s must be a number, not 'abc'",
                  "health.node_type_of.gpu*: unknown node type 'h100'",
                  "health.thresholds.temperature_warn_c (100) must be below temperature_fail_c (90)",
                  "state_dir must be an absolute path, not 'var/lib/slurm-ft'",
                  "slurm.backend: 'pyslurmm' is not one of auto, commands, pyslurm"):
        assert sum(f"slurm-ft: error: {p}: {words}" in line for line in got) == 1, (words, got)
    assert len(got) == 11 and err.splitlines()[-1] == f"slurm-ft: {p}: 11 errors"
    with pytest.raises(ConfigError, match="unknown key path"):     # a command's load: the first one
        load_config(str(p))


def test_the_internal_path_field_is_not_among_the_valid_keys(cfg):
    p = cfg("stat_dir: /var/lib/slurm-ft\n")
    code, _, err = check(str(p))
    valid = re.search(r"\(valid: ([^)]*)\)", err)
    assert code == 2 and valid and valid.group(1).split(", ") == [
        "controller", "fleet_lock", "health", "keep_off", "lifecycle", "planning", "slurm", "state_dir"]


@pytest.mark.parametrize("text,words", [
    ("health: [1, 2]\n", "health must be a mapping"),
    ("lifecycle:\n  remediation:\n    mode: [on]\n", "lifecycle.remediation.mode must be a string, not ['on']"),
])
def test_a_section_of_the_wrong_shape_is_one_error_and_the_rest_still_checked(cfg, text, words):
    p = cfg(text + "controller:\n  wake_port: 70000\n")
    code, _, err = check(str(p))
    assert code == 2 and f"{p}: {words}" in err and "controller.wake_port must be a UDP port" in err


def test_not_yaml_and_a_missing_file_are_one_line_each(cfg, tmp_path):
    p = cfg("health: [\n")
    code, _, err = check(str(p))
    assert code == 2 and len(errors(err)) == 1 and errors(err)[0].startswith(f"slurm-ft: error: {p}: line 2 is not valid YAML")
    code, _, err = check(str(tmp_path / "nope.yaml"))
    assert code == 2 and errors(err) == [f"slurm-ft: error: {tmp_path}/nope.yaml: config file not found"]


# --- row 11: a directory given as the config ----------------------------------------------------------

def test_a_directory_is_said_to_be_one_before_any_permission_advice(tmp_path):
    d = tmp_path / "tmp"
    d.mkdir()
    d.chmod(0o1777)                                   # as /tmp: the permission advice would break the host
    code, _, err = check(str(d))
    assert code == 2 and errors(err) == [f"slurm-ft: error: {d}: is a directory, not a config file"]
    assert "chmod" not in err
    with pytest.raises(ConfigError, match=r"is a directory, not a config file$"):     # every command's load
        load_config(str(d))


def test_an_unsafe_file_is_reported_with_its_other_errors(cfg):
    p = cfg("controller:\n  wake_port: 70000\n")
    p.chmod(0o666)
    code, _, err = check(str(p))
    assert code == 2
    assert f"slurm-ft: error: {p}: config file is writable by others; run `chmod o-w {p}`" in errors(err)
    assert any("controller.wake_port must be a UDP port" in line for line in errors(err))


# --- row 12: messages with the file, the key and the reason ------------------------------------------

def test_a_bad_hostlist_in_node_type_of_says_why_and_names_the_file(cfg):
    p = cfg('health:\n  node_types: {default: {}, a100: {gpus: 4}}\n'
            '  node_type_of: {"gpu[001-0a4": a100, "gpu[010-001]": a100, "gpu*,cpu*": a100}\n')
    code, _, err = check(str(p))
    assert code == 2 and errors(err) == [
        f"slurm-ft: error: {p}: health.node_type_of.gpu[001-0a4: malformed hostlist 'gpu[001-0a4': '[' without ']'",
        f"slurm-ft: error: {p}: health.node_type_of.gpu[010-001]: malformed hostlist 'gpu[010-001]': "
        f"range '010-001' goes backwards",
        f"slurm-ft: error: {p}: health.node_type_of.gpu*,cpu*: 'gpu*,cpu*' is not a node name or glob (letters, "
        f"digits, '_', '.', '-' and * ? [...]; one entry per glob, no commas or spaces)"]


def test_an_unknown_slurm_backend_lists_the_valid_ones_with_the_file(cfg):
    p = cfg("slurm:\n  backend: pyslurmm\n")
    code, _, err = check(str(p))
    assert code == 2 and errors(err) == [
        f"slurm-ft: error: {p}: slurm.backend: 'pyslurmm' is not one of auto, commands, pyslurm"]
    from slurm_ft.slurm.backend import BACKENDS
    from slurm_ft.config import SLURM_BACKENDS
    assert SLURM_BACKENDS == BACKENDS


# --- row 13: ranges and orderings; the breaker turned off ---------------------------------------------

@pytest.mark.parametrize("text,words", [
    ("controller:\n  wake_port: 99999\n", "controller.wake_port must be a UDP port, 1 to 65535 (0 = no wakes), not 99999"),
    ("health:\n  thresholds: {temperature_warn_c: 100, temperature_fail_c: 90}\n",
     "health.thresholds.temperature_warn_c (100) must be below temperature_fail_c (90), or a GPU fails before it warns"),
    ("state_dir: var/lib/slurm-ft\n", "state_dir must be an absolute path, not 'var/lib/slurm-ft'"),
    ("lifecycle:\n  metrics_path: slurm_ft.prom\n", "lifecycle.metrics_path must be an absolute path, not 'slurm_ft.prom'"),
    ("health:\n  metrics_path: node.prom\n", "health.metrics_path must be an absolute path, not 'node.prom'"),
    ("controller:\n  metrics_path: /var/lib/prometheus/node-exporter/controller.txt\n",
     "controller.metrics_path must end in .prom (node_exporter's textfile collector reads no other file), "
     "not '/var/lib/prometheus/node-exporter/controller.txt'"),
    ("controller:\n  metrics_path: /var/lib/prometheus/node-exporter/slurm_ft.prom\n",
     "controller.metrics_path is the file lifecycle.metrics_path names too "
     "(/var/lib/prometheus/node-exporter/slurm_ft.prom): each writer replaces its file whole, so give each its own"),
    ("controller:\n  interval_s: 0\n", "controller.interval_s must be more than 0 seconds"),
    ("lifecycle:\n  remediation: {budget_share: 2}\n", "lifecycle.remediation.budget_share is a share: at most 1, got 2"),
    ("health:\n  thresholds: {disk_free_fail_pct: 20, disk_free_warn_pct: 10}\n",
     "health.thresholds.disk_free_fail_pct (20) must not be above disk_free_warn_pct (10)"),
])
def test_out_of_range_and_misordered_values_are_errors(cfg, text, words):
    p = cfg(text)
    code, _, err = check(str(p))
    assert code == 2 and errors(err) == [f"slurm-ft: error: {p}: {words}"]
    with pytest.raises(ConfigError) as exc:
        load_config(str(p))
    assert str(exc.value) == f"{p}: {words}"


def test_no_breaker_is_a_loud_warning_of_config_check_and_of_every_load(cfg, caplog):
    p = cfg("lifecycle:\n  breaker_max_share: 0\n  breaker_max_nodes: 0\n")
    code, out, err = check(str(p))
    warning = (f"{p}: lifecycle.breaker_max_share and breaker_max_nodes are both 0: NO drain-rate breaker, "
               f"slurm-ft may drain every node of the cluster")
    assert code == 0 and f"slurm-ft: warning: {warning}" in err.splitlines()
    assert yaml.safe_load(out)["lifecycle"]["breaker_max_share"] == 0
    with caplog.at_level(logging.WARNING, logger="slurm_ft.config"):
        load_config(str(p))
    assert [r.getMessage() for r in caplog.records] == [warning]


def test_a_valid_port_temperature_and_zero_wake_port_pass(cfg):
    p = cfg("controller:\n  wake_port: 0\nhealth:\n  thresholds: {temperature_warn_c: 0, temperature_fail_c: 90}\n")
    assert check(str(p))[0] == 0


# --- the effective config ------------------------------------------------------------------------------

def test_the_effective_config_is_every_key_and_loads_back_to_the_same_config(cfg, tmp_path):
    p = cfg("lifecycle:\n  remediation:\n    mode: on\ncontroller:\n  job_partitions: [train]\n")
    code, out, err = check(str(p))
    assert code == 0 and err == ""
    assert out.startswith(f"# effective config of {p}: every key, defaults filled in\n")
    assert "path" not in yaml.safe_load(out)
    again = tmp_path / "etc" / "again.yaml"
    again.write_text(out)
    again.chmod(0o644)
    assert dataclasses.replace(load_config(str(again)), path=None) == dataclasses.replace(load_config(str(p)), path=None)
    code, out, _ = check("--json", str(p))
    data = json.loads(out)
    assert code == 0 and data["lifecycle"]["remediation"]["mode"] == "on" and data["controller"]["job_partitions"] == ["train"]
    assert set(data) == {f.name for f in dataclasses.fields(Config)} - {"path"}


def test_without_file_it_checks_the_config_the_other_commands_read(cfg, monkeypatch):
    p = cfg("controller:\n  wake_port: 99999\n")
    res = CliRunner().invoke(cli, ["--config", str(p), "config", "check"])
    assert res.exit_code == 2 and f"{p}: controller.wake_port must be a UDP port" in res.stderr
    monkeypatch.setenv("SLURM_FT_CONFIG", str(p))
    res = CliRunner().invoke(cli, ["config", "check"])
    assert res.exit_code == 2 and f"{p}: controller.wake_port must be a UDP port" in res.stderr


# --- the shipped example and the docs' examples ---------------------------------------------------------

def _doc_configs():
    """Every fenced ```yaml block of README.md and docs/*.md that is a slurm-ft config (a top-level key of
    Config's); the others (Prometheus rules) are not."""
    keys = {f.name for f in dataclasses.fields(Config)} - {"path"}
    found = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, block in enumerate(re.findall(r"^```ya?ml\n(.*?)^```", md.read_text(), re.M | re.S)):
            data = yaml.safe_load(block)
            if isinstance(data, dict) and set(data) & keys:
                found.append(pytest.param(block, id=f"{md.name}-{i}"))
    return found


def _passes(tmp_path, text: str) -> None:
    d = tmp_path / "conf"
    d.mkdir(mode=0o755, exist_ok=True)
    p = d / "slurm-ft.yaml"
    p.write_text(text)
    p.chmod(0o644)
    load_config(str(p))
    code, out, err = check(str(p))
    # the defaults read /dev/kmsg: a host (a container) without it is told so, and that is all
    host_only = [] if os.path.exists("/dev/kmsg") else [
        f"slurm-ft: error: {p}: health.kmsg_path: /dev/kmsg does not exist on this host"]
    assert [e for e in errors(err) if not any(e.startswith(h) for h in host_only)] == [], err
    assert code == (2 if host_only else 0) and not [w for w in err.splitlines() if "warning:" in w], err


def test_the_shipped_example_config_passes_config_check(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "gpu001")
    text = (ROOT / "etc" / "slurm-ft.yaml").read_text()
    assert "config check" in text.split("\n\n", 1)[0]          # the header says how to check a file
    _passes(tmp_path, text)


def test_the_docs_have_config_examples_to_check():
    assert len(_doc_configs()) >= 2                              # docs/planning.md's, at least


@pytest.mark.parametrize("block", _doc_configs())
def test_every_config_example_in_the_docs_passes_config_check(tmp_path, monkeypatch, block):
    monkeypatch.setenv("SLURMD_NODENAME", "gpu001")
    _passes(tmp_path, block)


def test_the_docs_quote_on_and_off_for_the_remediation_mode():
    for md in ("runbook.md", "remediation.md", "security.md"):
        text = (ROOT / "docs" / md).read_text()
        assert not re.search(r"mode: (on|off)\b", text), md


def test_no_file_at_the_default_path_is_the_defaults_said_so(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_FT_CONFIG", raising=False)
    monkeypatch.setattr("slurm_ft.config.DEFAULT_PATH", str(tmp_path / "none.yaml"))
    code, out, err = check("--json")
    if os.path.exists("/dev/kmsg"):
        assert code == 0 and json.loads(out) == json.loads(json.dumps(
            {k: v for k, v in dataclasses.asdict(Config()).items() if k != "path"}))
        assert f"slurm-ft: no config file at {tmp_path}/none.yaml: the defaults apply" in err


def test_json_output_on_errors_is_nothing_on_stdout(cfg):
    p = cfg("controller:\n  wake_port: 99999\n")
    code, out, err = check("--json", str(p))
    assert code == 2 and out == "" and "controller.wake_port" in err
