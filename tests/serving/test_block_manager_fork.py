"""n samples of one prompt in the block manager and the scheduler, without a model: a fork shares every
block, the first write into the shared partial block copies it (only that one), a group takes its seats
before its prefill, and a Hypothesis state machine replays arrivals of groups, aborts, preemptions and
steps over a pool that holds token ids instead of keys and values, so a missing or wrong copy shows as a
sequence reading another's tokens."""

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from labkit.core.paged import BlockAllocator, BlockPool
from labkit.decoding.config import DecodingConfig
from labkit.serving.block_manager import BlockManager
from labkit.serving.named_blocks import NULL_BLOCK
from labkit.serving.request import EngineRequest, Status
from labkit.serving.scheduler import Scheduler, SchedulerConfig


def make_seq(request_id, prompt, max_new_tokens=4, n=1):
    """A request without a tokenizer (the scheduler never decodes text), with samples ids request_id + 1, ..."""
    seq = EngineRequest(
        request_id, list(prompt), DecodingConfig(max_new_tokens=max_new_tokens), frozenset(), None, 0.0
    )
    seq.add_samples(range(request_id + 1, request_id + n))
    return seq


def prefilled_group(manager, prompt, n):
    """Sample 0 of n with its prompt allocated, named and cached, and the others forked from it."""
    parent = make_seq(0, prompt, n=n)
    manager.allocate(parent)
    manager.publish(parent, len(prompt))
    parent.num_cached_tokens = len(prompt)
    for child in parent.unforked:
        manager.fork(parent, child)
    return [parent, *parent.siblings]


def test_a_fork_shares_every_block_and_only_the_partial_block_is_copied_on_first_write():
    manager = BlockManager(BlockAllocator(8), block_size=4)
    samples = prefilled_group(manager, range(6), n=3)  # 6 prompt tokens: one full block, one partly filled
    full, partial = samples[0].block_table
    assert all(s.block_table == [full, partial] and s.num_cached_tokens == 6 for s in samples)
    assert manager.allocator.ref_counts[full] == manager.allocator.ref_counts[partial] == 3
    assert manager.allocator.n_used == 2  # three sequences, the blocks of one
    for index, seq in enumerate(samples):
        seq.output_ids.append(50 + index)  # each chose its own first token from the shared logits
    manager.check()
    for seq in samples:  # the decode step: position 6 lands in the shared partial block
        assert manager.needs_copy(seq) == (seq is not samples[-1]) and manager.can_append(seq)
        manager.append_slot(seq)
    copies = manager.take_copies()
    # n - 1 copies; the last holder writes in place
    assert [source for source, _ in copies] == [partial, partial]
    assert [s.block_table[1] for s in samples] == [copies[0][1], copies[1][1], partial]
    # a full block is never written again: still shared
    assert [s.block_table[0] for s in samples] == [full] * 3
    assert manager.allocator.ref_counts[full] == 3 and manager.allocator.ref_counts[partial] == 1
    assert manager.take_copies() == []  # taken once
    for seq in samples:
        seq.num_cached_tokens += 1  # the forward pass wrote each sample's token into its own block
    manager.check()


def test_a_prompt_that_fills_its_blocks_forks_without_any_copy():
    manager = BlockManager(BlockAllocator(8), block_size=4)
    samples = prefilled_group(manager, range(8), n=3)
    for index, seq in enumerate(samples):
        seq.output_ids.append(50 + index)
        assert manager.needs_block(seq) and not manager.needs_copy(seq)
        manager.append_slot(seq)
    assert manager.take_copies() == [] and manager.allocator.n_used == 2 + 3  # a fresh block each
    manager.check()


def test_the_check_catches_a_write_into_a_shared_block():
    manager = BlockManager(BlockAllocator(8), block_size=4)
    samples = prefilled_group(manager, range(6), n=2)
    for index, seq in enumerate(samples):
        seq.output_ids.append(50 + index)
        seq.num_cached_tokens += 1  # written without append_slot: both wrote slot 6 of one block
    with pytest.raises(AssertionError, match="different tokens"):
        manager.check()


def test_the_copy_needs_a_free_block_and_the_last_holder_needs_none():
    manager = BlockManager(BlockAllocator(2), block_size=4)
    parent, child = prefilled_group(manager, range(6), n=2)  # the pool is full
    parent.output_ids.append(50), child.output_ids.append(51)
    assert not manager.can_append(parent)  # its copy would need a block, and none is free
    manager.free(child)  # child preempted: parent now holds its blocks alone
    assert manager.can_append(parent) and not manager.needs_copy(parent)
    manager.check()


def test_copy_blocks_reads_every_source_before_writing_any_target():
    pool = BlockPool(n_layers=2, n_kv_heads=1, head_dim=2, n_blocks=4, block_size=3)
    pool.keys.copy_(torch.arange(4.0)[None, None, :, None, None].expand_as(pool.keys))  # block b holds b
    pool.values.copy_(-pool.keys)
    pool.copy_blocks([(0, 1), (1, 2), (0, 3)])  # block 1 is a target and a source in one call
    assert pool.keys[:, :, :, 0, 0].unique(dim=0).tolist() == [[[0.0, 0.0, 1.0, 0.0]]]  # every layer
    assert torch.equal(pool.values, -pool.keys)
    with pytest.raises(ValueError, match="written once"):
        pool.copy_blocks([(0, 1), (2, 1)])


def fake_step(scheduler, kv):
    """What the engine does, minus the model: copy, write the fed tokens, fork a prompt that is done, give
    each sample its own next token (100 + its index, so samples differ), finish at max_new_tokens."""
    batch = scheduler.schedule()
    assert batch.n_tokens <= scheduler.config.max_num_batched_tokens
    kv.run(batch)
    for seq, n in zip(batch.seqs, batch.n_new):
        seq.num_cached_tokens += n
        if seq.num_cached_tokens < len(seq):
            continue
        for sample in (seq, *scheduler.fork(seq)):
            sample.output_ids.append(100 + sample.sample_index)
            if len(sample.output_ids) == sample.config.max_new_tokens:
                scheduler.finish(sample)
    return batch


class TokenPool:
    """Pool blocks holding token ids where the real pool holds keys and values: the copies of a batch are
    made first (all sources read before any target is written), then each row writes its fed tokens."""

    def __init__(self, n_blocks, block_size):
        self.block_size = block_size
        self.slots = [[None] * block_size for _ in range(n_blocks)]

    def run(self, batch):
        copied = [(target, list(self.slots[source])) for source, target in batch.copies]
        for target, contents in copied:
            self.slots[target] = contents
        for seq, n in zip(batch.seqs, batch.n_new):
            for position in range(seq.num_cached_tokens, seq.num_cached_tokens + n):
                block, offset = divmod(position, self.block_size)
                self.slots[seq.block_table[block]][offset] = seq.token_ids[position]

    def read(self, seq):
        """seq's cached tokens, read through its block table."""
        size = self.block_size
        return [self.slots[seq.block_table[p // size]][p % size] for p in range(seq.num_cached_tokens)]


def test_a_group_waits_for_all_its_seats_is_prefilled_once_then_forks():
    manager = BlockManager(BlockAllocator(16), block_size=2)
    scheduler = Scheduler(
        SchedulerConfig(max_num_seqs=3, max_num_batched_tokens=16, max_model_len=64), manager
    )
    kv = TokenPool(16, 2)
    single, group = make_seq(0, [1, 2, 3], 3), make_seq(1, [4, 5, 6], 2, n=3)
    scheduler.add(single), scheduler.add(group)
    assert fake_step(scheduler, kv).seqs == (single,)  # 1 + 3 seats > 3: the group waits
    while not single.is_done:
        fake_step(scheduler, kv)
    batch = fake_step(scheduler, kv)
    assert batch.seqs == (group,) and batch.n_new == (3,)  # one prefill for three samples
    assert list(scheduler.running) == [group, *group.siblings] and scheduler.seats_used == 3
    assert [s.output_ids for s in scheduler.running] == [[100], [101], [102]]
    batch = fake_step(scheduler, kv)  # the first decode: position 3 is in the shared block [2, 3]
    assert len(batch.copies) == 2 and all(kv.read(s) == s.token_ids[:4] for s in scheduler.running)
    scheduler.check()
    with pytest.raises(ValueError, match="need 4 seats at once; max_num_seqs is 3"):
        scheduler.add(make_seq(9, [1, 2], n=4))
    with pytest.raises(ValueError, match=r"prompt 7 \+ 2 new, 3 samples\); the whole pool has 4"):
        Scheduler(SchedulerConfig(3, 16, 64), BlockManager(BlockAllocator(4), 2)).add(
            make_seq(5, range(7), 2, n=3)
        )


def test_sample_zero_preempted_before_its_fork_forks_when_its_prompt_is_done_again():
    # Found by search: a long decode (A) and a group whose prompt goes in chunks of one token in a pool of 5
    # blocks of 2; A's growth preempts the group's sample 0 while its prompt is half prefilled.
    manager = BlockManager(BlockAllocator(5), block_size=2)
    scheduler = Scheduler(SchedulerConfig(3, 3, 64, chunked_prefill=True, prefill_chunk=1), manager)
    kv = TokenPool(5, 2)
    long, group = make_seq(0, [1], 8), make_seq(1, [50, 51, 52, 53, 54], 3, n=2)
    scheduler.add(long), scheduler.add(group)
    preempted_unforked = 0
    while scheduler.has_unfinished():
        batch = fake_step(scheduler, kv)
        preempted_unforked += sum(1 for seq in batch.preempted if seq is group and seq.unforked)
        scheduler.check()
    assert preempted_unforked > 0
    assert [s.output_ids for s in (long, group, *group.siblings)] == [[100] * 8, [100] * 3, [101] * 3]
    assert manager.allocator.n_used == 0


class GroupMachine(RuleBasedStateMachine):
    """Random arrivals of groups of 1-3 samples (some sharing a prefix), aborts of any sample and steps on a
    small pool, prefill first or in chunks; after every rule the invariants hold and every running
    sequence reads its own tokens back through its block table; at the end every block is free."""

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
        budget = max(max_num_seqs, budget if chunked else 16)
        self.scheduler = Scheduler(
            SchedulerConfig(max_num_seqs, budget, 32, chunked, chunk if chunked else None), self.manager
        )
        self.kv = TokenPool(n_blocks, block_size)
        self.seqs, self.next_id = [], 0

    @rule(
        shared=st.integers(0, 6),
        own=st.lists(st.integers(0, 3), min_size=1, max_size=6),
        max_new=st.integers(1, 8),
        n=st.integers(1, 3),
    )
    def arrive(self, shared, own, max_new, n):
        seq = make_seq(self.next_id, [1] * shared + own, max_new, n)
        self.next_id += n
        try:
            self.scheduler.add(seq)
        except ValueError:
            # too many samples for the seats, or too long for the pool: refused, nothing changed
            assert seq not in self.scheduler.waiting
            return
        self.seqs += [seq, *seq.siblings]

    @rule(index=st.integers(0, 80))
    def abort(self, index):
        if index < len(self.seqs) and not self.seqs[index].is_done:
            self.scheduler.finish(self.seqs[index], Status.ABORTED)

    @rule()
    def step(self):
        busy = bool(self.scheduler.waiting or self.scheduler.running)
        batch = fake_step(self.scheduler, self.kv)
        assert not busy or batch.seqs or batch.preempted  # no step without progress

    @invariant()
    def consistent(self):
        if hasattr(self, "scheduler"):
            self.scheduler.check()
            for seq in self.scheduler.running:
                assert self.kv.read(seq) == seq.token_ids[: seq.num_cached_tokens], (
                    f"{seq} reads other tokens"
                )

    def teardown(self):
        if not hasattr(self, "scheduler"):
            return
        for _ in range(1000):
            if not self.scheduler.has_unfinished():
                break
            fake_step(self.scheduler, self.kv)
            self.consistent()
        assert not self.scheduler.has_unfinished(), "the scheduler did not drain"
        assert all(seq.is_done for seq in self.seqs)
        assert all(
            s.output_ids == [100 + s.sample_index] * s.config.max_new_tokens
            for s in self.seqs
            if s.status is Status.FINISHED
        )
        assert self.manager.allocator.n_used == 0 and self.manager.n_cached_free == len(
            self.manager.hash_to_block
        )
        self.manager.check()


TestGroupMachine = GroupMachine.TestCase
TestGroupMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_a_window_table_is_forked_copied_on_write_and_lets_go_of_what_its_window_left():
    """With a sliding window (4 keys), both tables are shared by a fork and copied on the first write; once
    the next token's window is past a block, every holder releases its local block, the global one stays."""
    manager = BlockManager(BlockAllocator(8), 4, window_allocator=BlockAllocator(8), sliding_window=4)
    samples = prefilled_group(manager, range(6), n=2)  # 6 tokens: keys 3..6 are the window of position 6
    assert all(s.window_table == samples[0].window_table for s in samples)
    assert manager.window.allocator.n_used == 2
    for index, seq in enumerate(samples):
        seq.output_ids.append(50 + index)
        manager.append_slot(seq)
    assert (
        len(manager.take_copies()) == len(manager.take_window_copies()) == 1
    )  # the last holder writes in place
    for seq in samples:
        manager.advance(seq, 1)  # 7 cached: position 7 sees keys 4..7, block 0 is out of every window
        assert seq.window_table[0] == NULL_BLOCK and seq.block_table[0] == samples[0].block_table[0]
    manager.check()
    assert manager.window.allocator.n_used == 2 and manager.allocator.n_used == 3  # one private block each
    samples[0].window_table[0] = samples[0].window_table[1]
    with pytest.raises(AssertionError, match="no window sees"):
        manager.check_window_table(samples[0])
