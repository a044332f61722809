"""`python -m labkit.bench kvcache`: runs, prints its table and one JSON line per comparison."""

import numpy as np
import pytest
import torch

import labkit
from labkit.benchmarks import kvcache
from labkit.core.forward import NoCache
from labkit.core.paged import BlockPool


def test_timed_generation_same_tokens_with_any_cache(tokenizer):
    model = labkit.tiny_model("labkit")
    input_ids = torch.tensor([tokenizer("Hello there")["input_ids"]])
    expected = labkit.generate_ids(model, tokenizer, input_ids, max_new_tokens=6)  # no EOS in 6 random steps
    cached, times = kvcache.timed_generation(model, input_ids, 6)
    recomputed, _ = kvcache.timed_generation(model, input_ids, 6, NoCache())
    pool = BlockPool.for_model(model, n_blocks=4, block_size=4)
    paged, _ = kvcache.timed_generation(
        model, input_ids, 6, pool.new_cache(max_length=input_ids.shape[1] + 6)
    )
    assert cached == recomputed == paged == expected[: len(cached)]
    assert len(times) == 6 and times == sorted(times)
    assert len(kvcache.step_seconds(model, input_ids, 3)) == 3
    assert kvcache.filler_ids(tokenizer, 50).shape == (1, 50)


def test_decode_step_seconds_runs_the_cached_and_the_recomputing_step(tokenizer):
    model = labkit.tiny_model("labkit")
    prompt = kvcache.filler_ids(tokenizer, 12)
    for use_cache in (True, False):
        seconds = kvcache.decode_step_seconds(model, prompt, use_cache=use_cache, repeats=2)
        assert isinstance(seconds, float) and seconds > 0


def test_fit_nonnegative_recovers_an_exact_curve_and_never_goes_negative():
    n = np.arange(1.0, 30.0)
    assert np.allclose(
        kvcache.fit_nonnegative([n**2, n, np.ones_like(n)], 0.5 * n**2 + 2 * n + 7), [0.5, 2, 7]
    )
    falling = 100 - n  # an unconstrained line would need a negative slope
    coefficients = kvcache.fit_nonnegative([n, np.ones_like(n)], falling)
    assert (coefficients >= 0).all() and coefficients[0] == 0
    assert np.isclose(coefficients[1], falling.mean())


@pytest.mark.slow
def test_quick_run_prints_json_ratios(bench_quick_run):
    run = bench_quick_run("kvcache")
    assert run.benches == [
        "kvcache_new_tokens",
        "kvcache_time_per_token_by_position",
        "prefill_vs_decode",
        "paged_vs_contiguous",
    ]
    assert "same tokens: True" in run.stdout
    assert "aim >= 10x" in run.stdout and "aim <= 1.25" in run.stdout
