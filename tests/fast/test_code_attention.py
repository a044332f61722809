"""CodeReadingKVCache: a one-token step attends over a quantized cache's codes with labkit's kernel
(labkit.fast.code_attention), equal to QuantizedKVCache's dequantizing path up to float32 rounding, the same
greedy tokens in generate, and the dequantizing path wherever the kernel cannot run."""

import pytest
import torch

import labkit
from labkit.benchmarks.longctx import decode_step_seconds_at
from labkit.core.attention import causal_mask, sliding_window_mask
from labkit.core.gemma3 import Gemma3, Gemma3Config
from labkit.fast import kernel
from labkit.fast.code_attention import CodeReadingKVCache, CodeRows
from labkit.quant.quantized_kv import QuantizedKVCache, new_kv_cache

pytestmark = pytest.mark.usefixtures("one_thread")

KINDS = ("int8", "int4", "int4-rot")
# Measured largest |difference| from the dequantizing path over 5 seeds of these rows, at 37 and 1,300 keys
# (outputs up to 3.3; the outlier channel makes scores of tens, whose float32 rounding the softmax carries): AVX2
# path 8.6e-6 (int8), 1.5e-5 (int4), 8.9e-6 (int4-rot); scalar path 2.0e-5, 1.2e-5, 1.0e-5. The sums run in
# another order (the AVX2 path scales each group's sum of q times the codes once, and adds int4's minimum times
# the sum of q), chunks of 512 keys are merged, and the AVX2 path's exp is a polynomial within 2 ulps. A
# decoding mistake in every row (nibble order, a group's scale) moves the output by 1e-2 or more; one row's
# minimum off by one step moves it by 4e-5 here.
TOLERANCE = 1e-4


def needs_kernel():
    status = kernel.load_kernel()
    if not status.available:
        pytest.skip(f"labkit's kernel is unavailable: {status.reason}")
    return status


def two_caches(kv_dtype, batch, kv_heads, head_dim, past, seed=0):
    """(a QuantizedKVCache, a CodeReadingKVCache) holding the same `past` random rows of one layer, and the
    step's new key and value [B, H_kv, 1, D]."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(batch, kv_heads, past, head_dim, generator=g) * 3
    k[..., 5] *= 10  # an outlier channel, as real keys have
    v = torch.randn(batch, kv_heads, past, head_dim, generator=g)
    caches = (
        QuantizedKVCache(1, batch, kv_heads, past + 2, head_dim, kv_dtype),
        CodeReadingKVCache(1, batch, kv_heads, past + 2, head_dim, kv_dtype),
    )
    for cache in caches:
        cache.append(0, k, v)
        cache.advance(past)
    return (
        caches,
        torch.randn(batch, kv_heads, 1, head_dim, generator=g),
        torch.randn(batch, kv_heads, 1, head_dim, generator=g),
    )


@pytest.mark.parametrize("path", ["auto", "scalar"])
@pytest.mark.parametrize(
    "kv_dtype, batch, heads, kv_heads, head_dim",
    [(kind, 2, 6, 2, 64) for kind in KINDS]
    + [("int8", 1, 9, 3, 64), ("int4", 2, 4, 4, 32), ("int8", 1, 16, 1, 128)],
)
def test_the_kernel_equals_the_dequantizing_path(
    kv_dtype, batch, heads, kv_heads, head_dim, path, monkeypatch
):
    needs_kernel()
    (plain, codes), k, v = two_caches(kv_dtype, batch, kv_heads, head_dim, past=37)
    q = torch.randn(batch, heads, 1, head_dim, generator=torch.Generator().manual_seed(3)) * 2
    k_float, v_float = plain.append(0, k, v)
    k_codes, v_codes = codes.append(0, k, v)
    assert isinstance(k_codes, CodeRows) and k_codes.shape == k_float.shape == (batch, kv_heads, 38, head_dim)
    mask = causal_mask(1, 38, q.device)
    expected = plain.attend(q, k_float, v_float, mask)
    if path == "scalar":  # the op's own path argument, through code_attention's call
        real = torch.ops.labkit.kv_code_attention
        monkeypatch.setattr(
            torch.ops.labkit, "kv_code_attention", lambda *args: real(*args, path="scalar"), raising=False
        )
    found = codes.attend(q, k_codes, v_codes, mask)
    assert found.shape == expected.shape and (found - expected).abs().max() < TOLERANCE
    assert (found - expected).abs().max() < 1e-2 * expected.abs().max()  # and not trivially: both nonzero
    assert expected.abs().max() > 0.1


def test_a_mask_and_a_models_own_scale_are_applied_as_attention_applies_them():
    needs_kernel()
    (plain, codes), k, v = two_caches("int8", 2, 2, 64, past=20)
    q = torch.randn(2, 4, 1, 64)
    mask = sliding_window_mask(1, 21, 8, q.device)  # keys 13..20 only
    expected = plain.attend(q, *plain.append(0, k, v), mask, scale=0.3)
    assert (codes.attend(q, *codes.append(0, k, v), mask, scale=0.3) - expected).abs().max() < TOLERANCE


def read_codes_cache(model, max_length, kv_dtype, read_codes):
    if read_codes:
        return CodeReadingKVCache.for_model(model, 1, max_length, kv_dtype)
    return new_kv_cache(model, 1, max_length, kv_dtype)


def test_generate_reading_codes_gives_the_dequantizing_caches_greedy_tokens(tiny, tokenizer):
    needs_kernel()
    prompt, n = "Once upon a time", 12
    length = len(labkit.encode_prompt(tokenizer, prompt)) + n
    runs = {}
    for kind in KINDS:
        for read_codes in (False, True):
            cache = read_codes_cache(tiny, length, kind, read_codes)
            steps = labkit.generate(
                tiny, tokenizer, prompt, max_new_tokens=n, return_logits=True, cache=cache
            )
            runs[kind, read_codes] = list(steps)
        plain, codes = runs[kind, False], runs[kind, True]
        assert [s.token_id for s in codes] == [s.token_id for s in plain], kind
        moved = max((a.logits - b.logits).abs().max().item() for a, b in zip(plain, codes))
        assert moved < 1e-3, kind  # float32 rounding only (measured below 1e-5)


def test_gemma3_reads_codes_at_its_own_scale_through_sliding_windows():
    needs_kernel()
    model = Gemma3(Gemma3Config.tiny()).eval()
    ids = torch.randint(0, 1000, (1, 10), generator=torch.Generator().manual_seed(2))
    logits = {}
    with torch.no_grad():
        for read_codes in (False, True):
            cache = read_codes_cache(model, 10, "int4-rot", read_codes)
            model(ids[:, :6], cache)
            logits[read_codes] = torch.cat([model(ids[:, t : t + 1], cache) for t in range(6, 10)], dim=1)
    assert (logits[True] - logits[False]).abs().max() < 1e-4


def test_prefill_and_an_unavailable_kernel_take_the_dequantizing_path(monkeypatch):
    (_, codes), k, v = two_caches("int8", 1, 2, 64, past=4)
    keys, _ = codes.append(0, torch.cat([k, k], dim=2), torch.cat([v, v], dim=2))  # T = 2: a prefill's step
    assert isinstance(keys, torch.Tensor) and keys.shape == (1, 2, 6, 64)
    off = kernel.KernelStatus(available=False, path=None, reason="no compiler (this test)")
    monkeypatch.setitem(kernel.LOADED, "status", off)
    keys, values = codes.append(0, k, v)
    assert isinstance(keys, torch.Tensor) and keys.dtype == torch.float32 and keys.shape == (1, 2, 5, 64)
    q = torch.randn(1, 2, 1, 64)
    assert codes.attend(q, keys, values, causal_mask(1, 5, q.device)).shape == (1, 2, 1, 64)


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_the_benchmarks_read_codes_must_be_a_bool(tiny, bad):
    with pytest.raises(TypeError, match="read_codes must be True or False"):
        decode_step_seconds_at(tiny, "int8", 8, read_codes=bad)


@pytest.mark.parametrize("kv_dtype", KINDS)
def test_a_long_context_split_in_chunks_equals_the_dequantizing_path(kv_dtype):
    """1,300 keys: three chunks of 512 read by different tasks and merged (FlashDecoding's rescaling); under a
    sliding window of 600 keys the first chunk is all masked and must weigh nothing."""
    needs_kernel()
    (plain, codes), k, v = two_caches(kv_dtype, 1, 3, 64, past=1300)
    q = torch.randn(1, 9, 1, 64, generator=torch.Generator().manual_seed(4)) * 2
    k_float, v_float = plain.append(0, k, v)
    k_codes, v_codes = codes.append(0, k, v)
    for mask in (causal_mask(1, 1301, q.device), sliding_window_mask(1, 1301, 600, q.device)):
        expected = plain.attend(q, k_float, v_float, mask)
        assert (codes.attend(q, k_codes, v_codes, mask) - expected).abs().max() < TOLERANCE


def rows_with_edges(batch, heads, tokens, head_dim, seed):
    """Random rows [B, H, T, D] with an outlier channel, and rows whose quantization is an edge case: all
    zero (scale 0 becomes 1), constant, all negative, and values on float16's smallest steps."""
    x = torch.randn(batch, heads, tokens, head_dim, generator=torch.Generator().manual_seed(seed)) * 3
    x[..., 5] *= 10
    x[0, 0, 0] = 0.0
    x[0, 0, 1] = 0.37
    x[0, 0, 2] = -x[0, 0, 2].abs() - 1
    x[0, 0, 3] *= 1e-6
    return x


@pytest.mark.parametrize("kv_dtype", KINDS)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_writer_stores_the_codes_quantize_groupwise_stores(kv_dtype, head_dim):
    """labkit::kv_code_write (one C++ call) against QuantizedRows.write (quantize_groupwise in torch): the same
    codes, scales and minimums, bit for bit, at positions after a prefix already written."""
    needs_kernel()
    plain = QuantizedKVCache(2, 2, 3, 12, head_dim, kv_dtype)
    codes = CodeReadingKVCache(2, 2, 3, 12, head_dim, kv_dtype)
    prefix = rows_with_edges(2, 3, 4, head_dim, seed=1)
    for cache in (plain, codes):
        cache.append(1, prefix, prefix)
        cache.advance(4)
    steps = rows_with_edges(2, 3, 4, head_dim, seed=2)
    for position in range(4):  # four one-token steps: the edge-case rows of rows_with_edges in turn
        step = steps[:, :, position : position + 1]
        for cache in (plain, codes):
            cache.append(1, step, -step)
            cache.advance(1)
    for mine, theirs in zip(
        [*codes.keys.tensors(), *codes.values.tensors()], [*plain.keys.tensors(), *plain.values.tensors()]
    ):
        assert torch.equal(mine, theirs)
