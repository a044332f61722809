"""Which pool blocks each running sequence holds, with prefix caching (Kwon et al. 2023; vLLM; nano-vllm).

Pure Python over `labkit.core.paged.BlockAllocator`: no tensors. A sequence of n tokens needs
ceil(n / block_size) blocks. **Prefix caching**: a full block is named by a chain hash,
hash(hash of everything before it, its own tokens), so two blocks share a name only when everything up
to and including them is equal. A block is named once the step that computes its keys and values is
scheduled (`publish`), prompt or generated tokens alike. A new sequence whose first tokens match named
blocks reuses them (reference count + 1) and skips computing them; only blocks among its first n - 1
tokens are looked up, so at least one token is always computed (its logits choose the next token).

**Reuse after a request ends** (as vLLM): a freed block keeps its name and its contents while it sits
free. A later request with the same prefix takes it back (`reuse`); a request that needs a fresh block
takes the least recently freed one, and if that one had a name, the name is evicted (LRU).

**Forks and copy on write** (vLLM's parallel sampling): `fork` gives a sample of the same prompt the
parent's whole block table (reference counts + 1, nothing copied). Positions only grow, so a full shared
block is never written again; only the last, partly filled prompt block is. Before a decode feeds a
token into a block that another table also holds, `append_slot` gives the sequence a fresh block,
records the pair (shared, fresh) in `copies`, and releases its reference on the shared one; the engine
copies every pair (`BlockPool.copy_blocks`) before the forward pass writes. The last holder writes in place.

Invariants (`check()`):
1. the allocator's own: every block is either free or used, never both;
2. a block's reference count equals the number of block tables that hold it;
3. every named block holds exactly block_size tokens and names map one to one (a named block may be free);
4. a sequence's table covers its cached tokens and at most the tokens it holds:
   num_cached_tokens <= len(table) * block_size and len(table) <= ceil(len(seq) / block_size);
5. a block held by several tables sits at the same index in each, and its holders agree on the tokens
   in it, as far as each has them cached (a write into a shared block, without its copy, breaks this).

    >>> manager = BlockManager(BlockAllocator(8), block_size=4)
    >>> manager.allocate(seq)                  # seq.block_table == [0, 1] for 6 tokens
    >>> manager.publish(seq, 6); manager.free(seq); manager.check()   # block 0 stays named, and free
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence as Ids

from labkit.core.arguments import check_int
from labkit.core.paged import BlockAllocator
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


class BlockManager:
    """Block tables of the sequences that hold blocks, a prefix cache of full blocks, and its hit rate."""

    def __init__(self, allocator: BlockAllocator, block_size: int):
        check_int("block_size", block_size, minimum=1, note="tokens per block")
        self.allocator = allocator
        self.block_size = block_size
        self.holders: dict[int, EngineRequest] = {}  # request_id -> sequence holding blocks
        self.hash_to_block: dict[int, int] = {}  # chain hash -> block whose tokens it names
        self.block_hash: dict[int, tuple[int, tuple[int, ...]]] = {}  # block -> (its chain hash, its tokens)
        # request_id -> (blocks named so far, last chain hash)
        self.published: dict[int, tuple[int, int]] = {}
        self.lookups = 0  # full prompt blocks looked up in the prefix cache
        self.hits = 0  # ... and found there (in use by another sequence, or free and still named)
        self.evictions = 0  # names dropped because their free block was handed out fresh
        # (shared, private) pairs to copy before the next forward pass
        self.copies: list[tuple[int, int]] = []

    @property
    def hit_rate(self) -> float:
        """Share of looked-up full blocks that were already in the pool (0 before any lookup)."""
        return self.hits / self.lookups if self.lookups else 0.0

    @property
    def n_cached_free(self) -> int:
        """Free blocks that still hold a named prefix block (reusable until evicted)."""
        return sum(1 for block in self.block_hash if self.allocator.ref_counts[block] == 0)

    def _cached(self, chain_hash: int, tokens: tuple[int, ...]) -> int | None:
        block = self.hash_to_block.get(chain_hash)
        return block if block is not None and self.block_hash[block][1] == tokens else None

    def cached_prefix(self, token_ids: Ids[int]) -> list[int]:
        """The blocks holding the leading full blocks of token_ids that are already in the pool."""
        blocks = []
        for chain_hash, tokens in chain_hashes(token_ids, self.block_size):
            block = self._cached(chain_hash, tokens)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def cached_prefix_blocks(self, token_ids: Ids[int]) -> int:
        """How many leading full blocks of token_ids are already in the pool."""
        return len(self.cached_prefix(token_ids))

    def blocks_needed(self, token_ids: Ids[int]) -> int:
        """Free blocks that allocating token_ids would take: fresh ones, and cached ones that sit free."""
        in_use = sum(1 for block in self.cached_prefix(token_ids) if self.allocator.ref_counts[block] > 0)
        return math.ceil(len(token_ids) / self.block_size) - in_use

    def can_allocate(self, token_ids: Ids[int]) -> bool:
        return self.blocks_needed(token_ids) <= self.allocator.n_free

    def can_admit(self, seq: EngineRequest) -> bool:
        """Whether seq's blocks are free, and one more for each sample still to fork from it (the copy or
        the fresh block its first decode will need)."""
        return self.blocks_needed(seq.token_ids) + len(seq.unforked) <= self.allocator.n_free

    def allocate(self, seq: EngineRequest) -> None:
        """Give seq blocks for all its tokens: its cached prefix blocks shared or reused, the rest fresh."""
        if seq.request_id in self.holders or seq.block_table:
            raise ValueError(
                f"Request {seq.request_id} already holds blocks {seq.block_table}; free them first."
            )
        if not self.can_allocate(seq.token_ids):
            raise ValueError(
                f"Request {seq.request_id} needs {self.blocks_needed(seq.token_ids)} blocks; "
                f"{self.allocator.n_free} are free. Ask can_allocate() first."
            )
        self.lookups += len(chain_hashes(seq.token_ids, self.block_size))
        table = [self._take_cached(block) for block in self.cached_prefix(seq.token_ids)]
        hits = len(table)
        self.hits += hits
        while len(table) < math.ceil(len(seq) / self.block_size):
            table.append(self._fresh())
        seq.block_table, seq.num_cached_tokens = table, hits * self.block_size
        self.holders[seq.request_id] = seq
        last = self.block_hash[table[hits - 1]][0] if hits else NO_HASH
        self.published[seq.request_id] = (hits, last)

    def _take_cached(self, block: int) -> int:
        """A named block for one more table: shared if in use, taken back from the free blocks if not."""
        return (
            self.allocator.share(block)
            if self.allocator.ref_counts[block] > 0
            else self.allocator.reuse(block)
        )

    def _fresh(self) -> int:
        """The least recently freed block, its old name (if any) evicted."""
        block = self.allocator.allocate()
        if block in self.block_hash:
            chain_hash, _ = self.block_hash.pop(block)
            del self.hash_to_block[chain_hash]
            self.evictions += 1
        return block

    def fork(self, parent: EngineRequest, child: EngineRequest) -> None:
        """child (a sample of parent's prompt, no blocks yet) shares every block of parent, reference counts
        + 1, and its cached tokens and names; no copy now (copy on write later, see `append_slot`)."""
        if child.request_id in self.holders or child.block_table or parent.request_id not in self.holders:
            raise ValueError(
                f"Fork a sequence that holds blocks into one that holds none; got {parent} -> {child}."
            )
        child.block_table = [self.allocator.share(block) for block in parent.block_table]
        child.num_cached_tokens = parent.num_cached_tokens
        self.holders[child.request_id] = child
        self.published[child.request_id] = self.published[parent.request_id]

    def publish(self, seq: EngineRequest, computed_tokens: int) -> None:
        """Name seq's full blocks among its first `computed_tokens` tokens (computed by the end of this step).

        A block whose name another block already has (the same prefix computed twice at once) stays
        unnamed and is simply freed with its sequence.
        """
        named, previous = self.published[seq.request_id]
        ids = seq.token_ids
        for index in range(named, computed_tokens // self.block_size):
            tokens = tuple(ids[index * self.block_size : (index + 1) * self.block_size])
            previous = hash((previous, tokens))
            block = seq.block_table[index]
            if previous not in self.hash_to_block and block not in self.block_hash:
                self.hash_to_block[previous] = block
                self.block_hash[block] = (previous, tokens)
            named = index + 1
        self.published[seq.request_id] = (named, previous)

    def free(self, seq: EngineRequest) -> None:
        """Release every block of seq, last block first (a shared block stays until its last holder lets go;
        a named one stays named, free, until its memory is needed)."""
        for block in reversed(seq.block_table):
            self.allocator.release(block)
        seq.block_table, seq.num_cached_tokens = [], 0
        self.holders.pop(seq.request_id, None)
        self.published.pop(seq.request_id, None)

    def needs_block(self, seq: EngineRequest) -> bool:
        """Whether the next token fed (at position len(seq) - 1) starts a new block."""
        return len(seq.block_table) * self.block_size < len(seq)

    def needs_copy(self, seq: EngineRequest) -> bool:
        """Whether the next token fed lands in a block another table also holds (copy on write first)."""
        index = (len(seq) - 1) // self.block_size
        return index < len(seq.block_table) and self.allocator.is_shared(seq.block_table[index])

    def can_append(self, seq: EngineRequest) -> bool:
        return not (self.needs_block(seq) or self.needs_copy(seq)) or self.allocator.n_free >= 1

    def append_slot(self, seq: EngineRequest) -> None:
        """Before a decode step: a fresh block when the token to feed crosses a block boundary; a private
        copy (recorded in `copies`) when it lands in a shared block."""
        if self.needs_block(seq):
            seq.block_table.append(self._fresh())
        elif self.needs_copy(seq):
            index = (len(seq) - 1) // self.block_size
            shared, private = seq.block_table[index], self._fresh()
            self.copies.append((shared, private))
            self.allocator.release(shared)
            seq.block_table[index] = private

    def take_copies(self) -> list[tuple[int, int]]:
        """The (shared, private) pairs recorded since the last call, for the next forward pass to copy first."""
        copies, self.copies = self.copies, []
        return copies

    def check(self) -> None:
        """Raise AssertionError unless invariants 1-5 of the module doc hold."""
        self.allocator.check()
        counts = Counter(block for seq in self.holders.values() for block in seq.block_table)
        for block in range(self.allocator.n_blocks):
            assert self.allocator.ref_counts[block] == counts[block], (
                f"block {block}: reference count {self.allocator.ref_counts[block]}, held by {counts[block]} tables"
            )
        for chain_hash, block in self.hash_to_block.items():
            assert self.block_hash.get(block, (None,))[0] == chain_hash, (
                f"hash entry of block {block} is stale"
            )
            assert len(self.block_hash[block][1]) == self.block_size, f"named block {block} is not full"
        assert len(self.block_hash) == len(self.hash_to_block), "block names are not one to one"
        assert set(self.published) == set(self.holders), "a name record for a sequence that holds no blocks"
        for seq in self.holders.values():
            assert seq.num_cached_tokens <= len(seq.block_table) * self.block_size, (
                f"{seq}: cached past its table"
            )
            assert len(seq.block_table) <= math.ceil(len(seq) / self.block_size), (
                f"{seq}: more blocks than tokens"
            )
        self.check_shared_blocks()

    def check_shared_blocks(self) -> None:
        """Invariant 5: a shared block is at one index of every table holding it, with the same tokens."""
        held = defaultdict(list)  # block -> (sequence, index in its table) of each table holding it
        for seq in self.holders.values():
            for index, block in enumerate(seq.block_table):
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
