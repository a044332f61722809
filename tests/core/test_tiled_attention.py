"""Attention in tiles (labkit.core.tiled_attention) equals plain attention: labkit's own `attention` (torch's
fused kernel) and torch's scaled_dot_product_attention given a mask built here, for any tile size (1, one
that divides the keys, one that does not, one longer than them), causal or not, windowed, grouped-query,
in a decode step and on SmolLM2's real layer 0; and it holds one tile of scores, never the [T, S] matrix.

Tolerance: the inputs are float32 and the outputs are averages of values of size about 1 (at most 3.4
here), so the two summation orders differ by float32 rounding only: 1e-5 absolute, about 10x the largest
difference measured (9.5e-7, a few units in the last place, on an AVX2 machine; 1.2e-7 on SmolLM2's layer 0),
so a CPU whose kernels sum in another order still passes.
Nothing here takes an argmax, so no near-tie can flip a result."""

import math

import pytest
import torch
import torch.nn.functional as F

from labkit.core.arguments import InvalidArgument
from labkit.core.attention import attention, attention_explicit, causal_mask, sliding_window_mask
from labkit.core.tiled_attention import attend_in_tiles, tiled_attention

ATOL = 1e-5  # float32 rounding of two summation orders (measured <= 9.5e-7)


def qkv(batch=1, heads=9, kv_heads=3, tokens=20, keys=20, head_dim=64, seed=0):
    """Random q [B, heads, T, D] and k, v [B, kv_heads, S, D] from a fixed seed."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, tokens, head_dim, generator=generator)
    k, v = (torch.randn(batch, kv_heads, keys, head_dim, generator=generator) for _ in range(2))
    return q, k, v


def labkit_mask(tokens, keys, causal=True, window=None):
    """The additive [T, S] mask labkit's attention takes."""
    if window is not None:
        return sliding_window_mask(tokens, keys, window=window, device="cpu")
    return causal_mask(tokens, keys, "cpu") if causal else torch.zeros(tokens, keys)


def torch_reference(q, k, v, causal=True, window=None, scale=None):
    """torch's own kernel with a boolean mask built here, independently of labkit: query i at position
    S - T + i sees key j when j <= that position (causal) and j > that position - window."""
    tokens, keys = q.shape[2], k.shape[2]
    query_pos = torch.arange(keys - tokens, keys)[:, None]
    key_pos = torch.arange(keys)[None, :]
    allowed = torch.ones(tokens, keys, dtype=torch.bool)
    if causal:
        allowed &= key_pos <= query_pos
    if window is not None:
        allowed &= key_pos > query_pos - window
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)


def assert_equal_to_plain(q, k, v, tile, causal=True, window=None):
    got = tiled_attention(q, k, v, tile=tile, causal=causal, window=window)
    assert got.shape == q.shape and not got.isnan().any()
    mask = labkit_mask(q.shape[2], k.shape[2], causal, window)
    assert (got - attention(q, k, v, mask)).abs().max() < ATOL
    assert (got - attention_explicit(q, k, v, mask)).abs().max() < ATOL
    assert (got - torch_reference(q, k, v, causal, window)).abs().max() < ATOL


@pytest.mark.parametrize("tile", [1, 5, 8, 16, 40, 1000])  # 40 keys: tiles that divide them and not
@pytest.mark.parametrize("causal", [True, False])
def test_any_tile_equals_plain_attention(tile, causal):
    q, k, v = qkv(batch=2, tokens=40, keys=40)
    assert_equal_to_plain(q, k, v, tile, causal)


@pytest.mark.parametrize(
    "tokens, keys, tile",
    [(1, 1, 1), (7, 7, 3), (12, 100, 7), (100, 300, 64), (33, 65, 32)],
)
def test_queries_at_the_end_of_a_longer_cache(tokens, keys, tile):
    assert_equal_to_plain(*qkv(tokens=tokens, keys=keys, seed=tokens), tile)


@pytest.mark.parametrize("heads, kv_heads", [(9, 3), (8, 2), (4, 4), (6, 1)])
def test_grouped_query_heads_read_their_own_key_head(heads, kv_heads):
    q, k, v = qkv(heads=heads, kv_heads=kv_heads, tokens=24, keys=50, head_dim=16, seed=heads)
    assert_equal_to_plain(q, k, v, tile=16)
    # query head h reads key head h // (heads / kv_heads): changing key head 0 changes the first group only
    changed = tiled_attention(q, k.clone().index_fill_(1, torch.tensor([0]), 0.0), v, tile=16)
    moved = (changed - tiled_attention(q, k, v, tile=16)).abs().amax(dim=(0, 2, 3)) > 0
    assert moved.tolist() == [h < heads // kv_heads for h in range(heads)]


@pytest.mark.parametrize("window, tile", [(1, 4), (5, 4), (16, 16), (17, 3), (100, 8)])
def test_a_sliding_window_equals_the_windowed_mask(window, tile):
    q, k, v = qkv(tokens=30, keys=60, seed=window)
    assert_equal_to_plain(q, k, v, tile, window=window)


def test_a_window_as_long_as_the_keys_is_no_window():
    q, k, v = qkv(tokens=30, keys=60)
    assert torch.equal(tiled_attention(q, k, v, tile=8, window=60), tiled_attention(q, k, v, tile=8))


def test_a_window_skips_the_tiles_no_query_sees():
    q, k, v = qkv(tokens=1, keys=1000)
    run = attend_in_tiles(q, k, v, tile=64, window=100)
    assert run.tiles == 2 and run.skipped == 14  # keys 900..999 only: tiles of 64 and 36 keys
    assert (run.out - torch_reference(q, k, v, window=100)).abs().max() < ATOL


@pytest.mark.parametrize("window", [None, 256])
@pytest.mark.parametrize("tile", [1, 64, 100])
def test_a_decode_step_over_a_long_cache(window, tile):
    q, k, v = qkv(tokens=1, keys=2048, seed=tile)
    assert_equal_to_plain(q, k, v, tile, window=window)


def test_a_given_scale_is_used():
    q, k, v = qkv(tokens=10, keys=30, head_dim=32)
    got = tiled_attention(q, k, v, tile=7, scale=0.5)
    assert (got - torch_reference(q, k, v, scale=0.5)).abs().max() < ATOL
    assert (got - tiled_attention(q, k, v, tile=7)).abs().max() > 1e-2  # 0.5 is not 1/sqrt(32)


def test_half_precision_is_computed_in_float32_and_returned_in_its_dtype():
    q, k, v = (x.bfloat16() for x in qkv(tokens=10, keys=30))
    got = tiled_attention(q, k, v, tile=8)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, tiled_attention(q.float(), k.float(), v.float(), tile=8).bfloat16())


def test_random_shapes_equal_plain_attention():
    """Property-style: 40 random problems (fixed seed): every size, tile, mask and head grouping at once."""
    pick = torch.Generator().manual_seed(2024)

    def draw(low, high):  # a whole number in [low, high]
        return int(torch.randint(low, high + 1, (1,), generator=pick))

    for case in range(40):
        keys = draw(1, 90)
        kv_heads, causal = draw(1, 3), bool(draw(0, 1))
        window = draw(1, keys + 3) if causal and draw(0, 1) else None
        shape = dict(
            batch=draw(1, 2),
            heads=kv_heads * draw(1, 3),
            kv_heads=kv_heads,
            tokens=draw(1, keys),
            keys=keys,
            head_dim=(4, 8, 16, 64)[draw(0, 3)],
            seed=case,
        )
        tile = draw(1, keys + 5)
        q, k, v = qkv(**shape)
        got = tiled_attention(q, k, v, tile=tile, causal=causal, window=window)
        error = (got - torch_reference(q, k, v, causal, window)).abs().max()
        assert error < ATOL, (shape, tile, causal, window, float(error))


@pytest.mark.parametrize("keys", [256, 1024, 4096])
def test_the_scores_held_are_one_tile_however_long_the_context(keys):
    q, k, v = qkv(batch=2, tokens=16, keys=keys, head_dim=16)
    run = attend_in_tiles(q, k, v, tile=64)
    assert run.score_bytes == 2 * 9 * 16 * 64 * 4  # [B, heads, T, tile] float32, the same at every length
    assert run.full_score_bytes == 2 * 9 * 16 * keys * 4  # [B, heads, T, S]: grows with the context
    assert run.saved == keys / 64 and run.tiles == keys // 64 and run.skipped == 0


def test_the_module_example_prints_what_it_says():
    q, k, v = qkv(tokens=100, keys=1000)
    run = attend_in_tiles(q, k, v, tile=64)
    assert (run.score_bytes, run.full_score_bytes, run.saved) == (230400, 3600000, 15.625)
    assert f"{run.saved:.0f}x less score memory" == "16x less score memory"
    assert attend_in_tiles(q, k, v, tile=4096).score_bytes == run.full_score_bytes  # one tile: all keys
    assert math.isclose(attend_in_tiles(q, k, v, tile=1).saved, 1000)


@pytest.mark.parametrize(
    "change, error, words",
    [
        (dict(q=[[1.0]]), TypeError, ("q must be a tensor [B, heads, T, D]", "got list")),
        (
            dict(k=torch.zeros(3, 20, 64)),
            InvalidArgument,
            ("k must be a tensor [B, heads, T, D]", "(3, 20, 64)"),
        ),
        (dict(v=torch.zeros(1, 3, 20, 64, dtype=torch.long)), TypeError, ("v must be a floating-point",)),
        (dict(v=torch.zeros(1, 3, 19, 64)), InvalidArgument, ("k and v must have one shape",)),
        (dict(q=torch.zeros(1, 9, 20, 32)), InvalidArgument, ("q must share k's batch size and head width",)),
        (dict(q=torch.zeros(1, 8, 20, 64)), InvalidArgument, ("multiple of k's kv_heads", "8 heads and 3")),
        (dict(tile=0), InvalidArgument, ("tile must be a whole number of 1 or more", "got 0")),
        (dict(tile=2.5), InvalidArgument, ("tile must be a whole number", "got 2.5")),
        (dict(window=0), InvalidArgument, ("window must be a whole number of 1 or more", "got 0")),
        (dict(window=4, causal=False), InvalidArgument, ("window needs causal=True",)),
        (dict(causal="yes"), TypeError, ("causal must be True or False", "got str")),
        (dict(scale=0), InvalidArgument, ("scale must be a number > 0", "got 0")),
        (
            dict(q=torch.zeros(1, 9, 21, 64)),
            InvalidArgument,
            ("at least as many keys as queries", "21 queries"),
        ),
        (
            dict(k=torch.zeros(1, 3, 0, 64), v=torch.zeros(1, 3, 0, 64)),
            InvalidArgument,
            ("at least one key",),
        ),
    ],
)
def test_bad_input_is_refused_by_name(change, error, words):
    q, k, v = qkv(tokens=20, keys=20)
    arguments = dict(q=q, k=k, v=v, tile=8, causal=True, window=None, scale=None) | change
    q, k, v = (arguments.pop(name) for name in ("q", "k", "v"))
    with pytest.raises(error) as caught:
        tiled_attention(q, k, v, **arguments)
    assert all(word in str(caught.value) for word in words), str(caught.value)


@pytest.mark.slow
def test_smollm2_layer_0_in_tiles_equals_the_model_s_attention(smollm2_labkit, tokenizer):
    """SmolLM2's own rotated q, k and v of layer 0 on a real prompt: the tiles rebuild what the model's
    attention handed its o_proj, and the windowed form equals labkit's sliding-window mask."""
    from labkit.core.inspect_forward import rotated_qk, split_heads, trace_forward

    text = "Attention in tiles reads the keys and values a block at a time, keeping a running max and sum."
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    trace = trace_forward(smollm2_labkit, ids)
    q, k = rotated_qk(trace, 0)  # [1, 9, T, 64], [1, 3, T, 64]
    v = split_heads(trace.v[0], smollm2_labkit.config.n_kv_heads)
    tokens = ids.shape[1]
    for tile in (1, 4, 7, tokens):
        got = tiled_attention(q, k, v, tile=tile)
        merged = got.transpose(1, 2).reshape(1, tokens, -1)  # [1, T, 9 * 64], what o_proj receives
        assert (merged - trace.attn_out[0]).abs().max() < ATOL, tile
    windowed = tiled_attention(q, k, v, tile=4, window=6)
    assert (windowed - attention(q, k, v, labkit_mask(tokens, tokens, window=6))).abs().max() < ATOL


@pytest.mark.parametrize("query_tile", [1, 7, 16, 40, 100])  # 40 queries: blocks that divide them and not
@pytest.mark.parametrize("causal, window", [(True, None), (False, None), (True, 9)])
def test_blocks_of_queries_equal_plain_attention(query_tile, causal, window):
    q, k, v = qkv(batch=2, tokens=40, keys=64)
    got = tiled_attention(q, k, v, tile=8, query_tile=query_tile, causal=causal, window=window)
    assert (got - torch_reference(q, k, v, causal, window)).abs().max() < ATOL


def test_a_causal_prefill_in_blocks_reads_the_diagonal_and_below_and_holds_one_tile():
    q, k, v = qkv(tokens=1024, keys=1024, head_dim=16)
    run = attend_in_tiles(q, k, v, tile=64, query_tile=64)
    assert (run.tiles, run.skipped) == (136, 120)  # 16 blocks x 16 tiles: 1 + 2 + ... + 16 read
    assert run.score_bytes == 9 * 64 * 64 * 4  # [B, heads, query tile, tile], whatever T and S
    assert (run.out - torch_reference(q, k, v)).abs().max() < ATOL
    whole = attend_in_tiles(q, k, v, tile=64)  # one block of every query: each tile is read once
    assert (whole.tiles, whole.skipped, whole.score_bytes) == (16, 0, 9 * 1024 * 64 * 4)
    assert attend_in_tiles(q, k, v, tile=64, query_tile=64, causal=False).skipped == 0


def test_a_bad_query_tile_is_refused_by_name():
    with pytest.raises(ValueError, match="query_tile must be a whole number of 1 or more"):
        tiled_attention(*qkv(), query_tile=0)
