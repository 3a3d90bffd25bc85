"""bench/peers.py's harness kept honest: one fault per contender, each deployed as the benchmark deploys it
(slurm_ft_lab.peers), on the real lab. The job is the real PyTorch one (DDP over gloo, DCP saves) of the
lab's job user, two nodes training and one beside them; the fault is a GPU that falls off the bus. Each
contender must get the job training again without the failed node, in a clean way: nothing healthy
drained. The figures themselves are bench/peers.py's to print, and only loosely held here.

The jobs are the job user's; the test acts as root only where the admin's side does (the controller and
`slurm-ft watch` of the slurm-ft contenders, the fault injection)."""
from __future__ import annotations

import shutil

import pytest

from slurm_ft_lab import peers

pytestmark = pytest.mark.lab

SETUP = peers.Setup(nodes=2, hot=1, groups=2, step_time=0.5, save_every=5, timeout=300.0)


@pytest.fixture
def bench_dir(lab):
    lab.reset()
    d = lab.cluster.dir / "peers-test"
    yield d
    lab.reset()
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("key", [c.key for c in peers.MEASURED])
def test_each_contender_gets_the_job_training_again_without_the_failed_node(lab, bench_dir, key):
    contender = next(c for c in peers.MEASURED if c.key == key)
    why = contender.missing()
    if why:
        pytest.skip(why)
    r = peers.run_fault(lab.cluster, bench_dir, contender, SETUP, 0)
    assert not r.error, f"{contender.label}: {r.error}"
    f = r.figures
    assert f is not None and f.bad_node_left_out, (r.victim, f)
    assert r.healthy_drained == [], r.drained
    # the job kept going past where it was: resumed from the checkpoint before the fault, or (replica
    # groups) never rolled back at all
    assert f.fault_to_first_step_s < SETUP.timeout and f.last_step_before >= SETUP.save_every
    if contender.groups(SETUP) > 1:
        assert f.steps_redone == 0 and f.fault_to_first_step_s < f.fault_to_full_s
    else:
        assert 0 <= f.steps_redone <= SETUP.save_every
    if contender.watch:            # slurm-ft takes the failed node out of service
        assert r.victim in r.drained
    assert f.gpu_s_lost > 0
