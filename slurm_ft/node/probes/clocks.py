"""Clock event reasons: hardware slowdown, hardware thermal slowdown, power brake.

Decision (documented in etc/slurm-ft.yaml): one reading is a warn at every level, because these
events are often short and environmental (a hot aisle, a PSU limit) and a single sample cannot tell a
blip from a fault. At the `full` level the gatherer samples the reasons several times over a window
(`thresholds.clock_event_samples` over `clock_event_window_s`: `host.ClockSeries`); an event
present in every sample is a persistent slowdown and fails the GPU: it would make it the straggler that
every synchronous step waits for (GPUD: unhealthy when HW slowdown fills most of a window).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from slurm_ft.finding import Action, Finding, Severity

from slurm_ft.gpu.sample import NodeSample
from slurm_ft.node.host import ClockSeries

if TYPE_CHECKING:
    from slurm_ft.node.probes import ProbeContext

CHECK = "clocks"

# nvmlClocksEventReason* bits (pynvml): the hardware-imposed ones; SW power cap / idle / sync are normal
HW_SLOWDOWN = 0x8
HW_THERMAL = 0x40
POWER_BRAKE = 0x80
EVENTS = ((HW_SLOWDOWN, "HW_SLOWDOWN", "HW slowdown"),
          (HW_THERMAL, "HW_THERMAL", "HW thermal slowdown"),
          (POWER_BRAKE, "POWER_BRAKE", "HW power brake"))


def probe(sample: NodeSample, ctx: ProbeContext) -> List[Finding]:
    out: List[Finding] = []
    read = sample.host.of("clocks", ClockSeries)
    series = read.by_gpu if read else {}
    for g in sample.gpus:
        if g.lost:
            continue
        readings = [r for r in series.get(g.index, ()) if r is not None]
        if not readings and g.clock_event_reasons is not None:
            readings = [g.clock_event_reasons]
        if not readings:
            continue
        for bit, code, text in EVENTS:
            hits = sum(1 for r in readings if r & bit)
            if not hits:
                continue
            persistent = len(readings) >= 2 and hits == len(readings)
            if persistent:
                out.append(Finding(CHECK, Severity.FAIL, f"{text} in {hits}/{len(readings)} samples",
                                   code, g.index, Action.DRAIN))
            else:
                out.append(Finding(CHECK, Severity.WARN, f"{text} ({hits}/{len(readings)} samples)", code, g.index))
    return out
