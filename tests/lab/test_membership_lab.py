"""The controller's swap and the sweep's return-to-pool at the same moment, on the real lab's slurmctld.

Both run the product code paths (Controller._swap, Sweeper.put_in_pool) in two threads released together,
each with its own handle on the one fleet lock, against real `scontrol`: every round, one spare moves
into `train` while a validated node goes back to `spares`. Without the lock the two read the spare
partition at the same time and the later write undoes the earlier one (a node lost, or in two places).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from slurm_ft.config import Config, ControllerConfig, SlurmConfig
from slurm_ft.fleet.lifecycle.node_history import Store
from slurm_ft.fleet.lifecycle.sweep import Sweeper
from slurm_ft.fleet.recovery.records import Step
from slurm_ft.fleet.recovery import journal as jn
from slurm_ft.fleet import db
from slurm_ft.fleet.recovery.controller import Controller

pytestmark = pytest.mark.lab

ROUNDS = 8


def test_swap_and_return_to_pool_race_loses_no_node(lab, tmp_path):
    lab.reset()
    cfg = Config(state_dir=str(tmp_path / "state"), slurm=SlurmConfig(conf=str(lab.conf)),
                 controller=ControllerConfig(job_partitions=("train",), read_progress=False))
    train = lab.train_nodes[:4]
    spare, other, returning = lab.spare_nodes[:3]
    ctl = Controller(lab.client, jn.connect(db.path_in(cfg.state_dir)), cfg)
    outcomes = []
    try:
        with Store(cfg.state_dir) as store:
            sweep = Sweeper(cfg, lab.client, store)
            for i in range(ROUNDS):
                lab.client.set_partition_nodes("train", train)
                lab.client.set_partition_nodes("spares", [spare, other])   # `returning` is in no partition
                iid = jn.open_incident(ctl.conn, job_id=9000 + i, nodes=[train[0]], faults=[f"{train[0]}: lab"],
                                       partition="train", restart_count=0, job_nodes=4, ckpt_step=None,
                                       fault_at=None, now=time.time())
                jn.update_incident(ctl.conn, iid, spares=[spare])
                inc = next(x for x in jn.incidents(ctl.conn, open_only=True) if x.id == iid)
                step = Step("swap", inc.job_id, incident_id=iid, spares=(spare,), partition="train")
                go = threading.Barrier(2)

                def swap():
                    go.wait()
                    return ctl._swap(step, inc)

                def give_back():
                    go.wait()
                    return sweep.put_in_pool(returning)

                with ThreadPoolExecutor(2) as pool:
                    a, b = pool.submit(swap), pool.submit(give_back)
                    outcomes.append((a.result(timeout=120), b.result(timeout=120)))
                jn.close_incident(ctl.conn, iid, "recovered", time.time())
                parts = {p.name: set(p.nodes) for p in lab.client.partitions()}
                assert parts["train"] == set(train) | {spare}, (i, parts)
                assert parts["spares"] == {other, returning}, (i, parts)
    finally:
        lab.client.set_partition_nodes("train", lab.train_nodes)
        lab.client.set_partition_nodes("spares", lab.spare_nodes)
    assert all(a[0] == "ok" and b is True for a, b in outcomes), outcomes
