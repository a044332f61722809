"""Choosing the next token. Transforms only rescale or mask logits; only `greedy` and `sample` choose.

    >>> probs = torch.softmax(apply_temperature(logits, 0.7), dim=-1)
    >>> next_ids = sample(probs, torch.Generator().manual_seed(0))     # [B]
"""

from __future__ import annotations

import torch


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits [B, V] / temperature. Below 1 sharpens the distribution, above 1 flattens it."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 to rescale logits (0 means greedy), got {temperature}.")
    return logits / temperature


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """logits [B, V] -> token ids [B]: the most likely token (the lowest id on a tie, like argmax)."""
    return logits.argmax(dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """probs [B, V] -> token ids [B], drawn with the given generator so a seed reproduces a run."""
    if not isinstance(generator, torch.Generator):
        raise TypeError("sample() needs a torch.Generator, e.g. torch.Generator().manual_seed(0).")
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
