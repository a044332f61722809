"""The engine's decode step compiled: one graph per batch size, the paged cache read inside it, written after.

An eager decode step of a small model is mostly dispatch: thousands of small torch ops, each a few
microseconds of Python and C++ before any arithmetic (notebook 13). `torch.compile` turns the step into
a few fused kernels, but only for shapes it has seen, and a paged step changes shape every time: the
batch grows and shrinks, and every row's context grows by one token. So, as vLLM captures its decode step
for a fixed set of batch sizes (`cudagraph_capture_sizes`) and pads a batch up to the next one:

- the batch is padded to the next of `batch_sizes` (1, 2, 4, 8, 16, ... up to the engine's seats): the
  padding rows read slot 0 under a mask and their keys are never written;
- the context length S is a dynamic dimension (`torch._dynamo.mark_dynamic`): one graph serves every
  length, so a batch size compiles once, at start-up (`warm_up`, timed);
- the graph only reads the pool. Each layer's attention reads its rows' past keys and values in place, at
  their slots (`paged_row_attention`), then the new token's own key; the new keys and values
  of every layer come out of the graph [L, B, H, 1, D] and are written into the pool by one indexed copy
  each, after it. (A write inside the graph into a slice of the pool's one tensor would become a copy of
  all of it: labkit.fast.static says why.)

With speculation (`verify_width` W = 1 + the most draft tokens a row feeds) a second graph runs the
drafted decode steps: each row's pending token and its drafts, padded to W tokens, the logits at every
position out. It is used where padding costs less than the eager step's dispatch (`worth_padding`).
Steps that feed a prompt (prefill, chunks, mixed) and batches beyond the largest size stay eager.

    >>> step = CompiledDecode(model, pool, max_batch=8)
    >>> step.warm_up()                                  # compiles 1, 2, 4, 8: {batch size: seconds}
    >>> logits = step.run(rows=[[5], [9]], tables=[[0], [1, 2]], starts=[3, 17])   # [2, V] float32
"""

from __future__ import annotations

import torch

from labkit.core.arguments import check_int
from labkit.core.llama import Llama
from labkit.core.paged import BlockPool
from labkit.fast.kernel import load_kernel
from labkit.fast.row_attention import paged_row_attention
from labkit.fast.static import compiled_function
from labkit.serving.batch_cache import slot_index
from labkit.timing import time_once

MIN_CONTEXT = 2  # S of at least 2: dynamo would specialize a length-1 dimension into a graph of its own


def batch_sizes(max_batch: int) -> tuple[int, ...]:
    """The padded batch sizes: powers of two below max_batch, and max_batch itself.

    >>> batch_sizes(16), batch_sizes(6)
    ((1, 2, 4, 8, 16), (1, 2, 4, 6))
    """
    check_int("max_batch", max_batch, minimum=1)
    sizes = [1 << i for i in range(max_batch.bit_length()) if 1 << i < max_batch]
    return (*sizes, max_batch)


def padded_size(batch: int, sizes: tuple[int, ...]) -> int | None:
    """The smallest size that holds `batch` rows, or None when the batch is larger than every size."""
    return next((size for size in sizes if size >= batch), None)


class PoolReader:
    """The cache a compiled decode step sees: each layer's new keys and values kept, to be written after the
    graph; its attention reads the row's past keys in place from the pool, then the new ones
    (`paged_row_attention`: no copy of the past per layer).

    read_slots [B, S]: row b's past tokens' flat pool slots (block * block_size + offset), padded with 0.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, read_slots: torch.Tensor):
        self.keys, self.values, self.read_slots = keys, values, read_slots
        self.new_keys: list[torch.Tensor] = []
        self.new_values: list[torch.Tensor] = []
        self.layer = 0  # the layer the last `append` came from: `attend` reads its past

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v [B, H, W, D]: kept for the write after the graph, and returned for `attend`."""
        self.new_keys.append(k)
        self.new_values.append(v)
        self.layer = layer
        return k, v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """q [B, H, W, D] over its row's past in the last appended layer, then k, v [B, H_kv, W, D]: mask
        [B, 1, W, S + W] -> [B, H, W, D]."""
        return paged_row_attention(
            q, self.layer_of(self.keys), self.layer_of(self.values), self.read_slots, k, v, mask
        )

    def layer_of(self, pool: torch.Tensor) -> torch.Tensor:
        """The last appended layer of pool [L, H, n_blocks, block_size, D], its blocks flattened: [H, slots, D]."""
        heads, n_blocks, block_size, dim = pool.shape[1:]
        return pool[self.layer].reshape(heads, n_blocks * block_size, dim)


def decode_graph(
    model: Llama,
    ids: torch.Tensor,
    positions: torch.Tensor,
    mask: torch.Tensor,
    read_slots: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The function compiled: ids [B, W] at positions [B, W] (W = 1 for a plain decode step; a drafted one:
    each row's pending token, its drafts, padding), mask [B, 1, W, S + W] (additive), read_slots [B, S] ->
    (logits at every position [B, W, V] float32, new keys and values [L, B, H, W, D])."""
    cache = PoolReader(keys, values, read_slots)
    logits = model(ids, cache, positions=positions, mask=mask)
    return logits, torch.stack(cache.new_keys), torch.stack(cache.new_values)


def step_mask(seen: torch.Tensor, length: int, width: int) -> torch.Tensor:
    """[B, 1, W, S + W] additive: row b's W new tokens see its first seen[b] of the S = length past slots,
    and the new tokens up to their own (causal); a padding row (seen 0) sees only its new tokens.

        >>> step_mask(torch.tensor([1]), 2, 2)[0, 0]
        tensor([[0., -inf, 0., -inf],
                [0., -inf, 0., 0.]])
    """
    columns = torch.arange(length + width, device=seen.device)
    past_hidden = (columns[None, :] >= seen[:, None]) & (columns[None, :] < length)  # [B, S + W]
    later_new = columns[None, :] - length > torch.arange(width, device=seen.device)[:, None]  # [W, S + W]
    hidden = past_hidden[:, None, :] | later_new[None, :, :]  # [B, W, S + W]
    return torch.zeros(hidden.shape, device=seen.device).masked_fill(hidden, float("-inf"))[:, None]


# A compiled drafted step pays for every padded token, an eager one for the tokens fed plus its dispatch.
# Measured (fuse+q4_1 SmolLM2, context 200, W = 5, medians of 15, idle 2-core Intel Xeon with AVX-512),
# ms compiled / eager, by rows and drafted rows: 1/1 22.8 / 33.3, 2/1 34.9 / 38.9, 2/2 35.5 / 51.3,
# 8/1 110 / 66, 8/4 108 / 98, 8/8 109 / 135, 16/8 237 / 173, 16/16 241 / 270 (a plain compiled step:
# 13.8, 17.7, 38, 79 ms at 1, 2, 8, 16 rows). Compiled wins where padded <= 1.25 x fed + 8 tokens.
PADDED_PER_FED, PADDED_SLACK = 1.25, 8


def worth_padding(padded: int, fed: int) -> bool:
    """Whether a drafted step of `fed` tokens runs compiled, padded to `padded` (rows x verify width).

    >>> worth_padding(5, 2), worth_padding(40, 40), worth_padding(40, 24)
    (True, True, False)
    """
    return padded <= PADDED_PER_FED * fed + PADDED_SLACK


def read_slots(tables: list[list[int]], seen: torch.Tensor, length: int, block_size: int) -> torch.Tensor:
    """[B, length]: row b's flat pool slot (block * block_size + offset) of each of its first seen[b]
    positions, 0 after them and in padding rows (B = len(seen) >= len(tables)); laid out by torch, not per
    token in Python, since a step reads every past token of every row.

        >>> read_slots([[3, 5]], torch.tensor([5, 0]), 6, 4)
        tensor([[12, 13, 14, 15, 20,  0],
                [ 0,  0,  0,  0,  0,  0]])
    """
    width = -(-length // block_size)  # blocks that hold `length` positions
    table = torch.zeros(len(seen), width, dtype=torch.long)
    for row, blocks in enumerate(tables):
        table[row, : min(len(blocks), width)] = torch.tensor(blocks[:width], dtype=torch.long)
    positions = torch.arange(length)
    slots = table[:, positions // block_size] * block_size + positions % block_size
    return slots.masked_fill(positions[None, :] >= seen.cpu()[:, None], 0).to(seen.device)


class CompiledDecode:
    """labkit's Llama's decode step compiled for the batch sizes up to `max_batch`, over `pool` (module doc).

    verify_width W (speculation: 1 + the most draft tokens a row feeds): the drafted step compiled too, for
    the same batch sizes, each row padded to W tokens (its pending token, then its drafts); None: only the
    plain decode step.
    """

    def __init__(self, model: Llama, pool: BlockPool, max_batch: int, verify_width: int | None = None):
        self.model, self.pool, self.sizes = model, pool, batch_sizes(max_batch)
        if verify_width is not None:
            check_int("verify_width", verify_width, minimum=2, note="1 + the most draft tokens a row feeds")
        self.verify_width = verify_width
        # a copy of each graph's code per engine: its graphs skip the guards on the model's modules, so
        # another engine's model must not find them (labkit.fast.static.compiled)
        self.graph = compiled_function(decode_graph)
        self.verify_graph = compiled_function(decode_graph) if verify_width else None  # a copy per width
        load_kernel()  # the graph's attention asks for labkit's kernel: loading it (a file's stat) cannot be traced
        self.compile_seconds: dict[int, float] = {}  # batch size -> seconds of its first calls (both graphs)
        self.steps = 0  # decode steps run compiled
        self.verify_steps = 0  # drafted steps run compiled

    def fits(self, batch: int) -> bool:
        return padded_size(batch, self.sizes) is not None

    def verifies(self, rows: list[list[int]]) -> bool:
        """Whether the compiled drafted step runs `rows` (each a pending token and its drafts): a verify
        width was compiled, every row fits it, the batch fits a size, and padding every row to the width
        adds few tokens (`worth_padding`)."""
        width = self.verify_width or 0
        size = padded_size(len(rows), self.sizes)
        return (
            size is not None
            and all(1 <= len(row) <= width for row in rows)
            and worth_padding(size * width, sum(map(len, rows)))
        )

    def warm_up(self) -> dict[int, float]:
        """Compile every batch size now (a step of padding rows each, of each graph), instead of at a
        request's first step; returns {batch size: seconds}. The model runs once eagerly first, so its kernels
        are loaded."""
        with torch.no_grad():
            self.model(torch.zeros(1, 1, dtype=torch.long, device=self.model.device))
        widths = (1, self.verify_width) if self.verify_width else (1,)
        for size in self.sizes:
            self.compile_seconds[size] = sum(
                time_once(lambda: self.inputs_and_run([], [], [], size, width))[1] for width in widths
            )
        return dict(self.compile_seconds)

    def run(self, rows: list[list[int]], tables: list[list[int]], starts: list[int]) -> torch.Tensor:
        """One new token per row (rows[b] == [token id]) after starts[b] cached tokens in tables[b]: its keys
        and values written into the pool; the logits [B, V] float32 (CPU)."""
        if any(len(row) != 1 for row in rows):
            raise ValueError("A compiled decode step feeds exactly one new token per row.")
        self.steps += 1
        return self.inputs_and_run(rows, tables, starts, self.size_of(rows), 1)

    def run_drafted(self, rows: list[list[int]], tables: list[list[int]], starts: list[int]) -> torch.Tensor:
        """Each row's pending token and its drafts (rows[b], 1 to verify_width tokens) after starts[b] cached
        tokens: their keys and values written; the logits at every fed token, row after row,
        [sum of len(rows[b]), V] float32 (CPU), as `forward_packed(..., n_logits)` returns them."""
        if not self.verifies(rows):
            raise ValueError(
                f"A compiled drafted step feeds 1 to {self.verify_width} tokens per row (verify_width), "
                f"in at most {self.sizes[-1]} rows; got rows of {sorted({len(row) for row in rows})} tokens."
            )
        self.verify_steps += 1
        return self.inputs_and_run(rows, tables, starts, self.size_of(rows), self.verify_width)

    def size_of(self, rows: list[list[int]]) -> int:
        size = padded_size(len(rows), self.sizes)
        if size is None:
            raise ValueError(f"{len(rows)} rows exceed the largest compiled batch size, {self.sizes[-1]}.")
        return size

    def inputs_and_run(
        self, rows: list[list[int]], tables: list[list[int]], starts: list[int], size: int, width: int
    ) -> torch.Tensor:
        """Lay the rows out padded to `size` rows of `width` tokens (a row's last token repeated: keys never
        written, logits never returned), run the graph of that width, write the real tokens' keys and values."""
        device, real = self.model.device, len(rows)
        length = max([MIN_CONTEXT, *starts])
        pad = size - real
        seen = torch.tensor(starts + [0] * pad, device=device)  # [size]: past tokens each row sees
        read = read_slots(tables, seen, length, self.pool.block_size)
        mask = step_mask(seen, length, width)
        ids = torch.tensor(
            [row + row[-1:] * (width - len(row)) for row in rows] + [[0] * width] * pad, device=device
        )
        last = self.model.config.max_position_embeddings - 1  # a padding token's position, never read
        positions = (seen[:, None] + torch.arange(width, device=device)).clamp(max=last)
        torch._dynamo.mark_dynamic(read, 1)
        torch._dynamo.mark_dynamic(mask, 3)
        graph = self.graph if width == 1 else self.verify_graph
        with torch.no_grad():
            logits, new_keys, new_values = graph(
                self.model, ids, positions, mask, read, self.pool.keys, self.pool.values
            )
        if real:
            self.write(new_keys, new_values, tables, starts, [len(row) for row in rows])
        if width == 1 or not real:
            return logits[:real, 0].cpu()
        return torch.cat([logits[b, : len(row)] for b, row in enumerate(rows)]).cpu()

    def write(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        tables: list[list[int]],
        starts: list[int],
        n_new: list[int],
    ) -> None:
        """Row b's first n_new[b] new keys and values of [L, B', H, W, D] (B' >= B) into its slots at
        positions starts[b] onwards, in every layer."""
        width = keys.shape[3]
        slots = [
            slot_index(table, list(range(start, start + n)), self.pool.block_size)
            for table, start, n in zip(tables, starts, n_new)
        ]
        picked = torch.tensor(
            [b * width + t for b, n in enumerate(n_new) for t in range(n)], device=keys.device
        )
        slots = torch.tensor([slot for row in slots for slot in row], device=keys.device)
        for pool, new in ((self.pool.keys, keys), (self.pool.values, values)):
            layers, heads, n_blocks, block_size, dim = pool.shape
            flat = pool.view(layers, heads, n_blocks * block_size, dim)  # a view: the writes land in the pool
            rows = new.transpose(1, 2).reshape(layers, heads, -1, dim)  # [L, H, B' * W, D]
            if len(picked) < rows.shape[2]:  # padding rows or tokens: keep the fed ones
                rows = rows.index_select(2, picked)
            # index_copy_, not `flat[:, :, slots] = ...`: on 2 cores the indexed assignment took 160 us a
            # pool at one row, index_copy_ 12 us (slots are distinct, so both write the same)
            flat.index_copy_(2, slots, rows.to(flat.dtype))
