"""labkit.fast.cost: the terms of a step's cost model, measured on the tiny model, and a recorded profile."""

import pytest
import torch

import labkit
from labkit.fast import optimize
from labkit.fast.cost import (
    Machine,
    StepCosts,
    compute_dtype,
    cost_table,
    count_ops,
    kv_bytes_read,
    linear_flops,
    measure_step,
)
from labkit.fast.machine import matmul_peak, measure_machine, thread_wake_seconds
from labkit.fast.regime import Probed
from labkit.fast.step_probes import linear_layers, probe_model
from labkit.fast.threads import using_threads

MACHINE = Machine(read_bandwidth=20e9, peaks={"float32": 100e9}, threads=2)
# Recorded profiles: SmolLM2-135M, one StaticDecoder step after 72 tokens, measured idle on a 2-core AMD
# EPYC (AVX-512) on 2026-11-24, where measure_machine() gave 34.9 GB/s and 204 GFLOP/s.
RECORDED_MACHINE = Machine(read_bandwidth=34.9e9, peaks={"float32": 204e9}, threads=2)
# fuse + int4
INT4_STEP = StepCosts(
    ops=1762,
    op_seconds=3.92e-6,
    matmul_seconds=0.00772,
    weight_bytes=94_907_904,
    kv_bytes=5_898_240,
    flops=268_959_744,
    measured_seconds=0.01425,
)
# fuse + q4_1
Q4_1_STEP = StepCosts(
    ops=1522,
    op_seconds=4.87e-6,
    matmul_seconds=0.00719,
    weight_bytes=94_907_904,
    kv_bytes=5_898_240,
    flops=268_959_744,
    measured_seconds=0.01417,
)


def test_recorded_profiles_add_their_terms_and_name_the_largest():
    terms = INT4_STEP.terms(RECORDED_MACHINE)
    # recorded before wake-ups were counted
    assert terms == pytest.approx(
        {
            "overhead": 1762 * 3.92e-6,
            "thread wake-ups": 0.0,
            "matmul kernels": 0.00772,
            "KV cache": 5_898_240 / 34.9e9,
        }
    )
    assert INT4_STEP.predicted_seconds(RECORDED_MACHINE) == pytest.approx(sum(terms.values()))
    floors = INT4_STEP.floors(RECORDED_MACHINE)
    assert floors == pytest.approx({"memory": 94_907_904 / 34.9e9, "compute": 268_959_744 / 204e9})
    # the kernels lead (7.72 ms against 6.91 ms of overhead) but read at 35 % of the bandwidth: kernel-bound
    assert INT4_STEP.regime(RECORDED_MACHINE) == "kernel-bound"
    assert Q4_1_STEP.regime(RECORDED_MACHINE) == "overhead-bound"  # 7.41 ms of overhead, 7.19 ms of kernels
    report = INT4_STEP.report(RECORDED_MACHINE)
    assert "1762 ops x 3.9 us" in report and "14.80 ms, measured 14.25 ms (+4%): kernel-bound" in report
    assert StepCosts(**INT4_STEP.as_dict()) == INT4_STEP


@pytest.mark.parametrize("matmul_seconds, regime", [(0.0500, "memory-bound"), (0.2, "kernel-bound")])
def test_when_the_kernels_lead_their_floors_decide_memory_or_kernel_bound(matmul_seconds, regime):
    fp32 = StepCosts(
        ops=2488,
        op_seconds=5e-6,
        matmul_seconds=matmul_seconds,
        weight_bytes=538_000_000,
        kv_bytes=3_000_000,
        flops=2.69e8,
        measured_seconds=0.06,
    )
    assert fp32.regime(MACHINE) == regime  # memory floor 26.9 ms: 54% of 50 ms, 13% of 200 ms


def test_many_rows_on_a_slow_peak_are_compute_bound():
    batch = StepCosts(
        ops=2488,
        op_seconds=5e-6,
        matmul_seconds=0.3,
        weight_bytes=538_000_000,
        kv_bytes=0,
        flops=2.69e8 * 64,
        measured_seconds=0.31,
    )
    assert batch.regime(MACHINE) == "compute-bound"  # 172 ms of FLOPs at the peak, 57% of the kernels' time


def test_ops_are_counted_as_dispatched():
    x = torch.ones(3)
    assert count_ops(lambda: x + 1) == 1
    assert count_ops(lambda: (x + 1).mul(2).sum()) == 3


def test_the_terms_of_the_tiny_model_follow_its_shapes():
    model = labkit.tiny_model(impl="labkit")
    c = model.config
    layers = linear_layers(model)
    assert len(layers) == 7 * c.n_layers + 1  # q, k, v, o, gate, up, down per block, and the head
    weights = sum(layer.in_features * layer.out_features for layer in layers)
    assert linear_flops(model, rows=3) == 2 * 3 * weights
    assert (
        kv_bytes_read(model, rows=2, context=10, tokens=1)
        == 2 * c.n_layers * 2 * c.n_kv_heads * 11 * c.head_dim * 4
    )
    costs = measure_step(model, rows=2, context=10, repeats=1)
    assert costs.ops > 20 * c.n_layers  # every block dispatches dozens of ops
    assert costs.op_seconds >= 0 and costs.matmul_seconds > 0 and costs.measured_seconds > 0
    assert costs.weight_bytes > 4 * weights  # float32 weights, plus norms and one embedding row


def test_the_time_per_op_leaves_out_the_probes_matmul_kernels_and_keeps_its_spread(monkeypatch):
    # The matmul term times every linear layer on the real widths, fixed cost per call included; the time
    # per op must not count that fixed cost a second time. Stand-in timings make the arithmetic exact.
    import labkit.fast.step_probes as probes

    steps = [0.009, 0.010, 0.010, 0.011, 0.030]  # the probe's whole step, five repeats, one disturbed
    monkeypatch.setattr(probes, "repeat_seconds", lambda run, repeats=5: steps)
    monkeypatch.setattr(probes, "matmul_seconds", lambda model, rows, repeats=5: 0.004)  # its linear layers
    config = labkit.tiny_model(impl="labkit").config
    ops = count_ops(probes.step_run(probe_model(config, ()), 1, 4, 1))
    per_op = probes.per_op_probe(config, (), rows=1, context=4, tokens=1)
    # per op: (step - 4 ms) / ops for each repeat, 5, 6, 6, 7 and 26 ms: the median 6 ms / ops; the spread,
    # their interquartile range over it, (7 - 6) / 6 (the disturbed repeat moves neither)
    assert per_op == Probed(pytest.approx(0.006 / ops), pytest.approx(1 / 6))


def test_the_probe_has_the_same_ops_per_block_at_small_widths():
    model = labkit.tiny_model(impl="labkit")
    probe = probe_model(model.config, ())
    assert probe.config.n_layers == model.config.n_layers and probe.config.vocab_size == 256
    tokens = torch.tensor([[1, 2, 3]])
    assert count_ops(lambda: model(tokens)) == count_ops(lambda: probe(tokens))  # same code, same op count


def test_steps_apply_to_the_probe_too_and_bad_arguments_are_refused():
    model = optimize(labkit.tiny_model(impl="labkit"), ("fuse", "int4"))
    costs = measure_step(model, ("fuse", "int4"), context=4, repeats=1)
    assert costs.weight_bytes < 4 * sum(
        layer.in_features * layer.out_features for layer in linear_layers(model)
    )
    with pytest.raises(ValueError, match="rows must be a whole number"):
        measure_step(model, ("fuse", "int4"), rows=0)
    with pytest.raises(ValueError, match="Unknown steps"):
        measure_step(model, ("warp",))
    with pytest.raises(ValueError, match="labkit's Llama"):
        measure_step(torch.nn.Linear(2, 2))


def test_the_machine_is_measured_in_plausible_units():
    machine = measure_machine()
    assert 1e8 < machine.read_bandwidth < 1e13  # bytes/s
    assert set(machine.peaks) == {"float32", "bfloat16", "int8"}
    assert (
        all(1e8 < flops < 1e15 for flops in machine.peaks.values())
        and machine.matmul_peak == machine.peaks["float32"]
    )
    assert 0 <= machine.wake_seconds < 0.01 and machine.wait_policy in ("PASSIVE", "ACTIVE")
    assert (
        machine.threads == torch.get_num_threads()
        and "GB/s" in machine.describe()
        and "bfloat16" in machine.describe()
    )
    # each probe is a median of its repeats, kept with their spread (a share of the median, never negative)
    assert set(machine.peak_spreads) == set(machine.peaks) and "median of 5" in machine.describe()
    assert min(machine.read_bandwidth_spread, machine.wake_spread, *machine.peak_spreads.values()) >= 0


def test_one_thread_wakes_nobody():
    with using_threads(1):
        assert thread_wake_seconds() == 0.0


def test_a_peak_not_measured_is_refused_by_name():
    with pytest.raises(ValueError, match="No matmul peak measured for 'int8'"):
        MACHINE.peak("int8")
    with pytest.raises(ValueError, match="dtype must be one of"):
        matmul_peak("float16")


WAKING = Machine(
    read_bandwidth=20e9,
    peaks={"float32": 100e9, "bfloat16": 400e9, "int8": 800e9},
    threads=2,
    wake_seconds=40e-6,
)


def test_wake_ups_are_carved_out_of_the_matmuls_and_the_sum_is_kept():
    step = StepCosts(
        ops=1000,
        op_seconds=2e-6,
        matmul_seconds=0.012,
        weight_bytes=95_000_000,
        kv_bytes=0,
        flops=2.7e8,
        measured_seconds=0.015,
        dtype="int8",
        parallel_calls=211,
    )
    terms = step.terms(WAKING)
    assert terms["thread wake-ups"] == pytest.approx(211 * 40e-6)  # 8.44 ms
    assert terms["matmul kernels"] == pytest.approx(0.012 - 211 * 40e-6)
    assert step.predicted_seconds(WAKING) == pytest.approx(0.002 + 0.012)
    assert step.regime(WAKING) == "wake-bound"  # 8.44 ms of wake-ups lead 3.56 ms of kernels and 2 ms of ops
    assert "211 calls x 40.0 us" in step.report(WAKING) and "wake-bound" in cost_table({"q4_1": step}, WAKING)
    # more wake-ups than the matmuls took: capped
    few = StepCosts(**{**step.as_dict(), "parallel_calls": 1000})
    assert few.terms(WAKING)["matmul kernels"] == 0.0 and few.predicted_seconds(WAKING) == pytest.approx(
        0.014
    )
    row = cost_table({"q4_1": few}, WAKING).splitlines()[1]
    # no matmul time left: no share, not a division by zero
    assert row.split()[-3:] == ["-", "-", "wake-bound"]


def test_the_compute_floor_uses_the_peak_of_the_steps_own_data_type():
    bf16 = StepCosts(
        ops=2700,
        op_seconds=3e-6,
        matmul_seconds=0.040,
        weight_bytes=270_000_000,
        kv_bytes=0,
        flops=2.69e8 * 64,
        measured_seconds=0.05,
        dtype="bfloat16",
    )
    # 17.2 GFLOP: 172 ms at the float32 peak (more than the kernels took), 43 ms at the bfloat16 one
    assert bf16.shares(WAKING)["compute"] == pytest.approx(2.69e8 * 64 / 400e9 / 0.040)
    assert bf16.regime(WAKING) == "compute-bound"
    # 43 % of 100 ms
    assert StepCosts(**{**bf16.as_dict(), "matmul_seconds": 0.1}).regime(WAKING) == "kernel-bound"


def test_the_data_type_follows_the_layers():
    model = labkit.tiny_model(impl="labkit")
    assert compute_dtype(model) == "float32"
    assert compute_dtype(optimize(labkit.tiny_model(impl="labkit"), ("int4",))) == "bfloat16"
    assert compute_dtype(optimize(labkit.tiny_model(impl="labkit"), ("q4_1",))) == "int8"
    costs = measure_step(model, context=4, repeats=1)
    assert costs.dtype == "float32" and costs.parallel_calls == 7 * model.config.n_layers + 1


def test_the_static_step_is_measured_with_its_whole_cache_and_only_for_one_token():
    model = labkit.tiny_model(impl="labkit")
    costs = measure_step(model, context=10, repeats=1, how="static")
    # every slot of a 64-slot cache
    assert costs.kv_bytes == kv_bytes_read(model, rows=1, context=63, tokens=1)
    assert costs.ops > 20 * model.config.n_layers
    with pytest.raises(ValueError, match="1 row x 1 token"):
        measure_step(model, rows=2, how="static")
    with pytest.raises(ValueError, match="1 row x 1 token"):
        measure_step(model, tokens=2, how="compiled")
    with pytest.raises(ValueError, match="how must be one of"):
        measure_step(model, how="jit")


def test_kernel_calls_are_read_from_inductors_generated_code():
    from torch._inductor.utils import run_and_get_code

    from labkit.fast.ops import kernel_calls

    weight = torch.randn(8, 8)
    _, [code] = run_and_get_code(
        torch.compile(lambda x: (x @ weight).relu() + 1, dynamic=False), torch.randn(2, 8)
    )
    assert kernel_calls(code) == 2  # the matmul (an extern call) and one fused C++ loop for relu and + 1
    # call() only
    assert (
        kernel_calls(
            "def call(args):\n    cpp_fused_add_0(buf0)\n    buf1 = torch.ops.aten.mm.default(a, b)\n"
            "\n\ndef benchmark_compiled_module():\n    cpp_fused_add_0(buf0)\n"
        )
        == 2
    )


def test_a_compiled_step_is_its_kernel_calls_at_the_compiled_probes_cost_plus_what_the_widths_add(
    monkeypatch,
):
    model = labkit.tiny_model(impl="labkit")
    real = measure_step(model, context=10, repeats=1, how="compiled")
    assert real.ops > 2 * model.config.n_layers  # kernel calls: a few fused loops and matmuls per block
    assert real.op_seconds > 0 and real.measured_seconds > 0
    assert real.kv_bytes == kv_bytes_read(model, rows=1, context=63, tokens=1)
    # the arithmetic, with stand-in timings: the probe's step over its calls; the real layers less the probe's
    import labkit.fast.step_probes as probes

    monkeypatch.setattr(probes, "repeat_seconds", lambda run, repeats=5: [0.002])  # the compiled probe's step
    # the probe's linear layers alone, then the real model's
    monkeypatch.setattr(
        probes,
        "matmul_seconds",
        lambda model, rows, repeats=5: 0.001 if model.config.vocab_size == 256 else 0.004,
    )
    per_call, matmuls = probes.compiled_probe_terms(model, (), context=10, repeats=1)
    assert per_call.value == pytest.approx(0.002 / real.ops) and matmuls == pytest.approx(0.003)  # same calls


def test_the_cost_table_prints_each_steps_terms_prediction_and_error():
    from labkit.fast.cost import cost_table

    table = cost_table({"int4, static": INT4_STEP}, RECORDED_MACHINE)
    header, line, legend = table.splitlines()
    # the memory floor 2.72 ms is 35 % of 7.72 ms of kernels, the compute floor 1.32 ms 17 %
    assert line.split() == [
        "int4,",
        "static",
        "1762",
        "3.9",
        "6.9",
        "0.0",
        "7.7",
        "0.17",
        "14.8",
        "14.2",
        "+4%",
        "35%",
        "17%",
        "kernel-bound",
    ]
    assert "predicted" in header and "wake" in header and "ops x us/op" in legend


def test_a_compiled_step_carves_no_wake_ups_out_of_its_real_minus_probe_matmuls():
    model = labkit.tiny_model(impl="labkit")
    costs = measure_step(model, context=4, repeats=1, how="compiled")
    assert costs.parallel_calls == 0 and costs.terms(WAKING)["thread wake-ups"] == 0.0
