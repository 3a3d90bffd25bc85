"""Soft signals (slurm_ft/node/soft.py): trends of what NVML shows, judged per GPU into warn findings that
ask for a planned swap. Hand-built readings and histories; the property tests walk days of passes."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings, strategies as hs

from slurm_ft.config import SoftSignals
from slurm_ft.finding import Finding, Severity
from slurm_ft.gpu.sample import EccCounts, GpuSample, NodeSample, NvLink
from slurm_ft.node import soft

OFF = SoftSignals(ecc_corrected=0, xid_contained=0, nvlink_replay=0, nvlink_crc=0, clock_event_share=0.0,
                  clock_slow_ratio=0.0, planned_codes=())


def run(passes, signals, period=60.0, t0=1_000_000.0):
    """Feed (gpu -> GpuReading) per pass every `period` s; the findings after each pass."""
    h = soft.empty("n1")
    out = []
    for i, gpus in enumerate(passes):
        now = t0 + i * period
        soft.record(h, now, gpus, soft.keep_s(signals))
        out.append(soft.judge(h, signals, now))
    return out


def ecc(values):
    return [{3: soft.GpuReading(sbe=v)} for v in values]


def test_readings_take_what_the_signals_need_and_skip_a_lost_gpu():
    links = (NvLink(0, True, crc_errors=5, replay_errors=2, recovery_errors=1), NvLink(1, True, crc_errors=7))
    s = NodeSample("n1", (GpuSample(0, ecc=EccCounts(volatile_corrected=12), nvlinks=links, clock_event_reasons=8,
                                    sm_clock_mhz=990, sm_clock_max_mhz=1980),
                          GpuSample(1, lost=True, ecc=EccCounts(volatile_corrected=99)),
                          GpuSample(2)))
    r = soft.readings(s)
    assert r == {0: soft.GpuReading(sbe=12, replay=3, crc=12, reasons=8, clock=0.5), 2: soft.GpuReading()}


def test_a_corrected_ecc_count_climbing_past_the_limit_within_the_window_is_a_warn_finding_with_its_figure():
    sig = replace(OFF, ecc_corrected=100, window_s=600)
    found = run(ecc([0, 40, 80, 120]), sig)
    assert found[:3] == [[], [], []]
    [f] = found[3]
    assert (f.check, f.severity, f.code, f.gpu) == ("soft", Severity.WARN, "ECC_SBE_RATE", 3)
    assert f.reason == "corrected ECC errors +120 in 3 min (limit 100 within 10 min)"


def test_the_same_count_spread_wider_than_the_window_is_not_a_trend():
    sig = replace(OFF, ecc_corrected=100, window_s=600)
    assert all(not f for f in run(ecc(range(0, 400, 9)), sig))     # 9 a minute: 90 in any 10 minutes


def test_a_counter_reset_counts_from_zero_and_a_gap_longer_than_the_window_counts_nothing():
    assert soft.increase([(0, 50), (60, 70), (120, 10)], start=0, max_gap=600) == (30, 120)
    assert soft.increase([(0, 50), (1000, 900), (1060, 950)], start=0, max_gap=600) == (50, 60)
    assert soft.increase([(0, 50), (60, None), (120, 80)], start=0, max_gap=600) == (0, 0.0)


def test_each_signal_off_says_nothing():
    h = soft.empty("n1")
    for i, v in enumerate(range(0, 10**6, 10**5)):
        soft.record(h, i * 60.0, {0: soft.GpuReading(sbe=v, replay=v, crc=v, reasons=0x8, clock=0.1)}, 7200)
    soft.record_xids(h, [(i * 60.0, 0, 94) for i in range(10)], 600.0, 7200)
    assert soft.judge(h, OFF, 600.0) == []
    assert {f.code for f in soft.judge(h, SoftSignals(), 600.0)} == {"ECC_SBE_RATE", "NVLINK_ERROR_RATE",
                                                                     "CLOCK_EVENT_HELD", "XID_CONTAINED"}


def test_nvlink_replay_growth_or_crc_growth_warn_once_per_gpu():
    sig = replace(OFF, nvlink_replay=1, nvlink_crc=6000)
    [f] = run([{1: soft.GpuReading(replay=0, crc=0)}, {1: soft.GpuReading(replay=2, crc=9000)}], sig)[1]
    assert (f.code, f.gpu, f.reason) == ("NVLINK_ERROR_RATE", 1,
                                         "NVLink replay/recovery errors +2 in 60 s (limit 1 within 60 min)")
    [f] = run([{1: soft.GpuReading(replay=0, crc=0)}, {1: soft.GpuReading(replay=0, crc=9000)}], sig)[1]
    assert f.reason.startswith("NVLink CRC errors +9000")


def test_a_clock_event_held_in_most_readings_of_its_window_warns_a_blip_does_not():
    sig = replace(OFF, clock_event_share=0.6, clock_window_s=600)
    held = [{0: soft.GpuReading(reasons=r, clock=0.6)} for r in (0x8, 0x8, 0, 0x8, 0x8)]
    [f] = run(held, sig)[-1]
    assert (f.code, f.reason) == ("CLOCK_EVENT_HELD", "HW slowdown in 4/5 readings over 4 min")
    blip = [{0: soft.GpuReading(reasons=r, clock=0.6)} for r in (0, 0x40, 0, 0, 0)]
    assert run(blip, sig)[-1] == []
    assert run(held[:2], sig)[-1] == []            # two readings are not a held state


def test_a_slow_clock_with_no_reason_at_all_is_clock_slow_one_with_a_reason_is_not():
    sig = replace(OFF, clock_event_share=0.6, clock_slow_ratio=0.7)
    slow = [{0: soft.GpuReading(reasons=0, clock=0.5)}] * 4
    [f] = run(slow, sig)[-1]
    assert (f.code, f.reason) == ("CLOCK_SLOW", "SM clock at 50% of max with no clock-event reason in 4/4 "
                                                "readings over 3 min")
    idle = [{0: soft.GpuReading(reasons=0x1, clock=0.1)}] * 4      # GpuIdle: an idle GPU clocks down
    capped = [{0: soft.GpuReading(reasons=0x4, clock=0.5)}] * 4    # SW power cap: the site's choice
    assert run(idle, sig)[-1] == [] and run(capped, sig)[-1] == []


def test_warn_class_xids_on_one_gpu_within_the_window_count_up_to_the_limit():
    sig = replace(OFF, xid_contained=3, window_s=3600)
    h = soft.empty("n1")
    soft.record_xids(h, [(100.0, 2, 94), (200.0, 2, 94), (300.0, 5, 63)], 300.0, 3600)
    assert soft.judge(h, sig, 300.0) == []
    soft.record_xids(h, [(400.0, 2, 63)], 400.0, 3600)
    [f] = soft.judge(h, sig, 400.0)
    assert (f.code, f.gpu, f.reason) == ("XID_CONTAINED", 2, "Xid 63, 94 x2 in 60 min (limit 3)")
    assert soft.judge(h, sig, 3750.0) == []        # the first one left the window


def test_the_node_types_planned_codes_turn_those_fail_findings_into_warnings():
    sig = SoftSignals()
    found = [Finding("recovery_action", Severity.FAIL, "the driver asks for recovery: drain_and_reset",
                     "GPU_RECOVERY_DRAIN_RESET", 1),
             Finding("recovery_action", Severity.FAIL, "the driver asks for recovery: gpu_reset", "GPU_RECOVERY_RESET", 2),
             Finding("ecc", Severity.OK, "ok")]
    out = soft.downgrade(found, sig)
    assert [(f.code, f.severity) for f in out] == [("GPU_RECOVERY_DRAIN_RESET", Severity.WARN),
                                                   ("GPU_RECOVERY_RESET", Severity.FAIL), ("", Severity.OK)]
    assert out[0].reason.endswith("(planned swap)")
    assert soft.downgrade(found, replace(sig, planned_codes=())) == found


def test_the_history_keeps_only_what_the_windows_need():
    sig = SoftSignals(window_s=600, clock_window_s=300)
    h = soft.empty("n1")
    for i in range(1000):
        soft.record(h, i * 1.0, {0: soft.GpuReading(sbe=i)}, soft.keep_s(sig))
    assert len(h["samples"]) == 601 and h["samples"][0][0] == 399.0
    for i in range(800):
        soft.record(h, 1000.0 + i, {0: soft.GpuReading(sbe=i)}, 1e9)
    assert len(h["samples"]) == soft.MAX_SAMPLES


def test_a_damaged_history_is_read_around_not_trusted():
    h = {"version": 1, "node": "n1", "samples": [[1.0, {"0": [1, None, None, None, None]}], "junk", [2.0, "x"],
                                                 [3.0, {"0": ["a", -1, True, None, None], "z": [1]}],
                                                 [4.0, {"0": [999999, None, None, None, None]}]],
         "xids": [[1.0, 0, 94], ["x"], [2.0, 0]]}
    assert soft.valid(h)
    assert [(t, r.sbe) for t, r in soft.series(h)[0]] == [(1.0, 1), (3.0, None), (4.0, 999999)]
    assert soft.judge(h, SoftSignals(ecc_corrected=1), 5.0) == []     # a missing value breaks the chain
    assert not soft.valid({"version": 2}) and not soft.valid([])


def test_the_finding_a_planned_reason_names_comes_first():
    fs = [Finding("soft", Severity.WARN, "x", "CLOCK_SLOW", 0), Finding("soft", Severity.WARN, "y", "ECC_SBE_RATE", 4),
          Finding("soft", Severity.WARN, "z", "ECC_SBE_RATE", 1)]
    assert soft.first(fs).code == "ECC_SBE_RATE" and soft.first(fs).gpu == 1
    d = Finding("recovery_action", Severity.WARN, "w", "GPU_RECOVERY_DRAIN_P2P", 7)
    assert soft.first([*fs, d], ("GPU_RECOVERY_DRAIN_P2P",)) is d


# --- the acceptance, over a long window: noise under the limit never, a climb above it always --------

@settings(max_examples=10, deadline=None)
@given(limit=hs.integers(10, 5000), window_min=hs.integers(2, 60), period_s=hs.sampled_from([5.0, 30.0, 60.0]),
       seed=hs.integers(0, 2**32 - 1), windows=hs.integers(3, 12))
def test_a_healthy_gpus_noise_under_the_limit_never_warns_over_a_long_window(limit, window_min, period_s, seed,
                                                                            windows):
    import random
    rng = random.Random(seed)
    window = window_min * 60.0
    passes = min(int(windows * window / period_s), 600)      # several windows (up to 10 h at 60 s a pass)
    # noise: a pass adds at most what keeps any window (plus the pair reaching into it) under the limit
    per_pass = (limit - 1) // (int(window // period_s) + 2)
    sig = replace(OFF, ecc_corrected=limit, window_s=window)
    h, v = soft.empty("n1"), 0
    for i in range(passes):
        v += rng.randint(0, per_pass)
        soft.record(h, i * period_s, {0: soft.GpuReading(sbe=v)}, soft.keep_s(sig))
        assert soft.judge(h, sig, i * period_s) == [], (i, v)


@settings(max_examples=15, deadline=None)
@given(limit=hs.integers(10, 5000), window_min=hs.integers(2, 60), period_s=hs.sampled_from([5.0, 30.0, 60.0]),
       over=hs.floats(1.05, 20.0))
def test_a_climb_above_the_limit_warns_within_one_window(limit, window_min, period_s, over):
    window = window_min * 60.0
    rate = over * limit / window                  # errors a second: `over` times the limit in one window
    sig = replace(OFF, ecc_corrected=limit, window_s=window)
    h = soft.empty("n1")
    for i in range(int(window // period_s) + 3):
        t = i * period_s
        soft.record(h, t, {0: soft.GpuReading(sbe=int(rate * t))}, soft.keep_s(sig))
        if soft.judge(h, sig, t):
            assert t <= window + 2 * period_s
            return
    raise AssertionError("no finding after a window and two passes")
