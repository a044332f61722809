"""Which blocks of a paged KV cache's pool are free, and how many block tables point at each one: pure Python
bookkeeping, no tensors (labkit.core.paged holds the tensors; labkit.serving.block_manager plans with this).

A block is free (reference count 0, waiting in the free order) or used (count >= 1: that many block tables
point at it, more than one when sequences share a prompt). Freed blocks go to the back of the line, so the
block handed out next is the one unused longest, and a just-freed block keeps its contents for a prefix cache.

    >>> allocator = BlockAllocator(4)
    >>> allocator.allocate(), allocator.allocate()
    (0, 1)
    >>> allocator.release(0); allocator.allocate()      # 2: block 0, freed just now, is handed out last
    2
"""

from __future__ import annotations

from labkit.core.arguments import check_int


class NoFreeBlocksError(RuntimeError):
    """The pool has fewer free blocks than a forward pass needs."""


class BlockAllocator:
    """Which blocks of a pool are free, and how many block tables point at each one (pure Python).

    Free blocks are handed out least recently freed first, so a block that was just freed keeps its
    contents longest: the serving engine's prefix cache reads a freed block again while it is still
    free (`reuse`), and the block that `allocate` overwrites is the one unused for the longest time (LRU).

    Invariants (`check()`): every block is either free (reference count 0, in the free order once) or
    used (reference count >= 1, not free); never both.
    """

    def __init__(self, n_blocks: int):
        check_int("n_blocks", n_blocks, minimum=1)
        self.n_blocks = n_blocks
        # oldest freed first: block 0 first
        self.free_blocks: dict[int, None] = dict.fromkeys(range(n_blocks))
        self.ref_counts: list[int] = [0] * n_blocks

    @property
    def n_free(self) -> int:
        return len(self.free_blocks)

    @property
    def n_used(self) -> int:
        return self.n_blocks - len(self.free_blocks)

    def allocate(self) -> int:
        """Take the least recently freed block (its reference count becomes 1)."""
        if not self.free_blocks:
            raise NoFreeBlocksError(
                f"The pool has no free block: all {self.n_blocks} are in use. Create the pool with more "
                "blocks, or free a finished sequence's cache (cache.free())."
            )
        block = next(iter(self.free_blocks))
        return self.reuse(block)

    def reuse(self, block: int) -> int:
        """Take this free block, contents and all (a cached prefix block); its reference count becomes 1."""
        if block not in self.free_blocks:
            raise ValueError(f"Cannot reuse block {block}: it is not free.")
        del self.free_blocks[block]
        self.ref_counts[block] = 1
        return block

    def share(self, block: int) -> int:
        """One more block table points at `block` (prefix sharing)."""
        self._check_used(block, "share")
        self.ref_counts[block] += 1
        return block

    def release(self, block: int) -> None:
        """One block table fewer points at `block`; at zero it goes back on the free list."""
        self._check_used(block, "release")
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self.free_blocks[block] = None  # the most recently freed: handed out last

    def is_shared(self, block: int) -> bool:
        return self.ref_counts[block] > 1

    def used_blocks(self) -> set[int]:
        return {b for b, count in enumerate(self.ref_counts) if count > 0}

    def _check_used(self, block: int, action: str) -> None:
        if not 0 <= block < self.n_blocks:
            raise ValueError(f"Block {block} does not exist: the pool has blocks 0..{self.n_blocks - 1}.")
        if self.ref_counts[block] == 0:
            raise ValueError(f"Cannot {action} block {block}: it is free (no block table points at it).")

    def check(self) -> None:
        """Raise AssertionError if the bookkeeping is inconsistent."""
        free = set(self.free_blocks)
        assert all(count >= 0 for count in self.ref_counts), "a negative reference count"
        used = self.used_blocks()
        assert not free & used, f"blocks both free and used: {sorted(free & used)}"
        assert free | used == set(range(self.n_blocks)), "a block is neither free nor used"

    def __repr__(self) -> str:
        return f"BlockAllocator({self.n_used} of {self.n_blocks} blocks used, {self.n_free} free)"
