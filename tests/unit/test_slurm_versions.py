"""The client's parsers over outputs captured from real 22.05, 24.11, 25.11 and 26.05 labs
(tests/data/slurm/<version>/, written by tests/data/slurm/capture.py), and what versions.py decides."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from slurm_ft.slurm import parse, versions
from slurm_ft.slurm.client import SlurmClient
from slurm_ft_lab import versionconf
from slurm_ft.runner import Result

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
VERSIONS = ["22.05", "24.11", "25.11", "26.05"]
REASON = 'slurm-ft: XID79 gpu3 "fell off the bus" a=b; c=\'d\''
COMMENT = 'slurm-ft:ft=1 note="a b" x=y;z'


def read(version: str, name: str) -> str:
    return (DATA / version / name).read_text()


def feats(version: str) -> versions.Features:
    return versions.features(parse.parse_version(read(version, "scontrol_version.txt")))


def json_nodes(version: str):
    """The nodes as the client reads them on this version: scontrol --json where it exists."""
    name = "scontrol_show_node.json" if feats(version).scontrol_json else "sinfo.json"
    return {n.name: n for n in parse.parse_nodes_json(read(version, name))}


def numbered(version: str, jobs):
    """The capture's jobs by their order of submission, 1 = the running `train run` job (its id is in
    sbatch_parsable.txt; a lab numbers its jobs from its own port, FirstJobId): earlier ones (the hang
    check's) are left out."""
    off = parse.parse_sbatch_parsable(read(version, "sbatch_parsable.txt")) - 1
    return {j.job_id - off: j for j in jobs if j.job_id > off}


def json_jobs(version: str):
    name = "scontrol_show_job.json" if feats(version).scontrol_json else "squeue.json"
    return numbered(version, parse.parse_jobs_json(read(version, name)))


def kv_jobs(version: str):
    return numbered(version, parse.parse_jobs_kv(read(version, "scontrol_show_job.txt")))


# --- versions.py -------------------------------------------------------------------------------------

@pytest.mark.parametrize("version, expected", [
    ("22.05", (22, 5, 8)), ("24.11", (24, 11, 5)), ("25.11", (25, 11, 7)), ("26.05", (26, 5, 5))])
def test_captured_versions(version, expected):
    assert parse.parse_version(read(version, "scontrol_version.txt")) == expected
    assert versions.untested_warning(expected) is None


def test_features_by_version():
    old, mid, v2511, new = (feats(v) for v in VERSIONS)
    assert not old.scontrol_json and mid.scontrol_json and v2511.scontrol_json and new.scontrol_json
    assert not old.expedite and not mid.expedite and v2511.expedite and new.expedite
    assert not mid.health_start_only and v2511.health_start_only and new.health_start_only
    assert not v2511.health_check_timeout and new.health_check_timeout
    assert not old.cgroup_plugin_disabled and mid.cgroup_plugin_disabled
    assert not old.rate_limiter and mid.rate_limiter and v2511.rate_limiter


def test_untested_version_gets_one_warning_and_its_features(caplog):
    """An unknown version works with what its number implies, after one warning (not per client)."""
    class Client(SlurmClient):
        def _run(self, argv, **kw):
            return Result(tuple(argv), 0, "slurm 27.05.1\n", "", 0.0)

    with caplog.at_level(logging.WARNING):
        a, b = Client(), Client()
        assert a.features().expedite and b.features().scontrol_json
        a.version(), b.version()
    warned = [r.getMessage() for r in caplog.records if "never tested" in r.getMessage()]
    assert len(warned) == 1 and "27.05.1" in warned[0] and "22.05, 24.11, 25.11, 26.05" in warned[0]


@pytest.mark.parametrize("version, option", [("22.05", "--requeue"), ("24.11", "--requeue"),
                                             ("25.11", "--requeue=expedite"), ("26.05", "--requeue=expedite")])
def test_requeue_option_from_the_running_config(version, option):
    """The 25.11 and 26.05 labs run with SlurmctldParameters=enable_expedited_requeue; older Slurm has no
    such mode."""
    config = parse.parse_config(read(version, "scontrol_show_config.txt"))
    v = parse.parse_version(read(version, "scontrol_version.txt"))
    assert versions.requeue_option(v, config["SlurmctldParameters"]) == option
    if option.endswith("expedite"):      # the same Slurm without the parameter: expedite would be refused
        assert versions.requeue_option(v, "(null)") == "--requeue"


def test_lab_configuration_by_version():
    old, mid, v2511, new = (feats(v) for v in VERSIONS)
    assert versionconf.cgroup_conf(old) is None
    assert "CgroupPlugin=disabled" in versionconf.cgroup_conf(mid)
    assert versionconf.conf_lines(old) == ""                  # 22.05: no rate limiter, no expedite
    assert [ln for ln in versionconf.conf_lines(mid).splitlines() if not ln.startswith("#")] == [
        "SlurmctldParameters=rl_enable"]
    lines = versionconf.conf_lines(new)
    # both in one SlurmctldParameters line
    assert "\nSlurmctldParameters=enable_expedited_requeue,rl_enable\n" in lines and "HealthCheckTimeout=" in lines
    assert lines.count("SlurmctldParameters=") == 1
    # 25.11: expedite and the rate limiter, and no HealthCheckTimeout (60 s, fixed, before 26.05)
    assert [ln for ln in versionconf.conf_lines(v2511).splitlines() if not ln.startswith("#")] == [
        "SlurmctldParameters=enable_expedited_requeue,rl_enable"]
    # and the running 26.05 lab did take them
    config = parse.parse_config(read("26.05", "scontrol_show_config.txt"))
    assert config["HealthCheckTimeout"].split()[0] == "30"


def test_config_parse_refuses_other_text():
    with pytest.raises(ValueError):
        parse.parse_config("scontrol: error: Unable to contact slurm controller\n")


def _config_client(rc: int, stdout: str, stderr: str = ""):
    class Captured(SlurmClient):
        def _run(self, argv, **kw):
            assert list(argv) == ["scontrol", "show", "config"] and kw.get("check") is False
            return Result(tuple(argv), rc, stdout, stderr, 0.0)
    return Captured()


def test_a_configuration_whose_closing_ping_failed_is_taken(caplog):
    """A loaded slurmctld answered the configuration read, then not scontrol's ping (exit 1, `is DOWN`
    and root's RESTORE banner): the printed configuration is slurmctld's (22.05, captured with slurmctld
    stopped between the two RPCs, tests/data/slurm/capture.py). `slurm-ft sbatch` failed on it in a
    100-job lab."""
    text = read("22.05", "scontrol_show_config_ping_down.txt")
    assert "is DOWN" in text and "RESTORE SLURMCTLD DAEMON" in text
    with caplog.at_level(logging.WARNING):
        config = _config_client(1, text).running_config()
    assert config["SlurmctldHost[0]"] == "vm(127.0.0.1)" and config["MessageTimeout"] == "10 sec"
    assert set(config) == set(parse.parse_config(read("22.05", "scontrol_show_config.txt")))   # all of it
    assert any("missed scontrol's closing ping" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("rc, stdout, stderr", [
    (1, "", "slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)\n"),
    (1, "Slurmctld(primary) at vm is DOWN\n", ""),                              # no configuration before it
    (1, "Configuration data as of 2026-12-05T11:05:43\nA = b\n", "error"),       # no ping line: cut short
    (1, "Configuration data as of 2026-12-05T11:05:43\nA = b\n\nSlurmctld(primary) at vm is UP\n", "x"),
])
def test_a_failed_configuration_read_is_an_error(rc, stdout, stderr):
    from slurm_ft.slurm.client import SlurmError
    with pytest.raises(SlurmError):
        _config_client(rc, stdout, stderr).running_config()


# --- nodes and jobs, the same facts on every version ---------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_nodes_on_every_version(version):
    nodes = json_nodes(version)
    assert (nodes["gpu001"].state, nodes["gpu001"].flags) == ("ALLOCATED", frozenset())
    assert nodes["gpu002"].state == "MIXED" and "DRAIN" in nodes["gpu002"].flags
    assert nodes["gpu003"].state == "IDLE" and {"DRAIN", "MAINTENANCE", "RESERVED"} <= nodes["gpu003"].flags
    assert nodes["gpu003"].reason == REASON and nodes["gpu003"].reason_user == "root"
    assert nodes["gpu003"].reason_time.startswith("20")
    assert "NOT_RESPONDING" in nodes["gpu004"].flags and nodes["gpu004"].down
    assert nodes["gpu005"].available and nodes["gpu005"].partitions == ("spares",)
    assert (nodes["gpu001"].gres, nodes["gpu001"].cpus, nodes["gpu001"].real_memory_mb) == ("gpu:8", 16, 64000)
    assert nodes["gpu001"].addr == "localhost"
    assert [n.drained for n in nodes.values()] == [False, True, True, False, False]


@pytest.mark.parametrize("version", ["24.11", "25.11", "26.05"])
def test_down_node_json(version):
    [n] = parse.parse_nodes_json(read(version, "scontrol_show_node_down.json"))
    assert (n.name, n.state, n.reason) == ("gpu004", "DOWN", "Not responding")
    assert "NOT_RESPONDING" in n.flags and n.down


@pytest.mark.parametrize("version", VERSIONS)
def test_jobs_on_every_version(version):
    jobs = json_jobs(version)
    j = jobs[1]
    assert (j.name, j.state, j.reason, j.user, j.partition) == ("train run", "RUNNING", "", "root", "train")
    assert j.comment == COMMENT and j.nodes == ("gpu001",) and j.num_nodes == 1 and j.batch_host == "gpu001"
    assert j.requeue and not j.held and j.restart_count == 0 and j.exit_code == "0:0"
    # 22.05 gives the script with its arguments; later versions the script alone (scontrol -o too)
    assert j.command.endswith("/train.sh --steps 10 two words" if version == "22.05" else "/train.sh")
    assert j.submit_time and j.start_time and j.eligible_time
    assert (jobs[2].state, jobs[2].reason, jobs[2].held) == ("PENDING", "BeginTime", False)
    held = jobs[4]
    assert held.state == "PENDING" and held.held and held.priority == 0 and held.partition == "spares"
    assert held.reason.replace("_", " ") == "job requeued in held state"
    assert (jobs[5].state, jobs[5].exit_code) == ("COMPLETED", "0:0")
    assert (jobs[6].state, jobs[6].reason, jobs[6].exit_code) == ("FAILED", "NonZeroExitCode", "3:0")


@pytest.mark.parametrize("version", ["25.11", "26.05"])
def test_expedited_requeue_held_after_a_non_zero_exit(version):
    """25.11 and 26.05: a --requeue=expedite job that exits 3 with clean epilogs is requeued HELD and stays
    REQUEUE_HOLD (as scontrol prints it) until released: the controller treats it as pending and held."""
    j = json_jobs(version)[7]
    assert (j.state, j.held, j.restart_count, j.exit_code, j.priority) == ("REQUEUE_HOLD", True, 1, "3:0", 0)
    assert j.nodes == ()
    kv = kv_jobs(version)
    assert kv[7].state == j.state


@pytest.mark.parametrize("version, tail", [("22.05", "/train-%j.out"), ("24.11", "/train-1.out"),
                                           ("25.11", "/train-%j.out"), ("26.05", "/train-%j.out")])
def test_json_stdout_by_version(version, tail):
    """22.05, 25.11 and 26.05 give the --output pattern unexpanded in JSON (24.11 expands it): for those
    SlurmClient.job() reads the expanded path from `scontrol show job -o`."""
    first = json_jobs(version)[1]
    assert first.std_out.endswith(tail.replace("1", str(first.job_id)))
    assert kv_jobs(version)[1].std_out.endswith(f"/train-{first.job_id}.out")


@pytest.mark.parametrize("version", ["24.11", "25.11", "26.05"])
def test_newer_sinfo_json_is_refused_not_misread(version):
    """>= 23.02's sinfo --json has no `nodes` list: the client reads scontrol --json there instead."""
    with pytest.raises(ValueError, match="'nodes'"):
        parse.parse_nodes_json(read(version, "sinfo.json"))


@pytest.mark.parametrize("version", VERSIONS)
def test_squeue_json_on_every_version(version):
    """squeue --json parses everywhere, but from 23.02 it applies squeue's default filter (finished jobs
    left out): that is why the client reads `scontrol show job --json` there."""
    sq = {j.job_id for j in numbered(version, parse.parse_jobs_json(read(version, "squeue.json"))).values()}
    every = json_jobs(version)
    finished = {every[5].job_id, every[6].job_id}
    if version == "22.05":
        assert sq == {j.job_id for j in every.values()}
    else:
        assert sq == {j.job_id for j in every.values()} - finished


@pytest.mark.parametrize("version", ["22.05"])
def test_scontrol_json_missing_on_22_05(version):
    assert "unrecognized option '--json'" in read(version, "scontrol_show_node.err")


# --- foreign data: any shape of number or state list ------------------------------------------------

_numbers = st.one_of(st.none(), st.integers(-2**40, 2**40), st.text(max_size=5),
                     st.fixed_dictionaries({"set": st.booleans(), "infinite": st.booleans(),
                                            "number": st.one_of(st.integers(0, 2**40), st.none())}))


@given(_numbers)
def test_number_is_an_int_or_a_value_error(value):
    try:
        assert isinstance(parse._number(value), int)
    except ValueError:
        pass


@given(st.lists(st.sampled_from(["PENDING", "RUNNING", "COMPLETING", "REQUEUE_HOLD", "REQUEUED", "X"]), max_size=4))
def test_job_state_list_gives_one_state(states):
    got = parse._job_state(states)
    assert got in states or (not states and got == "UNKNOWN")
    if "COMPLETING" in states:
        assert got == "COMPLETING"       # as scontrol prints it


_FLAGS = ["COMPLETING", "STOPPED", "SIGNALING", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_HOLD", "STAGE_OUT"]


@given(st.sampled_from(["PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED"]),
       st.lists(st.sampled_from(_FLAGS), max_size=3, unique=True))
def test_a_job_runs_when_slurm_lists_running_first_whatever_its_flags(base, flags):
    """>= 23.02 lists the base state apart: `running` reads it, not the flag scontrol would print."""
    j = parse.job_from_json({"job_id": 7, "job_state": [base, *flags]})
    assert j.base_state == base and j.running == (base == "RUNNING")
    assert j.state == parse._job_state([base, *flags])


@pytest.mark.parametrize("shown, running", [("RUNNING", True), ("STOPPED", True), ("SIGNALING", True),
                                            ("CONFIGURING", True), ("RESIZING", True), ("COMPLETING", False),
                                            ("PENDING", False), ("REQUEUE_HOLD", False), ("CANCELLED", False)])
def test_a_job_runs_on_22_05_when_its_one_word_is_running_or_a_flag_only_a_running_job_has(shown, running):
    """22.05 prints one word: the flag in place of the base state. STOPPED (the owner's SIGSTOP) and
    SIGNALING only ever stand for RUNNING; COMPLETING stands for a requeued or an ended job alike."""
    for j in (parse.job_from_json({"job_id": 7, "job_state": shown}),
              parse.job_from_kv({"JobId": "7", "JobState": shown})):
        assert j.state == shown and j.base_state == "" and j.running is running


@given(st.lists(st.sampled_from(["IDLE", "DOWN", "DRAIN", "NOT_RESPONDING", "MAINTENANCE"]), min_size=1, max_size=4))
def test_node_state_list(states):
    n = parse.node_from_json({"name": "gpu001", "state": states})
    assert n.state == states[0] and n.flags == frozenset(states[1:])


@pytest.mark.parametrize("version", VERSIONS)
def test_kv_and_json_agree_on_every_version(version):
    """`scontrol show job -o` (the fallback, and StdOut's source) reads the same jobs as the JSON,
    with the keys 24.11 and 26.05 added (ExpeditedRequeue=, SubmitLine=, ...) kept out of the values."""
    kv = kv_jobs(version)
    js = json_jobs(version)
    assert kv.keys() == js.keys()
    for jid in kv:
        for field in ("name", "state", "user", "partition", "nodes", "num_nodes", "comment", "restart_count",
                      "requeue", "held", "work_dir", "submit_time", "batch_host", "exit_code", "priority"):
            assert getattr(kv[jid], field) == getattr(js[jid], field), (version, jid, field)
        assert kv[jid].std_out.startswith("/") and " " not in kv[jid].std_out
    kvn = parse.parse_nodes_kv(read(version, "scontrol_show_node.txt"))
    assert kvn == list(json_nodes(version).values())


def test_snippet_documents_the_settings_of_newer_versions():
    """etc/slurm.conf.snippet shows (commented: older slurmctld do not know them) what the 26.05 lab sets."""
    text = (Path(__file__).resolve().parents[2] / "etc" / "slurm.conf.snippet").read_text()
    for line in versionconf.conf_lines(feats("26.05")).splitlines():
        if not line.startswith("#"):
            assert f"#{line}" in text.splitlines(), line
    assert "requeue_delay=" in text and "#HealthCheckNodeState=START_ONLY" in text.splitlines()


@pytest.mark.parametrize("version", VERSIONS)
def test_the_light_fleet_read_gives_the_json_read_nodes_and_breaker_view(version):
    """Every node's health check reads the fleet for the breaker with `scontrol show node -o` (a text
    read, ~25x less CPU than sinfo --json at 2,112 nodes): the same nodes, reasons with `=`, quotes
    and `;` included, and so the same view, on every version."""
    from slurm_ft.breaker import rules as brk

    class Captured(SlurmClient):
        def _run(self, argv, **kw):
            assert list(argv) == ["scontrol", "show", "node", "-o"]
            return Result(tuple(argv), 0, read(version, "scontrol_show_node.txt"), "", 0.0)

    light = {n.name: n for n in Captured().fleet_nodes()}
    assert light == json_nodes(version)
    assert light["gpu003"].reason == REASON
    now = 1.9e9
    assert brk.view(light.values(), now) == brk.view(json_nodes(version).values(), now)
    assert [name for name, _ in brk.view(light.values(), now).out] == ["gpu002", "gpu003"]
