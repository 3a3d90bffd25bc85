"""The driver's recovery action (NVML field 230): the check added through the check contract
(slurm_ft/node/probes: one registry line, one probe module), judged on hand-built samples and, end to
end, read by the real pynvml from the lab's fake libnvidia-ml.so.1."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slurm_ft.finding import Action, Severity
from slurm_ft.gpu.sample import GpuSample, NodeSample
from slurm_ft.node import levels
from slurm_ft.node.probes import BY_NAME, CHECKS, LEVEL_ORDER, check_of, get, query_check
from slurm_ft.node.probes.recovery_action import probe


def sample(*actions, lost=()):
    return NodeSample("n1", tuple(GpuSample(i, recovery_action=a, lost=i in lost) for i, a in enumerate(actions)))


def test_no_action_or_a_driver_without_the_field_says_nothing():
    assert probe(sample(0, None, 0), None) == []


@pytest.mark.parametrize("value, code, action", [(1, "GPU_RECOVERY_RESET", Action.RESET_GPU),
                                                 (2, "GPU_RECOVERY_REBOOT", Action.REBOOT),
                                                 (3, "GPU_RECOVERY_DRAIN_P2P", Action.DRAIN),
                                                 (4, "GPU_RECOVERY_DRAIN_RESET", Action.RESET_GPU),
                                                 (7, "GPU_RECOVERY_SYSTEM_REBOOT", Action.REBOOT)])
def test_the_action_the_driver_asks_for_fails_that_gpu_with_it(value, code, action):
    [f] = probe(sample(0, 0, value), None)
    assert (f.severity, f.code, f.gpu, f.action, f.check) == (Severity.FAIL, code, 2, action, "recovery_action")
    assert check_of(code) == "recovery_action"      # a drain naming it is resumed by this check alone


def test_an_unknown_action_warns_and_a_lost_gpu_is_the_inventorys():
    [f] = probe(sample(0, 42), None)
    assert (f.severity, f.code, f.gpu) == (Severity.WARN, "GPU_RECOVERY_UNKNOWN", 1)
    assert probe(sample(2, lost=(0,)), None) == []


def test_it_runs_from_the_quick_level_up_and_has_the_field_read():
    for level in LEVEL_ORDER:
        assert "recovery_action" in levels.checks_for(level)
        assert "recovery" in levels.nvml_parts(levels.checks_for(level), level)
    assert query_check("recovery_action") == "recovery_action"


# one code each check reports (its probe module): a new check needs its line here too
A_CODE = {"inventory": "GPU_LOST", "xid": "XID79", "ecc": "ECC_DBE", "remap": "REMAP_PENDING",
          "retired": "RETIRED_PAGES", "pcie": "PCIE_WIDTH", "recovery_action": "GPU_RECOVERY_RESET",
          "nvlink": "NVLINK_DOWN", "temperature": "TEMP_HIGH", "clocks": "HW_SLOWDOWN", "disk": "DISK_UNREADABLE",
          "processes": "GPU_PROC_LEFT", "infiniband": "IB_DOWN", "burnin": "BURNIN_TFLOPS"}


def test_every_registered_check_has_a_probe_a_known_level_and_codes_that_lead_back_to_it():
    assert len(BY_NAME) == len(CHECKS) and set(A_CODE) == set(BY_NAME)
    for c in CHECKS:
        assert c.level in LEVEL_ORDER and callable(get(c.name)), c
        assert check_of(A_CODE[c.name]) == c.name, c
    assert check_of("SXID12028") == "xid" and check_of("XID79x") is None and check_of("ADMIN") is None


def test_end_to_end_the_field_drives_the_quick_check_exit_and_finding(fake_nvml_env):
    env, state = fake_nvml_env
    state.write_text("gpu 3 recovery_action 2\n")
    p = subprocess.run([sys.executable, "-m", "slurm_ft", "check", "--level", "quick", "--json", "--node", "n1"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 1, p.stderr
    fails = [(f["check"], f["code"], f["gpu"], f["action"]) for f in json.loads(p.stdout)["findings"]
             if f["severity"] == "fail"]
    assert fails == [("recovery_action", "GPU_RECOVERY_REBOOT", 3, "reboot")]
