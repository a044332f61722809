"""labkit.fast.regime: one function names a step's regime with its margin, says "borderline" within the
probes' spread, and notes a probe the step contradicts; the machine probes keep medians and spreads.
Every number here is made up, so that the arithmetic is exact: no assertion reads a clock."""

import pytest

import labkit.fast.machine as machine_module
import labkit.fast.roofline as roofline
from labkit.benchmarks.fast_report import cost_cells as report_cells
from labkit.benchmarks.fast_rows import FP32, Row
from labkit.fast.cost import Machine, StepCosts, cost_table
from labkit.fast.regime import Probed, plus_minus, regime_of, relative_spread

# 20 GB/s measured at ±8 %, float32 at 100 GFLOP/s ±3 %, bfloat16 at 100 GFLOP/s ±1 %
SPREAD_MACHINE = Machine(
    read_bandwidth=20e9,
    peaks={"float32": 100e9, "bfloat16": 100e9},
    threads=2,
    read_bandwidth_spread=0.08,
    peak_spreads={"float32": 0.03, "bfloat16": 0.01},
)
# The kernels lead (50 ms against 10 ms of overhead) and read 480 MB: a 24 ms memory floor, 48 % of their time
NEAR_HALF = StepCosts(
    ops=2000,
    op_seconds=5e-6,
    matmul_seconds=0.050,
    weight_bytes=480_000_000,
    kv_bytes=2_000_000,
    flops=5e8,  # 5 ms at the float32 peak: 10 % of the kernels' time
    measured_seconds=0.060,
)
TERMS = {"overhead": 0.010, "thread wake-ups": 0.0, "matmul kernels": 0.050, "KV cache": 0.0001}


def test_the_spread_is_the_interquartile_range_over_the_median_and_one_disturbed_repeat_leaves_it():
    assert relative_spread([30.0, 31.0, 32.0, 33.0, 34.0]) == pytest.approx(2 / 32)
    assert relative_spread([30.0, 31.0, 32.0, 33.0, 90.0]) == pytest.approx(2 / 32)  # one outlier: same
    assert relative_spread([5.0]) == 0.0
    assert Probed.of([34.0, 30.0, 32.0, 31.0, 33.0]) == Probed(32.0, pytest.approx(2 / 32))


def test_a_probe_whose_repeats_all_vanish_reads_zero_with_a_spread_not_a_division_by_zero():
    # Under load a probe's step can time no slower than its matmuls alone: each repeat clamps to 0 s/op
    assert Probed.of([0.0, 0.0]) == Probed(0.0, 0.0)
    assert relative_spread([0.0, 0.0, 0.0, 1e-6, 2e-6]) == float("inf")
    assert plus_minus(relative_spread([0.0, 0.0, 0.0, 1e-6, 2e-6])) == "±>100%"
    vanished = StepCosts(**{**NEAR_HALF.__dict__, "op_seconds": 0.0, "op_spread": 0.0})
    assert "batch" in cost_table({"batch 1": vanished}, SPREAD_MACHINE)


def test_a_share_within_the_bandwidth_spread_of_the_line_is_borderline_but_keeps_its_plain_label():
    reading = NEAR_HALF.regime_reading(SPREAD_MACHINE)
    # the plain label is what the lines say (48 % < 50 %): callers that compare it see no change
    assert NEAR_HALF.regime(SPREAD_MACHINE) == reading.label == "kernel-bound"
    assert reading.share == pytest.approx(0.48) and reading.threshold == 0.5
    assert reading.margin == pytest.approx(-0.04) and reading.spread == 0.08
    assert reading.borderline and reading.alternative == "memory-bound"
    assert reading.name == "borderline memory-bound / kernel-bound"
    assert reading.reason == "the bandwidth probe's spread is ±8%, and 48% is within it of the 50% line"
    report = NEAR_HALF.report(SPREAD_MACHINE)
    assert "60.10 ms, measured 60.00 ms (+0%): borderline memory-bound / kernel-bound" in report
    assert "margin               -4%: the bandwidth probe's spread is ±8%" in report
    assert cost_table({"fp32": NEAR_HALF}, SPREAD_MACHINE).splitlines()[1].endswith(reading.name)


def test_outside_the_spread_the_reading_is_plain_and_still_gives_its_margin():
    tight = Machine(20e9, {"float32": 100e9}, 2, read_bandwidth_spread=0.02)
    reading = NEAR_HALF.regime_reading(tight)
    assert not reading.borderline and reading.name == "kernel-bound"
    assert reading.margin == pytest.approx(-0.04)
    assert reading.reason == (
        "the kernels read at 48% of the read bandwidth; the line is 50% (the bandwidth probe's spread: ±2%)"
    )
    unmeasured = NEAR_HALF.regime_reading(Machine(20e9, {"float32": 100e9}, 2))  # built the old way
    assert not unmeasured.borderline and unmeasured.reason.endswith(
        "(the bandwidth probe's spread: not measured)"
    )


def test_the_compute_line_is_read_against_the_peak_of_the_steps_own_data_type():
    fast_flops = StepCosts(**{**NEAR_HALF.as_dict(), "weight_bytes": 200_000_000, "flops": 2.6e9})
    float32 = fast_flops.regime_reading(SPREAD_MACHINE)  # 26 ms of FLOPs: 52 % of 50 ms, float32 ±3 %
    assert float32.label == "compute-bound" and float32.margin == pytest.approx(0.04)
    assert not float32.borderline  # 4 % from the line, outside ±3 %
    wide = Machine(
        20e9, {"float32": 100e9, "bfloat16": 100e9}, 2, peak_spreads={"float32": 0.1, "bfloat16": 0.01}
    )
    assert fast_flops.regime_reading(wide).name == "borderline compute-bound / kernel-bound"
    bfloat16 = StepCosts(**{**fast_flops.as_dict(), "dtype": "bfloat16"}).regime_reading(wide)
    assert bfloat16.name == "compute-bound" and "the bfloat16 peak probe's spread: ±1%" in bfloat16.reason


def test_two_leading_terms_within_the_timing_spread_are_borderline_between_their_regimes():
    close = StepCosts(
        ops=1522,
        op_seconds=4.87e-6,  # 7.41 ms of overhead
        matmul_seconds=0.00719,  # 7.19 ms of kernels, reading 95 MB at 66 % of 20 GB/s: memory-bound
        weight_bytes=94_907_904,
        kv_bytes=5_898_240,
        flops=268_959_744,
        measured_seconds=0.01417,
    )
    hand_built = Machine(20e9, {"float32": 100e9}, 2)
    assert close.regime_reading(hand_built).name == "overhead-bound"  # no spread measured: never borderline
    reading = close.regime_reading(SPREAD_MACHINE)  # timing spread: the widest probe, ±8 %
    assert reading.label == "overhead-bound" and reading.name == "borderline overhead-bound / memory-bound"
    assert reading.threshold == 1.0 and reading.margin == pytest.approx(1522 * 4.87e-6 / 0.00719 - 1)
    assert reading.reason == (
        "the timing spread (the bandwidth and float32 peak probes) is ±8%, and the overhead (7.41 ms) and the "
        "matmul kernels (7.19 ms) lie within it of each other"
    )


def test_terms_that_name_the_same_regime_are_not_a_borderline():
    # the KV cache leads the kernels by 2 %, but both say memory-bound (the kernels read at 60 %): the rival
    # is the overhead, far behind
    terms = {"overhead": 0.002, "thread wake-ups": 0.0, "matmul kernels": 0.0098, "KV cache": 0.010}
    reading = regime_of(terms, {"memory": 0.6, "compute": 0.1}, {"KV cache": 0.1, "matmul kernels": 0.1})
    assert reading.name == "memory-bound" and reading.margin == pytest.approx(4.0)
    assert "the KV cache (10.00 ms): 5.00x the overhead (2.00 ms)" in reading.reason


def test_the_nearest_borderline_line_is_the_one_named():
    # kernel-bound: memory 47 % (6 % short, bandwidth ±8 %) and compute 49 % (2 % short, peak ±3 %)
    reading = regime_of(TERMS, {"memory": 0.47, "compute": 0.49}, {"memory": 0.08, "compute": 0.03})
    assert reading.label == "kernel-bound" and reading.alternative == "compute-bound"
    assert reading.share == pytest.approx(0.49) and "the float32 peak probe's spread is ±3%" in reading.reason
    with pytest.raises(ValueError, match="the four terms"):
        regime_of({"overhead": 1.0}, {"memory": 0.5, "compute": 0.1}, {})


def test_a_step_faster_than_a_probe_gets_a_note_that_the_probe_was_likely_disturbed():
    above_peak = StepCosts(**{**NEAR_HALF.as_dict(), "flops": 5.6e9})  # 56 ms of FLOPs in 50 ms: 1.12x
    report = above_peak.report(SPREAD_MACHINE)
    assert (
        "note: this step's kernels ran above the measured float32 peak (1.12x): the peak probe was " in report
    )
    assert "re-run measure_machine()" in report and "faster path than the probe's" in report
    above_bandwidth = StepCosts(**{**NEAR_HALF.as_dict(), "weight_bytes": 1_200_000_000})  # 60 ms in 50 ms
    table = cost_table({"fp32": above_bandwidth, "again": above_bandwidth, "fine": NEAR_HALF}, SPREAD_MACHINE)
    assert "\nfp32, again: note: kernels above the measured read bandwidth (a bw share over 100%)" in table
    assert table.count("note:") == 1  # the steps of one table share a note
    assert "note:" not in NEAR_HALF.report(SPREAD_MACHINE)
    waking = Machine(20e9, {"float32": 100e9}, 2, wake_seconds=1e-3)
    all_wake_ups = StepCosts(**{**above_peak.as_dict(), "parallel_calls": 100})  # 100 ms of wake-ups
    assert all_wake_ups.probe_notes(waking) == []  # no kernel time left: no share to contradict a probe


def test_a_floor_the_kernels_beat_by_far_names_no_regime():
    """A bfloat16 peak probe on a CPU without bfloat16 instructions measured 0.9 GFLOP/s, while the step's
    vector products ran 14x faster: that "floor" bounds nothing, so it cannot make the step compute-bound."""
    terms = {"overhead": 0.016, "thread wake-ups": 0.015, "matmul kernels": 0.020, "KV cache": 0.0}
    reading = regime_of(terms, {"memory": 0.43, "compute": 14.4}, {}, "bfloat16")
    assert reading.label == "kernel-bound"
    assert regime_of(terms, {"memory": 0.43, "compute": 1.1}, {}, "bfloat16").label == "compute-bound"


def test_the_benchmark_table_names_the_borderline_too():
    row = Row(FP32, 2, 16.7, 480e6, "PASSIVE", NEAR_HALF)
    assert report_cells(row, SPREAD_MACHINE)[-1] == "borderline memory-bound / kernel-bound"


def test_a_machine_built_the_old_way_has_no_spread_and_a_measured_one_prints_each():
    old = Machine(read_bandwidth=20e9, peaks={"float32": 100e9}, threads=2)
    assert (
        old.read_bandwidth_spread == 0.0 and old.peak_spread("float32") == 0.0 and old.timing_spread() == 0.0
    )
    assert "±" not in old.describe() and old.describe().endswith("; 2 threads")
    described = SPREAD_MACHINE.describe()
    assert "read bandwidth 20.0 GB/s ±8% (sum of 256 MB, median of 5)" in described
    assert "float32 100 ±3%, bfloat16 100 ±1% GFLOP/s" in described
    assert SPREAD_MACHINE.timing_spread() == 0.08 and SPREAD_MACHINE.timing_spread("bfloat16") == 0.08
    int8_disturbed = Machine(
        20e9, {"float32": 1e11, "int8": 1e11}, 2, peak_spreads={"float32": 0.02, "int8": 0.44}
    )
    assert int8_disturbed.timing_spread() == 0.02  # a float32 step is not read against the int8 probe
    disturbed = Machine(20e9, {"float32": 100e9}, 2, wake_seconds=1.4e-6, wake_spread=478.3)
    assert "1.4 us ±>100% per parallel call" in disturbed.describe() and plus_minus(0.004) == "±0.4%"
    assert SPREAD_MACHINE.spreads("bfloat16") == {
        "thread wake-ups": 0.0,
        "matmul kernels": 0.08,
        "KV cache": 0.08,
        "memory": 0.08,
        "compute": 0.01,
    }


def test_the_probes_take_the_median_of_their_repeats_not_the_best(monkeypatch):
    times = [0.010, 0.011, 0.012, 0.013, 0.030]  # stand-in timings: one repeat disturbed
    monkeypatch.setattr(machine_module, "repeat_seconds", lambda run, repeats: times)
    monkeypatch.setattr(roofline, "repeat_seconds", lambda run, repeats: times)
    flops = 2 * 1024**3
    peak = machine_module.matmul_peak_probe("float32")
    assert peak.value == pytest.approx(flops / 0.012)  # the median, not the best (flops / 0.010)
    assert peak.spread == pytest.approx(0.012 / 0.011 - 0.012 / 0.013)  # rates' interquartile range / median
    bandwidth = roofline.read_bandwidth_probe(floats=1024)
    assert bandwidth == Probed(pytest.approx(4096 / 0.012), pytest.approx(peak.spread))
    assert roofline.read_bandwidth(floats=1024) == pytest.approx(4096 / 0.012)


def test_the_wake_up_is_the_threaded_median_less_dispatch_and_work_with_its_rounds_spread(monkeypatch):
    rounds = {  # (elements, threads) -> seconds per call in each of 7 rounds (stand-ins)
        (8, 1): [1e-6] * 7,
        (65_536, 1): [21e-6] * 7,
        (65_536, 2): [50e-6, 51e-6, 52e-6, 53e-6, 54e-6, 55e-6, 56e-6],
    }
    monkeypatch.setattr(
        machine_module, "call_seconds", lambda elements, threads, n=7: rounds[elements, threads]
    )
    wake = machine_module.thread_wake_probe(2)
    assert wake.value == pytest.approx(53e-6 - 1e-6 - 20e-6 / 2)  # 42 us
    assert wake.spread == pytest.approx((54.5e-6 - 51.5e-6) / 42e-6)  # the rounds' interquartile range / wake
    assert machine_module.thread_wake_probe(1) == Probed(0.0, 0.0)


def test_measure_machine_keeps_each_probes_median_and_spread(monkeypatch):
    monkeypatch.setattr(machine_module, "matmul_peak_probe", lambda dtype: Probed(1e11, 0.02))
    monkeypatch.setattr(machine_module, "read_bandwidth_probe", lambda: Probed(3e10, 0.06))
    monkeypatch.setattr(machine_module, "thread_wake_probe", lambda: Probed(4e-5, 0.2))
    machine = machine_module.measure_machine()
    assert (machine.read_bandwidth, machine.read_bandwidth_spread) == (3e10, 0.06)
    assert machine.peaks == {"float32": 1e11, "bfloat16": 1e11, "int8": 1e11}
    assert machine.peak_spreads == {"float32": 0.02, "bfloat16": 0.02, "int8": 0.02}
    assert (machine.wake_seconds, machine.wake_spread) == (4e-5, 0.2)
    assert "waking the other threads 40.0 us ±20% per parallel call" in machine.describe()


def test_an_overhead_lead_is_read_against_the_overhead_probes_own_spread():
    # 2000 ops x 10 us = 20 ms of overhead against 19 ms of kernels (a 26 % memory share: kernel-bound);
    # the machine's probes are tight (±2 %), the step's overhead probe varied by ±10 %
    tight = Machine(20e9, {"float32": 100e9}, 2, read_bandwidth_spread=0.02)
    step = StepCosts(
        ops=2000,
        op_seconds=10e-6,
        matmul_seconds=0.019,
        weight_bytes=100_000_000,
        kv_bytes=0,
        flops=1e8,
        measured_seconds=0.040,
        op_spread=0.10,
    )
    reading = step.regime_reading(tight)
    assert reading.name == "borderline overhead-bound / kernel-bound"
    assert reading.reason.startswith("the overhead probe's spread is ±10%, and the overhead (20.00 ms)")
    assert "(2000 ops x 10.0 us ±10%)" in step.report(tight)
    # a step measured before the spread was kept
    unmeasured = StepCosts(**{**step.as_dict(), "op_spread": 0.0})
    assert unmeasured.regime_reading(tight).name == "overhead-bound"  # a 5 % lead, outside the timing's ±2 %
