"""StreamingLLM's sink cache: a KVCache until it is full, then the sinks and the window, with moved keys
equal to the keys of their new positions (Llama, and Gemma3 with each kind of layer's RoPE base), and clear
errors."""

from dataclasses import replace

import pytest
import torch

from labkit.core.forward import decode_step, prefill
from labkit.core.gemma3 import Gemma3, Gemma3Config
from labkit.core.gemma3_config import GLOBAL, LOCAL
from labkit.core.kv_cache import Cache, KVCache
from labkit.core.llama import NotLabkitLlama
from labkit.core.sink_cache import SinkKVCache

from .conftest import GEMMA3_VOCAB, random_ids

# Kept keys vs the keys a fresh cache computes at their new positions, SmolLM2's layer 0, float32: the kept
# ones were rotated back once per eviction (up to 5 times here). Measured: |k| up to 8.8, differences up
# to 3.3e-6 (a few float32 steps of the largest key). Values are not rotated; they differ only by the
# projection's summation order over a different number of tokens (measured 5.6e-8).
KEY_ATOL = 1e-4
VALUE_ATOL = 1e-6


def feed(model, ids, cache, sizes):
    """Run ids [B, N] through the cache in passes of the given sizes; return the last pass's logits."""
    start, logits = 0, None
    for size in sizes:
        logits = model(ids[:, start : start + size], cache)
        start += size
    assert start == ids.shape[1]
    return logits


def evicted_and_fresh(model, ids, sinks: int, window: int):
    """ids [1, N] fed through a SinkKVCache in passes of 8 (evicting as it goes), and a fresh cache of the
    tokens it kept (its sinks and its window) fed at positions 0..n-1: (sink cache, fresh cache)."""
    cache, n = SinkKVCache.for_model(model, sinks=sinks, window=window, chunk=8), ids.shape[1]
    kept = torch.cat([ids[:, :sinks], ids[:, -window:]], dim=1)
    fresh = model.new_cache(max_length=kept.shape[1])
    with torch.no_grad():
        feed(model, ids, cache, [8] * (n // 8) + [n % 8] * (n % 8 > 0))
        model(kept, fresh)
    assert cache.length == kept.shape[1] and cache.evicted == n - kept.shape[1]
    return cache, fresh


def test_a_sink_cache_is_a_cache(tiny):
    assert isinstance(SinkKVCache.for_model(tiny, sinks=4, window=8), Cache)


@pytest.mark.parametrize("batch", [1, 2])
def test_a_window_longer_than_the_text_is_a_kv_cache(tiny, batch):
    ids = random_ids(batch, 40)
    sink = SinkKVCache.for_model(tiny, sinks=4, window=60, chunk=16, batch_size=batch)
    full = KVCache(2, batch, 2, sink.max_length, 16)  # the same tensors' shape: the same attention kernels
    for size in (16, 16, 8):
        start = full.length
        assert torch.equal(tiny(ids[:, start : start + size], sink), tiny(ids[:, start : start + size], full))
    assert sink.length == full.length == 40 and sink.evicted == 0


@pytest.mark.parametrize("sinks", [0, 4])
def test_length_never_passes_sinks_plus_window(tiny, sinks):
    ids = random_ids(1, 100)
    cache = SinkKVCache.for_model(tiny, sinks=sinks, window=20, chunk=16)
    fed = 0
    for size in (16, 3, 16, 1, 16, 16, 16, 16):
        tiny(ids[:, fed : fed + size], cache)
        fed += size
        assert cache.length == min(fed, sinks + 20)
        assert cache.evicted == max(0, fed - sinks - 20)


@pytest.mark.slow
@pytest.mark.parametrize("sinks", [0, 4])
def test_kept_keys_are_the_keys_of_their_new_positions(smollm2_labkit, sinks):
    # Layer 0's keys depend only on each token and its position, so after evictions the kept ones must be
    # what a fresh KVCache computes for the kept tokens at positions 0..n-1.
    cache, fresh = evicted_and_fresh(smollm2_labkit, random_ids(1, 61), sinks, window=20)
    torch.testing.assert_close(cache.keys[0, :, :, : cache.length], fresh.keys[0], atol=KEY_ATOL, rtol=0)
    torch.testing.assert_close(
        cache.values[0, :, :, : cache.length], fresh.values[0], atol=VALUE_ATOL, rtol=0
    )


def test_prefill_and_decode_step_run_past_the_window(tiny):
    cache = SinkKVCache.for_model(tiny, sinks=2, window=10, chunk=16)
    logits, cache = prefill(tiny, random_ids(1, 12), cache)
    for _ in range(30):
        logits = decode_step(tiny, logits.argmax(-1), cache)
        assert cache.length == 12
    assert cache.evicted == 30 and torch.isfinite(logits).all()
    assert "2 sinks + 10 window" in repr(cache) and "evicted=30" in repr(cache)


def test_reset_crop_reorder_and_bytes(tiny):
    cache = SinkKVCache.for_model(tiny, sinks=2, window=10, chunk=8, batch_size=2)
    tiny(random_ids(2, 6), cache)
    cache.crop(4)  # nothing evicted yet: a crop is a KVCache's
    assert cache.length == 4
    swapped = cache.keys[:, [1, 0]]
    cache.reorder(torch.tensor([1, 0]))
    assert torch.equal(cache.keys, swapped)
    assert cache.nbytes() == 2 * 2 * 2 * 2 * 20 * 16 * 4  # K and V, layers, batch, heads, 2+10+8, head_dim
    assert cache.used_bytes() == cache.nbytes() * 4 // 20
    feed(tiny, random_ids(2, 16), cache, [8, 8])  # 20 tokens: 8 evicted
    assert cache.evicted == 8
    with pytest.raises(ValueError, match="cannot crop after it has evicted"):
        cache.crop(3)
    cache.reset()
    assert cache.length == 0 and cache.evicted == 0


def test_a_pass_longer_than_chunk_is_refused(tiny):
    cache = SinkKVCache.for_model(tiny, sinks=4, window=8, chunk=4)
    with pytest.raises(ValueError, match="at most chunk=4 new tokens a forward pass; got 5"):
        tiny(random_ids(1, 5), cache)
    assert cache.length == 0


@pytest.mark.parametrize(
    "options, words",
    [
        ({"sinks": -1, "window": 8}, "sinks must be a whole number of 0 or more"),
        ({"sinks": 4, "window": 0}, "window must be a whole number of 1 or more"),
        ({"sinks": 4, "window": 8, "chunk": 0}, "chunk must be a whole number of 1 or more"),
        ({"sinks": 4, "window": 500, "chunk": 16}, "sinks + window + chunk = 520 positions is beyond"),
    ],
)
def test_bad_sizes_are_refused(tiny, options, words):
    with pytest.raises(ValueError, match=words.replace("+", r"\+")):
        SinkKVCache.for_model(tiny, **options)


def test_bad_constructor_arguments_are_refused():
    with pytest.raises(ValueError, match="head_dim must be even"):
        SinkKVCache(2, 2, 15, sinks=4, window=8)
    with pytest.raises(ValueError, match="rope_theta must be a positive number"):
        SinkKVCache(2, 2, 16, sinks=4, window=8, rope_theta=0)


def test_for_model_wants_labkits_llama():
    with pytest.raises(NotLabkitLlama, match="SinkKVCache.for_model runs labkit's Llama"):
        SinkKVCache.for_model(torch.nn.Linear(2, 2), sinks=4, window=8)


def tiny_gemma3(layer_types: tuple[str, ...]) -> Gemma3:
    """Gemma3Config.tiny() with these kinds of layer (window 4), random weights (seed 0)."""
    torch.manual_seed(0)
    return Gemma3(replace(Gemma3Config.tiny(), layer_types=layer_types)).eval()


@pytest.mark.parametrize("first", [LOCAL, GLOBAL])
def test_gemma3s_kept_keys_are_the_keys_of_their_new_positions_under_their_layers_base(first):
    # Layer 0 is local (RoPE base 10,000) in one model and global (1,000,000) in the other: its moved keys
    # match a fresh cache's only if each layer is rotated back with its own base.
    model = tiny_gemma3((first, LOCAL, GLOBAL))
    cache, fresh = evicted_and_fresh(model, random_ids(1, 61, vocab=GEMMA3_VOCAB), sinks=4, window=20)
    assert cache.rope_theta == ((1e4 if first == LOCAL else 1e6), 1e4, 1e6)
    torch.testing.assert_close(cache.keys[0, :, :, : cache.length], fresh.keys[0], atol=KEY_ATOL, rtol=0)


def test_gemma3_reads_past_its_context_through_a_sink_cache():
    model = tiny_gemma3((LOCAL, LOCAL, GLOBAL))  # a context of 512 positions
    ids = random_ids(1, 48, vocab=GEMMA3_VOCAB)
    full, sink = model.new_cache(max_length=48), SinkKVCache.for_model(model, sinks=4, window=60, chunk=16)
    with torch.no_grad():  # a window longer than the text: the same logits as a KVCache
        assert torch.allclose(feed(model, ids, sink, [16] * 3), feed(model, ids, full, [16] * 3), atol=1e-5)
        cache = SinkKVCache.for_model(model, sinks=4, window=60, chunk=16)
        logits = feed(model, random_ids(1, 640, vocab=GEMMA3_VOCAB), cache, [16] * 40)  # past 512
    assert cache.length == 64 and cache.evicted == 576 and torch.isfinite(logits).all()
