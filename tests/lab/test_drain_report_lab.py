"""False-drain accounting against the real lab: a temperature check tuned to fire on healthy GPUs drains
nodes, the sweep retests them (remediation `retest`: no repair), they pass validation, and
`slurm-ft report --json` and the metrics count those drains as probable false positives of that check.

The nodes' health check runs with `temperature_fail_c: 41` (the lab's healthy fake GPUs read 40-42 C):
the mis-tuned threshold. The validation job runs the sweep's config, whose threshold is the default.
"""
from __future__ import annotations

import json
import os

import pytest
import yaml

from test_lifecycle_lab import clean, ft, history, make_config  # noqa: F401
from test_remediation_lab import sweep_until

pytestmark = pytest.mark.lab


def test_drains_of_a_check_tuned_to_fire_on_healthy_nodes_are_probable_false_positives(clean, tmp_path):
    lab = clean
    cfg = make_config(lab, tmp_path, remediation={"mode": "on", "actions": {"TEMP_HIGH": "retest"}})
    tuned = tmp_path / "tuned.yaml"
    data = yaml.safe_load(cfg.read_text())
    data.setdefault("health", {})["thresholds"] = {"temperature_fail_c": 41, "temperature_warn_c": 30}
    tuned.write_text(yaml.safe_dump(data))
    os.chmod(tuned, 0o644)
    nodes = lab.train_nodes[-2:]
    for node in nodes:   # the node's own check (HealthCheckProgram / prolog level) with the tuned threshold
        p = ft(lab, tuned, "check", "--level", "prolog", "--drain", "--node", node, ok=False,
               env={"LD_LIBRARY_PATH": f"{lab.dir}/lib", "SLURMD_NODENAME": node})
        assert p.returncode == 1 and lab.client.node(node).reason.startswith("slurm-ft: TEMP_HIGH"), p.stdout
    out = sweep_until(lab, cfg, lambda o: all(f"{n}: validating -> spare" in o for n in nodes), timeout=120)
    for node in nodes:
        assert f"{node}: quarantined -> repaired (TEMP_HIGH gpu" in out and "retest (attempt 1 of 3)" in out, out
        assert history(lab, cfg, node) == ["fault", "quarantine", "remediate", "remediated", "validate", "pass"]

    rep = json.loads(ft(lab, cfg, "report", "--json").stdout)
    temp = rep["by_check"]["temperature"]
    assert (temp["drains"], temp["probable_false_positives"], temp["confirmed"], temp["open"]) == (2, 2, 0, 0)
    assert temp["false_positive_rate"] == 1.0 and temp["node_hours_out"] > 0
    assert sorted(e["node"] for e in rep["episodes"] if e["outcome"] == "probable_false_positive") == sorted(nodes)
    assert rep["by_xid"] == {}
    text = ft(lab, cfg, "report").stdout
    assert text.splitlines()[2].startswith("temperature") and "100%" in text.splitlines()[2]
    metrics = (tmp_path / "metrics" / "slurm_ft.prom").read_text()
    assert 'slurm_ft_drains_probable_false_positive_total{check="temperature"} 2' in metrics
    assert 'slurm_ft_drains_total{check="temperature"} 2' in metrics
