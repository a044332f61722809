"""The paged KV cache: same results as the contiguous one, prefix sharing, and allocator invariants."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule  # noqa: E402

import labkit  # noqa: E402
from labkit.core.forward import greedy_decode  # noqa: E402
from labkit.core.paged import BlockAllocator, BlockPool, NoFreeBlocksError, PagedKVCache, sharing_summary  # noqa: E402
from labkit.viz.paged import draw_block_tables, format_block_tables  # noqa: E402

from .conftest import random_ids  # noqa: E402

# Paged vs contiguous: the same numbers in the same order go into attention, only gathered from
# blocks; measured differences are 0 on tiny() and SmolLM2. The tolerance leaves room for a kernel
# that sums in another order: 1e-5 on tiny() (logits of order 1), 1e-4 on SmolLM2 (logits up to |40|).
TINY_ATOL = 1e-5
REAL_MODEL_ATOL = 1e-4


@pytest.mark.parametrize("block_size", [1, 3, 16])
@pytest.mark.parametrize("batch", [1, 2])
def test_tiny_paged_equals_contiguous(tiny, block_size, batch):
    input_ids = random_ids(batch, 11)
    contiguous_ids, contiguous_logits = greedy_decode(tiny, input_ids, 14, tiny.new_cache(batch, 25))
    pool = BlockPool.for_model(tiny, n_blocks=batch * (25 // block_size + 1), block_size=block_size)
    cache = pool.new_cache(batch)
    paged_ids, paged_logits = greedy_decode(tiny, input_ids, 14, cache)
    assert torch.equal(paged_ids, contiguous_ids)
    assert (paged_logits - contiguous_logits).abs().max() < TINY_ATOL
    assert cache.length == 24 and len(cache.block_tables[0]) == -(-24 // block_size)
    cache.free()
    assert pool.allocator.n_used == 0


@pytest.mark.slow
def test_smollm2_paged_equals_contiguous(smollm2_labkit, tokenizer):
    model = smollm2_labkit
    input_ids = torch.tensor([labkit.chat_prompt(tokenizer, "Write a haiku about the sea.")])
    n_new = 16
    contiguous_ids, contiguous_logits = greedy_decode(
        model, input_ids, n_new, model.new_cache(1, input_ids.shape[1] + n_new)
    )
    pool = BlockPool.for_model(model, n_blocks=8, block_size=16)
    paged_ids, paged_logits = greedy_decode(model, input_ids, n_new, pool.new_cache())
    assert torch.equal(paged_ids, contiguous_ids)
    assert (paged_logits - contiguous_logits).abs().max() < REAL_MODEL_ATOL


def test_prefix_sharing_same_logits_fewer_blocks_and_copy_on_write(tiny):
    prompt = random_ids(1, 10)  # 2.5 blocks of 4: the third block is partly filled, and shared
    suffix_a, suffix_b = random_ids(1, 3, seed=1), random_ids(1, 2, seed=2)
    pool = BlockPool.for_model(tiny, n_blocks=8, block_size=4)
    a = pool.new_cache()
    with torch.no_grad():
        tiny(prompt, a)
        b = a.fork()
        assert b.block_tables == a.block_tables and b.length == 10
        assert pool.allocator.n_used == 3  # the prompt's blocks once, not twice
        logits_a, logits_b = tiny(suffix_a, a), tiny(suffix_b, b)
        expected_a = tiny(torch.cat([prompt, suffix_a], dim=1))[:, -3:]
        expected_b = tiny(torch.cat([prompt, suffix_b], dim=1))[:, -2:]
    assert (logits_a - expected_a).abs().max() < TINY_ATOL
    assert (logits_b - expected_b).abs().max() < TINY_ATOL
    # The two full blocks stay shared; the partial one was copied by whoever wrote into it first.
    assert a.block_tables[0][:2] == b.block_tables[0][:2]
    assert a.block_tables[0][2] != b.block_tables[0][2]
    summary = sharing_summary({"A": a, "B": b})
    assert summary["blocks_unshared"] == 7 and summary["blocks_shared"] == pool.allocator.n_used == 5
    assert pool.used_bytes() == 5 * pool.bytes_per_block() < a.nbytes() + b.nbytes()
    assert summary["bytes_saved"] == 2 * pool.bytes_per_block()
    pool.allocator.check()
    a.free()
    assert pool.allocator.n_used == 3  # b's blocks, including the two it had shared with a
    b.free()
    assert pool.allocator.ref_counts == [0] * 8 and pool.allocator.n_free == 8
    pool.allocator.check()


def test_no_free_blocks_is_a_clear_error_and_changes_nothing(tiny):
    pool = BlockPool.for_model(tiny, n_blocks=3, block_size=4)
    cache = pool.new_cache()
    with torch.no_grad():
        tiny(random_ids(1, 10), cache)
        other = pool.new_cache()
        with pytest.raises(
            NoFreeBlocksError, match=r"has 0 free blocks of 4 tokens.*more blocks \(n_blocks > 3\)"
        ):
            tiny(random_ids(1, 2), other)
    assert other.block_tables == [[]] and other.length == 0
    assert pool.allocator.n_used == 3
    pool.allocator.check()


def test_sequence_longer_than_its_cache_is_a_clear_error(tiny):
    pool = BlockPool.for_model(tiny, n_blocks=8, block_size=4)
    cache = pool.new_cache(max_length=6)
    with torch.no_grad(), pytest.raises(ValueError, match="holds 6 tokens per sequence.*at least 7"):
        tiny(random_ids(1, 7), cache)
    assert pool.allocator.n_used == 0


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"batch_size": 0}, "batch_size must be a whole number of 1 or more, got 0"),
        ({"batch_size": -1}, "batch_size must be a whole number of 1 or more, got -1"),
        ({"batch_size": True}, "batch_size must be a whole number of 1 or more, got True"),
        (
            {"max_length": 0},
            r"max_length must be a whole number of 1 or more \(or None for the pool's capacity\), got 0",
        ),
    ],
)
def test_bad_cache_arguments(tiny, arguments, message):
    with pytest.raises(ValueError, match=message):
        BlockPool.for_model(tiny, n_blocks=2).new_cache(**arguments)


def test_bad_pool_arguments(tiny):
    with pytest.raises(ValueError, match="n_blocks must be a whole number of 1 or more, got 0"):
        BlockPool.for_model(tiny, n_blocks=0)
    with pytest.raises(
        ValueError, match=r"block_size must be a whole number of 1 or more \(tokens per block\), got 0"
    ):
        BlockPool.for_model(tiny, n_blocks=2, block_size=0)


def test_allocator_basics_and_misuse():
    allocator = BlockAllocator(2)
    a, b = allocator.allocate(), allocator.allocate()
    assert (a, b) == (0, 1) and allocator.n_free == 0
    with pytest.raises(NoFreeBlocksError, match="all 2 are in use"):
        allocator.allocate()
    allocator.share(a)
    assert allocator.is_shared(a) and not allocator.is_shared(b)
    allocator.release(a)
    allocator.release(a)
    with pytest.raises(ValueError, match="Cannot release block 0: it is free"):
        allocator.release(a)
    with pytest.raises(ValueError, match="Block 5 does not exist"):
        allocator.share(5)
    allocator.check()


def test_block_tables_as_text_and_picture(tiny):
    pool = BlockPool.for_model(tiny, n_blocks=6, block_size=4)
    a = pool.new_cache()
    with torch.no_grad():
        tiny(random_ids(1, 6), a)
        b = a.fork()
        tiny(random_ids(1, 1), b)
    text = format_block_tables({"A": a, "B": b})
    assert text.splitlines() == [
        "A  length   6  blocks [0, 1]",
        "B  length   7  blocks [0, 2]",
        "pool: 6 blocks of 4 tokens; used 0:x2 1 2; free 3",
    ]
    ax = draw_block_tables({"A": a, "B": b})
    assert len(ax.patches) == 6 + 4


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["allocate", "share", "release"]), st.integers(0, 7)), max_size=60))
def test_allocator_invariants_under_any_operations(operations):
    allocator = BlockAllocator(8)
    held: list[int] = []  # one entry per reference we hold
    for action, pick in operations:
        if action == "allocate" and allocator.n_free:
            held.append(allocator.allocate())
        elif action == "share" and held:
            held.append(allocator.share(held[pick % len(held)]))
        elif action == "release" and held:
            allocator.release(held.pop(pick % len(held)))
        allocator.check()
        assert all(allocator.ref_counts[b] == held.count(b) for b in range(8))
    for block in held:
        allocator.release(block)
    assert allocator.ref_counts == [0] * 8 and sorted(allocator.free_blocks) == list(range(8))


class PagedCacheMachine(RuleBasedStateMachine):
    """Random appends, forks and frees of paged caches over one small pool. Each cache must always
    read back exactly the tokens written to it (or to its ancestors before a fork), the allocator
    must stay consistent, and every block must come back when all caches are freed."""

    def __init__(self):
        super().__init__()
        self.pool = BlockPool(n_layers=2, n_kv_heads=1, head_dim=2, n_blocks=10, block_size=3)
        self.caches: list[tuple[PagedKVCache, list[float]]] = []  # (cache, the values it should hold)
        self.counter = 0.0

    @rule()
    def new_cache(self):
        if len(self.caches) < 4:
            self.caches.append((self.pool.new_cache(), []))

    @precondition(lambda self: self.caches)
    @rule(pick=st.integers(0, 3), n_tokens=st.integers(1, 5))
    def append(self, pick, n_tokens):
        cache, expected = self.caches[pick % len(self.caches)]
        values = [self.counter + i for i in range(n_tokens)]
        self.counter += n_tokens
        k = torch.tensor(values).view(1, 1, n_tokens, 1).expand(1, 1, n_tokens, 2)
        if cache.length + n_tokens > cache.max_length:  # past the pool's capacity: refused, nothing written
            with pytest.raises(ValueError, match="do not fit"):
                cache.append(0, k, -k)
            return
        try:
            for layer in range(2):
                keys, vals = cache.append(layer, k + layer, -k)
        except NoFreeBlocksError:
            return  # all or nothing: the cache is as it was
        cache.advance(n_tokens)
        expected.extend(values)
        assert keys[0, 0, :, 0].tolist() == [v + 1 for v in expected]
        assert vals[0, 0, :, 1].tolist() == [-v for v in expected]

    @precondition(lambda self: self.caches and len(self.caches) < 4)
    @rule(pick=st.integers(0, 3))
    def fork(self, pick):
        cache, expected = self.caches[pick % len(self.caches)]
        self.caches.append((cache.fork(), list(expected)))

    @precondition(lambda self: self.caches)
    @rule(pick=st.integers(0, 3))
    def free(self, pick):
        cache, _ = self.caches.pop(pick % len(self.caches))
        cache.free()

    @invariant()
    def allocator_is_consistent(self):
        allocator = self.pool.allocator
        allocator.check()
        references = [b for cache, _ in self.caches for table in cache.block_tables for b in table]
        assert all(allocator.ref_counts[b] == references.count(b) for b in range(allocator.n_blocks))

    def teardown(self):
        for cache, _ in self.caches:
            cache.free()
        assert self.pool.allocator.ref_counts == [0] * self.pool.n_blocks
        self.pool.allocator.check()


TestPagedCacheMachine = PagedCacheMachine.TestCase
TestPagedCacheMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
