"""One batched forward pass per engine step, over labkit's Llama or Gemma3 and a paged KV cache.

The rows of a batch may be at different positions (a decode row at position 300 next to a prompt
being prefilled from 0) and feed different numbers of tokens: `BatchKV` (rows right-padded, for
decode steps) or `PackedKV` (rows end to end, for steps that feed prompts) gives each row its
positions, its blocks and its mask.

A `CompiledDecode` (compiled_step.py), when given, runs the steps where every row feeds one token and
the batch fits one of its sizes, and, compiled with a verify width, the drafted steps where every row
decodes (its pending token and its drafts); every other step runs eagerly here (always, for a Gemma3).

**Gemma3's windows** (vLLM's hybrid KV cache manager). Its 15 local layers see the last 512 keys of each
row through a second mask, `layout(T, window)`, and keep their keys in a pool of their own (`LayerPools`)
through each sequence's `window_table`: the block manager releases a local block once it lies wholly
before the window of the sequence's next token, while the 3 global layers keep every block. The prefix
cache then reuses a prefix of L tokens only where both kinds still hold theirs: every global block of it,
and the local blocks of the window before L (those holding keys L - window + 1 .. L - 1); a local block
released and since handed out again ends the hit there. What that saves, by the memory calculator
(labkit.models.sizing, gemma-3-270m, float32, 8 sequences): 176 MB instead of 302 MB at 1,024 tokens
each, 528 MB instead of 2,416 MB at 8,192.

    >>> runner = BatchRunner(model, LayerPools.for_model(model, n_blocks=64, block_size=16))
    >>> logits = runner.run(batch.seqs)        # [B, V]: after each row's last new token
"""

from __future__ import annotations

import itertools

import torch

from labkit.core.gemma3 import Gemma3
from labkit.core.llama import Llama, NotLabkitLlama, check_llama
from labkit.core.paged import BlockPool
from labkit.serving.batch_cache import BatchKV, PackedKV
from labkit.serving.compiled_step import CompiledDecode
from labkit.serving.layer_pools import LayerPools
from labkit.serving.request import EngineRequest

PAGED_USER = "The serving engine (a paged KV cache, rows at different positions)"


def require_llama(model: torch.nn.Module) -> None:
    """Raise NotLabkitLlama unless model is labkit's Llama (static batching, compiled decode steps)."""
    check_llama(model, PAGED_USER)


def require_paged_model(model: object) -> Llama | Gemma3:
    """model, if it is one of labkit's from-scratch models with a paged, mixed-position path (Llama,
    Gemma3); else NotLabkitLlama saying how to load one.

    >>> require_paged_model(torch.nn.Linear(2, 2))
    Traceback (most recent call last):
    NotLabkitLlama: The serving engine (...) runs labkit's Llama or Gemma3 (the from-scratch models), got Linear. ...
    """
    if not isinstance(model, (Llama, Gemma3)):
        raise NotLabkitLlama(
            f"{PAGED_USER} runs labkit's Llama or Gemma3 (the from-scratch models), got {type(model).__name__}. "
            "Load one with labkit.load_model(name, impl='labkit')."
        )
    return model


class BatchRunner:
    """labkit's Llama or Gemma3, the pools its sequences' keys and values live in (a BlockPool: every layer
    in it), and its compiled decode step (None: every step eager; a Llama's only)."""

    def __init__(
        self, model: torch.nn.Module, pools: BlockPool | LayerPools, compiled: CompiledDecode | None = None
    ):
        require_paged_model(model)
        self.model, self.pools, self.compiled = model, LayerPools.of(pools), compiled
        self.pool = self.pools.full

    def run(
        self,
        seqs: tuple[EngineRequest, ...] | list[EngineRequest],
        n_new: tuple[int, ...] | list[int] | None = None,
        copies: tuple[tuple[int, int], ...] = (),
        window_copies: tuple[tuple[int, int], ...] = (),
        drafts: tuple[tuple[int, ...], ...] = (),
    ) -> torch.Tensor:
        """Feed each sequence its next `n_new[i]` uncached tokens (all of them by default); return the logits
        after each row's last one, [B, V] float32 (CPU). copies, window_copies: (shared, private) block pairs
        of the global and the local layers' pool, copied first (copy on write: a sample's first write after
        its fork). drafts (speculation): row i's last len(drafts[i]) of its n_new[i] tokens are these draft
        tokens, after its pending one; the logits are then those at every token of a drafted row and at the
        last of the others, in row order: [sum over rows of (1 + len(drafts[i])), V], always packed.

        Rows that all feed one token (decode) run as a batch [B, 1]; when some feed more (prompts, chunks)
        and there are several rows, they run packed end to end [1, N], so no row is padded to the longest.
        Each sequence's block table must already cover its new tokens (the scheduler sees to it).
        """
        self.pools.copy_blocks(list(copies), list(window_copies))
        rows = [seq.new_token_ids(None if n_new is None else n_new[i]) for i, seq in enumerate(seqs)]
        if any(drafts):
            rows = [seq.new_token_ids(n - len(d)) + list(d) for seq, n, d in zip(seqs, n_new, drafts)]
        tables, starts = [seq.block_table for seq in seqs], [seq.num_cached_tokens for seq in seqs]
        windows = [seq.window_table for seq in seqs] if self.pools.window is not None else None
        self.model.check_position(max(start + len(row) for start, row in zip(starts, rows)) - 1)
        if self.compiled is not None and max(map(len, rows)) == 1 and self.compiled.fits(len(rows)):
            return self.compiled.run(rows, tables, starts)
        every_row_decodes = any(drafts) and all(n - len(d) == 1 for n, d in zip(n_new, drafts))  # no chunk
        if every_row_decodes and self.compiled is not None and self.compiled.verifies(rows):
            return self.compiled.run_drafted(rows, tables, starts)
        if any(drafts):
            n_logits = [1 + len(d) for d in drafts]
            return forward_packed(self.model, self.pools, rows, tables, starts, windows, n_logits)
        if len(rows) > 1 and max(len(row) for row in rows) > 1:
            return forward_packed(self.model, self.pools, rows, tables, starts, windows)
        return forward_padded(self.model, self.pools, rows, tables, starts, windows)


def forward_padded(
    model: Llama | Gemma3,
    pool: BlockPool | LayerPools,
    rows: list[list[int]],
    tables: list[list[int]],
    starts: list[int],
    window_tables: list[list[int]] | None = None,
) -> torch.Tensor:
    """Rows of new token ids right-padded to the longest, [B, T], over a `BatchKV`: the logits after each
    row's last one, [B, V] float32 (CPU). Row b continues the starts[b] tokens in its block table (and,
    with `LayerPools` that have a window pool, its window table for the local layers).

        >>> forward_padded(model, pool, [[5], [9]], tables=[[0], [1]], starts=[3, 7]).shape   # two decodes
        torch.Size([2, 49152])
    """
    n_new = [len(row) for row in rows]
    width, device = max(n_new), model.device
    ids = torch.tensor([row + [0] * (width - len(row)) for row in rows], device=device)  # [B, T]
    last = torch.tensor(n_new, device=device) - 1  # [B]: each row's last new token
    return forward_laid_out(model, ids, BatchKV(pool, tables, starts, n_new, window_tables), last)


def forward_packed(
    model: Llama | Gemma3,
    pool: BlockPool | LayerPools,
    rows: list[list[int]],
    tables: list[list[int]],
    starts: list[int],
    window_tables: list[list[int]] | None = None,
    n_logits: list[int] | None = None,
) -> torch.Tensor:
    """The same rows end to end, [1, N] with N = the sum of their lengths, over a `PackedKV`: [B, V]
    float32 (CPU); with n_logits, the logits at each row's last n_logits[b] tokens instead,
    [sum(n_logits), V] (a drafted row's: its pending token's and each draft's).

    >>> forward_packed(model, pool, [[5], [1, 2, 3]], tables=[[0], [1]], starts=[3, 0]).shape
    torch.Size([2, 49152])
    >>> forward_packed(model, pool, [[5], [1, 2, 3]], [[0], [1]], [3, 0], n_logits=[1, 3]).shape
    torch.Size([4, 49152])
    """
    cache = PackedKV(pool, tables, starts, [len(row) for row in rows], window_tables)
    ids = torch.tensor([[t for row in rows for t in row]], device=model.device)  # [1, N]
    if n_logits is None:
        return forward_laid_out(model, ids, cache, cache.last)
    ends = itertools.accumulate(len(row) for row in rows)
    at = [i for end, n in zip(ends, n_logits) for i in range(end - n, end)]
    return forward_laid_out(model, ids, cache, torch.tensor(at, device=model.device))


def forward_laid_out(
    model: Llama | Gemma3, ids: torch.Tensor, cache: BatchKV | PackedKV, logits_at: torch.Tensor
) -> torch.Tensor:
    """model on ids [B, T] at the positions and under the mask of the cache's layout (a Gemma3's local
    layers under the layout of its window): the logits [B, V] float32 (CPU) at logits_at [B], one index
    into T per row; packed (B = 1), logits_at [M] may hold any indices into N: [M, V]."""
    positions, mask = cache.layout(ids.shape[1])
    masks = {"mask": mask}
    if isinstance(model, Gemma3):
        masks["window_mask"] = cache.layout(ids.shape[1], model.config.sliding_window)[1]
    with torch.no_grad():
        return model(ids, cache, logits_at=logits_at, positions=positions, **masks).cpu()
