"""A from-scratch model (labkit's Llama or Gemma3) on the weights of a transformers model, shared, not copied.

The model is built on the meta device (no memory), then handed the transformers model's own tensors by name
(`model.` prefixes dropped); a tied output head points at the embedding again, and a weight that found no
tensor is an error rather than a silently random layer.

    >>> model = on_hf_weights(lambda: Llama(LlamaConfig.from_hf(hf_model.config)), hf_model)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)


def on_hf_weights(build: Callable[[], M], hf_model: nn.Module) -> M:
    """build() on the meta device, given hf_model's tensors by name; in eval mode. A ValueError names the
    weights hf_model did not have."""
    with torch.device("meta"):
        model = build()
    state = {name.removeprefix("model."): tensor for name, tensor in hf_model.state_dict().items()}
    model.load_state_dict(state, strict=False, assign=True)
    if model.config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    missing = [name for name, parameter in model.named_parameters() if parameter.is_meta]
    if missing:
        raise ValueError(f"These weights were not found in the transformers model: {missing[:5]}")
    return model.eval()
