"""labkit.core.forward, the one seam that runs a model: labkit's Llama and its transformers twin give the
same logits through every path (no cache, fresh cache, NoCache, paged cache), and every cache keeps the
reorder / crop protocol that beam search and speculative decoding rely on."""

import pytest
import torch
from transformers import DynamicCache

from labkit.core.forward import (
    CachedSequence,
    NoCache,
    crop_cache,
    decode_step,
    forward,
    new_cache,
    prefill,
    reorder_cache,
)
from labkit.core.paged import BlockPool

from .conftest import SMOLLM2_VOCAB, random_ids

# Random tiny weights give logits of order 1; the two implementations and the cached / recomputed paths
# differ only in summation order (measured ~2e-7), so 1e-4 leaves room without hiding a wrong position.
ATOL = 1e-4
BLOCK_SIZE = 4

pytestmark = pytest.mark.usefixtures("one_thread")  # many millisecond-sized tiny-model calls


def assert_close(actual, expected, what=""):
    assert actual.shape == expected.shape, what
    error = (actual - expected).abs().max().item()
    assert error < ATOL, f"{what}: max |difference| {error:.2e}"


def make_cache(kind, tiny, tiny_hf, batch_size, max_length=32):
    """(model, cache, pool) for one cache kind; pool is None except for the paged cache."""
    if kind == "kv":
        return tiny, new_cache(tiny, batch_size, max_length), None
    if kind == "paged":
        pool = BlockPool.for_model(tiny, n_blocks=16, block_size=BLOCK_SIZE)
        return tiny, pool.new_cache(batch_size), pool
    if kind == "nocache":
        return tiny, NoCache(), None
    if kind == "dynamic":
        return tiny_hf, new_cache(tiny_hf, batch_size), None
    raise AssertionError(kind)


def from_scratch(model, ids):
    """Logits after the last position of each row of ids [B, T], no cache at all."""
    return forward(model, ids)[:, -1]


# --- parity: both implementations, every cache path -------------------------------------------------


def test_both_implementations_give_the_same_logits_without_a_cache(tiny, tiny_hf):
    ids = random_ids(2, 7)
    logits = forward(tiny, ids)
    assert logits.dtype == torch.float32 and logits.shape == (2, 7, SMOLLM2_VOCAB)
    assert_close(logits, forward(tiny_hf, ids), "forward, labkit vs transformers")
    assert_close(forward(tiny, ids, keep=2), logits[:, -2:], "keep=2 is the last two positions")


@pytest.mark.parametrize(
    "impl, cache_kind",
    [
        ("labkit", "fresh"),
        ("labkit", "nocache"),
        ("labkit", "paged"),
        ("transformers", "fresh"),
        ("transformers", "nocache"),
    ],
)
def test_prefill_and_decode_match_the_uncached_transformers_logits(tiny, tiny_hf, impl, cache_kind):
    ids = random_ids(2, 9, seed=1)  # 5 prompt tokens, then 4 decode steps
    reference = forward(tiny_hf, ids)  # [2, 9, V], every position at once
    model = tiny if impl == "labkit" else tiny_hf
    if cache_kind == "fresh":
        cache = None
    elif cache_kind == "nocache":
        cache = NoCache()
    else:
        cache = BlockPool.for_model(tiny, n_blocks=8, block_size=BLOCK_SIZE).new_cache(batch_size=2)
    logits, cache = prefill(model, ids[:, :5], cache, max_length=9)
    assert_close(logits, reference[:, 4], "prefill")
    for position in range(5, 9):
        logits = decode_step(model, ids[:, position], cache)
        assert_close(logits, reference[:, position], f"decode_step at position {position}")
    stored = cache.get_seq_length() if isinstance(cache, DynamicCache) else cache.length
    assert stored == 9


def test_prefill_continues_what_a_cache_already_holds(tiny):
    ids = random_ids(1, 8, seed=2)
    _, cache = prefill(tiny, ids[:, :3], max_length=8)
    logits, same = prefill(tiny, ids[:, 3:], cache)
    assert same is cache and cache.length == 8
    assert_close(logits, from_scratch(tiny, ids), "a second prefill on the same cache")


# --- reorder (beam search) ----------------------------------------------------------------------------

CACHE_KINDS = ["kv", "paged", "nocache", "dynamic"]
REORDER = torch.tensor([2, 0, 0])


@pytest.mark.parametrize("kind", CACHE_KINDS)
def test_reorder_then_decode_equals_the_reordered_sequences_from_scratch(tiny, tiny_hf, kind):
    model, cache, _ = make_cache(kind, tiny, tiny_hf, batch_size=3)
    prompts = random_ids(3, 6, seed=3)
    prefill(model, prompts, cache)
    reorder_cache(cache, REORDER)
    tokens = torch.tensor([11, 22, 33])  # rows 1 and 2 hold the same prefix, then get different tokens
    logits = decode_step(model, tokens, cache)
    expected_ids = torch.cat([prompts[REORDER], tokens[:, None]], dim=1)
    assert_close(logits, from_scratch(model, expected_ids), "after reorder [2, 0, 0]")
    assert not torch.allclose(logits[1], logits[2]), "rows 1 and 2 were fed different tokens"
    more = torch.tensor([44, 55, 66])  # one step further: nothing of row 2's write leaked into row 1
    logits = decode_step(model, more, cache)
    assert_close(
        logits, from_scratch(model, torch.cat([expected_ids, more[:, None]], dim=1)), "one step later"
    )


def test_paged_reorder_shares_blocks_copies_on_write_and_leaks_nothing(tiny):
    pool = BlockPool.for_model(tiny, n_blocks=16, block_size=BLOCK_SIZE)
    cache = pool.new_cache(batch_size=3)
    prompts = random_ids(3, 6, seed=4)  # 6 tokens: two blocks per row, the second half full
    prefill(tiny, prompts, cache)
    assert pool.allocator.n_used == 6
    old_row_1 = set(cache.block_tables[1])

    cache.reorder(REORDER)
    pool.allocator.check()
    assert cache.block_tables[1] == cache.block_tables[2], "rows 1 and 2 share row 0's blocks, no copy yet"
    assert all(pool.allocator.is_shared(block) for block in cache.block_tables[1])
    assert not old_row_1 & pool.allocator.used_blocks(), "the dropped row's blocks went back to the pool"
    assert pool.allocator.n_used == 4

    logits = decode_step(tiny, torch.tensor([11, 22, 33]), cache)  # position 6 lands in the shared 2nd block
    pool.allocator.check()
    first, last = zip(*[(table[0], table[1]) for table in cache.block_tables])
    assert first[1] == first[2] and pool.allocator.is_shared(first[1]), (
        "the untouched first block stays shared"
    )
    assert len(set(last)) == 3, "each row now writes into its own copy of the last block"
    assert pool.allocator.n_used == len(cache.blocks())
    expected = from_scratch(tiny, torch.cat([prompts[REORDER], torch.tensor([[11], [22], [33]])], dim=1))
    assert_close(logits, expected, "after copy on write")

    cache.free()
    pool.allocator.check()
    assert pool.allocator.n_used == 0 and pool.allocator.n_free == pool.n_blocks


# --- crop (speculative decoding) ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["kv", "paged", "nocache", "dynamic"])
@pytest.mark.parametrize("length", [4, 3, 0])
def test_crop_then_decode_equals_the_shorter_sequence_from_scratch(tiny, tiny_hf, kind, length):
    model, cache, _ = make_cache(kind, tiny, tiny_hf, batch_size=1)
    ids = random_ids(1, 6, seed=5)
    prefill(model, ids, cache)
    crop_cache(cache, length)
    token = torch.tensor([77])
    logits = decode_step(model, token, cache)
    assert_close(
        logits,
        from_scratch(model, torch.cat([ids[:, :length], token[:, None]], dim=1)),
        f"crop to {length}, then one token",
    )


@pytest.mark.parametrize("length, blocks_left", [(4, 1), (3, 1), (5, 2), (0, 0)])
def test_paged_crop_gives_blocks_beyond_the_length_back(tiny, length, blocks_left):
    pool = BlockPool.for_model(tiny, n_blocks=8, block_size=BLOCK_SIZE)
    cache = pool.new_cache()
    prefill(tiny, random_ids(1, 6, seed=6), cache)
    assert pool.allocator.n_used == 2
    cache.crop(length)
    pool.allocator.check()
    assert cache.length == length and pool.allocator.n_used == blocks_left == len(cache.blocks())
    cache.free()
    assert pool.allocator.n_used == 0


def prefilled(kind, tiny, tiny_hf, batch_size=3):
    model, cache, _ = make_cache(kind, tiny, tiny_hf, batch_size)
    prefill(model, random_ids(batch_size, 6, seed=7), cache)
    return cache


@pytest.mark.parametrize("kind", ["kv", "paged", "nocache", "dynamic"])
@pytest.mark.parametrize("length", [-1, 7, 2.0], ids=["negative", "past-the-end", "float"])
def test_bad_crop_length_is_a_value_error_naming_length(tiny, tiny_hf, kind, length):
    cache = prefilled(kind, tiny, tiny_hf)
    with pytest.raises(ValueError, match="length must be a whole number from 0 to"):
        crop_cache(cache, length)


@pytest.mark.parametrize("kind", ["kv", "paged", "nocache", "dynamic"])
@pytest.mark.parametrize(
    "indices",
    [[0, 1], [0, 1, 3], [-1, 0, 1], [0.0, 1.0, 2.0]],
    ids=["wrong-length", "out-of-range", "negative", "float"],
)
def test_bad_reorder_indices_are_a_value_error_naming_indices(tiny, tiny_hf, kind, indices):
    cache = prefilled(kind, tiny, tiny_hf)
    with pytest.raises(ValueError, match="indices"):
        reorder_cache(cache, torch.tensor(indices))


def test_a_rejected_crop_or_reorder_leaves_the_paged_cache_intact(tiny):
    pool = BlockPool.for_model(tiny, n_blocks=16, block_size=BLOCK_SIZE)
    cache = pool.new_cache(batch_size=3)
    prefill(tiny, random_ids(3, 6, seed=8), cache)
    tables = [list(table) for table in cache.block_tables]
    for bad in (lambda: cache.crop(7), lambda: cache.reorder(torch.tensor([0, 1, 3]))):
        with pytest.raises(ValueError):
            bad()
    assert cache.block_tables == tables and cache.length == 6
    pool.allocator.check()


# --- CachedSequence ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl, cache_type", [("labkit", "KVCache"), ("transformers", "NoCache")])
def test_cached_sequence_run_crop_run_equals_one_run_over_the_final_ids(tiny, tiny_hf, impl, cache_type):
    model = tiny if impl == "labkit" else tiny_hf
    sequence = CachedSequence(model, max_length=16)
    assert type(sequence.cache).__name__ == cache_type
    first = random_ids(1, 6, seed=9)[0].tolist()
    sequence.run(first)
    sequence.crop(4)
    assert sequence.ids == first[:4]
    second = sequence.run([101, 202, 303])
    final = first[:4] + [101, 202, 303]
    assert sequence.ids == final
    whole = CachedSequence(model, max_length=16).run(final)
    assert whole.shape == (7, SMOLLM2_VOCAB)
    assert_close(second, whole[4:], "run, crop, run vs one run")
    with pytest.raises(ValueError, match="length"):
        sequence.crop(8)


# --- the wrong kind of cache -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "impl, cache_kind",
    [
        ("transformers", "kv"),
        ("transformers", "paged"),
        ("labkit", "dynamic"),
    ],
)
def test_a_cache_of_the_other_implementation_is_a_clear_type_error(tiny, tiny_hf, impl, cache_kind):
    model = tiny_hf if impl == "transformers" else tiny
    cache = {
        "kv": lambda: tiny.new_cache(1, 8),
        "paged": lambda: BlockPool.for_model(tiny, n_blocks=4, block_size=BLOCK_SIZE).new_cache(),
        "dynamic": lambda: DynamicCache(config=tiny_hf.config),
    }[cache_kind]()
    with pytest.raises(TypeError, match=f"{type(cache).__name__}.*impl="):
        prefill(model, random_ids(1, 3), cache)
