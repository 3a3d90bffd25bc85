"""Per-domain planning: independent faults against exact arithmetic, outages apart from them, the
config's domains validated, and `spares plan --from-journal` answering per domain."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from fractions import Fraction

import pytest

from planning_helpers import exact_poisson_tail
from slurm_ft.config import load_config
from slurm_ft.errors import ConfigError
from slurm_ft.config import expand_domains
from slurm_ft.plan.domains import outages_of, plan_domains
from slurm_ft.plan.history import garwood

DAY = 86400.0


@dataclass
class Ep:
    node: str
    start: float


DOMAINS = {"a": ["n1", "n2", "n3", "n4"], "b": ["m1", "m2"]}
EPISODES = [Ep("n1", 1 * DAY), Ep("n2", 10 * DAY), Ep("n3", 10 * DAY + 100), Ep("n1", 50 * DAY),
            Ep("m1", 5 * DAY), Ep("x9", 7 * DAY), Ep("n4", -DAY)]


def _plan(**kw):
    return plan_domains(DOMAINS, EPISODES, since=0.0, now=100 * DAY, repair_hours=48.0, target=0.99, **kw)


def _smallest(lam: float, risk: float) -> int:
    s = 0
    while exact_poisson_tail(lam, s) >= risk:
        s += 1
    return s


def test_independent_faults_rates_and_spares_per_domain_exactly():
    p = _plan()
    a, b = p.domains
    assert (a.name, a.nodes, a.faults, b.name, b.nodes, b.faults) == ("a", 4, 2, "b", 2, 1)
    assert a.rate_per_node_day == float(Fraction(2, 4 * 100)) and b.rate_per_node_day == float(Fraction(1, 200))
    lo, hi = garwood(2)
    assert a.rate_interval == (lo / 400, hi / 400)
    # L_d = faults / days x H / 24
    assert a.expected_in_repair == pytest.approx(0.04, abs=1e-15) and b.expected_in_repair == pytest.approx(0.02, abs=1e-15)
    assert a.spares_alone == _smallest(0.04, 0.01) == 1 and b.spares_alone == _smallest(0.02, 0.01) == 1
    assert p.pooled_in_repair == pytest.approx(0.06, abs=1e-15) and p.pooled_spares == _smallest(0.06, 0.01) == 1
    assert p.sum_of_domain_spares == 2          # pooling independent faults saves a node
    assert p.unassigned_faults == 1             # x9 is in no domain; n4's fault is before the window


def test_an_outage_is_counted_once_and_its_need_is_the_whole_domain_not_a_poisson_tail():
    p = _plan()
    a, b = p.domains
    assert (a.outages, a.largest_outage, b.outages) == (1, 2, 0)
    assert [(o.domain, o.nodes) for o in p.outages] == [("a", ("n2", "n3"))]
    assert a.outage_rate_per_day == 1 / 100 and a.outage_rate_interval == (garwood(1)[0] / 100, garwood(1)[1] / 100)
    # riding through the loss of a: its 4 nodes at once plus the spares b needs alone meanwhile
    assert a.spares_to_survive_loss == 4 + _smallest(0.02, 0.01) == 5
    assert b.spares_to_survive_loss == 2 + _smallest(0.04, 0.01) == 3
    assert (p.worst_domain, p.spares_to_survive_any_loss) == ("a", 5)
    # a narrower window than the 100 s between n2 and n3: two independent faults, no outage
    narrow = _plan(window_s=50)
    assert (narrow.domains[0].faults, narrow.domains[0].outages) == (4, 0)


def test_outages_of_groups_from_the_first_fault_and_needs_two_distinct_nodes():
    outs, single = outages_of([(0, "x"), (300, "y"), (700, "z"), (5000, "x"), (5100, "x")], 600)
    assert [[n for _, n in g] for g in outs] == [["x", "y"]]
    assert single == [(700, "z"), (5000, "x"), (5100, "x")]    # 700 s after the first is a fault of its own


def _cfg(tmp_path, body: str):
    d = tmp_path / "cfg"
    d.mkdir(mode=0o755, exist_ok=True)
    f = d / "slurm-ft.yaml"
    f.write_text(body)
    os.chmod(f, 0o644)
    return f


@pytest.mark.parametrize("domains,msg", [
    ('{"rack 1": "gpu[1-2]"}', "is not a domain name"),
    ('{r1: "gpu[1-"}', "r1: "),
    ('{r1: ""}', "r1: the hostlist names no node"),
    ('{r1: "gpu[1-4]", r2: "gpu[4-6]"}', "r2: node gpu4 is already in domain r1"),
    ('[gpu1]', "planning.domains must be a mapping"),
])
def test_bad_domains_are_a_one_line_config_error(tmp_path, domains, msg):
    f = _cfg(tmp_path, f"planning:\n  domains: {domains}\n")
    with pytest.raises(ConfigError, match="planning.domains") as exc:
        load_config(str(f))
    assert msg in str(exc.value) and "\n" not in str(exc.value)
    p = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(f), "spares", "plan", "--gpus", "8"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and msg in p.stderr


def test_expand_domains_keeps_the_nodes_in_order():
    assert expand_domains({"r1": "gpu[01-03]", "r2": "cpu7,gpu04"}) == {"r1": ["gpu01", "gpu02", "gpu03"],
                                                                      "r2": ["cpu7", "gpu04"]}


def test_spares_plan_from_journal_answers_per_domain(tmp_path):
    from test_planning_history import _sim_year
    state, journal, _ = _sim_year(tmp_path, seed=11)
    f = _cfg(tmp_path, f"state_dir: {state}\nplanning:\n  domains: {{r1: \"sim[00000-00031]\", "
                       f"r2: \"sim[00032-00065]\"}}\n")
    p = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(f), "spares", "plan", "--gpus", "512",
                        "--from-journal", "--fleet-nodes", "64", "--json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    per = doc["from_journal"]["per_domain"]
    rows = {d["name"]: d for d in per["domains"]}
    assert [rows["r1"]["nodes"], rows["r2"]["nodes"]] == [32, 34]
    in_outages = sum(len(o["nodes"]) for o in per["outages"])
    assert rows["r1"]["independent_faults"] + rows["r2"]["independent_faults"] + in_outages == journal["node_faults"]
    assert per["unassigned_faults"] == 0
    for d in rows.values():
        lo, hi = d["rate_interval"]
        assert lo <= d["rate_per_node_day"] <= hi
        assert d["spares_to_survive_its_loss"] >= d["nodes"]
    assert per["pooled"]["spares"] <= per["pooled"]["sum_of_domain_spares"]
    assert per["repair_hours"] == pytest.approx(doc["repair_hours"])
    text = subprocess.run([sys.executable, "-m", "slurm_ft", "--config", str(f), "spares", "plan", "--gpus", "512",
                           "--from-journal", "--fleet-nodes", "64"], capture_output=True, text=True, timeout=60).stdout
    assert "Per failure domain (2 domains" in text and "riding through the loss of a whole domain" in text
