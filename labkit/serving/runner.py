"""One batched forward pass per engine step, over labkit's Llama and a paged KV cache.

The rows of a batch may be at different positions (a decode row at position 300 next to a prompt
being prefilled from 0) and feed different numbers of tokens: `BatchKV` (rows right-padded, for
decode steps) or `PackedKV` (rows end to end, for steps that feed prompts) gives each row its
positions, its blocks and its mask.

    >>> runner = BatchRunner(model, pool)
    >>> logits = runner.run(batch.seqs)        # [B, V]: after each row's last new token
"""

from __future__ import annotations

import torch

from labkit.core.llama import Llama
from labkit.core.paged import BlockPool
from labkit.serving.batch_cache import BatchKV, PackedKV
from labkit.serving.request import EngineRequest


def require_llama(model: torch.nn.Module) -> None:
    """Raise a TypeError unless model is labkit's Llama (the only model with a paged, mixed-position path)."""
    if not isinstance(model, Llama):
        raise TypeError(
            f"The serving engine runs labkit's from-scratch Llama over a paged KV cache; this is a "
            f"{type(model).__name__}. Load it with labkit.load_model(name, impl='labkit'), or wrap a "
            "transformers Llama with labkit.Llama.from_hf(model)."
        )


class BatchRunner:
    """labkit's Llama and the BlockPool its sequences' keys and values live in."""

    def __init__(self, model: torch.nn.Module, pool: BlockPool):
        require_llama(model)
        self.model, self.pool = model, pool

    def run(self, seqs: tuple[EngineRequest, ...] | list[EngineRequest],
            n_new: tuple[int, ...] | list[int] | None = None) -> torch.Tensor:
        """Feed each sequence its next `n_new[i]` uncached tokens (all of them by default); return the logits
        after each row's last one, [B, V] float32 (CPU).

        Rows that all feed one token (decode) run as a batch [B, 1]; when some feed more (prompts, chunks)
        and there are several rows, they run packed end to end [1, N], so no row is padded to the longest.
        Each sequence's block table must already cover its new tokens (the scheduler sees to it).
        """
        rows = [seq.new_token_ids(None if n_new is None else n_new[i]) for i, seq in enumerate(seqs)]
        n_fed = [len(row) for row in rows]
        tables, starts = [seq.block_table for seq in seqs], [seq.num_cached_tokens for seq in seqs]
        device = self.model.device
        if len(rows) > 1 and max(n_fed) > 1:
            cache = PackedKV(self.pool, tables, starts, n_fed)
            ids, last = torch.tensor([[t for row in rows for t in row]], device=device), cache.last  # [1, N], [B]
        else:
            width = max(n_fed)
            ids = torch.tensor([row + [0] * (width - len(row)) for row in rows], device=device)  # [B, T]
            cache = BatchKV(self.pool, tables, starts, n_fed)
            last = torch.tensor(n_fed, device=device) - 1  # [B]: each row's last new token
        with torch.no_grad():
            return self.model(ids, cache, logits_at=last).cpu()  # [B, V]
