"""First come, first served scheduling with preemption by recomputation (nano-vllm's, without globals).

Each `schedule()` returns one batch, of one of two kinds (prefill first, as nano-vllm):

- **prefill**: if requests wait and the pool can hold the oldest one, admit waiting requests in
  arrival order while the running set stays within `max_num_seqs`, their tokens within
  `max_num_batched_tokens`, and the pool can hold each prompt. Running sequences skip this step.
- **decode**, otherwise: every running sequence feeds one token. One that crosses a block boundary
  needs a free block; if there is none, the NEWEST running sequence is preempted: its blocks are freed
  and it goes back to the FRONT of the waiting queue, to be recomputed later from its prompt and the
  tokens it has generated (its output so far is kept; sampling continues with its own generator).

Never a deadlock: `add` refuses a request that could not run even alone (beyond the model's context,
the whole pool, or the per-step token budget), and a sequence alone in the pool can always grow.

Invariants (`check()`): waiting sequences are WAITING and hold no blocks; running ones are RUNNING and
hold blocks; none is in both; at most max_num_seqs run; the block manager's own invariants hold.

    >>> scheduler = Scheduler(SchedulerConfig(max_num_seqs=4), BlockManager(BlockAllocator(32), 16))
    >>> scheduler.add(seq); batch = scheduler.schedule()     # batch.is_prefill, batch.seqs == [seq]
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from labkit.serving.block_manager import BlockManager
from labkit.serving.request import EngineRequest, Status


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 8  # at most this many sequences running (and in one batch)
    max_num_batched_tokens: int = 512  # at most this many tokens fed in one forward pass
    max_model_len: int = 512  # the model's context: prompt + new tokens must fit in it

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(f"max_num_batched_tokens={self.max_num_batched_tokens} must be at least "
                             f"max_num_seqs={self.max_num_seqs}: a decode step feeds one token per sequence.")


@dataclass(frozen=True)
class ScheduledBatch:
    """What one step runs: the sequences, in batch-row order, and whether it is a prefill step."""

    seqs: tuple[EngineRequest, ...]  # each feeds seq.new_token_ids()
    is_prefill: bool  # True: newly admitted prompts; False: one token per running sequence
    preempted: tuple[EngineRequest, ...] = ()  # sequences sent back to the waiting queue by this schedule

    @property
    def n_tokens(self) -> int:
        return sum(len(seq.new_token_ids()) for seq in self.seqs)


class Scheduler:
    """A waiting queue and a running set over a BlockManager; `schedule()` picks each step's batch."""

    def __init__(self, config: SchedulerConfig, block_manager: BlockManager):
        self.config = config
        self.block_manager = block_manager
        self.waiting: deque[EngineRequest] = deque()  # oldest first; preempted ones go back to the front
        self.running: deque[EngineRequest] = deque()  # admission order: the newest is on the right
        self.n_preemptions = 0  # how many times a sequence was preempted

    def add(self, seq: EngineRequest) -> None:
        """Queue a request, or raise a ValueError if it could never run, even alone."""
        c, manager = self.config, self.block_manager
        if seq.max_length > c.max_model_len:
            raise ValueError(f"The prompt has {len(seq.prompt_ids)} tokens and {seq.config.max_new_tokens} new ones "
                             f"were asked for; the model's context holds {c.max_model_len}.")
        blocks = math.ceil(seq.max_length / manager.block_size)
        if blocks > manager.allocator.n_blocks:
            raise ValueError(f"This request needs up to {blocks} blocks of {manager.block_size} tokens (prompt "
                             f"{len(seq.prompt_ids)} + {seq.config.max_new_tokens} new); the whole pool has "
                             f"{manager.allocator.n_blocks}. Create the engine with more blocks, or ask for less.")
        if seq.max_length - 1 > c.max_num_batched_tokens:
            raise ValueError(f"This request may need {seq.max_length - 1} tokens in one forward pass (a recomputed "
                             f"prompt + new tokens); max_num_batched_tokens is {c.max_num_batched_tokens}.")
        seq.status = Status.WAITING
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledBatch:
        """The next step's batch: a prefill of newly admitted sequences if any fit, else a decode step."""
        admitted = self._admit()
        if admitted:
            return ScheduledBatch(tuple(admitted), True)
        return self._decode()

    def _admit(self) -> list[EngineRequest]:
        admitted, tokens, manager = [], 0, self.block_manager
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            if tokens + len(seq) > self.config.max_num_batched_tokens or not manager.can_allocate(seq.token_ids):
                break
            manager.allocate(seq)
            tokens += len(seq)
            seq.status = Status.RUNNING
            self.running.append(self.waiting.popleft())
            admitted.append(seq)
        return admitted

    def _decode(self) -> ScheduledBatch:
        scheduled, preempted, manager = [], [], self.block_manager
        while self.running:
            seq = self.running.popleft()
            while not manager.can_append(seq):
                victim = self.running.pop() if self.running else seq  # the newest still running
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            else:
                manager.append_slot(seq)
                scheduled.append(seq)
        self.running.extend(scheduled)
        return ScheduledBatch(tuple(scheduled), False, tuple(preempted))

    def _preempt(self, seq: EngineRequest) -> None:
        self.block_manager.free(seq)
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)
        self.n_preemptions += 1

    def finish(self, seq: EngineRequest, status: Status = Status.FINISHED) -> None:
        """Take seq out of the queue or the running set, free its blocks, mark it finished or aborted."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        seq.status = status

    def check(self) -> None:
        """Raise AssertionError unless the invariants of the module doc hold."""
        assert all(s.status is Status.WAITING and not s.block_table for s in self.waiting), "a bad waiting sequence"
        assert all(s.status is Status.RUNNING and s.block_table for s in self.running), "a bad running sequence"
        assert not {id(s) for s in self.waiting} & {id(s) for s in self.running}, "a sequence waits and runs"
        assert len(self.running) <= self.config.max_num_seqs, f"{len(self.running)} sequences running"
        assert set(self.block_manager.holders) == {s.seq_id for s in self.running}, "blocks held by a non-runner"
        self.block_manager.check()
