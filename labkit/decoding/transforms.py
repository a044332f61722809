"""A decoding policy as data: each logits transform with its options bound, applied in order.

A function of `labkit.decoding.sampling` such as `top_p_filter(logits, p)` needs its options (p = 0.9) and,
for some, the tokens so far: the repetition penalty reads the prompt too, the presence penalty only the
generated tokens, min_new_tokens only how many there are. A `Transform` binds the options and says which
of those it reads, so every transform is called the same way, transform(logits, input_ids), and a policy
is a plain list of them (`DecodingConfig.transforms` builds one from the options).

    >>> top_p = Transform.bind(sampling.top_p_filter, p=0.9)
    >>> top_p
    top_p_filter(p=0.9)
    >>> logits = apply_transforms(logits, input_ids, [top_p])     # logits [B, V], input_ids [B, T]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from labkit.core.doors import check_items, check_tensor


@dataclass(frozen=True)
class Transform:
    """A transform with its parameters bound, called as transform(logits [B, V], input_ids [B, T]).

    input_ids are the prompt and the tokens generated so far; `prompt_length` says where they part.
    """

    name: str  # the function in labkit.sampling
    function: Callable[..., torch.Tensor] = field(repr=False)
    options: tuple[tuple[str, object], ...] = ()  # keyword arguments, as (name, value) pairs
    ids: str = "none"  # which ids the function takes: "none", "all" (prompt too), "generated", "count"
    prompt_length: int = field(default=0, repr=False)

    @classmethod
    def bind(
        cls, function: Callable[..., torch.Tensor], ids: str = "none", prompt_length: int = 0, **options
    ) -> Transform:
        """`function` with its keyword `options` bound, named after it; `ids` as in the field above.

        >>> Transform.bind(sampling.repetition_penalty, "all", penalty=1.1)
        repetition_penalty(penalty=1.1)
        """
        return cls(function.__name__, function, tuple(options.items()), ids, prompt_length)

    def __call__(self, logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        kwargs = dict(self.options)
        if self.ids == "all":
            return self.function(logits, input_ids, **kwargs)
        if self.ids == "generated":
            return self.function(logits, input_ids[:, self.prompt_length :], **kwargs)
        if self.ids == "count":
            return self.function(logits, input_ids.shape[-1] - self.prompt_length, **kwargs)
        return self.function(logits, **kwargs)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.options if k != "eos_token_ids")
        return f"{self.name}({shown})"


def apply_transforms(
    logits: torch.Tensor, input_ids: torch.Tensor, transforms: Iterable[Callable]
) -> torch.Tensor:
    """Run logits [B, V] through each transform in order; input_ids [B, T] are the tokens so far."""
    check_tensor("logits", logits, "[B, V] of scores", dims=2)
    check_items("transforms", transforms, "logits transforms (callables)", has=("__call__",))
    for transform in transforms:
        logits = transform(logits, input_ids)
    return logits
