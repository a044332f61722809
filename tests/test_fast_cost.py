"""labkit.fast.cost: the terms of a step's cost model, measured on the tiny model, and a recorded profile."""

import pytest
import torch

import labkit
from labkit.fast import optimize
from labkit.fast.cost import (Machine, StepCosts, count_ops, kv_bytes_read, linear_flops, linear_layers,
                              measure_machine, measure_step, probe_model)

MACHINE = Machine(read_bandwidth=20e9, matmul_peak=100e9, threads=2)
# A recorded profile: SmolLM2-135M fuse+int4 on a 2-core AMD EPYC, one decode step after 72 tokens.
INT4_STEP = StepCosts(ops=2039, op_seconds=9.5e-6, matmul_seconds=0.0085, weight_bytes=94_900_000,
                      kv_bytes=3_300_000, flops=2.69e8, measured_seconds=0.0301)


def test_a_recorded_profile_adds_its_terms_and_names_the_largest():
    terms = INT4_STEP.terms(MACHINE)
    assert terms == pytest.approx({"overhead": 0.0193705, "matmul kernels": 0.0085, "KV cache": 0.000165})
    assert INT4_STEP.predicted_seconds(MACHINE) == pytest.approx(sum(terms.values()))
    assert INT4_STEP.regime(MACHINE) == "overhead-bound"
    floors = INT4_STEP.floors(MACHINE)
    assert floors == pytest.approx({"memory": 94.9e6 / 20e9, "compute": 2.69e8 / 100e9})
    report = INT4_STEP.report(MACHINE)
    assert "2039 ops x 9.5 us" in report and "28.04 ms, measured 30.10 ms (-7%): overhead-bound" in report
    assert StepCosts(**INT4_STEP.as_dict()) == INT4_STEP


@pytest.mark.parametrize("matmul_seconds, regime", [(0.0500, "memory-bound"), (0.2, "kernel-bound")])
def test_when_the_kernels_lead_their_floors_decide_memory_or_kernel_bound(matmul_seconds, regime):
    fp32 = StepCosts(ops=2488, op_seconds=5e-6, matmul_seconds=matmul_seconds, weight_bytes=538_000_000,
                     kv_bytes=3_000_000, flops=2.69e8, measured_seconds=0.06)
    assert fp32.regime(MACHINE) == regime  # memory floor 26.9 ms: 54% of 50 ms, 13% of 200 ms


def test_many_rows_on_a_slow_peak_are_compute_bound():
    batch = StepCosts(ops=2488, op_seconds=5e-6, matmul_seconds=0.3, weight_bytes=538_000_000, kv_bytes=0,
                      flops=2.69e8 * 64, measured_seconds=0.31)
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
    assert kv_bytes_read(model, rows=2, context=10, tokens=1) == 2 * c.n_layers * 2 * c.n_kv_heads * 11 * c.head_dim * 4
    costs = measure_step(model, rows=2, context=10, repeats=1)
    assert costs.ops > 20 * c.n_layers  # every block dispatches dozens of ops
    assert costs.op_seconds > 0 and costs.matmul_seconds > 0 and costs.measured_seconds > 0
    assert costs.weight_bytes > 4 * weights  # float32 weights, plus norms and one embedding row


def test_the_probe_has_the_same_ops_per_block_at_small_widths():
    model = labkit.tiny_model(impl="labkit")
    probe = probe_model(model.config, ())
    assert probe.config.n_layers == model.config.n_layers and probe.config.vocab_size == 256
    tokens = torch.tensor([[1, 2, 3]])
    assert count_ops(lambda: model(tokens)) == count_ops(lambda: probe(tokens))  # same code, same op count


def test_steps_apply_to_the_probe_too_and_bad_arguments_are_refused():
    model = optimize(labkit.tiny_model(impl="labkit"), ("fuse", "int4"))
    costs = measure_step(model, ("fuse", "int4"), context=4, repeats=1)
    assert costs.weight_bytes < 4 * sum(layer.in_features * layer.out_features for layer in linear_layers(model))
    with pytest.raises(ValueError, match="rows must be a whole number"):
        measure_step(model, ("fuse", "int4"), rows=0)
    with pytest.raises(ValueError, match="Unknown steps"):
        measure_step(model, ("warp",))
    with pytest.raises(ValueError, match="labkit's Llama"):
        measure_step(torch.nn.Linear(2, 2))


def test_the_machine_is_measured_in_plausible_units():
    machine = measure_machine()
    assert 1e8 < machine.read_bandwidth < 1e13 and 1e8 < machine.matmul_peak < 1e15  # bytes/s, FLOP/s
    assert machine.threads == torch.get_num_threads() and "GB/s" in machine.describe()


def test_the_static_step_is_measured_with_its_whole_cache_and_only_for_one_token():
    model = labkit.tiny_model(impl="labkit")
    costs = measure_step(model, context=10, repeats=1, how="static")
    assert costs.kv_bytes == kv_bytes_read(model, rows=1, context=63, tokens=1)  # every slot of a 64-slot cache
    assert costs.ops > 20 * model.config.n_layers
    with pytest.raises(ValueError, match="1 row x 1 token"):
        measure_step(model, rows=2, how="static")
    with pytest.raises(ValueError, match="'loop' or 'static'"):
        measure_step(model, how="compiled")
