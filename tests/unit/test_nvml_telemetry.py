"""The fake libnvidia-ml.so.1 driven by the real pynvml, and gpu/nvml.py reading it.

Each read runs in a fresh Python with LD_LIBRARY_PATH pointing at the library built into tmp_path,
exactly as the lab's prolog/epilog/healthcheck wrappers run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from slurm_ft_lab import fake_nvml, inject

NODE = "gpu007"

READ = """
import json, sys
from dataclasses import asdict
from slurm_ft.gpu import nvml
include = sys.argv[1].split(",") if len(sys.argv) > 1 else nvml.ALL
s = nvml.read_node("gpu007", include=include)
print(json.dumps(asdict(s)))
"""


@pytest.fixture(scope="module")
def libdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("fakelib")
    fake_nvml.build(d)
    return d


@pytest.fixture
def lab(tmp_path):
    inject.init_node(tmp_path, NODE, gpus=8)
    return tmp_path


def env_for(libdir, lab):
    env = dict(os.environ)
    env.update(LD_LIBRARY_PATH=str(libdir), SLURM_FT_LAB_DIR=str(lab), SLURMD_NODENAME=NODE)
    env.pop("SLURM_FT_FAKE_NVML_STATE", None)
    return env


def read(libdir, lab, include=None):
    argv = [sys.executable, "-c", READ] + ([",".join(include)] if include else [])
    r = subprocess.run(argv, env=env_for(libdir, lab), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_build_is_skipped_when_up_to_date(libdir):
    lib = libdir / "libnvidia-ml.so.1"
    before = lib.stat().st_mtime_ns
    assert fake_nvml.build(libdir) == lib
    assert lib.stat().st_mtime_ns == before


def test_healthy_node(libdir, lab):
    s = read(libdir, lab)
    assert s["nvml_error"] == "" and s["driver_version"]
    assert len(s["gpus"]) == 8
    buses = [g["pci_bus_id"] for g in s["gpus"]]
    assert buses[0] == "00000000:18:00.0" and len(set(buses)) == 8
    assert len({g["uuid"] for g in s["gpus"]}) == 8
    g = s["gpus"][0]
    assert g["name"] == "NVIDIA H100 80GB HBM3" and not g["lost"]
    assert g["ecc"] == {"volatile_corrected": 0, "volatile_uncorrected": 0,
                        "aggregate_corrected": 0, "aggregate_uncorrected": 0}
    assert g["remap"] == {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False}
    assert g["retired"] is None                      # Hopper: row remapping only
    assert len(g["nvlinks"]) == 18 and all(link["active"] for link in g["nvlinks"])
    assert g["pcie"] == {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16}
    assert g["clock_event_reasons"] == 0 and g["sm_clock_mhz"] == g["sm_clock_max_mhz"] > 0
    assert 30 <= g["temperature_c"] <= 50 and g["power_w"] > 0 and g["processes"] == []
    assert g["unsupported"] == [] and g["errors"] == [] and g["recovery_action"] == 0


def test_uuids_match_the_state_file_and_default(libdir, lab):
    s = read(libdir, lab)
    assert s["gpus"][3]["uuid"] == inject.default_uuid(NODE, 3)
    (lab / "nodes" / NODE / "nvml.state").unlink()   # no state file: the library's own defaults agree
    s = read(libdir, lab)
    assert s["gpus"][3]["uuid"] == inject.default_uuid(NODE, 3)
    assert s["gpus"][3]["pci_bus_id"] == inject.default_pci(3)


INJECTIONS = [
    ("ecc_dbe", None, lambda g: g["ecc"]["volatile_uncorrected"] == 1 and g["ecc"]["aggregate_uncorrected"] == 1),
    ("remap_pending", None, lambda g: g["remap"]["pending"] and g["remap"]["uncorrected"] == 1),
    ("remap_failure", None, lambda g: g["remap"]["failure"]),
    ("nvlink_down", 3, lambda g: [link["link"] for link in g["nvlinks"] if not link["active"]] == [3]),
    ("nvlink_errors", 4, lambda g: [(x["link"], x["replay_errors"], x["recovery_errors"], x["crc_errors"])
                                    for x in g["nvlinks"] if x["replay_errors"]] == [(4, 1, 1, 100)]),
    ("temp", 91, lambda g: g["temperature_c"] == 91),
    ("recovery_action", "node_reboot", lambda g: g["recovery_action"] == 2),
    ("pcie_width", 8, lambda g: g["pcie"]["width"] == 8 and g["pcie"]["max_width"] == 16),
    ("gpu_lost", None, lambda g: g["lost"] and "lost" in g["error"].lower()),
    ("clock_event", "hw_slowdown", lambda g: g["clock_event_reasons"] == 0x8),
    ("clock_event", "power_brake", lambda g: g["clock_event_reasons"] == 0x80),
    ("slow", 0.5, lambda g: g["sm_clock_mhz"] == round(0.5 * g["sm_clock_max_mhz"])),
    ("proc", 4242, lambda g: g["processes"] == [4242]),
]


@pytest.mark.parametrize("fault,value,check", INJECTIONS, ids=[f"{f}-{v}" for f, v, _ in INJECTIONS])
def test_each_injection_shows_in_read_node(libdir, lab, fault, value, check):
    inject.inject(lab, NODE, fault, gpu=2, value=value)
    s = read(libdir, lab)
    g2 = s["gpus"][2]
    assert check(g2), g2
    others = [g for g in s["gpus"] if g["index"] != 2]
    assert not any(check(g) for g in others if not g["lost"])   # only GPU 2 changed
    inject.heal(lab, NODE)
    healed = read(libdir, lab)["gpus"][2]
    assert not healed["lost"] and not check(healed)


def test_an_ecc_rate_keeps_the_corrected_count_climbing_and_a_reset_restarts_the_volatile_count(libdir, lab):
    inject.inject(lab, NODE, "ecc_sbe_rate", gpu=3, value="6000/min", now=time.time() - 60)    # 100 a second
    first = read(libdir, lab, ["identity", "ecc"])["gpus"][3]["ecc"]
    time.sleep(1.2)
    second = read(libdir, lab, ["identity", "ecc"])["gpus"][3]["ecc"]
    assert 6000 <= first["volatile_corrected"] < second["volatile_corrected"]
    assert second["volatile_corrected"] - first["volatile_corrected"] >= 100
    assert second["aggregate_corrected"] == second["volatile_corrected"] and second["volatile_uncorrected"] == 0
    inject.reset_gpu(lab, NODE, 3)
    after = read(libdir, lab, ["identity", "ecc"])["gpus"][3]["ecc"]
    assert after["volatile_corrected"] < 1000 and after["aggregate_corrected"] >= second["aggregate_corrected"]
    inject.inject(lab, NODE, "ecc_sbe_rate", gpu=3, value=0)
    stopped = read(libdir, lab, ["identity", "ecc"])["gpus"][3]["ecc"]
    time.sleep(0.3)
    assert read(libdir, lab, ["identity", "ecc"])["gpus"][3]["ecc"] == stopped
    assert read(libdir, lab, ["identity", "ecc"])["gpus"][2]["ecc"]["volatile_corrected"] == 0


@pytest.mark.parametrize("value, per_min", [("600/min", 600.0), ("10/s", 600.0), ("36000/h", 600.0), (5, 5.0)])
def test_the_rate_reads_in_any_unit(value, per_min):
    assert inject.rate_per_minute(value) == per_min


@pytest.mark.parametrize("value", ["fast", "10/day", "-1/min", "nan"])
def test_a_bad_rate_is_one_clear_error(value):
    from slurm_ft.errors import UsageError
    with pytest.raises(UsageError, match="ecc-sbe-rate"):
        inject.rate_per_minute(value)


def test_injected_xid_reaches_the_kernel_log(lab):
    from slurm_ft.gpu import kmsg
    inject.inject(lab, NODE, "gpu_lost", gpu=4)
    inject.inject(lab, NODE, "xid", gpu=1, value=13)
    ev = kmsg.read_xids(str(lab / "nodes" / NODE / "kmsg"), lookback_s=60)
    assert [(e.xid, e.pci_bus_id) for e in ev] == [(79, "0000:9a:00"), (13, "0000:2a:00")]
    inject.heal(lab, NODE)
    assert kmsg.read_xids(str(lab / "nodes" / NODE / "kmsg")) == []


def test_quick_groups_skip_nvlink(libdir, lab):
    from slurm_ft.gpu import nvml
    s = read(libdir, lab, include=nvml.QUICK)
    g = s["gpus"][0]
    assert g["nvlinks"] == [] and g["ecc"] is not None and g["pcie"] is not None


def test_no_library_is_a_clear_message(tmp_path):
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", READ], env=env, capture_output=True, text=True, timeout=60)
    if os.path.exists("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"):
        pytest.skip("a real NVIDIA driver is installed here")
    s = json.loads(r.stdout)
    assert s["gpus"] == [] and "libnvidia-ml.so.1 not found" in s["nvml_error"]


WATCH = """
import json, sys
from slurm_ft.gpu import nvml
with nvml.XidEventWatcher() as w:
    print(json.dumps({"registered": w.registered}), flush=True)
    got = []
    while len(got) < int(sys.argv[1]):
        evs = w.wait(5000)
        if not evs:
            break
        got += [{"xid": e.xid, "gpu": e.gpu, "pci": e.pci_bus_id, "source": e.source, "t": e.timestamp} for e in evs]
    print(json.dumps(got), flush=True)
"""


def test_xid_events_arrive_through_the_watcher(libdir, lab):
    inject.inject(lab, NODE, "xid", gpu=0, value=31)          # before registration: history, not delivered
    p = subprocess.Popen([sys.executable, "-c", WATCH, "3"], env=env_for(libdir, lab),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(p.stdout.readline())
        assert ready["registered"] == list(range(8))
        t0 = time.time()
        inject.inject(lab, NODE, "xid", gpu=5, value=79)
        inject.inject(lab, NODE, "ecc_dbe", gpu=6)
        inject.inject(lab, NODE, "xid", gpu=1, value=13)
        got = json.loads(p.stdout.readline())
    finally:
        p.kill()
        p.wait(10)
    assert [(e["xid"], e["gpu"], e["pci"]) for e in got] == [(79, 5, "0000:ab:00"), (48, 6, "0000:ba:00"),
                                                             (13, 1, "0000:2a:00")]
    assert all(e["source"] == "nvml" for e in got)
    assert got[0]["t"] - t0 < 1.0                              # delivered well within a second


def test_gpu_without_nvlink_and_with_fewer_links(libdir, lab):
    st = inject.load_state(lab, NODE)
    st.nvlinks = 0                                        # a PCIe card
    inject.save_state(lab, st)
    g = read(libdir, lab)["gpus"][0]
    assert g["nvlinks"] == [] and "nvlink" in g["unsupported"] and not g["lost"]
    st.nvlinks = 12                                       # an A100
    inject.save_state(lab, st)
    g = read(libdir, lab)["gpus"][0]
    assert len(g["nvlinks"]) == 12 and g["unsupported"] == []


def test_error_policy():
    import pynvml as N
    from slurm_ft.gpu.nvml import _GpuReader, _Lost

    def raises(code):
        def fn(*_):
            raise N.NVMLError(code)
        return fn

    r = _GpuReader(N, 0)
    assert r.call("ecc", raises(N.NVML_ERROR_NOT_SUPPORTED)) is None
    assert r.call("temperature", raises(N.NVML_ERROR_FUNCTION_NOT_FOUND)) is None
    assert r.call("power", raises(N.NVML_ERROR_NO_PERMISSION)) is None
    assert r.call("name", lambda: "ok") == "ok"
    assert r.unsupported == ["ecc", "temperature"]
    assert r.errors == ["power: Insufficient Permissions"]
    for code in (N.NVML_ERROR_GPU_IS_LOST, N.NVML_ERROR_UNKNOWN):
        with pytest.raises(_Lost):
            r.call("uuid", raises(code))


def test_events_keep_flowing_after_a_long_history(libdir, lab):
    st = inject.load_state(lab, NODE)
    st.gpus[0].xids = [(i + 1, 31) for i in range(100)]      # a long-lived node, more than any buffer
    inject.save_state(lab, st)
    p = subprocess.Popen([sys.executable, "-c", WATCH, "1"], env=env_for(libdir, lab),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        json.loads(p.stdout.readline())
        inject.inject(lab, NODE, "xid", gpu=0, value=95)
        got = json.loads(p.stdout.readline())
    finally:
        p.kill()
        p.wait(10)
    assert [(e["xid"], e["gpu"]) for e in got] == [(95, 0)]
    assert len(inject.load_state(lab, NODE).gpus[0].xids) == inject.XID_HISTORY


def test_driver_unloaded_is_a_clear_message(libdir, lab):
    inject.inject(lab, NODE, "driver_unloaded")
    s = read(libdir, lab)
    assert s["gpus"] == [] and "driver not loaded" in s["nvml_error"].lower()
    inject.heal(lab, NODE)
    assert len(read(libdir, lab)["gpus"]) == 8


def test_hung_gpu_makes_calls_slow(libdir, lab):
    inject.inject(lab, NODE, "hang", gpu=1, value=0.2)
    code = ("import time; from slurm_ft.gpu import nvml; t = time.perf_counter(); "
            "s = nvml.read_node('gpu007', include=['identity']); print(time.perf_counter() - t)")
    r = subprocess.run([sys.executable, "-c", code], env=env_for(libdir, lab), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) >= 0.6                         # 3 identity calls on GPU 1, 0.2 s each
