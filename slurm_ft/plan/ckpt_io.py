"""Checkpoint I/O arithmetic: how big the training state is, how long each hop of a save takes, what a
synchronous save blocks against a two-stage asynchronous one, and the share of run time that costs.

Training state with mixed-precision Adam: 2 bytes of bf16 weights + 2 of bf16 gradients + 4 of fp32
master weights + 4 + 4 of Adam moments = 16 bytes a parameter (the rule practitioners quote; a checkpoint
without gradients is 14). Hops of a save: each GPU copies its shard to host memory (all GPUs side by
side), then hosts write to storage, limited by each node's link and by the storage system's aggregate
bandwidth, whichever is slower. A synchronous save blocks training for both hops; a two-stage
asynchronous save (MegaScale, NVRx) blocks only for the first and writes in the background, which
holds while the write finishes within one interval. Pure arithmetic with its derivation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from slurm_ft.errors import UsageError
from slurm_ft.plan.explain import Derivation, gnum, num, pct

TIB = 2 ** 40


@dataclass
class CkptPlan:
    params: float
    bytes_per_param: float
    gpus: int
    gpus_per_node: int
    shards: int
    state_gb: float
    state_tib: float
    per_rank_gb: float
    per_node_gb: float
    gpu_to_host_s: float
    host_to_storage_s: float
    bottleneck: str
    sync_blocking_s: float
    async_blocking_s: float
    async_keeps_up: bool
    interval_s: float
    sync_share: float
    async_share: float
    derivation: Derivation = field(default_factory=Derivation)
    notes: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"params": self.params, "bytes_per_param": self.bytes_per_param, "gpus": self.gpus,
                "gpus_per_node": self.gpus_per_node, "shards": self.shards,
                "state_bytes": self.state_gb * 1e9, "state_tb": self.state_gb / 1000, "state_tib": self.state_tib,
                "bytes_per_rank": self.per_rank_gb * 1e9, "bytes_per_node": self.per_node_gb * 1e9,
                "gpu_to_host_s": self.gpu_to_host_s, "host_to_storage_s": self.host_to_storage_s,
                "storage_bottleneck": self.bottleneck,
                "sync_blocking_s": self.sync_blocking_s, "async_blocking_s": self.async_blocking_s,
                "async_write_fits_interval": self.async_keeps_up, "interval_s": self.interval_s,
                "sync_share_of_run_time": self.sync_share, "async_share_of_run_time": self.async_share,
                "notes": self.notes, "derivation": self.derivation.to_list()}


def _pos(name: str, v: Optional[float]) -> None:
    if v is None or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
        raise UsageError(f"{name} must be a positive number, got {v}")


def plan_checkpoint(params: float, *, gpus: int, gpus_per_node: int = 8, shards: Optional[int] = None,
                    bytes_per_param: float = 16.0, d2h_gbps: float = 25.0, node_storage_gbps: float = 50.0,
                    storage_gbps: float = 2000.0, interval_min: float = 30.0) -> CkptPlan:
    """Sizes in decimal GB (1e9 bytes), bandwidths in GB/s; `shards`: the state is split into this many
    equal pieces, each held and written by one rank (default: every GPU, i.e. fully sharded)."""
    _pos("--params", params)
    _pos("--bytes-per-param", bytes_per_param)
    for name, v in (("--d2h-gbps", d2h_gbps), ("--node-storage-gbps", node_storage_gbps),
                    ("--storage-gbps", storage_gbps), ("--interval-min", interval_min)):
        _pos(name, v)
    if gpus <= 0 or gpus_per_node <= 0:
        raise UsageError("--gpus and --gpus-per-node must be positive")
    if gpus % gpus_per_node:
        raise UsageError(f"--gpus {gpus} is not a multiple of --gpus-per-node {gpus_per_node}")
    shards = gpus if shards is None else shards
    if not (0 < shards <= gpus):
        raise UsageError(f"--shards must be between 1 and --gpus ({gpus}), got {shards}")

    d = Derivation()
    P = d.given("params", "parameters (P)", params)
    b = d.given("bytes_per_param", "bytes per parameter (b)", bytes_per_param,
                note="bf16 weights 2 + bf16 grads 2 + fp32 master 4 + Adam m 4 + v 4")
    S = d.step("state_gb", "training state (S)", "P × b / 1e9", f"{gnum(P)} × {gnum(b)} / 1e9", P * b / 1e9, "GB")
    tb = d.step("state_tb", "in TB (decimal)", "S / 1000", f"{gnum(S)} / 1000", S / 1000, "TB")
    tib = d.step("state_tib", "in TiB (binary)", "S × 1e9 / 2^40", f"{gnum(S)} × 1e9 / {TIB:,}", S * 1e9 / TIB, "TiB")
    G = d.given("gpus", "GPUs (G)", gpus)
    g = d.given("gpus_per_node", "GPUs per node (g)", gpus_per_node)
    n = d.step("nodes", "nodes (n)", "G / g", f"{gnum(G)} / {gnum(g)}", gpus // gpus_per_node)
    N = d.given("shards", "shards written, one per rank (N)", shards,
                note="fully sharded (FSDP/ZeRO-3, DCP)" if shards == gpus else "the other ranks hold replicas")
    per_rank = d.step("per_rank_gb", "bytes per writing rank", "S / N", f"{gnum(S)} / {gnum(N)}", S / N, "GB")
    if N >= n:
        per_node = d.step("per_node_gb", "bytes per node (shards spread over all nodes)", "S / n",
                          f"{gnum(S)} / {gnum(n)}", S / n, "GB")
    else:
        per_node = d.step("per_node_gb", "bytes per writing node (N < n: one shard per node)", "S / N",
                          f"{gnum(S)} / {gnum(N)}", S / N, "GB")
    bw1 = d.given("d2h_gbps", "GPU to host bandwidth, each GPU", d2h_gbps, "GB/s")
    t1 = d.step("gpu_to_host_s", "hop 1, GPU to host memory (all GPUs side by side)", "(S / N) / bw1",
                f"{gnum(per_rank)} / {gnum(bw1)}", per_rank / bw1, "s")
    bwn = d.given("node_storage_gbps", "node to storage bandwidth, each node", node_storage_gbps, "GB/s")
    bws = d.given("storage_gbps", "storage aggregate write bandwidth", storage_gbps, "GB/s",
                  note="Llama 3's Tectonic: 2 TB/s sustained, 7 TB/s peak")
    t_node = d.step("node_limit_s", "hop 2 limited by the node links", "bytes per node / bw_node",
                    f"{gnum(per_node)} / {gnum(bwn)}", per_node / bwn, "s")
    t_agg = d.step("storage_limit_s", "hop 2 limited by the storage", "S / bw_storage", f"{gnum(S)} / {gnum(bws)}",
                   S / bws, "s")
    t2 = max(t_node, t_agg)
    bottleneck = "node links" if t_node >= t_agg else "storage aggregate"
    d.step("host_to_storage_s", f"hop 2, host to storage (the slower: {bottleneck})", "", "", t2, "s", exact=True)
    sync = d.step("sync_blocking_s", "synchronous save blocks for", "hop 1 + hop 2", f"{gnum(t1)} + {gnum(t2)}",
                  t1 + t2, "s")
    asy = d.step("async_blocking_s", "two-stage asynchronous save blocks for", "hop 1", gnum(t1), t1, "s",
                 note="hop 2 runs in the background", exact=True)
    I = d.step("interval_s", "checkpoint interval (I)", "minutes × 60", f"{gnum(interval_min)} × 60",
               interval_min * 60, "s")
    s_share = d.step("sync_share", "share of run time, synchronous", "sync / (I + sync)",
                     f"{gnum(sync)} / ({gnum(I)} + {gnum(sync)})", sync / (I + sync))
    a_share = d.step("async_share", "share of run time, asynchronous", "hop 1 / (I + hop 1)",
                     f"{gnum(asy)} / ({gnum(I)} + {gnum(asy)})", asy / (I + asy))
    keeps_up = t2 <= I
    notes = [f"{gnum(P)} parameters × {gnum(b)} bytes = {num(tb)} TB = {num(tib)} TiB."]
    if abs(P - 70e9) < 1e9 and b == 16:
        notes.append("The 1.13 TB often quoted for a 70B model is Llama 3 70B's actual 70.6e9 parameters × 16 bytes; "
                     "70e9 × 16 gives 1.12 TB (and 1.02 TiB).")
    if not keeps_up:
        notes.append(f"The background write ({num(t2)} s) takes longer than the interval ({num(I)} s): the "
                     f"asynchronous save cannot keep up and the next save waits for it.")
    notes.append(f"Share of run time: synchronous {pct(s_share)}, asynchronous {pct(a_share)} at one save every "
                 f"{gnum(interval_min)} min; give the blocking time to `slurm-ft spares plan --checkpoint-cost-s`.")
    return CkptPlan(P, b, gpus, gpus_per_node, N, S, tib, per_rank, per_node, t1, t2, bottleneck, sync, asy,
                    keeps_up, I, s_share, a_share, d, notes)


def render(plan: CkptPlan) -> List[str]:
    out = [f"Checkpoint of {gnum(plan.params)} parameters on {num(plan.gpus)} GPUs "
           f"({plan.shards:,} shards), one save every {gnum(plan.interval_s / 60)} min", ""]
    out += plan.derivation.render()
    out += [""] + [f"=> {t}" for t in plan.notes]
    return out
