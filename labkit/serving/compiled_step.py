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
- the graph only reads the pool. Each layer gathers its rows' past keys and values from their blocks
  [B, H, S, D] and attends over them and the new token's own key, appended last; the new keys and values
  of every layer come out of the graph [L, B, H, 1, D] and are written into the pool by one indexed copy
  each, after it. (A write inside the graph into a slice of the pool's one tensor would become a copy of
  all of it: labkit.fast.static says why.)

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
from labkit.fast.row_attention import row_attention
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
    """The cache a compiled decode step sees: each layer's past keys and values gathered from the pool, with
    the new token's own appended last; the new ones are kept to be written after the graph.

    read_slots [B, S]: row b's past tokens' flat pool slots (block * block_size + offset), padded with 0.
    """

    attend = staticmethod(row_attention)  # batch-invariant, as the eager steps' caches

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, read_slots: torch.Tensor):
        self.keys, self.values, self.read_slots = keys, values, read_slots
        self.new_keys: list[torch.Tensor] = []
        self.new_values: list[torch.Tensor] = []

    def gather(self, pool: torch.Tensor, layer: int) -> torch.Tensor:
        """Layer `layer` of pool [L, H, n_blocks, block_size, D] at read_slots: [B, H, S, D]."""
        heads, n_blocks, block_size, dim = pool.shape[1:]
        flat = pool[layer].reshape(heads, n_blocks * block_size, dim)
        batch, length = self.read_slots.shape
        picked = flat.index_select(1, self.read_slots.reshape(-1))  # [H, B * S, D]
        return picked.view(heads, batch, length, dim).transpose(0, 1)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v [B, H, 1, D] -> every key and value the new tokens see, [B, H, S + 1, D]."""
        self.new_keys.append(k)
        self.new_values.append(v)
        return (
            torch.cat([self.gather(self.keys, layer), k], dim=2),
            torch.cat([self.gather(self.values, layer), v], dim=2),
        )


def decode_graph(
    model: Llama,
    ids: torch.Tensor,
    positions: torch.Tensor,
    mask: torch.Tensor,
    read_slots: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The function compiled: ids [B, 1] at positions [B, 1], mask [B, 1, 1, S + 1] (additive), read_slots
    [B, S] -> (logits [B, V] float32, new keys and values [L, B, H, 1, D])."""
    cache = PoolReader(keys, values, read_slots)
    last = torch.zeros(ids.shape[0], dtype=torch.long, device=ids.device)
    logits = model(ids, cache, logits_at=last, positions=positions, mask=mask)
    return logits, torch.stack(cache.new_keys), torch.stack(cache.new_values)


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
    """labkit's Llama's decode step compiled for the batch sizes up to `max_batch`, over `pool` (module doc)."""

    def __init__(self, model: Llama, pool: BlockPool, max_batch: int):
        self.model, self.pool, self.sizes = model, pool, batch_sizes(max_batch)
        # a copy of decode_graph's code per engine: its graphs skip the guards on the model's modules, so
        # another engine's model must not find them (labkit.fast.static.compiled)
        self.graph = compiled_function(decode_graph)
        load_kernel()  # the graph's attention asks for labkit's kernel: loading it (a file's stat) cannot be traced
        self.compile_seconds: dict[int, float] = {}  # batch size -> seconds of its first call
        self.steps = 0  # decode steps run compiled

    def fits(self, batch: int) -> bool:
        return padded_size(batch, self.sizes) is not None

    def warm_up(self) -> dict[int, float]:
        """Compile every batch size now (a step of padding rows each), instead of at a request's first step;
        returns {batch size: seconds}. The model runs once eagerly first, so its kernels are loaded."""
        with torch.no_grad():
            self.model(torch.zeros(1, 1, dtype=torch.long, device=self.model.device))
        for size in self.sizes:
            self.compile_seconds[size] = time_once(lambda: self.inputs_and_run([], [], [], size))[1]
        return dict(self.compile_seconds)

    def run(self, rows: list[list[int]], tables: list[list[int]], starts: list[int]) -> torch.Tensor:
        """One new token per row (rows[b] == [token id]) after starts[b] cached tokens in tables[b]: its keys
        and values written into the pool; the logits [B, V] float32 (CPU)."""
        if any(len(row) != 1 for row in rows):
            raise ValueError("A compiled decode step feeds exactly one new token per row.")
        size = padded_size(len(rows), self.sizes)
        if size is None:
            raise ValueError(f"{len(rows)} rows exceed the largest compiled batch size, {self.sizes[-1]}.")
        self.steps += 1
        return self.inputs_and_run([row[0] for row in rows], tables, starts, size)

    def inputs_and_run(
        self, tokens: list[int], tables: list[list[int]], starts: list[int], size: int
    ) -> torch.Tensor:
        """Lay the rows out padded to `size`, run the graph, write the real rows' keys and values."""
        device, block_size, real = self.model.device, self.pool.block_size, len(tokens)
        length = max([MIN_CONTEXT, *starts])
        pad = size - real
        seen = torch.tensor(starts + [0] * pad, device=device)  # [size]: past tokens each row sees
        read = read_slots(tables, seen, length, block_size)
        columns = torch.arange(length + 1, device=device)
        # the new key, last, is seen
        hidden = (columns[None, :] >= seen[:, None]) & (columns[None, :] < length)
        mask = torch.zeros(size, 1, 1, length + 1, device=device).masked_fill(
            hidden[:, None, None], float("-inf")
        )
        ids = torch.tensor(tokens + [0] * pad, device=device)[:, None]
        torch._dynamo.mark_dynamic(read, 1)
        torch._dynamo.mark_dynamic(mask, 3)
        with torch.no_grad():
            logits, new_keys, new_values = self.graph(
                self.model, ids, seen[:, None], mask, read, self.pool.keys, self.pool.values
            )
        if real:
            self.write(new_keys[:, :real], new_values[:, :real], tables, starts)
        return logits[:real].cpu()

    def write(
        self, keys: torch.Tensor, values: torch.Tensor, tables: list[list[int]], starts: list[int]
    ) -> None:
        """Each row's new keys and values [L, B, H, 1, D] into its slot at position starts[b], in every layer."""
        slots = torch.tensor(
            [slot_index(t, [s], self.pool.block_size)[0] for t, s in zip(tables, starts)], device=keys.device
        )
        for pool, new in ((self.pool.keys, keys), (self.pool.values, values)):
            layers, heads, n_blocks, block_size, dim = pool.shape
            flat = pool.view(layers, heads, n_blocks * block_size, dim)  # a view: the writes land in the pool
            flat[:, :, slots] = new[:, :, :, 0].transpose(1, 2).to(flat.dtype)  # [L, H, B, D]
