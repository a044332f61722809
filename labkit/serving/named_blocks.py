"""One pool's blocks with a prefix cache: an allocator, and names (chain hashes) of the full blocks computed.

The block manager keeps one of these per kind of layer (a Llama's one pool; a Gemma 3's global layers' pool
and its sliding-window layers' pool): each kind names its own blocks, keeps a freed named block free and
named until a fresh block is needed (least recently freed first, its name evicted), and takes a named block
back for a later prompt with the same prefix. Pure Python: no tensors.

    >>> names = NamedBlocks(BlockAllocator(8))
    >>> block = names.fresh(); names.name(block, chain_hash=1234, tokens=(5, 6, 7, 8))
    >>> names.allocator.release(block); names.cached(1234, (5, 6, 7, 8))    # 0: free, still named
"""

from __future__ import annotations

from labkit.core.paged import BlockAllocator

NULL_BLOCK = -1  # a sliding-window table's entry for a block no window sees any more (released)


class NamedBlocks:
    """An allocator and the names of its full blocks (chain hash -> block and block -> (hash, tokens))."""

    def __init__(self, allocator: BlockAllocator):
        self.allocator = allocator
        self.hash_to_block: dict[int, int] = {}  # chain hash -> block whose tokens it names
        self.block_hash: dict[int, tuple[int, tuple[int, ...]]] = {}  # block -> (its chain hash, its tokens)
        self.evictions = 0  # names dropped because their free block was handed out fresh

    @property
    def n_cached_free(self) -> int:
        """Free blocks that still hold a named prefix block (reusable until evicted)."""
        return sum(1 for block in self.block_hash if self.allocator.ref_counts[block] == 0)

    def cached(self, chain_hash: int, tokens: tuple[int, ...]) -> int | None:
        """The block named chain_hash, if it holds these tokens; else None."""
        block = self.hash_to_block.get(chain_hash)
        return block if block is not None and self.block_hash[block][1] == tokens else None

    def in_use(self, block: int) -> bool:
        return self.allocator.ref_counts[block] > 0

    def take_cached(self, block: int) -> int:
        """A named block for one more table: shared if in use, taken back from the free blocks if not."""
        return self.allocator.share(block) if self.in_use(block) else self.allocator.reuse(block)

    def fresh(self) -> int:
        """The least recently freed block, its old name (if any) evicted."""
        block = self.allocator.allocate()
        if block in self.block_hash:
            chain_hash, _ = self.block_hash.pop(block)
            del self.hash_to_block[chain_hash]
            self.evictions += 1
        return block

    def fresh_unnamed(self) -> int:
        """The least recently freed block that names no prefix: a block taken without evicting any (a
        speculative draft's slot, which must not cost the prefix cache a hit). A ValueError if none is free."""
        block = next((b for b in self.allocator.free_blocks if b not in self.block_hash), None)
        if block is None:
            raise ValueError("Every free block names a prefix; count n_free - n_cached_free first.")
        return self.allocator.reuse(block)

    def name(self, block: int, chain_hash: int, tokens: tuple[int, ...]) -> None:
        """Name block, unless the name is taken (the same prefix computed twice at once) or it has one."""
        if chain_hash not in self.hash_to_block and block not in self.block_hash:
            self.hash_to_block[chain_hash] = block
            self.block_hash[block] = (chain_hash, tokens)

    def release(self, table: list[int]) -> None:
        """Release every block of a table, last first; NULL_BLOCK entries hold nothing."""
        for block in reversed(table):
            if block != NULL_BLOCK:
                self.allocator.release(block)

    def check(self, tables: list[list[int]], block_size: int) -> None:
        """The allocator's invariants; each reference count equals the tables holding the block; names are
        one to one and name full blocks."""
        self.allocator.check()
        counts = [0] * self.allocator.n_blocks
        for table in tables:
            for block in table:
                if block != NULL_BLOCK:
                    counts[block] += 1
        for block, count in enumerate(counts):
            assert self.allocator.ref_counts[block] == count, (
                f"block {block}: reference count {self.allocator.ref_counts[block]}, held by {count} tables"
            )
        for chain_hash, block in self.hash_to_block.items():
            assert self.block_hash.get(block, (None,))[0] == chain_hash, (
                f"hash entry of block {block} is stale"
            )
            assert len(self.block_hash[block][1]) == block_size, f"named block {block} is not full"
        assert len(self.block_hash) == len(self.hash_to_block), "block names are not one to one"
