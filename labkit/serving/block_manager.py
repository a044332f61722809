"""Which pool blocks each running sequence holds, with prefix caching (Kwon et al. 2023; nano-vllm).

Pure Python over `labkit.core.paged.BlockAllocator`: no tensors. A sequence of n tokens needs
ceil(n / block_size) blocks. **Prefix caching**: a full block is named by a chain hash,
hash(hash of everything before it, its own tokens), so two blocks share a name only when everything up
to and including them is equal. A sequence whose prompt starts like a running one's reuses those blocks
(reference count + 1) and skips computing them. A name lives as long as its block is in use; only
blocks among the first n - 1 tokens are named, so at least one token is always computed (its logits
choose the next token).

Invariants (`check()`):
1. the allocator's own: every block is either free or used, never both;
2. a block's reference count equals the number of block tables that hold it;
3. every named block is in use, holds exactly block_size tokens, and names map one to one;
4. a sequence's table covers its cached tokens and at most the tokens it holds:
   num_cached_tokens <= len(table) * block_size and len(table) <= ceil(len(seq) / block_size).

    >>> manager = BlockManager(BlockAllocator(8), block_size=4)
    >>> manager.allocate(seq)                  # seq.block_table == [0, 1] for 6 tokens
    >>> manager.free(seq); manager.check()
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence as Ids

from labkit.core.paged import BlockAllocator
from labkit.serving.request import EngineRequest


def chain_hashes(token_ids: Ids[int], block_size: int) -> list[tuple[int, tuple[int, ...]]]:
    """(chain hash, tokens) of every full block among the first len - 1 tokens, in order."""
    out, previous = [], -1
    for start in range(0, len(token_ids) - 1 - block_size + 1, block_size):
        tokens = tuple(token_ids[start:start + block_size])
        previous = hash((previous, tokens))
        out.append((previous, tokens))
    return out


class BlockManager:
    """Block tables of the sequences that hold blocks, a prefix cache of full blocks, and its hit rate."""

    def __init__(self, allocator: BlockAllocator, block_size: int):
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be at least 1 token, got {block_size!r}.")
        self.allocator = allocator
        self.block_size = block_size
        self.holders: dict[int, EngineRequest] = {}  # seq_id -> sequence holding blocks
        self.hash_to_block: dict[int, int] = {}  # chain hash -> block whose tokens it names
        self.block_hash: dict[int, tuple[int, tuple[int, ...]]] = {}  # block -> (its chain hash, its tokens)
        self.lookups = 0  # full prompt blocks looked up in the prefix cache
        self.hits = 0  # ... and found there

    @property
    def hit_rate(self) -> float:
        """Share of looked-up full blocks that were already in the pool (0 before any lookup)."""
        return self.hits / self.lookups if self.lookups else 0.0

    def _cached(self, chain_hash: int, tokens: tuple[int, ...]) -> int | None:
        block = self.hash_to_block.get(chain_hash)
        return block if block is not None and self.block_hash[block][1] == tokens else None

    def cached_prefix_blocks(self, token_ids: Ids[int]) -> int:
        """How many leading full blocks of token_ids are already in the pool."""
        count = 0
        for chain_hash, tokens in chain_hashes(token_ids, self.block_size):
            if self._cached(chain_hash, tokens) is None:
                break
            count += 1
        return count

    def blocks_needed(self, token_ids: Ids[int]) -> int:
        """Free blocks that allocating token_ids would take (cached prefix blocks cost none)."""
        return math.ceil(len(token_ids) / self.block_size) - self.cached_prefix_blocks(token_ids)

    def can_allocate(self, token_ids: Ids[int]) -> bool:
        return self.blocks_needed(token_ids) <= self.allocator.n_free

    def allocate(self, seq: EngineRequest) -> None:
        """Give seq blocks for all its tokens: cached prefix blocks shared, the rest fresh (named if full)."""
        if seq.seq_id in self.holders or seq.block_table:
            raise ValueError(f"Request {seq.seq_id} already holds blocks {seq.block_table}; free them first.")
        if not self.can_allocate(seq.token_ids):
            raise ValueError(f"Request {seq.seq_id} needs {self.blocks_needed(seq.token_ids)} blocks; "
                             f"{self.allocator.n_free} are free. Ask can_allocate() first.")
        table, hits = [], 0
        for chain_hash, tokens in chain_hashes(seq.token_ids, self.block_size):
            self.lookups += 1
            block = self._cached(chain_hash, tokens)
            if block is not None and hits == len(table):  # only a leading run of hits is reused
                hits += 1
                table.append(self.allocator.share(block))
                continue
            block = self.allocator.allocate()
            if chain_hash not in self.hash_to_block:
                self.hash_to_block[chain_hash] = block
                self.block_hash[block] = (chain_hash, tokens)
            table.append(block)
        while len(table) < math.ceil(len(seq) / self.block_size):
            table.append(self.allocator.allocate())
        self.hits += hits
        seq.block_table, seq.num_cached_tokens = table, hits * self.block_size
        self.holders[seq.seq_id] = seq

    def free(self, seq: EngineRequest) -> None:
        """Release every block of seq (a shared block stays until its last holder lets go)."""
        for block in reversed(seq.block_table):
            self.allocator.release(block)
            if self.allocator.ref_counts[block] == 0 and block in self.block_hash:
                chain_hash, _ = self.block_hash.pop(block)
                del self.hash_to_block[chain_hash]
        seq.block_table, seq.num_cached_tokens = [], 0
        self.holders.pop(seq.seq_id, None)

    def needs_block(self, seq: EngineRequest) -> bool:
        """Whether the next token fed (at position len(seq) - 1) starts a new block."""
        return len(seq.block_table) * self.block_size < len(seq)

    def can_append(self, seq: EngineRequest) -> bool:
        return not self.needs_block(seq) or self.allocator.n_free >= 1

    def append_slot(self, seq: EngineRequest) -> None:
        """Before a decode step: a fresh block when the token to feed crosses a block boundary."""
        if self.needs_block(seq):
            seq.block_table.append(self.allocator.allocate())

    def check(self) -> None:
        """Raise AssertionError unless invariants 1-4 of the module doc hold."""
        self.allocator.check()
        counts = Counter(block for seq in self.holders.values() for block in seq.block_table)
        for block in range(self.allocator.n_blocks):
            assert self.allocator.ref_counts[block] == counts[block], \
                f"block {block}: reference count {self.allocator.ref_counts[block]}, held by {counts[block]} tables"
        for chain_hash, block in self.hash_to_block.items():
            assert self.block_hash.get(block, (None,))[0] == chain_hash, f"hash entry of block {block} is stale"
            assert self.allocator.ref_counts[block] > 0, f"named block {block} is free"
            assert len(self.block_hash[block][1]) == self.block_size, f"named block {block} is not full"
        assert len(self.block_hash) == len(self.hash_to_block), "block names are not one to one"
        for seq in self.holders.values():
            assert seq.num_cached_tokens <= len(seq.block_table) * self.block_size, f"{seq}: cached past its table"
            assert len(seq.block_table) <= math.ceil(len(seq) / self.block_size), f"{seq}: more blocks than tokens"
