"""Helpers shared by the tests of labkit.core (fixtures live in tests/conftest.py)."""

import torch

SMOLLM2_VOCAB = 49152  # SmolLM2's vocabulary, and so the tiny model's (labkit.tiny_model)
GEMMA3_VOCAB = 262144  # Gemma-3's vocabulary, and so Gemma3Config.tiny()'s


def random_ids(batch: int, length: int, seed: int = 0, vocab: int = SMOLLM2_VOCAB) -> torch.Tensor:
    """Token ids [batch, length] drawn uniformly from range(vocab) by a generator seeded with `seed`: the
    same seed, shape and vocab give the same ids on every run.

        >>> random_ids(2, 7).shape, random_ids(1, 12, seed=1, vocab=GEMMA3_VOCAB).shape
        (torch.Size([2, 7]), torch.Size([1, 12]))
    """
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))
