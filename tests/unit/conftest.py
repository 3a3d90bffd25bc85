"""Hypothesis without its per-example deadline: CI's machines are shared (load 30-200 while the lab rooms
run), and a deadline there is a timing assertion, which belongs in bench/, not in a test."""
import os

import pytest
from hypothesis import settings

settings.register_profile("shared-machine", deadline=None)
settings.load_profile("shared-machine")


@pytest.fixture
def fake_nvml_env(tmp_path):
    """`slurm-ft check` of node n1 over the real pynvml and the lab's fake libnvidia-ml.so.1: the process
    environment, and the fake driver's state file (write faults into it)."""
    from slurm_ft_lab.fake_nvml import build
    lib = build(tmp_path / "lib")
    cfg = tmp_path / "slurm-ft.yaml"
    cfg.write_text(f"health:\n  kmsg_path: {tmp_path}/k\n  state_file: {tmp_path}/s.json\n")
    os.chmod(cfg, 0o644)
    state = tmp_path / "nvml.state"
    state.write_text("")
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib.parent), SLURM_FT_FAKE_NVML_STATE=str(state),
               SLURM_FT_FAKE_NODE="n1", SLURM_FT_CONFIG=str(cfg))
    return env, state
