"""The cluster cost model of notebook 16 (labkit.parallel.cluster): its formulas on hand-computed cases, the
70B model's fit on 80 GB GPUs, and the directions a faster link or a longer context must move it."""

import math
from types import SimpleNamespace

import pytest

from labkit.core.llama import LlamaConfig
from labkit.parallel.cluster import (
    ETHERNET_25G,
    ETHERNET_100G,
    H100_SXM,
    INFINIBAND_NDR,
    LLAMA_3_70B,
    NVLINK_4,
    PCIE_4,
    PCIE_5,
    SMOLLM2_135M,
    Accelerator,
    Link,
    decode_step,
    dims_of,
    format_layouts,
    layouts,
    ring_all_gather_seconds,
    ring_all_reduce_seconds,
    this_machine_link,
    tp_collective_prediction,
)


def test_the_parameter_counts_match_the_published_models():
    assert SMOLLM2_135M.n_params == 134_515_008  # labkit's own count of the loaded model
    assert math.isclose(LLAMA_3_70B.n_params, 70.6e9, rel_tol=0.002)
    assert dims_of(LlamaConfig()).n_params == SMOLLM2_135M.n_params  # labkit's default config: SmolLM2


def test_a_ring_all_reduce_by_hand():
    link = Link("toy", 1e9, 1e-5)  # 1 GB/s, 10 us
    # 4 ranks: 2 x 3/4 x 1 MB / 1 GB/s = 1.5 ms, plus 6 latencies = 60 us
    assert math.isclose(ring_all_reduce_seconds(1e6, 4, link), 1.5e-3 + 6e-5)
    assert math.isclose(ring_all_reduce_seconds(1e6, 2, link), 1e-3 + 2e-5)
    assert ring_all_reduce_seconds(1e6, 1, link) == 0.0  # alone: nothing to add up
    assert math.isclose(ring_all_gather_seconds(1e6, 4, link), 0.75e-3 + 3e-5)


def test_a_decode_step_by_hand():
    gpu = Accelerator("toy", 100e9, 1e12, 1e15)
    link = Link("toy", 1e10, 1e-6)
    step = decode_step(LLAMA_3_70B, gpu, link, tp=2, pp=2, batch=1, context=1000)
    weights = LLAMA_3_70B.n_params * 2 / 4
    kv = 2 * 40 * 4 * 128 * 1000 * 2  # 40 layers a stage, 4 of the 8 KV heads a rank
    assert step.memory_per_gpu == weights + kv and step.fits
    assert math.isclose(step.weight_read_s, 2 * weights / 1e12)  # two stages visited in turn
    assert math.isclose(step.kv_read_s, 2 * kv / 1e12)
    one = 2 * 1 / 2 * 8192 * 2 / 1e10 + 2 * 1e-6
    assert math.isclose(step.all_reduce_s, 160 * one)
    assert math.isclose(step.send_s, 8192 * 2 / 1e10 + 1e-6)
    assert math.isclose(step.seconds, step.weight_read_s + step.kv_read_s + step.all_reduce_s + step.send_s)
    assert math.isclose(step.tokens_per_s, 1 / step.seconds)


def test_kv_heads_are_replicated_past_their_count():
    a = decode_step(LLAMA_3_70B, H100_SXM, NVLINK_4, tp=8, pp=1, batch=1, context=4096)
    b = decode_step(LLAMA_3_70B, H100_SXM, NVLINK_4, tp=16, pp=1, batch=1, context=4096)
    assert math.isclose(a.kv_read_s, b.kv_read_s)  # one KV head a GPU either way
    assert b.weight_read_s < a.weight_read_s


def test_compute_bounds_a_large_batch():
    slow = Accelerator("slow", 1e12, 3e12, 1e12)  # 1 TFLOP/s: compute, not memory, sets the pace
    step = decode_step(LLAMA_3_70B, slow, NVLINK_4, tp=8, pp=1, batch=64, context=16)
    assert math.isclose(step.seconds - step.all_reduce_s, step.compute_s)


def test_70b_does_not_fit_one_gpu_in_bf16_and_fits_two_or_more():
    one = decode_step(LLAMA_3_70B, H100_SXM, NVLINK_4, tp=1, pp=1, batch=1, context=4096)
    assert not one.fits and one.memory_per_gpu > 140e9
    for tp, pp in [(2, 1), (1, 2), (4, 1), (8, 1), (2, 2)]:
        assert decode_step(LLAMA_3_70B, H100_SXM, NVLINK_4, tp=tp, pp=pp, batch=1, context=4096).fits
    fp8 = decode_step(LLAMA_3_70B, H100_SXM, NVLINK_4, tp=1, pp=1, batch=1, context=4096, bytes_per_weight=1)
    assert fp8.fits  # 70.6 GB of weights in 8 bits


def test_tp_divides_the_reads_and_pp_does_not():
    steps = {
        (tp, pp): decode_step(LLAMA_3_70B, H100_SXM, NVLINK_4, tp=tp, pp=pp, batch=1, context=4096)
        for tp, pp in [(2, 1), (4, 1), (8, 1), (2, 2)]
    }
    assert steps[(2, 1)].seconds > steps[(4, 1)].seconds > steps[(8, 1)].seconds
    assert math.isclose(steps[(2, 2)].weight_read_s, steps[(2, 1)].weight_read_s)
    assert steps[(2, 2)].seconds >= steps[(2, 1)].seconds


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_faster_link_never_makes_a_step_slower(tp):
    links = [ETHERNET_25G, ETHERNET_100G, PCIE_4, INFINIBAND_NDR, PCIE_5, NVLINK_4]
    links = sorted(links, key=lambda link: (link.bytes_per_s, -link.latency_s))
    times = [decode_step(LLAMA_3_70B, H100_SXM, link, tp, 1, 8, 4096).seconds for link in links]
    assert times == sorted(times, reverse=True)


def test_a_longer_context_costs_memory_and_time():
    short, long = (decode_step(LLAMA_3_70B, H100_SXM, NVLINK_4, 4, 1, 8, c) for c in (1024, 32768))
    assert long.memory_per_gpu > short.memory_per_gpu and long.seconds > short.seconds


def test_layouts_keep_tp_in_a_node_and_send_across_nodes_over_the_slow_link():
    rows = layouts(LLAMA_3_70B, H100_SXM, NVLINK_4, ETHERNET_100G, 4, 2, batch=1, context=4096)
    pairs = [(r.tp, r.pp) for r in rows]
    assert pairs == [(1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 2), (2, 4), (4, 1), (4, 2)]
    one_node = decode_step(LLAMA_3_70B, H100_SXM, NVLINK_4, 4, 2, 1, 4096)
    across = rows[pairs.index((4, 2))]
    assert across.send_s > one_node.send_s and across.all_reduce_s == one_node.all_reduce_s
    table = format_layouts(rows)
    assert table.splitlines()[0].split()[:3] == ["tp", "pp", "fits"] and len(table.splitlines()) == 10


def test_a_link_is_fitted_back_from_its_own_all_reduces():
    link = Link("truth", 2e9, 40e-6)
    sizes = (1_000, 10_000, 100_000, 1_000_000)
    measured = {n: ring_all_reduce_seconds(4 * n, 2, link) for n in sizes}
    fitted = this_machine_link(measured)
    assert math.isclose(fitted.bytes_per_s, 2e9, rel_tol=1e-9)
    assert math.isclose(fitted.latency_s, 40e-6, rel_tol=1e-9)


def test_smollm2s_split_makes_61_collectives_a_step():
    link = Link("gloo", 1e9, 50e-6)
    found = tp_collective_prediction(SMOLLM2_135M, link)
    assert found.calls == 61 and found.all_reduce_bytes == 576 * 4
    assert found.all_gather_bytes == 2 * 24576 * 4  # 49,152 / 2 a rank, gathered
    assert math.isclose(found.seconds, 60 * found.all_reduce_seconds + found.all_gather_seconds)
    assert tp_collective_prediction(SMOLLM2_135M, link, world=1).seconds == 0.0
    assert tp_collective_prediction(LlamaConfig(), link).calls == 61


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: ring_all_reduce_seconds(-1, 2, NVLINK_4), "nbytes"),
        (lambda: ring_all_reduce_seconds(10, 0, NVLINK_4), "ranks"),
        (lambda: ring_all_reduce_seconds(10, 2, "nvlink"), "link"),
        (lambda: Link("x", 0, 1e-6), "bytes_per_s"),
        (lambda: Accelerator("x", 80e9, -1, 1e15), "hbm_bytes_per_s"),
        (lambda: decode_step(LLAMA_3_70B, H100_SXM, NVLINK_4, 0, 1, 1, 10), "tp"),
        (lambda: decode_step(LLAMA_3_70B, H100_SXM, NVLINK_4, 1, 81, 1, 10), "pp"),
        (lambda: decode_step(LLAMA_3_70B, "H100", NVLINK_4, 1, 1, 1, 10), "accelerator"),
        (lambda: decode_step(SimpleNamespace(), H100_SXM, NVLINK_4, 1, 1, 1, 10), "model"),
        (lambda: layouts(LLAMA_3_70B, H100_SXM, NVLINK_4, ETHERNET_100G, 0, 2, 1, 10), "gpus_per_node"),
        (lambda: this_machine_link({1000: 1e-4}), "at least two"),
        (lambda: this_machine_link({1000: 1e-4, 2000: 1e-4}), "do not grow"),
        (lambda: format_layouts([1, 2]), "rows"),
    ],
)
def test_bad_input_is_named(call, words):
    with pytest.raises((TypeError, ValueError)) as error:
        call()
    assert words in str(error.value)
