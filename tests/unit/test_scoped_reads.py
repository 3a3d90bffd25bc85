"""Reads scoped to the question (issue 21): one node from `sinfo -n`, a few nodes out of the light fleet
read, the notices a job's output shows; over outputs captured from real 22.05, 24.11, 25.11 and 26.05 labs
(tests/data/slurm/<version>/, tests/data/slurm/capture.py)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from slurm_ft.slurm import parse
from slurm_ft.vocab import parse_event

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
VERSIONS = ["22.05", "24.11", "25.11", "26.05"]
REASON = 'slurm-ft: XID79 gpu3 "fell off the bus" a=b; c=\'d\''


def read(version: str, name: str) -> str:
    return (DATA / version / name).read_text()


def same_node(one, full):
    """sinfo's single-node RPC carries no allocation counts: a partly allocated node reads ALLOCATED,
    where the full read says MIXED. Everything else must be equal."""
    if one.state == "ALLOCATED" and full.state == "MIXED":
        one = replace(one, state="MIXED")
    return one == full


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name, node", [("sinfo_node_draining.txt", "gpu002"), ("sinfo_node_drained.txt", "gpu003"),
                                        ("sinfo_node_noresp.txt", "gpu004")])
def test_one_node_from_sinfo_is_the_node_of_the_full_read(version, name, node):
    [one] = parse.parse_sinfo_nodes(read(version, name))
    full = {n.name: n for n in parse.parse_nodes_kv(read(version, "scontrol_show_node.txt"))}
    assert one.name == node and same_node(one, full[node]), (one, full[node])


@pytest.mark.parametrize("version", VERSIONS)
def test_the_drained_node_keeps_its_reason_exactly(version):
    [n] = parse.parse_sinfo_nodes(read(version, "sinfo_node_drained.txt"))
    assert n.drained and n.reason == REASON and n.reason_user == "root" and n.reason_time
    assert n.partitions == ("train",)                 # the default partition's `*` dropped


@pytest.mark.parametrize("version", VERSIONS)
def test_a_down_node_and_an_unknown_one(version):
    [down] = parse.parse_sinfo_nodes(read(version, "sinfo_node_down.txt"))
    assert same_node(down, parse.parse_nodes_kv(read(version, "scontrol_show_node_down.txt"))[0])
    assert down.down and down.state == "DOWN"
    assert parse.parse_sinfo_nodes(read(version, "sinfo_node_unknown.txt")) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_a_few_records_out_of_the_fleet_read(version):
    text = read(version, "scontrol_show_node.txt")
    full = parse.parse_nodes_kv(text)
    some = parse.parse_nodes_kv(parse.records_of(text, "NodeName", {"gpu002", "gpu004"}))
    assert some == [n for n in full if n.name in ("gpu002", "gpu004")]
    assert parse.records_of(text, "NodeName", set()) == ""


@pytest.mark.parametrize("version", VERSIONS)
def test_a_notice_as_the_job_output_shows_it(version):
    lines = [parse_event(x) for x in read(version, "notify_batch_output.txt").splitlines()]
    assert ("failed", "gpu001", REASON) in lines


@pytest.mark.parametrize("version", VERSIONS)
def test_where_the_node_side_finds_munge_the_controller_and_its_steps(version):
    conf = parse.parse_config(read(version, "scontrol_show_config.txt"))
    assert parse.munge_socket(conf).endswith("/lab/munge/munge.socket")
    assert parse.controller_host(conf) == "127.0.0.1"
    assert parse.slurmd_spool_dir(conf, "gpu007", "host").endswith("/lab/spool/slurmd.gpu007")


def test_config_forms_the_node_side_reads():
    assert parse.munge_socket({"AuthInfo": "cred_expire=600,socket=/run/m.sock"}) == "/run/m.sock"
    assert parse.munge_socket({"AuthInfo": "(null)"}) is None
    assert parse.controller_host({"SlurmctldHost[0]": "ctl1"}) == "ctl1"
    assert parse.controller_host({}) == ""
    assert parse.slurmd_spool_dir({"SlurmdSpoolDir": "/var/spool/slurmd.%h"}, "n1", "h1") == "/var/spool/slurmd.h1"


@given(st.lists(st.sampled_from(["gpu1", "\x1f", "idle", "+drain", "\n", "x", "(null)", "train*", " ", "7", "none",
                                 "Unknown"]), max_size=40).map("".join))
def test_any_sinfo_text_is_nodes_or_a_value_error(text):
    try:
        nodes = parse.parse_sinfo_nodes(text)
    except ValueError:
        return
    assert all(n.name for n in nodes)


@given(st.lists(st.sampled_from(["gpu1", "gpu2", "gpu3"]), max_size=4), st.text(max_size=40))
def test_records_of_never_returns_a_record_not_asked_for(names, junk):
    text = f"NodeName=gpu1 State=IDLE\nNodeName=gpu2 State=IDLE {junk}\nNodeName=gpu3 State=IDLE\n"
    for line in parse.records_of(text, "NodeName", set(names)).splitlines():
        if line.startswith("NodeName="):
            assert line.split()[0][len("NodeName="):] in names
