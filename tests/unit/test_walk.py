"""The walk of one fatal Xid 79, from the kernel log to the resumed job (README "Layout"), traced.

The fault is handed on through six files: the kernel-log reader, the watcher, the check run, the drain,
the controller and the job's starter (and, for each write, the Slurm seam under slurm/). Everything else on the way is consulted by one of them (a probe,
the catalog, the state file, the breaker, the plan, the journal, a checkpoint layout, the seams) and
returns: each file of the walk is entered from the one before it only, never again from a module it
consulted, so a reader follows the fault in those six files. (The kernel-log reader is also a seam: the
check reads the log again for every Xid in its look-back window.)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WALK = ["slurm_ft/gpu/kmsg.py", "slurm_ft/node/watch.py", "slurm_ft/node/run.py", "slurm_ft/node/drain.py",
        "slurm_ft/fleet/recovery/controller.py", "slurm_ft/job/jobstart.py"]
SEAM = "slurm_ft/slurm/"


def _walk(tmp_path: Path) -> dict:
    from slurm_ft_lab.fake_nvml import build
    lib = build(tmp_path / "lib")
    cfg = tmp_path / "slurm-ft.yaml"
    cfg.write_text(f"health:\n  kmsg_path: {tmp_path}/kmsg\n  state_file: {tmp_path}/state/{{node}}.json\n")
    os.chmod(cfg, 0o644)
    (tmp_path / "kmsg").write_text("")
    (tmp_path / "nvml.state").write_text("")
    here = Path(__file__).parent
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib.parent), SLURM_FT_FAKE_NVML_STATE=str(tmp_path / "nvml.state"),
               SLURM_FT_FAKE_NODE="n1", SLURM_FT_CONFIG=str(cfg),
               PYTHONPATH=os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, str(here / "xid79_walk.py"), str(tmp_path)], env=env, text=True,
                         capture_output=True, timeout=180)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_one_xid79_drains_the_node_swaps_a_spare_and_resumes_from_the_checkpoint(tmp_path):
    w = _walk(tmp_path)
    kind, nodes, reason = w["slurm"][0]
    assert (kind, nodes) == ("drain", "('n1',)") and reason.startswith("slurm-ft: XID79 gpu3 GPU has fallen off")
    assert ["requeue", "100", "False"] in w["slurm"]
    assert "n1" not in w["job"]["nodes"] and "n5" in w["job"]["nodes"]
    assert w["started"] == ["/bin/true", "--resume", str(tmp_path / "ckpt" / "step_5")]


def test_the_fault_passes_through_six_files_and_nothing_consulted_calls_back(tmp_path):
    w = _walk(tmp_path)
    handed = {frame.split(":")[0] for part in w["parts"].values() for h in part["handoffs"] for frame in h["stack"]}
    # the Slurm seam a write goes through (here the fake stands for slurm/client.py; partition lists are
    # written through slurm/membership.py) is not the fault's path
    assert sorted(f for f in handed if not f.startswith(SEAM)) == sorted(WALK), json.dumps(w["parts"], indent=1)
    what = [(h["what"], h["stack"][-1]) for p in w["parts"].values() for h in p["handoffs"]]
    assert what[0][0] == "XidEvent" and what[0][1].startswith("slurm_ft/gpu/kmsg.py:")
    assert ("slurm drain", "slurm_ft/node/drain.py:apply") in what
    assert ("slurm requeue", "slurm_ft/fleet/recovery/controller.py:_requeue") in what
    assert ("slurm set_partition_nodes", "slurm_ft/slurm/membership.py:change") in what      # quarantine, swap
    assert what[-1] == ("exec", "slurm_ft/job/jobstart.py:main")
    callers = {b: sorted({a for p in w["parts"].values() for a, b2, _ in p["calls"] if b2 == b}) for b in WALK}
    assert callers == {"slurm_ft/gpu/kmsg.py": ["slurm_ft/node/gather.py", "slurm_ft/node/watch.py"],
                       "slurm_ft/node/watch.py": ["slurm_ft/gpu/kmsg.py"],     # the reader's callbacks
                       "slurm_ft/node/run.py": ["slurm_ft/node/watch.py"],
                       "slurm_ft/node/drain.py": ["slurm_ft/node/run.py"],
                       "slurm_ft/fleet/recovery/controller.py": [], "slurm_ft/job/jobstart.py": []}
    consulted = {f for p in w["parts"].values() for f in p["ran"]} - set(WALK)
    print(f"walk: {len(WALK)} files; consulted on the way: {len(consulted)}: {' '.join(sorted(consulted))}")
