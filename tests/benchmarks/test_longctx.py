"""labkit.benchmarks.longctx: the caches it times hold the text's real keys (prefilled once, copied into each
kind), every timed step runs at the same context, and bad arguments are refused. No timing is asserted."""

import pytest
import torch

from labkit.benchmarks import longctx
from labkit.core.forward import decode_step, prefill

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_float_cache_filled_from_the_prefill_decodes_as_a_fresh_prefill_does(tiny):
    context = 40
    ids, _ = longctx.prefilled(tiny, context)
    assert ids.shape == (1, context + 1) and torch.equal(ids[0], longctx.text_ids(context + 1)[0])
    filled = longctx.filled_cache(tiny, None, context)
    assert filled.length == context and filled.max_length == context + 1
    _, fresh = prefill(tiny, ids[:, :context], max_length=context + 1)
    assert torch.allclose(filled.keys[:, :, :, :context], fresh.keys[:, :, :, :context], atol=1e-5)
    token = ids[:, context]
    assert torch.allclose(decode_step(tiny, token, filled), decode_step(tiny, token, fresh), atol=1e-4)


def test_the_prefill_is_kept_and_reused_for_shorter_contexts(tiny):
    long_ids, long_cache = longctx.prefilled(tiny, 60)
    short_ids, short_cache = longctx.prefilled(tiny, 20)
    assert short_cache is long_cache and short_ids is long_ids  # no second prefill
    assert longctx.prefilled(tiny, 70)[1] is not long_cache  # a longer context prefills again


@pytest.mark.parametrize("kv_dtype", ["int8", "int4", "int4-rot"])
def test_a_quantized_cache_holds_the_prefills_keys_quantized(tiny, kv_dtype):
    context = 33
    _, source = longctx.prefilled(tiny, context)
    cache = longctx.filled_cache(tiny, kv_dtype, context)
    assert cache.kv_dtype == kv_dtype and cache.length == context
    keys = cache.keys.read(0, context)  # every stored key of layer 0, dequantized (and rotated back)
    error = (keys - source.keys[0, :, :, :context]).abs().max()
    assert 0 < error < 0.5 * source.keys[0, :, :, :context].abs().max()  # quantized, yet near


@pytest.mark.parametrize("kv_dtype", [None, "int4-rot"])
def test_decode_step_seconds_at_times_steps_at_one_context(tiny, kv_dtype):
    seconds = longctx.decode_step_seconds_at(tiny, kv_dtype, context=24, repeats=2)
    assert isinstance(seconds, float) and seconds > 0


@pytest.mark.parametrize(
    "arguments, match",
    [
        ((None, 0), "context must be a whole number from 1 to 511"),
        ((None, 512), "context must be a whole number from 1 to 511"),
        (("int3", 8), "kv_dtype must be None .* 'int4-rot'"),
        ((None, 8, 0), "repeats must be"),
    ],
)
def test_bad_arguments_are_refused(tiny, arguments, match):
    with pytest.raises(ValueError, match=match):
        longctx.decode_step_seconds_at(tiny, *arguments)
    with pytest.raises(TypeError, match="labkit's from-scratch"):
        longctx.decode_step_seconds_at(torch.nn.Linear(2, 2), None, 8)
