"""The scheduler and block manager on their own (no model): prefix caching, preemption, and a
Hypothesis state machine that checks every invariant after every arrival, abort and step."""

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from labkit.core.paged import BlockAllocator
from labkit.decoding.config import DecodingConfig
from labkit.serving.block_manager import BlockManager, chain_hashes
from labkit.serving.request import EngineRequest, Status
from labkit.serving.scheduler import Scheduler, SchedulerConfig


def make_seq(request_id, prompt, max_new_tokens=4):
    """A request without a tokenizer: the scheduler and block manager never decode text."""
    return EngineRequest(
        request_id, list(prompt), DecodingConfig(max_new_tokens=max_new_tokens), frozenset(), None, 0.0
    )


def fake_step(scheduler, token=7):
    """What the engine does after a forward pass, minus the model: cache the fed tokens, append one to
    each row whose prompt is now complete."""
    batch = scheduler.schedule()
    assert batch.n_tokens <= scheduler.config.max_num_batched_tokens
    for seq, n in zip(batch.seqs, batch.n_new):
        seq.num_cached_tokens += n
        if seq.num_cached_tokens < len(seq):  # a chunk of a prompt
            continue
        seq.output_ids.append(token)
        if len(seq.output_ids) == seq.config.max_new_tokens:
            scheduler.finish(seq)
    return batch


def test_chain_hash_names_a_block_by_everything_before_it():
    a, b = chain_hashes([1, 2, 3, 4, 5], 2), chain_hashes([9, 9, 3, 4, 5], 2)
    assert len(a) == 2 and a[1][1] == b[1][1] == (3, 4)  # the same tokens ...
    assert a[1][0] != b[1][0]  # ... after a different prefix: a different name
    assert len(chain_hashes([1, 2, 3, 4], 2)) == 1  # the last token is always computed, never cached


def test_a_block_size_is_a_whole_number_of_tokens():
    for block_size in (0, 4.0, True):
        with pytest.raises(
            ValueError, match=r"block_size must be a whole number of 1 or more \(tokens per block\)"
        ):
            BlockManager(BlockAllocator(10), block_size=block_size)


def test_prefix_blocks_are_shared_counted_and_released():
    manager = BlockManager(BlockAllocator(10), block_size=4)
    first, second = make_seq(0, range(10)), make_seq(1, list(range(8)) + [50, 51, 52])
    manager.allocate(first)
    assert manager.blocks_needed(second.token_ids) == 3  # first's blocks are not computed yet: no names
    manager.publish(first, 10)  # the step that computes first's 10 tokens is scheduled: 2 full blocks named
    assert manager.blocks_needed(second.token_ids) == 1  # 3 blocks, 2 of them cached
    manager.allocate(second)
    assert second.block_table[:2] == first.block_table[:2] and second.num_cached_tokens == 8
    assert manager.allocator.n_used == 4 and manager.hits == 2 and manager.hit_rate == 0.5
    manager.check()
    manager.free(first)
    assert manager.allocator.ref_counts[second.block_table[0]] == 1
    manager.free(second)
    manager.check()
    assert manager.allocator.n_used == 0 and manager.n_cached_free == 2  # free, and still named


def test_finished_prefix_is_reused_until_its_memory_is_needed_least_recently_freed_first():
    manager = BlockManager(BlockAllocator(4), block_size=2)
    old, recent = make_seq(0, [1, 2, 3]), make_seq(1, [4, 5, 6])
    named = []
    for seq in (old, recent):  # each computes and names one full block, then finishes
        manager.allocate(seq)
        manager.publish(seq, 3)
        named.append(seq.block_table[0])
        manager.free(seq)
    assert manager.n_cached_free == 2 and manager.allocator.n_used == 0
    again = make_seq(2, [4, 5, 9, 9])  # recent's first block again, after recent ended
    assert manager.blocks_needed(again.token_ids) == 2  # the cached block is free: taking it back costs one
    manager.allocate(again)
    assert again.num_cached_tokens == 2 and again.block_table[0] == named[1] and manager.hits == 1
    assert manager.evictions == 0  # its fresh block was a free one that never had a name
    # 2 fresh blocks: the last unnamed one, then old's (least recently freed)
    fresh = make_seq(3, [7, 7, 7, 7])
    manager.allocate(fresh)
    assert (
        manager.evictions == 1
        and named[0] in fresh.block_table
        and manager.cached_prefix_blocks([1, 2, 3]) == 0
    )
    assert manager.cached_prefix_blocks([4, 5, 6]) == 1  # in use by `again`: never evicted
    manager.check()


def test_the_newest_running_sequence_is_preempted_and_recomputed_first():
    manager = BlockManager(BlockAllocator(4), block_size=2)
    scheduler = Scheduler(
        SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=16, max_model_len=64), manager
    )
    old, new = make_seq(0, [1, 2, 3], 5), make_seq(1, [4, 5, 6], 5)
    scheduler.add(old), scheduler.add(new)
    assert fake_step(scheduler).is_prefill  # both admitted: 2 blocks each, the pool is full
    assert fake_step(scheduler).seqs == (old, new)  # position 3 still lands in each one's 2nd block
    batch = fake_step(scheduler)  # position 4: old needs a 3rd block, none is free: new is preempted
    assert batch.preempted == (new,) and batch.seqs == (old,)
    assert new.status is Status.WAITING and scheduler.waiting[0] is new and new.block_table == []
    assert new.output_ids == [7, 7]  # kept: it will be recomputed from prompt + output
    scheduler.check()
    while scheduler.has_unfinished():
        fake_step(scheduler)
        scheduler.check()
    assert old.output_ids == new.output_ids == [7] * 5 and manager.allocator.n_used == 0


def test_chunked_prefill_spreads_a_long_prompt_and_never_stalls_the_decodes():
    manager = BlockManager(BlockAllocator(16), block_size=4)
    config = SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=6, max_model_len=64, chunked_prefill=True, prefill_chunk=4
    )
    scheduler = Scheduler(config, manager)
    short, long = make_seq(0, [1, 2, 3], 8), make_seq(1, range(10, 30), 2)  # 20 prompt tokens, budget 6
    scheduler.add(short)
    assert fake_step(scheduler).kind == "prefill"  # short's whole prompt (3 tokens) fits one chunk
    scheduler.add(long)
    kinds, fed = [], []
    while long.num_cached_tokens < 20:
        batch = fake_step(scheduler)
        kinds.append(batch.kind)
        fed.append(dict(zip([s.request_id for s in batch.seqs], batch.n_new)))
        scheduler.check()
    assert kinds == ["mixed"] * 5 and all(step[0] == 1 for step in fed)  # short decodes in every step ...
    assert [step[1] for step in fed] == [4, 4, 4, 4, 4]  # ... while long's prompt goes in chunks of 4
    assert long.output_ids == [7] and len(short.output_ids) == 6  # long's first token after its last chunk
    with pytest.raises(ValueError, match="needs chunked_prefill=True"):
        SchedulerConfig(prefill_chunk=4)
    chunked = Scheduler(config, BlockManager(BlockAllocator(16), block_size=4))
    chunked.add(make_seq(2, range(40), 4))  # longer than the budget: fine in chunks, refused without
    with pytest.raises(ValueError, match="max_num_batched_tokens is 6"):
        Scheduler(SchedulerConfig(4, 6, 64), manager).add(make_seq(3, range(40), 4))


def test_requests_that_could_never_run_are_refused():
    manager = BlockManager(BlockAllocator(4), block_size=4)
    scheduler = Scheduler(
        SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=12, max_model_len=20), manager
    )
    with pytest.raises(ValueError, match="whole pool has 4"):  # the context was checked when it was made
        scheduler.add(make_seq(0, range(18), 4))
    with pytest.raises(ValueError, match="whole pool has 4"):
        scheduler.add(make_seq(0, range(15), 4))
    with pytest.raises(ValueError, match="max_num_batched_tokens is 12"):
        scheduler.add(make_seq(0, range(12), 4))
    with pytest.raises(ValueError, match="max_num_seqs"):
        SchedulerConfig(max_num_seqs=0)
    with pytest.raises(ValueError, match="at least max_num_seqs"):
        SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=4)
    with pytest.raises(ValueError, match="n_blocks"):
        BlockAllocator(0)
    assert not scheduler.has_unfinished()


class SchedulerMachine(RuleBasedStateMachine):
    """Random arrivals (some sharing a prefix), aborts and steps on a small pool, prefill first or in chunks
    under a small token budget; every invariant after every rule; at the end everything drains and every
    block is free."""

    @initialize(
        n_blocks=st.integers(4, 12),
        block_size=st.integers(1, 4),
        max_num_seqs=st.integers(1, 4),
        chunked=st.booleans(),
        budget=st.integers(1, 16),
        chunk=st.none() | st.integers(1, 5),
    )
    def setup(self, n_blocks, block_size, max_num_seqs, chunked, budget, chunk):
        self.manager = BlockManager(BlockAllocator(n_blocks), block_size)
        budget = max(max_num_seqs, budget if chunked else 16)  # chunked: a budget smaller than most prompts
        config = SchedulerConfig(max_num_seqs, budget, 32, chunked, chunk if chunked else None)
        self.scheduler = Scheduler(config, self.manager)
        self.seqs = []

    @rule(
        shared=st.integers(0, 6),
        own=st.lists(st.integers(0, 3), min_size=1, max_size=6),
        max_new=st.integers(1, 8),
    )
    def arrive(self, shared, own, max_new):
        seq = make_seq(len(self.seqs), [1] * shared + own, max_new)
        try:
            self.scheduler.add(seq)
        except ValueError:  # could never fit this pool: refused, and nothing changed
            assert seq.status is Status.WAITING and seq not in self.scheduler.waiting
            return
        self.seqs.append(seq)

    @rule(index=st.integers(0, 50))
    def abort(self, index):
        if index < len(self.seqs) and not self.seqs[index].is_done:
            self.scheduler.finish(self.seqs[index], Status.ABORTED)

    @rule()
    def step(self):
        running_before = len(self.scheduler.running)
        batch = fake_step(self.scheduler)
        if self.scheduler.waiting or running_before:
            assert batch.seqs or batch.preempted  # no step without progress
        assert len(batch.seqs) <= self.scheduler.config.max_num_seqs

    @invariant()
    def consistent(self):
        if hasattr(self, "scheduler"):
            self.scheduler.check()

    def teardown(self):
        if not hasattr(self, "scheduler"):
            return
        for _ in range(1000):
            if not self.scheduler.has_unfinished():
                break
            fake_step(self.scheduler)
            self.scheduler.check()
        assert not self.scheduler.has_unfinished(), "the scheduler did not drain"
        assert all(seq.is_done for seq in self.seqs)
        assert all(
            len(s.output_ids) == s.config.max_new_tokens for s in self.seqs if s.status is Status.FINISHED
        )
        assert self.manager.allocator.n_used == 0 and self.manager.n_cached_free == len(
            self.manager.hash_to_block
        )
        self.manager.check()


TestSchedulerMachine = SchedulerMachine.TestCase
TestSchedulerMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
