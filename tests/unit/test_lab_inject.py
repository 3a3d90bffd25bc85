"""`slurm-ft lab inject` / `heal` as a person uses them: state and kernel log change, errors exit 2."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from slurm_ft.errors import UsageError
from slurm_ft.gpu import kmsg
from slurm_ft_lab import inject


@pytest.fixture
def lab(tmp_path):
    for n in ("gpu001", "gpu002"):
        inject.init_node(tmp_path, n, gpus=8)
    return tmp_path


def cli(lab, *args):
    env = dict(os.environ, SLURM_FT_LAB=str(lab))
    return subprocess.run([sys.executable, "-m", "slurm_ft", "lab", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_inject_prints_and_logs(lab):
    r = cli(lab, "inject", "gpu001", "--gpu", "3", "--xid", "79")
    assert r.returncode == 0, r.stderr
    assert "gpu001 gpu3: Xid 79" in r.stdout and "NVRM: Xid (PCI:0000:5d:00): 79" in r.stdout
    ev = kmsg.read_xids(str(lab / "nodes" / "gpu001" / "kmsg"))
    assert [(e.xid, e.pci_bus_id) for e in ev] == [(79, "0000:5d:00")]
    assert kmsg.read_xids(str(lab / "nodes" / "gpu002" / "kmsg")) == []     # only that node


def test_a_nodes_kernel_log_is_roots_and_its_fake_driver_anyones(lab):
    """A job's user may query NVML but not read the kernel log (/dev/kmsg with kernel.dmesg_restrict=1)."""
    d = lab / "nodes" / "gpu001"
    assert (d / "kmsg").stat().st_mode & 0o777 == 0o600 and (d / "nvml.state").stat().st_mode & 0o777 == 0o644
    inject.inject(lab, "gpu001", "xid", gpu=0, value=79)
    inject.heal(lab, "gpu001")
    assert (d / "kmsg").stat().st_mode & 0o777 == 0o600
    inject.init_node(lab, "gpu003", gpus=2, durable=False)          # `lab up`'s way
    assert (lab / "nodes" / "gpu003" / "kmsg").stat().st_mode & 0o777 == 0o600


def test_log_only_writes_the_kernel_log_line_and_leaves_the_driver_alone(lab):
    before = (lab / "nodes" / "gpu001" / "nvml.state").read_text()
    r = cli(lab, "inject", "gpu001", "--gpu", "3", "--xid", "79", "--log-only")
    assert r.returncode == 0, r.stderr
    assert (lab / "nodes" / "gpu001" / "nvml.state").read_text() == before          # no NVML event, no state
    assert [e.xid for e in kmsg.read_xids(str(lab / "nodes" / "gpu001" / "kmsg"))] == [79]
    r = cli(lab, "inject", "gpu001", "--xid", "79", "--log-only", "--no-log")
    assert r.returncode == 2 and "exclude each other" in r.stderr


def test_heal_forgets_the_watchers_place_in_the_kernel_log(lab):
    """A rebooted node's watcher starts at the end of its (new) kernel log."""
    place = lab / "nodes" / "gpu001" / "state.json.watch"
    place.write_text('{"path": "x", "inode": 1, "offset": 10}\n')
    inject.heal(lab, "gpu001")
    assert not place.exists()


def test_records_have_increasing_sequence_numbers(lab):
    for code in (13, 48, 79):
        inject.inject(lab, "gpu001", "xid", gpu=0, value=code)
    lines = (lab / "nodes" / "gpu001" / "kmsg").read_text().splitlines()
    assert [int(line.split(",")[1]) for line in lines] == [1, 2, 3]
    assert all(kmsg.KMSG_RECORD_RE.match(line) for line in lines)


@pytest.mark.parametrize("args,msg", [
    (["inject", "gpu999", "--xid", "79"], "unknown lab node 'gpu999'"),
    (["inject", "gpu001"], "exactly one fault"),
    (["inject", "gpu001", "--xid", "79", "--ecc-dbe"], "exactly one fault"),
    (["inject", "gpu001", "--gpu", "8", "--ecc-dbe"], "GPUs 0..7"),
    (["inject", "gpu001", "--nvlink-down", "18"], "NVLink must be between 0 and 17"),
    (["inject", "gpu001", "--slow", "1.5"], "between 0 and 1"),
    (["heal"], "a NODE or --all"),
])
def test_bad_input_exits_2_with_one_line(lab, args, msg):
    r = cli(lab, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert msg in r.stderr and "Traceback" not in r.stderr


def test_no_lab_is_a_clear_error(tmp_path):
    r = cli(tmp_path / "nolab", "inject", "gpu001", "--xid", "79")
    assert r.returncode == 2 and "no lab in" in r.stderr


def test_heal_all_restores_every_node(lab):
    inject.inject(lab, "gpu001", "gpu_lost", gpu=1)
    inject.inject(lab, "gpu002", "nvlink_down", gpu=2, value=5)
    r = cli(lab, "heal", "--all")
    assert r.returncode == 0 and "healed 2 node(s)" in r.stdout
    for n in ("gpu001", "gpu002"):
        st = inject.load_state(lab, n)
        assert not any(g.lost or g.nvlink_down or g.xids for g in st.gpus)
        assert (lab / "nodes" / n / "kmsg").read_text() == ""


def test_heal_forgets_the_health_state_as_the_reboot_of_a_repair_does(lab):
    """Stale active findings would fail the next prolog; a stale belief in a drain of ours would
    decide the next check. Already healthy GPUs do not keep it either; --all forgets every node's."""
    from slurm_ft.node import state as hst
    for n in ("gpu001", "gpu002"):
        hst.save(lab / "nodes" / n / "state.json", {**hst.empty(n), "slurm_ft_drained": True})
    inject.inject(lab, "gpu001", "xid", gpu=0, value=79)
    inject.heal(lab, "gpu001")
    assert not (lab / "nodes" / "gpu001" / "state.json").exists()
    assert (lab / "nodes" / "gpu002" / "state.json").exists()          # only the healed node's
    r = cli(lab, "heal", "--all")
    assert r.returncode == 0 and not list(lab.glob("nodes/*/state.json"))
    inject.heal(lab, "gpu001")                                          # nothing to forget: fine


def test_heal_removes_the_state_file_the_lab_config_names_and_nothing_outside_the_lab(lab, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("run") / "gpu001.json"
    elsewhere.write_text("{}")
    (lab / "slurm-ft.yaml").write_text(f"health:\n  state_file: {lab}/run/{{node}}.json\n")
    (lab / "run").mkdir()
    (lab / "run" / "gpu001.json").write_text("{}")
    inject.heal(lab, "gpu001")
    assert not (lab / "run" / "gpu001.json").exists()
    (lab / "slurm-ft.yaml").write_text(f"health:\n  state_file: {elsewhere.parent}/{{node}}.json\n")
    inject.heal(lab, "gpu001")
    assert elsewhere.exists()                                           # not the lab's: left alone


def test_concurrent_injections_all_land(lab):
    def worker(gpu):
        for _ in range(15):
            inject.inject(lab, "gpu001", "xid", gpu=gpu, value=74, log=False)
    threads = [threading.Thread(target=worker, args=(g,)) for g in (0, 1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    st = inject.load_state(lab, "gpu001")
    assert [len(st.gpus[g].xids) for g in (0, 1, 2)] == [15, 15, 15]
    seqs = [s for g in st.gpus for s, _ in g.xids]
    assert len(set(seqs)) == len(seqs)                   # every event distinct for NVML event sets


def test_state_round_trips(lab):
    inject.inject(lab, "gpu002", "clock_event", gpu=4, value="hw_thermal")
    inject.inject(lab, "gpu002", "slow", gpu=4, value=0.7)
    inject.inject(lab, "gpu002", "proc", gpu=4, value=1234)
    inject.inject(lab, "gpu002", "nvlink_errors", gpu=4, value=9)
    inject.inject(lab, "gpu002", "nvlink_errors", gpu=4, value=9)
    st = inject.load_state(lab, "gpu002")
    again = inject.NodeState.parse("gpu002", st.render())
    assert again == st
    g = st.gpus[4]
    assert (g.clock_events, g.slow, g.procs) == (0x40, 0.7, [(1234, 1 << 30)])
    assert g.nvlink_err == {(9, "replay"): 2, (9, "recovery"): 2, (9, "crc_flit"): 200}


def test_corrupt_state_is_reported(lab):
    (lab / "nodes" / "gpu001" / "nvml.state").write_text("gpus eight\n")
    with pytest.raises(UsageError, match="unreadable fake NVML state"):
        inject.inject(lab, "gpu001", "ecc_dbe")
    r = cli(lab, "heal", "gpu001")                      # the fix the message suggests works
    assert r.returncode == 0
    assert len(inject.load_state(lab, "gpu001").gpus) == 8
