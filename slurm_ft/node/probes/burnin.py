"""Burn-in verdict: per-GPU matmul TFLOPS against the node type's expectation and the node's best GPU.

The measuring happens in `slurm_ft.node.burnin` (a gatherer); this probe only judges its result,
`host.BurninResult` (reader "burnin": backend, label, skipped, gpus: {index: tflops}, errors: {index: text}).
A run with no backend is a visible skip (a warn), never a pass.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from slurm_ft.finding import Action, Finding, Severity

from slurm_ft.gpu.sample import NodeSample
from slurm_ft.node.host import BurninResult

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "burnin"


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    res = sample.host.of("burnin", BurninResult)
    if res is None:
        return [Finding(CHECK, Severity.WARN, "burn-in skipped: nothing measured", "BURNIN_SKIPPED")]
    if res.skipped:
        return [Finding(CHECK, Severity.WARN, f"burn-in skipped: {res.skipped}", "BURNIN_SKIPPED")]
    out: List[Finding] = []
    label = res.label or res.backend
    for idx, err in sorted(res.errors.items()):
        out.append(Finding(CHECK, Severity.FAIL, f"burn-in failed ({label}): {err}", "BURNIN_ERROR",
                           idx, Action.DRAIN))
    tflops = dict(res.gpus)
    if not tflops:
        return out
    best = max(tflops.values())
    t = ctx.thresholds
    expected = ctx.node_type.tflops_bf16 if res.absolute else 0.0
    for idx, v in sorted(tflops.items()):
        why = []
        if best > 0 and v < t.burnin_relative_min * best:
            why.append(f"{v / best:.0%} of the node's best {_tf(best)}")
        if expected and v < t.burnin_absolute_min * expected:
            why.append(f"{v / expected:.0%} of expected {expected:g}")
        if why:
            out.append(Finding(CHECK, Severity.FAIL, f"slow GPU: {_tf(v)} TFLOPS, " + " and ".join(why) + f" ({label})",
                               "BURNIN_SLOW", idx, Action.DRAIN))
        else:
            out.append(Finding(CHECK, Severity.OK, f"{_tf(v)} TFLOPS ({label})", "BURNIN_TFLOPS", idx))
    return out


def _tf(v: float) -> str:
    return f"{v:.1f}" if v >= 10 else f"{v:.3g}"
