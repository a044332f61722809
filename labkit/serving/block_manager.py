"""Which pool blocks each running sequence holds, with prefix caching (Kwon et al. 2023; vLLM; nano-vllm).

Pure Python over `labkit.core.paged.BlockAllocator` (through `NamedBlocks`, one per kind of layer): no
tensors. A sequence of n tokens needs ceil(n / block_size) blocks. **Prefix caching**: a full block is named
by a chain hash, hash(hash of everything before it, its own tokens), so two blocks share a name only when
everything up to and including them is equal. A block is named once the step that computes its keys and
values is scheduled (`publish`), prompt or generated tokens alike. A new sequence whose first tokens match
named blocks reuses them (reference count + 1) and skips computing them; only blocks among its first n - 1
tokens are looked up, so at least one token is always computed (its logits choose the next token).

**Reuse after a request ends** (as vLLM): a freed block keeps its name and its contents while it sits
free. A later request with the same prefix takes it back; a request that needs a fresh block takes the
least recently freed one, and if that one had a name, the name is evicted (LRU).

**Sliding windows** (Gemma 3's local layers; vLLM's hybrid KV cache manager, its SlidingWindowManager):
with a `window_allocator`, each sequence has a second table, `window_table`, in the pool of the local
layers. Global blocks are taken for the whole prompt at admission; local ones one scheduled chunk at a time
(vLLM's SlidingWindowManager): a step that feeds tokens c .. c + n - 1 needs the local blocks of keys
c - window + 1 .. c + n - 1 (`allocate(seq, limit)` for the first chunk, `grow_window` for a later one,
`append_slot` for a decode), so the window table reaches ceil((c + n) / block_size) blocks. Once c tokens
are cached, the first (c - window + 1) // block_size entries are released (`advance`) and become
NULL_BLOCK: a decoding Gemma3 sequence holds at most ceil((window - 1) / block_size) + 1 local blocks,
while its global blocks grow. A prefix hit of L tokens needs every global block of the prefix and, for the
local layers, the blocks that hold keys L - window + 1 .. L - 1 (the window of the first token computed);
the hit is the longest L for which both kinds still hold theirs, each kind naming its own blocks.

**Forks and copy on write** (vLLM's parallel sampling): `fork` gives a sample of the same prompt the
parent's tables (reference counts + 1, nothing copied). Positions only grow, so a full shared block is
never written again; only the last, partly filled prompt block is. Before a decode feeds a token into a
block that another table also holds, `append_slot` gives the sequence a fresh block, records the pair
(shared, fresh) in `copies` (`window_copies` for the local layers' pool), and releases its reference on
the shared one; the engine copies every pair before the forward pass writes. The last holder writes in place.

Invariants (`check()`), for each kind of block:
1. the allocator's own: every block is either free or used, never both;
2. a block's reference count equals the number of tables that hold it;
3. every named block holds exactly block_size tokens and names map one to one (a named block may be free);
4. a sequence's table covers its cached tokens and at most the tokens it holds:
   num_cached_tokens <= len(table) * block_size and len(table) <= ceil(len(seq) / block_size);
5. a block held by several tables sits at the same index in each, and its holders agree on the tokens
   in it, as far as each has them cached (a write into a shared block, without its copy, breaks this);
6. a window table holds exactly the blocks from its window's start to its computed/scheduled end e
   (`window_end`, num_cached_tokens <= e <= len(seq)): ceil(e / block_size) entries, NULL_BLOCK before
   index (num_cached_tokens - window + 1) // block_size, a block from it on.

    >>> manager = BlockManager(BlockAllocator(8), block_size=4)
    >>> manager.allocate(seq)                  # seq.block_table == [0, 1] for 6 tokens
    >>> manager.publish(seq, 6); manager.free(seq); manager.check()   # block 0 stays named, and free
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from collections.abc import Sequence as Ids

from labkit.core.arguments import check_int
from labkit.core.paged import BlockAllocator
from labkit.serving.draft_slots import DraftSlots
from labkit.serving.named_blocks import NULL_BLOCK, NamedBlocks
from labkit.serving.request import EngineRequest

NO_HASH = -1  # the chain hash "before" the first block


def chain_hashes(token_ids: Ids[int], block_size: int) -> list[tuple[int, tuple[int, ...]]]:
    """(chain hash, tokens) of every full block among the first len - 1 tokens, in order."""
    out, previous = [], NO_HASH
    for start in range(0, len(token_ids) - 1 - block_size + 1, block_size):
        tokens = tuple(token_ids[start : start + block_size])
        previous = hash((previous, tokens))
        out.append((previous, tokens))
    return out


class BlockManager(DraftSlots):
    """Block tables of the sequences that hold blocks, a prefix cache of full blocks, and its hit rate.

    window_allocator and sliding_window (together, or neither): the local layers' pool and their window,
    for a Gemma3 (module doc, "Sliding windows")."""

    def __init__(
        self,
        allocator: BlockAllocator,
        block_size: int,
        window_allocator: BlockAllocator | None = None,
        sliding_window: int | None = None,
    ):
        check_int("block_size", block_size, minimum=1, note="tokens per block")
        if (window_allocator is None) != (sliding_window is None):
            raise ValueError("Give window_allocator and sliding_window together (a Gemma3's), or neither.")
        if sliding_window is not None:
            check_int("sliding_window", sliding_window, minimum=1, note="keys a local layer's query sees")
        self.full = NamedBlocks(allocator)
        self.window = None if window_allocator is None else NamedBlocks(window_allocator)
        self.block_size, self.sliding_window = block_size, sliding_window
        self.holders: dict[int, EngineRequest] = {}  # request_id -> sequence holding blocks
        # request_id -> (blocks named so far, last chain hash)
        self.published: dict[int, tuple[int, int]] = {}
        self.window_end: dict[int, int] = {}  # request_id -> tokens its window table has room for
        self.lookups = 0  # full prompt blocks looked up in the prefix cache
        self.hits = 0  # ... and found there (in use by another sequence, or free and still named)
        # (shared, private) pairs to copy before the next forward pass, in the global and the local pool
        self.copies: list[tuple[int, int]] = []
        self.window_copies: list[tuple[int, int]] = []

    allocator = property(lambda self: self.full.allocator)  # the (global layers') pool's allocator
    hash_to_block = property(lambda self: self.full.hash_to_block)
    block_hash = property(lambda self: self.full.block_hash)
    evictions = property(lambda self: self.full.evictions)
    n_cached_free = property(lambda self: self.full.n_cached_free)

    @property
    def hit_rate(self) -> float:
        """Share of looked-up full blocks that were already in the pool (0 before any lookup)."""
        return self.hits / self.lookups if self.lookups else 0.0

    def skipped_blocks(self, computed: int) -> int:
        """Leading blocks no local layer sees once `computed` tokens are cached (0 without a window): the
        next query, at position `computed`, sees keys from computed - window + 1 on."""
        if self.sliding_window is None:
            return 0
        return max(0, computed - self.sliding_window + 1) // self.block_size

    def cached_prefix(self, token_ids: Ids[int]) -> list[int]:
        """The blocks holding the leading full blocks of token_ids that are already in the pool."""
        blocks = []
        for chain_hash, tokens in chain_hashes(token_ids, self.block_size):
            block = self.full.cached(chain_hash, tokens)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def prefix_hit(self, token_ids: Ids[int]) -> tuple[list[int], list[int]]:
        """(global blocks, local blocks) of the longest cached prefix that both kinds still hold: every
        global block of it, and the local blocks from its first token's window on (module doc)."""
        full = self.cached_prefix(token_ids)
        if self.window is None:
            return full, []
        named = chain_hashes(token_ids, self.block_size)
        for hit in range(len(full), -1, -1):
            window = [
                self.window.cached(*named[i]) for i in range(self.skipped_blocks(hit * self.block_size), hit)
            ]
            if None not in window:
                return full[:hit], window
        raise AssertionError("unreachable: a hit of 0 blocks needs no local block")

    def cached_prefix_blocks(self, token_ids: Ids[int]) -> int:
        """How many leading full blocks of token_ids are already in the pool (for every kind of layer)."""
        return len(self.prefix_hit(token_ids)[0])

    def needed(self, token_ids: Ids[int], limit: int | None = None) -> tuple[int, int]:
        """Free (global, local) blocks that allocating token_ids would take: fresh ones, and cached ones
        that sit free; local 0 without a window. limit: the most tokens its first step feeds (None: all);
        the local blocks are those of that first chunk's window."""
        full, window = self.prefix_hit(token_ids)
        total = math.ceil(len(token_ids) / self.block_size)
        need_full = total - sum(self.full.in_use(block) for block in full)
        if self.window is None:
            return need_full, 0
        hit = len(full) * self.block_size
        end = len(token_ids) if limit is None else min(len(token_ids), hit + limit)
        held = math.ceil(end / self.block_size) - self.skipped_blocks(hit)
        return need_full, held - sum(self.window.in_use(block) for block in window)

    def blocks_needed(self, token_ids: Ids[int]) -> int:
        """Free blocks of the (global layers') pool that allocating token_ids would take."""
        return self.needed(token_ids)[0]

    def _fits(self, token_ids: Ids[int], extra: int = 0, limit: int | None = None) -> bool:
        """Whether both kinds have the blocks of token_ids (its first `limit` new tokens' window) free, and
        `extra` more each."""
        full, window = self.needed(token_ids, limit)
        return full + extra <= self.full.allocator.n_free and (
            self.window is None or window + extra <= self.window.allocator.n_free
        )

    def can_allocate(self, token_ids: Ids[int], limit: int | None = None) -> bool:
        return self._fits(token_ids, limit=limit)

    def can_admit(self, seq: EngineRequest, limit: int | None = None) -> bool:
        """Whether seq's blocks are free (local ones for its first `limit` new tokens), and one more of each
        kind for each sample still to fork from it (the copy or the fresh block its first decode will need)."""
        return self._fits(seq.token_ids, len(seq.unforked), limit)

    def allocate(self, seq: EngineRequest, limit: int | None = None) -> None:
        """Give seq global blocks for all its tokens: its cached prefix blocks shared or reused, the rest
        fresh; local blocks for the window of its first chunk, at most `limit` new tokens (None: all)."""
        if seq.request_id in self.holders or seq.block_table:
            raise ValueError(
                f"Request {seq.request_id} already holds blocks {seq.block_table}; free them first."
            )
        if not self.can_allocate(seq.token_ids, limit):
            raise ValueError(
                f"Request {seq.request_id} needs {self.blocks_needed(seq.token_ids)} blocks; "
                f"{self.full.allocator.n_free} are free (and of the local layers' pool, if any: "
                f"{self.needed(seq.token_ids, limit)[1]} needed). Ask can_allocate() first."
            )
        self.lookups += len(chain_hashes(seq.token_ids, self.block_size))
        full, window = self.prefix_hit(seq.token_ids)
        hits, total = len(full), math.ceil(len(seq) / self.block_size)
        self.hits += hits
        seq.block_table = [self.full.take_cached(b) for b in full] + [
            self.full.fresh() for _ in range(hits, total)
        ]
        if self.window is not None:
            skipped = [NULL_BLOCK] * self.skipped_blocks(hits * self.block_size)
            seq.window_table = skipped + [self.window.take_cached(block) for block in window]
        seq.num_cached_tokens = hits * self.block_size
        if seq.prefix_cached_tokens is None:  # its first admission: what /metrics counts as prefix-cache hits
            seq.prefix_cached_tokens = seq.num_cached_tokens
        self.holders[seq.request_id] = seq
        self.published[seq.request_id] = (hits, self.full.block_hash[full[-1]][0] if hits else NO_HASH)
        self.window_end[seq.request_id] = seq.num_cached_tokens
        self.grow_window(seq, len(seq) - seq.num_cached_tokens if limit is None else limit)

    def window_short(self, seq: EngineRequest, n_new: int) -> int:
        """Fresh local blocks seq's window table needs before a step feeds its next n_new tokens."""
        if self.window is None:
            return 0
        end = min(len(seq), seq.num_cached_tokens + n_new)
        return max(0, math.ceil(end / self.block_size) - len(seq.window_table))

    def can_grow_window(self, seq: EngineRequest, n_new: int) -> bool:
        return self.window is None or self.window_short(seq, n_new) <= self.window.allocator.n_free

    def grow_window(self, seq: EngineRequest, n_new: int) -> None:
        """Fresh local blocks for seq's next n_new tokens (a chunk); nothing without a window."""
        if self.window is None:
            return
        if not self.can_grow_window(seq, n_new):
            raise ValueError(
                f"Request {seq.request_id} needs {self.window_short(seq, n_new)} local blocks for {n_new} "
                f"tokens; {self.window.allocator.n_free} are free. Ask can_grow_window() first."
            )
        seq.window_table += [self.window.fresh() for _ in range(self.window_short(seq, n_new))]
        end = min(len(seq), seq.num_cached_tokens + n_new)
        self.window_end[seq.request_id] = max(self.window_end[seq.request_id], end)

    def fork(self, parent: EngineRequest, child: EngineRequest) -> None:
        """child (a sample of parent's prompt, no blocks yet) shares every block of parent's tables,
        reference counts + 1, and its cached tokens and names; no copy now (copy on write, `append_slot`)."""
        if child.request_id in self.holders or child.block_table or parent.request_id not in self.holders:
            raise ValueError(
                f"Fork a sequence that holds blocks into one that holds none; got {parent} -> {child}."
            )
        child.block_table = [self.full.allocator.share(block) for block in parent.block_table]
        if self.window is not None:
            share = self.window.allocator.share
            child.window_table = [NULL_BLOCK if b == NULL_BLOCK else share(b) for b in parent.window_table]
        child.num_cached_tokens = parent.num_cached_tokens
        self.holders[child.request_id] = child
        self.published[child.request_id] = self.published[parent.request_id]
        self.window_end[child.request_id] = self.window_end[parent.request_id]

    def publish(self, seq: EngineRequest, computed_tokens: int) -> None:
        """Name seq's full blocks among its first `computed_tokens` tokens (computed by the end of this step),
        in each kind. A block whose name another block already has (the same prefix computed twice at
        once) stays unnamed and is simply freed with its sequence."""
        named, previous = self.published[seq.request_id]
        ids = seq.token_ids
        for index in range(named, computed_tokens // self.block_size):
            tokens = tuple(ids[index * self.block_size : (index + 1) * self.block_size])
            previous = hash((previous, tokens))
            self.full.name(seq.block_table[index], previous, tokens)
            local = seq.window_table[index] if index < len(seq.window_table) else NULL_BLOCK
            if self.window is not None and local != NULL_BLOCK:
                self.window.name(local, previous, tokens)
            named = index + 1
        self.published[seq.request_id] = (named, previous)

    def advance(self, seq: EngineRequest, n_computed: int) -> None:
        """seq's next n_computed tokens are now cached: count them, and release the local blocks that left
        its window (a named one stays named, free, until its memory is needed)."""
        seq.num_cached_tokens += n_computed
        if self.window is None:
            return
        self.window_end[seq.request_id] = max(self.window_end[seq.request_id], seq.num_cached_tokens)
        for index in range(self.skipped_blocks(seq.num_cached_tokens)):
            if seq.window_table[index] != NULL_BLOCK:
                self.window.allocator.release(seq.window_table[index])
                seq.window_table[index] = NULL_BLOCK

    def free(self, seq: EngineRequest) -> None:
        """Release every block of seq, last block first, in each kind (a shared block stays until its last
        holder lets go; a named one stays named, free, until its memory is needed)."""
        self.full.release(seq.block_table)
        if self.window is not None:
            self.window.release(seq.window_table)
        seq.block_table, seq.window_table, seq.num_cached_tokens = [], [], 0
        self.holders.pop(seq.request_id, None)
        self.published.pop(seq.request_id, None)
        self.window_end.pop(seq.request_id, None)

    def needs_block(self, seq: EngineRequest, table: list[int] | None = None) -> bool:
        """Whether the next token fed (at position len(seq) - 1) starts a new block (of `table`: by default
        the global one)."""
        return len(seq.block_table if table is None else table) * self.block_size < len(seq)

    def kinds(self, seq: EngineRequest) -> list[tuple[NamedBlocks, list[int], list[tuple[int, int]]]]:
        """(blocks, seq's table, copies) of each kind of layer: the global one, and the local one if any."""
        out = [(self.full, seq.block_table, self.copies)]
        return out if self.window is None else [*out, (self.window, seq.window_table, self.window_copies)]

    def _shared_next(self, names: NamedBlocks, table: list[int], seq: EngineRequest) -> bool:
        index = (len(seq) - 1) // self.block_size
        return index < len(table) and names.allocator.is_shared(table[index])

    def needs_copy(self, seq: EngineRequest) -> bool:
        """Whether the next token fed lands in a block another table also holds (copy on write first)."""
        return any(self._shared_next(names, table, seq) for names, table, _ in self.kinds(seq))

    def can_append(self, seq: EngineRequest) -> bool:
        """Whether each kind has the block a decode of seq needs (fresh or a copy), if it needs one."""
        return all(
            not (self.needs_block(seq, table) or self._shared_next(names, table, seq))
            or names.allocator.n_free >= 1
            for names, table, _ in self.kinds(seq)
        )

    def append_slot(self, seq: EngineRequest) -> None:
        """Before a decode step, in each kind: a fresh block when the token to feed crosses a block boundary;
        a private copy (recorded in `copies` or `window_copies`) when it lands in a shared block."""
        index = (len(seq) - 1) // self.block_size
        if self.window is not None:
            self.window_end[seq.request_id] = len(seq)
        for names, table, copies in self.kinds(seq):
            if self.needs_block(seq, table):
                table.append(names.fresh())
            elif self._shared_next(names, table, seq):
                shared, private = table[index], names.fresh()
                copies.append((shared, private))
                names.allocator.release(shared)
                table[index] = private

    def take_copies(self) -> list[tuple[int, int]]:
        """The (shared, private) pairs of the global pool recorded since the last call, to copy first."""
        copies, self.copies = self.copies, []
        return copies

    def take_window_copies(self) -> list[tuple[int, int]]:
        """The same for the local layers' pool."""
        copies, self.window_copies = self.window_copies, []
        return copies

    def check(self) -> None:
        """Raise AssertionError unless invariants 1-6 of the module doc hold."""
        seqs = list(self.holders.values())
        self.full.check([seq.block_table for seq in seqs], self.block_size)
        if self.window is not None:
            self.window.check([seq.window_table for seq in seqs], self.block_size)
        assert set(self.published) == set(self.holders), "a name record for a sequence that holds no blocks"
        for seq in seqs:
            assert seq.num_cached_tokens <= len(seq.block_table) * self.block_size, (
                f"{seq}: cached past its table"
            )
            assert len(seq.block_table) <= math.ceil(len(seq) / self.block_size), (
                f"{seq}: more blocks than tokens"
            )
            self.check_window_table(seq)
        self.check_shared_blocks(lambda seq: seq.block_table)
        self.check_shared_blocks(lambda seq: seq.window_table)

    def check_window_table(self, seq: EngineRequest) -> None:
        """Invariant 6: the window table holds exactly the blocks from its window's start to its end."""
        if self.window is None:
            assert not seq.window_table, f"{seq}: a window table without a window"
            return
        end = self.window_end[seq.request_id]
        assert seq.num_cached_tokens <= end <= len(seq), f"{seq}: its window ends at {end}"
        assert len(seq.window_table) == math.ceil(end / self.block_size), (
            f"{seq}: {len(seq.window_table)} window entries for {end} tokens computed or scheduled"
        )
        first = self.skipped_blocks(seq.num_cached_tokens)
        table = seq.window_table
        assert set(table[:first]) <= {NULL_BLOCK}, f"{seq}: holds local blocks no window sees: {table}"
        assert NULL_BLOCK not in table[first:], f"{seq}: released a local block its window sees: {table}"

    def check_shared_blocks(self, table_of: Callable[[EngineRequest], list[int]]) -> None:
        """Invariant 5: a shared block is at one index of every table holding it, with the same tokens."""
        held = defaultdict(list)  # block -> (sequence, index in its table) of each table holding it
        for seq in self.holders.values():
            for index, block in enumerate(table_of(seq)):
                if block != NULL_BLOCK:
                    held[block].append((seq, index))
        for block, places in held.items():
            if len(places) == 1:
                continue
            indices = {index for _, index in places}
            assert len(indices) == 1, f"block {block} sits at indices {sorted(indices)} of different tables"
            start = indices.pop() * self.block_size
            end = min([start + self.block_size] + [seq.num_cached_tokens for seq, _ in places])
            contents = {tuple(seq.token_ids[start:end]) for seq, _ in places}
            assert len(contents) == 1, f"block {block} holds different tokens for its holders: {contents}"
