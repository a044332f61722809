"""The contiguous KV cache: the same tokens and logits as recomputing the prefix, and clear errors."""

import pytest
import torch

import labkit
from labkit.core.forward import NoCache, greedy_decode
from labkit.core.kv_cache import Cache, KVCache
from labkit.core.paged import BlockPool

from .conftest import random_ids

# Tolerances on logits, cached vs recomputed. tiny(): random weights, logits of order 1, the two paths
# differ only in summation order (measured ~5e-7). SmolLM2: fp32 logits reach |40|; measured
# differences are ~1e-4, so 1e-3 absolute, as in test_llama.py.
TINY_ATOL = 1e-5
REAL_MODEL_ATOL = 1e-3


@pytest.mark.parametrize("batch", [1, 3])
def test_tiny_cached_equals_recomputed(tiny, batch):
    input_ids = random_ids(batch, 9)
    cached_ids, cached_logits = greedy_decode(tiny, input_ids, 20, tiny.new_cache(batch, 29))
    recomputed_ids, recomputed_logits = greedy_decode(tiny, input_ids, 20, cache=NoCache())
    assert torch.equal(cached_ids, recomputed_ids)
    assert (cached_logits - recomputed_logits).abs().max() < TINY_ATOL


def test_tiny_generate_with_and_without_cache(tiny, tokenizer):
    cached = list(labkit.generate(tiny, tokenizer, "Once upon a time", max_new_tokens=12, return_logits=True))
    recomputed = list(
        labkit.generate(
            tiny, tokenizer, "Once upon a time", max_new_tokens=12, use_cache=False, return_logits=True
        )
    )
    assert [s.token_id for s in cached] == [s.token_id for s in recomputed]
    assert max((a.logits - b.logits).abs().max().item() for a, b in zip(cached, recomputed)) < TINY_ATOL


@pytest.mark.slow
def test_smollm2_cached_equals_recomputed(smollm2_labkit, tokenizer):
    input_ids = torch.tensor([labkit.chat_prompt(tokenizer, "Name three rivers in Europe.")])
    cached_ids, cached_logits = greedy_decode(
        smollm2_labkit, input_ids, 16, smollm2_labkit.new_cache(1, input_ids.shape[1] + 16)
    )
    recomputed_ids, recomputed_logits = greedy_decode(smollm2_labkit, input_ids, 16, cache=NoCache())
    assert torch.equal(cached_ids, recomputed_ids)
    assert (cached_logits - recomputed_logits).abs().max() < REAL_MODEL_ATOL


def test_cache_interface_is_shared_by_both_caches(tiny):
    assert isinstance(tiny.new_cache(1, 8), Cache)
    assert isinstance(BlockPool.for_model(tiny, n_blocks=2, block_size=4).new_cache(), Cache)


def test_cache_bytes():
    cache = KVCache(n_layers=3, batch_size=2, n_kv_heads=4, max_length=10, head_dim=8, dtype=torch.bfloat16)
    assert cache.nbytes() == 2 * 3 * 2 * 4 * 10 * 8 * 2
    assert cache.bytes_per_token() == 2 * 3 * 2 * 4 * 8 * 2
    assert cache.used_bytes() == 0
    cache.advance(4)
    assert cache.used_bytes() == 4 * cache.bytes_per_token()
    assert "length=4/10" in repr(cache)
    cache.reset()
    assert cache.length == 0


def test_cache_fills_in_order_and_reads_back_everything():
    cache = KVCache(n_layers=1, batch_size=1, n_kv_heads=1, max_length=5, head_dim=2)
    first = torch.arange(6.0).view(1, 1, 3, 2)
    keys, values = cache.append(0, first, -first)
    cache.advance(3)
    second = torch.full((1, 1, 1, 2), 9.0)
    keys, values = cache.append(0, second, -second)
    assert keys.shape == (1, 1, 4, 2)
    assert torch.equal(keys[0, 0], torch.tensor([[0.0, 1], [2, 3], [4, 5], [9, 9]]))
    assert torch.equal(values, -keys)


@pytest.mark.parametrize("batch", [0, -2])
def test_zero_or_negative_batch_is_a_clear_error(tiny, batch):
    with pytest.raises(ValueError, match="batch_size must be a whole number of 1 or more, got "):
        tiny.new_cache(batch, 8)


def test_zero_max_length_is_a_clear_error(tiny):
    with pytest.raises(
        ValueError, match=r"max_length must be a whole number of 1 or more \(room for the prompt "
    ):
        tiny.new_cache(1, 0)


def test_cache_longer_than_the_context_is_refused(tiny):
    with pytest.raises(ValueError, match="beyond the model's context of 512 tokens; ask for at most 512"):
        tiny.new_cache(1, 513)


def test_overflowing_the_cache_says_how_large_to_make_it(tiny):
    cache = tiny.new_cache(1, 6)
    with torch.no_grad():
        tiny(random_ids(1, 5), cache)
        with pytest.raises(
            ValueError, match=r"holds 6 tokens; 5 are stored and 2 more do not fit.*at least 7"
        ):
            tiny(random_ids(1, 2), cache)
    assert cache.length == 5  # nothing was silently dropped or half-written into the count


def test_batch_mismatch_is_a_clear_error(tiny):
    with pytest.raises(ValueError, match="batch of 1 sequences; the model was given 2.*batch_size=2"):
        with torch.no_grad():
            tiny(random_ids(2, 3), tiny.new_cache(1, 8))


def test_greedy_decode_wants_an_empty_cache_and_a_positive_count(tiny):
    cache = tiny.new_cache(1, 16)
    with torch.no_grad():
        tiny(random_ids(1, 3), cache)
    with pytest.raises(ValueError, match="already holds 3 tokens"):
        greedy_decode(tiny, random_ids(1, 3), 2, cache)
    with pytest.raises(ValueError, match="n_tokens must be a whole number of 1 or more, got 0"):
        greedy_decode(tiny, random_ids(1, 3), 0, NoCache())
    with pytest.raises(ValueError, match="NoCache"):
        greedy_decode(tiny, random_ids(1, 3), 2, None)
