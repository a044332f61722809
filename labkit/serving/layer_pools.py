"""The serving engine's KV memory by kind of layer: one `BlockPool` for the layers that see every key, one for
a Gemma3's sliding-window layers (vLLM's hybrid KV cache: one group of blocks per kind of layer).

A Llama has one kind: `window` is None and layer i lives in row i of `full`. Gemma-3-270M's 3 global layers
live in `full` (3 layer rows), its 15 local ones in `window` (15 rows); a block id names a block of its own
kind's pool, so a local block holds 15 layers' keys and values, a global one 3 layers'. The local pool has
its own number of blocks (`n_window_blocks`, by default n_blocks): the block manager takes local blocks one
scheduled chunk at a time and releases those that left the window, so the engine sizes it by what its seats
and its token budget can hold at once (`labkit.serving.capacity.default_window_blocks`).

    >>> pools = LayerPools.for_model(gemma3, n_blocks=64, block_size=16, n_window_blocks=24)
    >>> pools.rows[5], pools.rows[6]          # (False, 0): layer 5 is global, row 0; (True, 5): local, row 5
    >>> pools.used_bytes()                    # bytes of the blocks in use, both kinds
    >>> pools.describe()                      # each pool's layers, blocks and bytes
"""

from __future__ import annotations

import torch

from labkit.core.gemma3 import Gemma3
from labkit.core.paged import BlockPool


class LayerPools:
    """`full` and `window` pools (window None: one kind) and `rows`: per model layer, (in the window pool?,
    its row in that pool)."""

    def __init__(self, full: BlockPool, window: BlockPool | None, rows: list[tuple[bool, int]]):
        self.full, self.window, self.rows = full, window, tuple(rows)

    @classmethod
    def single(cls, pool: BlockPool) -> LayerPools:
        """Every layer in one pool (a Llama; or a Gemma3 whose local layers keep every block too)."""
        return cls(pool, None, [(False, layer) for layer in range(pool.keys.shape[0])])

    @classmethod
    def of(cls, pools: BlockPool | LayerPools) -> LayerPools:
        """pools as they are, or a plain BlockPool holding every layer (`single`)."""
        return pools if isinstance(pools, LayerPools) else cls.single(pools)

    @classmethod
    def for_model(
        cls, model: torch.nn.Module, n_blocks: int, block_size: int, n_window_blocks: int | None = None
    ) -> LayerPools:
        """One pool for a Llama; for a Gemma3, its global layers' pool (n_blocks) and its local layers' pool
        (n_window_blocks; None: n_blocks too)."""
        if not isinstance(model, Gemma3):
            return cls.single(BlockPool.for_model(model, n_blocks, block_size))
        c, weight = model.config, model.embed_tokens.weight
        sliding = [c.is_sliding(layer) for layer in range(c.n_layers)]
        pools = {
            kind: BlockPool(
                sliding.count(kind),
                c.n_kv_heads,
                c.head_dim,
                n_window_blocks if kind and n_window_blocks is not None else n_blocks,
                block_size,
                weight.dtype,
                weight.device,
            )
            for kind in (False, True)
        }
        rows = [(kind, sliding[:layer].count(kind)) for layer, kind in enumerate(sliding)]
        return cls(pools[False], pools[True], rows)

    def pool(self, windowed: bool) -> BlockPool:
        return self.window if windowed else self.full

    def copy_blocks(self, copies: list[tuple[int, int]], window_copies: list[tuple[int, int]]) -> None:
        """Copy on write in each pool: (shared, private) pairs of the global pool, then of the local one."""
        self.full.copy_blocks(list(copies))
        if window_copies:
            self.window.copy_blocks(list(window_copies))

    def used_bytes(self) -> int:
        """Bytes of the blocks in use in both pools (a shared block counts once)."""
        return self.full.used_bytes() + (self.window.used_bytes() if self.window is not None else 0)

    def nbytes(self) -> int:
        """Bytes of both pools, free blocks included."""
        return self.full.nbytes() + (self.window.nbytes() if self.window is not None else 0)

    def describe(self) -> str:
        """Each pool's layers, blocks and bytes (free blocks included), e.g. for Gemma-3-270M in float32 at
        512 blocks of 16: "global layers: 3 layers x 512 blocks of 16 tokens, 50,331,648 bytes; sliding-window
        layers: 15 layers x 512 blocks of 16 tokens, 251,658,240 bytes"."""
        kinds = [("every layer" if self.window is None else "global layers", self.full)]
        kinds += [] if self.window is None else [("sliding-window layers", self.window)]
        return "; ".join(
            f"{name}: {pool.keys.shape[0]} layers x {pool.allocator.n_blocks} blocks of {pool.block_size} "
            f"tokens, {pool.nbytes():,} bytes"
            for name, pool in kinds
        )
