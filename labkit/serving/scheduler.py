"""First come, first served scheduling with preemption by recomputation (nano-vllm's; vLLM V1's chunked prefill).

Each `schedule()` returns the batch of one step, under one of two policies:

**Prefill first** (nano-vllm, vLLM V0; the default), a step of one of two kinds:
- **prefill**: if requests wait and the pool can hold the oldest one, admit waiting requests in
  arrival order while the running set stays within `max_num_seqs`, their tokens within
  `max_num_batched_tokens`, and the pool can hold each prompt. Running sequences skip this step.
- **decode**, otherwise: every running sequence feeds one token.

**Chunked prefill** (`chunked_prefill=True`, vLLM V1): every step feeds each decoding sequence its one
token first, then spends what is left of the step's token budget (`max_num_batched_tokens`) on
prompts: the rest of prompts already started, then newly admitted ones, each cut to at most
`prefill_chunk` tokens. A long prompt is spread over several steps; the decodes never wait for it.

In both, a decoding sequence that crosses a block boundary needs a free block; if there is none, the
NEWEST running sequence is preempted: its blocks are freed and it goes back to the FRONT of the
waiting queue, to be recomputed later from its prompt and the tokens it has generated (its output so
far is kept; sampling continues with its own generator; blocks it had computed stay in the prefix cache).

**n samples of one prompt**: sample 0 is queued alone but takes a seat for every sample still to fork
from it (`EngineRequest.seats`), and is admitted only when its group's seats are free and, beyond its
prompt's blocks, one block per later sample (each one's first copy or fresh block). Its prompt is
prefilled once; then `fork` seats the other samples, sharing its blocks (copy on write: the block
manager's `copies` travel with the batch, `ScheduledBatch.copies` and `window_copies`). A sample
preempted later is recomputed like any request; sample 0 preempted before its fork forks when its prompt
is done again.

Never a deadlock: `add` refuses a request that could not run even alone (beyond the whole pool, or,
without chunks, the per-step token budget), and a sequence alone in the pool can always grow. The context
rule is not checked here but once, where the request is made: the engine's `check_request` holds it to
the smaller of the model's context and `max_model_len` (vLLM checks it in its input processor too).

**Two kinds of block** (a Gemma3): admission (`can_admit`) counts a prompt's global blocks and the local
blocks of its first chunk's window; each later chunk asks for its own local blocks (`can_grow_window`), and
each decode's slot (`can_append`) counts both pools; when a chunk's local blocks are short, the newest
running sequence is preempted, as for a decode's; preemption frees both. A sequence's local blocks that left
its window are already free (the block manager's `advance`), so the local pool can be much smaller than
the global one (`labkit.serving.capacity.default_window_blocks`). `add` refuses a request whose group could
not run alone in either pool.

**Speculation** (`drafts`, labkit.serving.speculation): once every row has its slots, each decoding
sequence may feed draft tokens after its own, within what is left of the token budget and the free blocks
(`BlockManager.reserve_drafts`): drafts are the first thing dropped, and never preempt.

Invariants (`check()`): waiting sequences are WAITING and hold no blocks; running ones are RUNNING and
hold blocks; none is in both; the running sequences' seats (samples still to fork included) are at most
max_num_seqs; a sample still to fork is WAITING, holds no blocks and is in neither queue, and its sample
0 has no output yet; the block manager's own invariants hold.

    >>> scheduler = Scheduler(SchedulerConfig(max_num_seqs=4), BlockManager(BlockAllocator(32), 16))
    >>> scheduler.add(seq); batch = scheduler.schedule()     # batch.kind == "prefill", batch.seqs == (seq,)
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from labkit.core.arguments import check_int
from labkit.serving.block_manager import BlockManager
from labkit.serving.request import EngineRequest, Status


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 8  # at most this many sequences running (and in one batch)
    max_num_batched_tokens: int = 512  # at most this many tokens fed in one forward pass (the step's budget)
    max_model_len: int = 512  # prompt + new tokens must fit (<= the model's context; check_request checks it)
    chunked_prefill: bool = False  # split prompts across steps, beside the running decodes (vLLM V1)
    prefill_chunk: int | None = (
        None  # with chunked_prefill: at most this many prompt tokens per sequence per step
    )

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "prefill_chunk"):
            # prefill_chunk None: the whole budget
            if getattr(self, name) is not None or name != "prefill_chunk":
                check_int(name, getattr(self, name), minimum=1)
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens={self.max_num_batched_tokens} must be at least "
                f"max_num_seqs={self.max_num_seqs}: a decode step feeds one token per sequence."
            )
        if not isinstance(self.chunked_prefill, bool):
            raise ValueError(f"chunked_prefill must be True or False, got {self.chunked_prefill!r}.")
        if self.prefill_chunk is not None and not self.chunked_prefill:
            raise ValueError("prefill_chunk splits prompts into chunks: it needs chunked_prefill=True.")

    @property
    def chunk(self) -> int:
        """The most prompt tokens one sequence feeds in one step."""
        return self.prefill_chunk or self.max_num_batched_tokens


@dataclass(frozen=True)
class ScheduledBatch:
    """What one step runs: the sequences in batch-row order, how many tokens each feeds, what kind of step.

    Row i feeds seqs[i].token_ids[num_cached_tokens : num_cached_tokens + n_new[i]]. Decode rows (one
    token, the last) come first, then prompts being prefilled (whole, or a chunk of them).
    """

    seqs: tuple[EngineRequest, ...]
    n_new: tuple[int, ...]  # tokens each row feeds this step
    n_decode: int = 0  # the first n_decode rows decode; the others prefill
    preempted: tuple[EngineRequest, ...] = ()  # sequences sent back to the waiting queue by this schedule
    # (shared, private) blocks to copy before the pass (copy on write), in the global and the local pool
    copies: tuple[tuple[int, int], ...] = ()
    window_copies: tuple[tuple[int, int], ...] = ()
    # speculation: each row's draft tokens, fed after its pending token and counted in n_new (() : none)
    drafts: tuple[tuple[int, ...], ...] = ()

    @property
    def n_tokens(self) -> int:
        return sum(self.n_new)

    @property
    def kind(self) -> str:
        """ "decode" (one token per row), "prefill" (prompts only) or "mixed" (both in one forward pass)."""
        return "decode" if self.n_decode == len(self.seqs) else "prefill" if self.n_decode == 0 else "mixed"

    @property
    def is_prefill(self) -> bool:
        return self.kind == "prefill"


def window_blocks_alone(seq: EngineRequest, chunk: int, window: int, block_size: int) -> int:
    """The most local blocks seq's group could hold at once running alone: a chunk of up to `chunk` tokens
    with its window (and one block per sample still to fork), or every sample decoding with its window.

    A step feeding n tokens holds the blocks of its W - 1 + n keys, at most ceil((W - 2 + n) / B) + 1.

    >>> window_blocks_alone(seq, chunk=256, window=512, block_size=16)   # 49 for a long prompt
    """
    most = math.ceil(seq.max_length / block_size)  # no table is longer than the longest sequence's

    def held(n: int) -> int:
        return min(most, math.ceil(max(0, window - 2 + n) / block_size) + 1)

    return max(held(chunk) + len(seq.unforked), seq.seats * held(1))


def is_decoding(seq: EngineRequest) -> bool:
    """Whether every token but the last is cached: the next step feeds one token and chooses the next."""
    return seq.num_cached_tokens == len(seq) - 1


class Scheduler:
    """A waiting queue and a running set over a BlockManager; `schedule()` picks each step's batch.

    drafts (speculation): drafts(decodes, rows, tokens, budget) -> each row's draft tokens, their slots
    reserved (`Speculator.drafts`); asked once every row has its own slots, the step's tokens counted."""

    def __init__(self, config: SchedulerConfig, block_manager: BlockManager, drafts: Callable | None = None):
        self.config = config
        self.block_manager = block_manager
        self.drafts = drafts
        self.waiting: deque[EngineRequest] = deque()  # oldest first; preempted ones go back to the front
        self.running: deque[EngineRequest] = deque()  # admission order: the newest is on the right
        self.n_preemptions = 0  # how many times a sequence was preempted

    def add(self, seq: EngineRequest) -> None:
        """Queue a request, or raise a ValueError if it could never run, even alone. Its context was checked
        where it was made (check_request, against max_model_len): not again here."""
        c, manager = self.config, self.block_manager
        if seq.seats > c.max_num_seqs:
            raise ValueError(
                f"This request's {seq.seats} samples share one prefill, so they need {seq.seats} seats at "
                f"once; max_num_seqs is {c.max_num_seqs}."
            )
        # a group's admission
        blocks = max(
            math.ceil(seq.max_length / manager.block_size),
            math.ceil(len(seq) / manager.block_size) + len(seq.unforked),
        )
        if blocks > manager.allocator.n_blocks:
            samples = f", {seq.seats} samples" if seq.unforked else ""
            raise ValueError(
                f"This request needs up to {blocks} blocks of {manager.block_size} tokens (prompt "
                f"{len(seq.prompt_ids)} + {seq.config.max_new_tokens} new{samples}); the whole pool has "
                f"{manager.allocator.n_blocks}. Create the engine with more blocks, or ask for less."
            )
        self._check_window_room(seq)
        if not c.chunked_prefill and seq.max_length - 1 > c.max_num_batched_tokens:
            raise ValueError(
                f"This request may need {seq.max_length - 1} tokens in one forward pass (a recomputed "
                f"prompt + new tokens); max_num_batched_tokens is {c.max_num_batched_tokens}."
            )
        seq.status = Status.WAITING
        self.waiting.append(seq)

    def _check_window_room(self, seq: EngineRequest) -> None:
        """Refuse a request whose group could not run alone in the local layers' pool (none: nothing)."""
        manager = self.block_manager
        if manager.window is None:
            return
        chunk = self.config.chunk if self.config.chunked_prefill else seq.max_length - 1
        need = window_blocks_alone(seq, chunk, manager.sliding_window, manager.block_size)
        if need > manager.window.allocator.n_blocks:
            raise ValueError(
                f"This request may need {need} blocks of the sliding-window layers' pool at once (its "
                f"window, a chunk of up to {chunk} tokens, {seq.seats} sample(s)); that pool has "
                f"{manager.window.allocator.n_blocks}. Create the engine with more n_window_blocks."
            )

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def seats_used(self) -> int:
        """Seats of the running sequences: one each, and one per sample still to fork from them."""
        return sum(seq.seats for seq in self.running)

    def _seats_for_next(self) -> bool:
        """Whether the oldest waiting request (its whole group) has seats."""
        return self.seats_used + self.waiting[0].seats <= self.config.max_num_seqs

    def schedule(self) -> ScheduledBatch:
        """The next step's batch (see the module doc for the two policies)."""
        return self._schedule_chunked() if self.config.chunked_prefill else self._schedule_prefill_first()

    def _schedule_prefill_first(self) -> ScheduledBatch:
        """Whole prompts of newly admitted sequences if any fit, else one decode token per running sequence."""
        admitted, tokens, manager = [], 0, self.block_manager
        while self.waiting and self._seats_for_next():
            seq = self.waiting[0]
            if tokens + len(seq) > self.config.max_num_batched_tokens or not manager.can_admit(seq):
                break
            self._admit()
            self.block_manager.publish(seq, len(seq))  # named now: a prompt admitted after it may share it
            tokens += len(seq) - seq.num_cached_tokens
            admitted.append(seq)
        if admitted:
            return self._batch([], admitted, [len(seq) - seq.num_cached_tokens for seq in admitted], ())
        preempted = self._reserve_decode_slots()
        return self._batch(list(self.running), [], [], preempted)

    def _schedule_chunked(self) -> ScheduledBatch:
        """Every decode first (one token each), then prompt chunks within the step's token budget."""
        preempted = list(self._reserve_decode_slots())
        decodes = [seq for seq in self.running if is_decoding(seq)]
        budget = self.config.max_num_batched_tokens - len(decodes)
        prefills, chunks = [], []
        for seq in [seq for seq in self.running if not is_decoding(seq)]:  # prompts started in earlier steps
            if seq not in self.running or not self._window_room(seq, budget, decodes, preempted):
                continue  # preempted, for an older prompt's chunk or its own
            self.block_manager.grow_window(seq, self._chunk(seq, budget))
            chunks.append(self._chunk(seq, budget))
            prefills.append(seq)
            budget -= chunks[-1]
        while (
            not preempted
            and budget > 0
            and self.waiting
            and self._seats_for_next()
            and self.block_manager.can_admit(self.waiting[0], min(budget, self.config.chunk))
        ):
            prefills.append(self._admit(min(budget, self.config.chunk)))
            chunks.append(self._chunk(prefills[-1], budget))
            self.block_manager.publish(prefills[-1], prefills[-1].num_cached_tokens + chunks[-1])
            budget -= chunks[-1]
        rows = [(seq, n) for seq, n in zip(prefills, chunks) if n > 0]  # a started prompt may wait a step
        return self._batch(decodes, [seq for seq, _ in rows], [n for _, n in rows], tuple(preempted))

    def _window_room(
        self, seq: EngineRequest, budget: int, decodes: list[EngineRequest], preempted: list[EngineRequest]
    ) -> bool:
        """Whether seq's next chunk has its local blocks, preempting the newest running sequences (seq itself
        last) until it does; a preempted decode leaves `decodes`. False if seq itself was preempted."""
        manager = self.block_manager
        while not manager.can_grow_window(seq, self._chunk(seq, budget)):
            victim = self.running.pop()  # the newest still running
            self._preempt(victim)
            preempted.append(victim)
            if victim in decodes:
                decodes.remove(victim)
            if victim is seq:
                return False
        return True

    def _chunk(self, seq: EngineRequest, budget: int) -> int:
        """How many of seq's uncached tokens this step feeds: all, or what the budget and chunk size allow."""
        return max(0, min(len(seq) - seq.num_cached_tokens, budget, self.config.chunk))

    def _admit(self, limit: int | None = None) -> EngineRequest:
        """The oldest waiting sequence, given its blocks (cached prefix reused; local ones for its first
        `limit` new tokens, None: all) and moved to running."""
        seq = self.waiting.popleft()
        self.block_manager.allocate(seq, limit)
        seq.status = Status.RUNNING
        self.running.append(seq)
        return seq

    def _batch(
        self,
        decodes: list[EngineRequest],
        prefills: list[EngineRequest],
        chunks: list[int],
        preempted: tuple[EngineRequest, ...],
    ) -> ScheduledBatch:
        """The step's batch; each row's blocks are named as computed by its end (prefix cache), a draft's
        never (it may be rejected). With `drafts`, decodes draft within what the token budget has left.

        Within one step a later row may read blocks an earlier row computes: each layer writes every
        row's new keys and values before any row attends (`BatchKV`)."""
        seqs, n_new = decodes + prefills, [1] * len(decodes) + chunks
        for seq, n in zip(seqs, n_new):
            self.block_manager.publish(seq, seq.num_cached_tokens + n)
        budget = self.config.max_num_batched_tokens
        drafts = self.drafts(decodes, len(seqs), sum(n_new), budget) if self.drafts else ()
        n_new = [n + len(draft) for n, draft in zip(n_new, drafts)] if drafts else n_new
        manager = self.block_manager
        copies, window_copies = tuple(manager.take_copies()), tuple(manager.take_window_copies())
        return ScheduledBatch(
            tuple(seqs), tuple(n_new), len(decodes), preempted, copies, window_copies, drafts
        )

    def _reserve_decode_slots(self) -> tuple[EngineRequest, ...]:
        """A slot for each decoding sequence's next token; when the pool is full, preempt the newest."""
        kept, preempted, manager = [], [], self.block_manager
        while self.running:
            seq = self.running.popleft()
            if not is_decoding(seq):  # a prompt being prefilled: its chunk asks for its blocks
                kept.append(seq)
                continue
            while not manager.can_append(seq):
                victim = self.running.pop() if self.running else seq  # the newest still running
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            else:
                manager.append_slot(seq)
                kept.append(seq)
        self.running.extend(kept)
        return tuple(preempted)

    def _preempt(self, seq: EngineRequest) -> None:
        self.block_manager.free(seq)
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)
        self.n_preemptions += 1

    def fork(self, parent: EngineRequest) -> list[EngineRequest]:
        """parent's prompt is now cached (its logits are in hand): seat the samples still to fork from it,
        each sharing its blocks and cached tokens, newest last. Returns them (none for a request of one)."""
        children, parent.unforked = parent.unforked, []
        for child in children:
            self.block_manager.fork(parent, child)
            child.status = Status.RUNNING
            self.running.append(child)
        return children

    def finish(self, seq: EngineRequest, status: Status = Status.FINISHED) -> None:
        """Take seq out of the queue or the running set, free its blocks, mark it finished or aborted. A sample
        still to fork leaves its sample 0's list; sample 0 finished before its fork takes those along."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        for head in (*self.waiting, *self.running):
            if seq in head.unforked:
                head.unforked.remove(seq)
        for child in seq.unforked:
            child.status = status
        seq.unforked = []
        self.block_manager.free(seq)
        seq.status = status

    def check(self) -> None:
        """Raise AssertionError unless the invariants of the module doc hold."""
        assert all(s.status is Status.WAITING and not s.block_table for s in self.waiting), (
            "a bad waiting sequence"
        )
        assert all(s.status is Status.RUNNING and s.block_table for s in self.running), (
            "a bad running sequence"
        )
        assert not {id(s) for s in self.waiting} & {id(s) for s in self.running}, "a sequence waits and runs"
        assert self.seats_used <= self.config.max_num_seqs, f"{self.seats_used} seats taken"
        for head in (*self.waiting, *self.running):
            assert not (head.unforked and head.output_ids), f"{head} has output but did not fork"
            for child in head.unforked:
                assert child.status is Status.WAITING and not child.block_table, (
                    f"a bad unforked sample {child}"
                )
                assert child not in self.waiting and child not in self.running, (
                    f"{child} is queued before its fork"
                )
        assert set(self.block_manager.holders) == {s.request_id for s in self.running}, (
            "blocks held by a non-runner"
        )
        self.block_manager.check()
