"""A paged KV cache (Kwon et al. 2023, "PagedAttention"): memory in fixed-size blocks, like an OS's pages.

A contiguous cache reserves `max_length` tokens per sequence up front; most of it stays empty. A
paged cache cuts one big pool of memory into blocks of `block_size` tokens and hands a sequence a
block only when it needs one. Each sequence keeps a **block table**: its i-th block of tokens lives
in pool block `table[i]`. Three pieces, kept apart:

- `BlockAllocator`: pure Python bookkeeping, no tensors: the free blocks, least recently freed first, and
  a reference count per block.
- `BlockPool`: the tensors, keys and values [n_layers, n_kv_heads, n_blocks, block_size, head_dim],
  and the allocator that says which blocks are in use.
- `PagedKVCache`: one sequence (or a batch of them), its block tables, and the same
  `append(layer, k, v)` / `advance(T)` interface as the contiguous `KVCache`, so labkit's Llama uses
  it unchanged.

Two sequences that start with the same prompt can share its blocks: `fork()` gives a second cache
whose table points at the same blocks (reference count 2). A shared block is stored, and counted,
once. When either sequence writes into a shared block, it first gets its own copy (copy on write).

    >>> pool = BlockPool.for_model(model, n_blocks=64, block_size=16)
    >>> a = pool.new_cache()
    >>> logits = model(prompt_ids, a)              # prefill: blocks allocated as needed
    >>> b = a.fork()                               # b shares every block of the prompt
    >>> model(next_a[:, None], a); model(next_b[:, None], b)   # the last, partial block is copied
    >>> a.free(); b.free()                         # all reference counts back to 0
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from labkit.core.arguments import check_int
from labkit.core.block_allocator import BlockAllocator, NoFreeBlocksError
from labkit.core.doors import check_items, check_record
from labkit.core.kv_cache import check_crop_length, check_reorder_indices


class BlockPool:
    """The block tensors that every paged cache of one model draws on, and their allocator."""

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        n_blocks: int,
        block_size: int = 16,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        check_int("block_size", block_size, minimum=1, note="tokens per block")
        self.allocator = BlockAllocator(n_blocks)
        self.block_size = block_size
        # Heads before blocks: the blocks of one head, gathered in table order, are already [S, D] rows.
        shape = (n_layers, n_kv_heads, n_blocks, block_size, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)

    @classmethod
    def for_model(cls, model: torch.nn.Module, n_blocks: int, block_size: int = 16) -> BlockPool:
        """A pool shaped for labkit's Llama `model` (its layers, KV heads, head size, dtype, device)."""
        model = check_record(
            "model", model, "labkit's Llama (load_model(name, impl='labkit'))", has=("config", "embed_tokens")
        )
        c, weight = model.config, model.embed_tokens.weight
        return cls(c.n_layers, c.n_kv_heads, c.head_dim, n_blocks, block_size, weight.dtype, weight.device)

    @property
    def n_blocks(self) -> int:
        return self.allocator.n_blocks

    @property
    def capacity(self) -> int:
        """Tokens the whole pool holds."""
        return self.n_blocks * self.block_size

    def new_cache(self, batch_size: int = 1, max_length: int | None = None) -> PagedKVCache:
        """An empty paged cache for `batch_size` sequences (blocks come from this pool as it fills)."""
        return PagedKVCache(self, batch_size, max_length)

    def bytes_per_block(self) -> int:
        return (self.keys.nbytes + self.values.nbytes) // self.n_blocks

    def nbytes(self) -> int:
        """Bytes of the whole pool, free blocks included."""
        return self.keys.nbytes + self.values.nbytes

    def used_bytes(self) -> int:
        """Bytes of the blocks in use; a block shared by several sequences counts once."""
        return self.allocator.n_used * self.bytes_per_block()

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Each (source, target): target's keys and values become source's, in every layer (copy on write,
        vLLM's blocks_to_copy). All sources are read before any target is written.

            >>> pool.copy_blocks([(3, 7), (3, 8)])     # two private copies of shared block 3
        """
        if len({target for _, target in pairs}) < len(pairs):
            raise ValueError(f"Each target block may be written once per copy, got the pairs {pairs}.")
        if pairs:
            source, target = (torch.tensor(side, device=self.keys.device) for side in zip(*pairs))
            self.keys[:, :, target] = self.keys[:, :, source]  # the right side is gathered first: a copy
            self.values[:, :, target] = self.values[:, :, source]

    def __repr__(self) -> str:
        return (
            f"BlockPool({self.n_blocks} blocks x {self.block_size} tokens, {self.allocator.n_used} used, "
            f"{self.nbytes() / 1e6:.1f} MB)"
        )


class PagedKVCache:
    """Block tables of `batch_size` sequences of equal length, over a shared `BlockPool`.

    Same interface as `labkit.kv_cache.KVCache`: `model(input_ids, cache)` appends the new tokens'
    keys and values to the blocks and reads back all of them.
    """

    def __init__(self, pool: BlockPool, batch_size: int = 1, max_length: int | None = None):
        check_int("batch_size", batch_size, minimum=1)
        if max_length is not None:
            check_int("max_length", max_length, minimum=1, note="or None for the pool's capacity")
        self.pool = pool
        self.max_length = pool.capacity if max_length is None else max_length
        self.block_tables: list[list[int]] = [[] for _ in range(batch_size)]
        self.length = 0
        self._ready_until = 0  # positions < this have exclusively owned blocks for the pass in flight
        self._index: torch.Tensor | None = None  # block_tables as a tensor [B, n_blocks], rebuilt on change

    @property
    def batch_size(self) -> int:
        return len(self.block_tables)

    @property
    def block_size(self) -> int:
        return self.pool.block_size

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, n_kv_heads, T, D] after the cached tokens; return all of them [B, H, length+T, D]."""
        if k.shape[0] != self.batch_size:
            raise ValueError(
                f"This paged cache holds {self.batch_size} sequences; the model was given {k.shape[0]}. "
                f"Create it with pool.new_cache(batch_size={k.shape[0]})."
            )
        start, end = self.length, self.length + k.shape[2]
        if end > self.max_length:
            raise ValueError(
                f"The paged KV cache holds {self.max_length} tokens per sequence; {self.length} are stored "
                f"and {k.shape[2]} more do not fit. Create it with a larger max_length (at least {end}), "
                "or the pool with more blocks."
            )
        if end > self._ready_until:  # the first layer of a forward pass: find room for the new tokens
            self._make_room(start, end)
        size = self.block_size
        keys, values = self.pool.keys[layer], self.pool.values[layer]  # [H, n_blocks, block_size, D]
        position = start
        while position < end:  # one block at a time: the tokens that land in the same block
            block_index, offset = divmod(position, size)
            count = min(size - offset, end - position)
            rows = self._index[:, block_index]  # [B] pool block of each sequence
            source = slice(position - start, position - start + count)
            keys[:, rows, offset : offset + count] = k[:, :, source].transpose(0, 1)  # [H, B, count, D]
            values[:, rows, offset : offset + count] = v[:, :, source].transpose(0, 1)
            position += count
        return self._gather(keys, end), self._gather(values, end)

    def _gather(self, blocks: torch.Tensor, end: int) -> torch.Tensor:
        """The first `end` tokens of every sequence, read through the block tables: [B, H, end, D]."""
        n_used = math.ceil(end / self.block_size)
        index = self._index[:, :n_used]  # [B, n_used]
        picked = blocks.index_select(1, index.reshape(-1))  # [H, B * n_used, block_size, D], one copy
        heads, _, size, dim = blocks.shape
        # [B, H, S, D], a view
        picked = picked.view(heads, index.shape[0], n_used * size, dim).transpose(0, 1)
        return picked[:, :, :end]

    def _make_room(self, start: int, end: int) -> None:
        """Before tokens start..end-1 are written: a private copy of a shared block they land in (copy on
        write), and new blocks past the end of each table. All or nothing: if the pool is short of
        blocks, nothing changes and NoFreeBlocksError says how many were missing."""
        allocator, size = self.pool.allocator, self.block_size
        first, needed_blocks = start // size, math.ceil(end / size)
        copies = [
            (row, i)
            for row, table in enumerate(self.block_tables)
            for i in range(first, len(table))
            if allocator.is_shared(table[i])
        ]
        new_blocks = sum(max(0, needed_blocks - len(table)) for table in self.block_tables)
        wanted = len(copies) + new_blocks
        if wanted > allocator.n_free:
            raise NoFreeBlocksError(
                f"The paged KV cache's pool has {allocator.n_free} free blocks of {size} tokens; {end - start} new "
                f"token(s) of {self.batch_size} sequence(s) need {wanted}. Create the pool with more blocks (n_blocks "
                f"> {allocator.n_blocks}), run fewer sequences at once, or free finished ones (cache.free())."
            )
        pairs = [(self.block_tables[row][i], allocator.allocate()) for row, i in copies]  # (shared, private)
        self.pool.copy_blocks(pairs)
        for (row, i), (shared, private) in zip(copies, pairs):
            allocator.release(shared)
            self.block_tables[row][i] = private
        for table in self.block_tables:
            while len(table) < needed_blocks:
                table.append(allocator.allocate())
        if wanted or self._index is None:
            self._index = torch.tensor(self.block_tables, dtype=torch.long, device=self.pool.keys.device)
        self._ready_until = end

    def advance(self, n_tokens: int) -> None:
        """Mark n_tokens more as stored (called once per forward pass, after every layer appended)."""
        self.length += n_tokens

    def fork(self) -> PagedKVCache:
        """A second cache with the same tokens, sharing every block (reference counts + 1), no copy. The two
        then diverge: whichever writes into a shared block first gets its own copy of it."""
        other = PagedKVCache(self.pool, self.batch_size, self.max_length)
        other.block_tables = [
            [self.pool.allocator.share(block) for block in table] for table in self.block_tables
        ]
        other.length = self.length
        other._index = None if self._index is None else self._index.clone()
        other._ready_until = 0
        self._ready_until = 0  # this cache's last block is now shared too: check it before writing
        return other

    def free(self) -> None:
        """Give every block back to the pool (a shared block stays until its last user frees it)."""
        for table in self.block_tables:
            for block in table:
                self.pool.allocator.release(block)
            table.clear()
        self.length, self._ready_until, self._index = 0, 0, None

    def reset(self) -> None:
        """Forget every stored token: the same as `free()`."""
        self.free()

    def crop(self, length: int) -> None:
        """Forget every token after the first `length`; blocks no longer needed go back to the pool."""
        check_crop_length(length, self.length)
        keep = math.ceil(length / self.block_size)
        for table in self.block_tables:
            for block in table[keep:]:
                self.pool.allocator.release(block)
            del table[keep:]
        self.length, self._ready_until, self._index = length, 0, None

    def reorder(self, indices: torch.Tensor) -> None:
        """Row i now points at row indices[i]'s blocks (shared, no copy: the next write copies on write)."""
        check_reorder_indices(indices, self.batch_size)
        allocator = self.pool.allocator
        tables = [[allocator.share(block) for block in self.block_tables[int(i)]] for i in indices]
        for table in self.block_tables:
            for block in table:
                allocator.release(block)
        self.block_tables, self._ready_until, self._index = tables, 0, None

    def blocks(self) -> set[int]:
        """The distinct pool blocks this cache points at."""
        return {block for table in self.block_tables for block in table}

    def nbytes(self) -> int:
        """Bytes of the blocks this cache points at (blocks it shares with others included)."""
        return len(self.blocks()) * self.pool.bytes_per_block()

    def __repr__(self) -> str:
        tables = "; ".join(str(table) for table in self.block_tables)
        return f"PagedKVCache(length={self.length}, block_size={self.block_size}, block tables {tables})"


def sharing_summary(caches: Mapping[str, PagedKVCache] | list[PagedKVCache]) -> dict[str, int]:
    """Blocks and bytes of several caches with sharing (each block once) and as if nothing were shared."""
    caches = list(caches.values()) if isinstance(caches, Mapping) else caches
    caches = check_items("caches", caches, "PagedKVCache (or a dict of them)", of=PagedKVCache)
    if not caches:
        raise ValueError("Give at least one paged cache.")
    pool = caches[0].pool
    if any(cache.pool is not pool for cache in caches):
        raise ValueError("These caches belong to different pools; sharing only happens within one pool.")
    separate = sum(len(table) for cache in caches for table in cache.block_tables)
    distinct = len(set().union(*(cache.blocks() for cache in caches)))
    per_block = pool.bytes_per_block()
    return {
        "blocks_unshared": separate,
        "blocks_shared": distinct,
        "bytes_unshared": separate * per_block,
        "bytes_shared": distinct * per_block,
        "bytes_saved": (separate - distinct) * per_block,
    }
