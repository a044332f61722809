"""The cache one forward pass of a mixed batch sees: each row at its own position, in its own blocks.

Row b already has `starts[b]` tokens in the pool (through its block table) and feeds `n_new[b]` more;
rows are right-padded to T = max(n_new). `layout(T)` gives the positions [B, T] and the additive mask
[B, 1, T, S] (S = max(starts + n_new), the longest row after this pass) that the caller passes to labkit's
`Llama.forward`. `append` writes each row's real new keys/values into its slots of the `BlockPool` (the
padding is never written) and reads back every row's keys/values, padded to S; the mask hides the
padding, and each padded query repeats its row's last real position, so no mask row is all -inf.

    >>> cache = BatchKV(pool, block_tables=[[0], [1, 2]], starts=[0, 17], n_new=[5, 1])
    >>> positions, mask = cache.layout(5)            # input_ids [2, 5], row 1 right-padded
    >>> logits = model(input_ids, cache, positions=positions, mask=mask)

`PackedKV` lays the same rows end to end instead, as one sequence of N = sum(n_new) tokens with no
padding (vLLM's layout): a token attends only to its own row's keys. A step that mixes 1-token decodes
with a 64-token prompt chunk then computes N tokens, not B x 64.

    >>> cache = PackedKV(pool, block_tables=[[0], [1, 2]], starts=[0, 17], n_new=[5, 1])
    >>> positions, mask = cache.layout(6)            # input_ids [1, 6] -> logits [2, V]
    >>> logits = model(input_ids, cache, logits_at=cache.last, positions=positions, mask=mask)

**Two kinds of layer** (a Gemma3): given `LayerPools` with a window pool and each row's `window_tables`,
a local layer's keys go to and come from the window pool through the window table. Its released blocks
(NULL_BLOCK, wholly before the window of the row's first new token) are never written; reading them gives
slot 0, like padding, a key the window mask hides (`layout(T, window)`), so no query sees it. Given a
plain `BlockPool`, every layer lives in it.

Neither counts tokens (no `length`, no `advance`): the engine's sequences count their own.
"""

from __future__ import annotations

import torch

from labkit.core.paged import BlockPool
from labkit.fast.row_attention import row_attention
from labkit.serving.layer_pools import LayerPools
from labkit.serving.named_blocks import NULL_BLOCK


def slot_index(table: list[int], positions: list[int], block_size: int) -> list[int]:
    """Flat pool slots (block * block_size + offset) of `positions` of one sequence; slot 0 for a position
    in a released block (NULL_BLOCK: a key no window sees, masked)."""
    return [
        0 if table[p // block_size] == NULL_BLOCK else table[p // block_size] * block_size + p % block_size
        for p in positions
    ]


def row_ends(
    pool: BlockPool, block_tables: list[list[int]], starts: list[int], n_new: list[int]
) -> list[int]:
    """Each row's length after this pass (start + n_new), once every row's table is checked to hold it."""
    if not (len(block_tables) == len(starts) == len(n_new)) or min(n_new, default=0) < 1:
        raise ValueError("Give one block table, start and n_new >= 1 per row.")
    ends = [s + n for s, n in zip(starts, n_new)]
    for table, start, end in zip(block_tables, starts, ends):
        if len(table) * pool.block_size < end:
            raise ValueError(
                f"A block table of {len(table)} blocks holds {len(table) * pool.block_size} tokens; "
                f"this pass needs {end}. Allocate its blocks first."
            )
        if NULL_BLOCK in table[start // pool.block_size :]:
            raise ValueError(
                f"The block table {table} released a block this pass writes (from position {start})."
            )
    return ends


class PagedRows:
    """What BatchKV and PackedKV share: each kind of layer's write and read slots, and `append`. A subclass
    sets `new_rows` (its k [.., H, T, D] -> the real new rows [H, n, D]) and `keys_of` ([H, m, D] read ->
    the layout's keys)."""

    attend = staticmethod(row_attention)  # batch-invariant: a row's output does not depend on the others

    def set_slots(
        self,
        tables: list[list[int]],
        window_tables: list[list[int]] | None,
        starts: list[int],
        ends: list[int],
        pad_to: int | None,
    ) -> None:
        """Write slots [sum n_new] and read slots ([B, pad_to] padded with slot 0, or [S] end to end) of
        each kind of layer: False (every key) through `tables`, True (a window) through `window_tables`."""
        kinds = {False: tables}
        if self.pools.window is not None:
            if window_tables is None or len(window_tables) != len(tables):
                raise ValueError("A pool of window layers needs one window table per row (window_tables).")
            row_ends(self.pools.window, window_tables, starts, [e - s for s, e in zip(starts, ends)])
            kinds[True] = window_tables
        size, device = self.pools.full.block_size, self.pools.full.keys.device
        self.slots = {}  # kind -> (write slots, read slots)
        for kind, kind_tables in kinds.items():
            writes = [slot_index(t, list(range(s, e)), size) for t, s, e in zip(kind_tables, starts, ends)]
            reads = [slot_index(t, list(range(e)), size) for t, e in zip(kind_tables, ends)]
            if pad_to is None:  # [S], rows end to end
                read = torch.tensor([x for row in reads for x in row], device=device)
            else:  # [B, S], padding reads slot 0 (masked)
                read = torch.tensor([row + [0] * (pad_to - len(row)) for row in reads], device=device)
            self.slots[kind] = (torch.tensor([x for row in writes for x in row], device=device), read)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the real new rows of k, v in `layer`'s pool; return every row's keys and values as laid out."""
        windowed, row = self.pools.rows[layer]
        pool, (write, read) = self.pools.pool(windowed), self.slots[windowed]
        return self._store_and_read(pool.keys[row], k, write, read), self._store_and_read(
            pool.values[row], v, write, read
        )

    def _store_and_read(
        self, blocks: torch.Tensor, new: torch.Tensor, write: torch.Tensor, read: torch.Tensor
    ) -> torch.Tensor:
        heads, n_blocks, size, dim = blocks.shape
        flat = blocks.view(heads, n_blocks * size, dim)  # a view: writes land in the pool
        # index_copy_ rather than `flat[:, write] = ...`: 4 us against 48-72 us for 16 rows on 2 cores
        flat.index_copy_(1, write, self.new_rows(new).to(flat.dtype))  # [H, sum n_new, D] at distinct slots
        return self.keys_of(flat.index_select(1, read.reshape(-1)))  # [H, B * S, D] -> the layout's


class BatchKV(PagedRows):
    """append(layer, k, v) and layout(T) for rows at different positions, right-padded (see module doc)."""

    def __init__(
        self,
        pool: BlockPool | LayerPools,
        block_tables: list[list[int]],
        starts: list[int],
        n_new: list[int],
        window_tables: list[list[int]] | None = None,
    ):
        self.pools = LayerPools.of(pool)
        ends, device = row_ends(self.pools.full, block_tables, starts, n_new), self.pools.full.keys.device
        self.new_tokens, self.total = max(n_new), max(ends)  # T and S
        steps = torch.arange(self.new_tokens)
        last = torch.tensor(n_new)[:, None] - 1
        self.valid = (steps[None, :] <= last).to(device)  # [B, T] real (not padding) tokens
        # [B, T]
        self.positions = (torch.tensor(starts)[:, None] + torch.minimum(steps[None, :], last)).to(device)
        self.set_slots(block_tables, window_tables, starts, ends, pad_to=self.total)

    @property
    def batch_size(self) -> int:
        return self.positions.shape[0]

    def layout(self, new_tokens: int, window: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions [B, T] long, mask [B, 1, T, S] additive float): key s is visible iff s <= query position,
        and, with a `window` (a local layer's, Gemma 3's), s > query position - window."""
        if new_tokens != self.new_tokens:
            raise ValueError(
                f"This batch was laid out for {self.new_tokens} tokens per row, got {new_tokens}."
            )
        keys = torch.arange(self.total, device=self.positions.device)[None, None, :]  # [1, 1, S]
        hidden = keys > self.positions[:, :, None]  # [B, T, S]
        if window is not None:
            hidden |= keys <= self.positions[:, :, None] - window
        mask = torch.zeros(hidden.shape, device=hidden.device).masked_fill(hidden, float("-inf"))
        return self.positions, mask[:, None]

    def new_rows(self, new: torch.Tensor) -> torch.Tensor:
        return new.transpose(0, 1)[:, self.valid]  # [B, H, T, D] -> [H, sum n_new, D]

    def keys_of(self, picked: torch.Tensor) -> torch.Tensor:
        return picked.view(picked.shape[0], self.batch_size, self.total, -1).transpose(0, 1)  # [B, H, S, D]


class PackedKV(PagedRows):
    """append(layer, k, v) and layout(N) for rows laid end to end in one sequence [1, N] (see module doc)."""

    def __init__(
        self,
        pool: BlockPool | LayerPools,
        block_tables: list[list[int]],
        starts: list[int],
        n_new: list[int],
        window_tables: list[list[int]] | None = None,
    ):
        self.pools = LayerPools.of(pool)
        ends, device = row_ends(self.pools.full, block_tables, starts, n_new), self.pools.full.keys.device
        self.new_tokens = sum(n_new)  # N
        rows = torch.arange(len(n_new))
        token_row = rows.repeat_interleave(torch.tensor(n_new))  # [N] the row of each new token
        positions = torch.cat([torch.arange(s, e) for s, e in zip(starts, ends)])  # [N]
        key_row = rows.repeat_interleave(torch.tensor(ends))  # [S] the row of each key read
        key_position = torch.cat([torch.arange(e) for e in ends])  # [S]
        self.same_row = key_row[None, :] == token_row[:, None]  # [N, S]
        self.key_position = key_position  # [S]
        self.positions = positions[None].to(device)  # [1, N]
        self.mask = self.visible_mask(None)  # [1, 1, N, S]
        self.set_slots(block_tables, window_tables, starts, ends, pad_to=None)
        # [R] each row's last token in the sequence
        self.last = (torch.tensor(n_new).cumsum(0) - 1).to(device)

    def visible_mask(self, window: int | None) -> torch.Tensor:
        """[1, 1, N, S] additive: a token sees its own row's keys up to itself (within `window` of it, if given)."""
        query = self.positions[0, :, None].cpu()  # [N, 1]
        visible = self.same_row & (self.key_position[None, :] <= query)
        if window is not None:
            visible &= self.key_position[None, :] > query - window
        return (
            torch.zeros(visible.shape)
            .masked_fill(~visible, float("-inf"))[None, None]
            .to(self.positions.device)
        )

    def layout(self, new_tokens: int, window: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions [1, N] long, mask [1, 1, N, S] additive float): a token sees its own row's keys up to
        itself, and with a `window` (a local layer's) only the last `window` of them."""
        if new_tokens != self.new_tokens:
            raise ValueError(f"This batch was packed into {self.new_tokens} tokens, got {new_tokens}.")
        return self.positions, self.mask if window is None else self.visible_mask(window)

    def new_rows(self, new: torch.Tensor) -> torch.Tensor:
        return new[0]  # [1, H, N, D] -> [H, N, D]

    def keys_of(self, picked: torch.Tensor) -> torch.Tensor:
        return picked[None]  # [1, H, S, D]
