"""etc/prometheus/slurm-ft.rules.yml and etc/grafana/slurm-ft.json read only what slurm-ft writes.

The metric names come from the product's own writers: the three textfiles (the sweep's, the controller's,
a node watcher's) are written into one directory, as node_exporter's textfile collector finds them, with
every optional part filled in. A rule or a panel naming anything else, or a label its metric lacks,
fails here. The rules' structure is checked in Python always; promtool, when installed, checks the rules,
runs their unit tests (tests/data/prometheus/) and lints each textfile.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from slurm_ft.fleet.recovery import liveness
from slurm_ft.fleet.report import metrics
from slurm_ft.node.liveness import NodeLiveness
from test_liveness import node_config, write_state   # same directory: pytest puts it on sys.path

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "etc" / "prometheus" / "slurm-ft.rules.yml"
DASHBOARD = ROOT / "etc" / "grafana" / "slurm-ft.json"
RULES_TESTS = ROOT / "tests" / "data" / "prometheus" / "slurm-ft.rules.test.yml"
RUNBOOK = ROOT / "docs" / "runbook.md"
SCRAPE_LABELS = {"instance", "job", "le"}      # added by Prometheus, or a histogram's bucket bound
NAME = re.compile(r"\bslurm_ft_[a-z0-9_]+")


@pytest.fixture(scope="module")
def textfiles(tmp_path_factory):
    """node_exporter's textfile directory as slurm-ft fills it: {file name: text}."""
    tmp = tmp_path_factory.mktemp("textfile")
    row = {"drains": 3, "confirmed": 1, "probable_false_positives": 1, "node_hours_out": 2.5, "spare_node_hours": 1.0}
    metrics.write(str(tmp / "slurm_ft.prom"), metrics.Readings(
        nodes_by_state={"in_service": 6, "rma": 1}, pool_size=1, pool_target=2, incidents_total=4, incidents_open=1,
        phase_seconds={"requeue": [0.5], "total": [3.3]}, breaker_open=False, breaker_drains_in_window=2,
        breaker_limit=6, last_sweep_time=1.7e9, last_sweep_duration_s=12.0,
        drains=[("check", "xid", row), ("check", "temperature", row), ("xid", "79", row)],
        jobs=[(7, {"goodput_ratio": 0.97, "elapsed_gpu_hours": 100.0, "redone_steps": 3,
                   "lost_gpu_hours": {"startup": 0.1, "recovery": 0.5, "redone_steps": 0.2}})]))
    w = liveness.Writer(str(tmp / "slurm_ft_controller.prom"))
    w.cycle_failed()
    w.cycle_done(0.4)
    w.write(force=True)
    node = tmp_path_factory.mktemp("node")
    cfg = node_config(node)
    write_state(node, [{"check": "ecc", "severity": "fail", "reason": "DBE", "code": "ECC_DBE", "gpu": 0,
                        "action": "reset_gpu", "level": "quick", "time": 1.0}], drained=True)
    lv = NodeLiveness("gpu001", cfg)
    lv.path = str(tmp / "slurm_ft_node.prom")
    lv.looped()
    lv.checked("quick")
    lv.write({"kernel_log": True, "nvml_events": True, "soft_signals": True})
    return {p.name: p.read_text() for p in sorted(tmp.iterdir())}


def families(textfiles):
    """{family: {file, kind, label sets (frozensets of names), sample names}} across every textfile."""
    out: dict = {}
    for file, text in textfiles.items():
        kinds = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            sample = re.split(r"[{ ]", line, maxsplit=1)[0]
            family = next(f for f in (sample, re.sub(r"_(bucket|sum|count)$", "", sample)) if f in kinds)
            f = out.setdefault(family, {"files": set(), "kind": kinds[family], "label_sets": set(), "samples": set()})
            f["files"].add(file)
            f["samples"].add(sample)
            f["label_sets"].add(frozenset(re.findall(r'(\w+)="', line.partition("{")[2])) - {"le"})
    return out


def written(textfiles):
    """{sample name: its labels} slurm-ft writes."""
    out = {}
    for f in families(textfiles).values():
        for s in f["samples"]:
            out[s] = set().union(*f["label_sets"])
    return out


def rules():
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def dashboard_queries():
    """(panel title, expr, legendFormat) of every target, rows' panels included."""
    def walk(panels):
        for p in panels:
            yield from ((p.get("title", ""), t["expr"], t.get("legendFormat", "")) for t in p.get("targets", []))
            yield from walk(p.get("panels", []))
    return list(walk(json.loads(DASHBOARD.read_text())["panels"]))


def referenced_labels(expr):
    """Label names an expression selects, groups or matches on."""
    names = set()
    for sel in re.findall(r"slurm_ft_\w+\{([^}]*)\}", expr):
        names |= set(re.findall(r"(\w+)\s*=~?", sel))
    for group in re.findall(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)", expr):
        names |= {n.strip() for n in group.split(",") if n.strip()}
    return names


def check_query(expr, wrote, where, templates=()):
    names = set(NAME.findall(expr))
    assert names, f"{where}: names no slurm-ft metric: {expr}"
    unknown = names - set(wrote)
    assert not unknown, f"{where}: slurm-ft writes no {sorted(unknown)}"
    have = set().union(*(wrote[n] for n in names)) | SCRAPE_LABELS
    missing = (referenced_labels(expr) | set(templates)) - have
    assert not missing, f"{where}: no metric of {sorted(names)} has label(s) {sorted(missing)}"


def test_every_metric_the_alert_rules_name_is_one_slurm_ft_writes(textfiles):
    wrote = written(textfiles)
    for r in rules():
        templates = re.findall(r"\$labels\.(\w+)", " ".join(r.get("annotations", {}).values()))
        check_query(r["expr"], wrote, r["alert"], templates)


def test_every_metric_the_dashboard_queries_is_one_slurm_ft_writes(textfiles):
    wrote = written(textfiles)
    queries = dashboard_queries()
    assert len(queries) >= 20
    for title, expr, legend in queries:
        check_query(expr, wrote, f"panel {title!r}", re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))


def test_the_liveness_families_are_written_and_the_rules_alert_on_them(textfiles):
    f = families(textfiles)
    for name in ("slurm_ft_controller_last_cycle_timestamp_seconds", "slurm_ft_watch_last_loop_timestamp_seconds",
                 "slurm_ft_node_check_ok", "slurm_ft_watch_source_up", "slurm_ft_node_drained"):
        assert name in f
        assert any(name in r["expr"] for r in rules()), name


def test_no_family_mixes_label_sets_or_spans_two_textfiles(textfiles):
    """One label set per family (sum() counts each thing once); a family in two files of one textfile
    directory would clash in node_exporter (the lab runs the controller and watchers on one host)."""
    f = families(textfiles)
    assert len(f) >= 30
    assert {n: x["label_sets"] for n, x in f.items() if len(x["label_sets"]) > 1} == {}
    assert {n: x["files"] for n, x in f.items() if len(x["files"]) > 1} == {}
    assert all(x["kind"] != "counter" or n.endswith("_total") for n, x in f.items())


def _slug(heading):
    """GitHub's anchor for a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_rules_file_has_the_shape_prometheus_loads_and_links_the_runbook():
    """Always run, promtool or not: what `promtool check rules` would refuse in structure, and what a
    site's Alertmanager routes on (severity) and links to (an existing runbook heading named as the alert)."""
    data = yaml.safe_load(RULES.read_text())
    assert set(data) == {"groups"} and data["groups"]
    groups = [g["name"] for g in data["groups"]]
    assert len(groups) == len(set(groups))
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", RUNBOOK.read_text(), re.M)}
    names = []
    for g in data["groups"]:
        assert set(g) == {"name", "rules"} and g["rules"], g["name"]
        for r in g["rules"]:
            names.append(r["alert"])
            assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r["alert"]
            assert re.fullmatch(r"SlurmFT[A-Z][A-Za-z]+", r["alert"])
            assert isinstance(r["expr"], str) and r["expr"].strip()
            assert r["expr"].count("(") == r["expr"].count(")") and r["expr"].count("{") == r["expr"].count("}")
            assert re.fullmatch(r"\d+[smh]", str(r.get("for", "0s"))), r["alert"]
            assert r["labels"]["severity"] in ("critical", "warning"), r["alert"]
            assert set(r["annotations"]) == {"summary", "runbook_url"}, r["alert"]
            url = re.fullmatch(r"https://slurm-ft\.invalid/docs/runbook\.md#([\w-]+)", r["annotations"]["runbook_url"])
            assert url and url.group(1) == r["alert"].lower(), r["alert"]
            assert url.group(1) in anchors, f"docs/runbook.md has no heading {r['alert']}"
    assert len(names) == len(set(names))
    for want in ("SlurmFTControllerDown", "SlurmFTWatcherDown", "SlurmFTBreakerOpen", "SlurmFTNodeCheckFailing",
                 "SlurmFTDrainsRisingFast", "SlurmFTIncidentStuck"):
        assert want in names


PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not on PATH (Debian: the prometheus package)")


@needs_promtool
def test_promtool_checks_the_rules_and_their_unit_tests_pass():
    for argv in (["check", "rules", str(RULES)], ["test", "rules", str(RULES_TESTS)]):
        p = subprocess.run([PROMTOOL, *argv], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr


@needs_promtool
def test_promtool_lints_every_textfile(textfiles):
    for name, text in textfiles.items():
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, f"{name}: {p.stdout}{p.stderr}"
