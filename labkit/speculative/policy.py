"""The decoding policy a target and its drafter share in speculative decoding.

>>> policy = SamplingPolicy(config.transforms(len(prompt_ids), eos_ids), config.temperature, generator)
>>> policy.probs(logits, context_ids)       # [n, V] after the same transforms as labkit.generate
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from labkit.decoding.transforms import apply_transforms


@dataclass
class SamplingPolicy:
    """How logits become a choice, applied identically to the target's and the draft's logits."""

    transforms: list[Callable] = field(default_factory=list)  # from DecodingConfig.transforms()
    temperature: float = 0.0  # 0 = greedy (the transforms then hold only penalties, if any)
    generator: torch.Generator = field(default_factory=torch.Generator)  # all the run's randomness

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0

    def logits(
        self, logits: torch.Tensor, context: Sequence[int], drafts: Sequence[int] = ()
    ) -> torch.Tensor:
        """logits [n, V] -> transformed [n, V] (float32, CPU); row i follows context + drafts[:i]."""
        logits = logits.float().cpu()
        if not self.transforms:
            return logits
        rows = [
            apply_transforms(
                logits[i : i + 1], torch.tensor([list(context) + list(drafts[:i])]), self.transforms
            )
            for i in range(logits.shape[0])
        ]
        return torch.cat(rows)

    def probs(self, logits: torch.Tensor, context: Sequence[int], drafts: Sequence[int] = ()) -> torch.Tensor:
        """Sampling distributions [n, V]: softmax of the transformed logits (temperature included)."""
        return torch.softmax(self.logits(logits, context, drafts), dim=-1)
