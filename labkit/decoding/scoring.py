"""How likely a model finds a text: per-token log-probabilities, sequence log-probability, perplexity.

>>> continuation_logprob(model, tokenizer("Q: 2+2?\\nA:")["input_ids"], tokenizer(" 4")["input_ids"])
-0.9...
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from labkit.core.arguments import check_int
from labkit.core.doors import check_items, check_model, check_tensor
from labkit.core.forward import forward, model_device


def token_logprobs(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """input_ids [B, T] -> [B, T-1]: log p(x_t | x_<t) for t = 1..T-1 (the first token is given)."""
    check_model("model", model)
    check_tensor("input_ids", input_ids, "[B, T] of token ids", dims=2)
    if input_ids.dim() != 2 or input_ids.shape[1] < 2:
        raise ValueError(
            f"input_ids must be [batch, tokens] with at least 2 tokens, got {tuple(input_ids.shape)}."
        )
    logprobs = torch.log_softmax(forward(model, input_ids)[:, :-1], dim=-1)
    return logprobs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)


def continuation_logprob(
    model: torch.nn.Module, prompt_ids: Sequence[int], continuation_ids: Sequence[int]
) -> float:
    """log p(continuation | prompt), summed over the continuation's tokens."""
    check_model("model", model)
    check_items("prompt_ids", prompt_ids, "token ids (int)", of=int)
    check_items("continuation_ids", continuation_ids, "token ids (int)", of=int)
    if not prompt_ids or not continuation_ids:
        raise ValueError("Both the prompt and the continuation need at least one token.")
    input_ids = torch.tensor([list(prompt_ids) + list(continuation_ids)], device=model_device(model))
    return float(token_logprobs(model, input_ids)[0, len(prompt_ids) - 1 :].sum())


def perplexity(model: torch.nn.Module, input_ids: torch.Tensor, window: int = 512) -> float:
    """exp(mean negative log-likelihood) of input_ids [1, T], scored in non-overlapping windows."""
    check_model("model", model)
    check_tensor("input_ids", input_ids, "[1, T] of token ids", dims=2)
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"perplexity() takes one sequence [1, T], got {tuple(input_ids.shape)}.")
    check_int("window", window, minimum=2)
    total, count = 0.0, 0
    for start in range(0, input_ids.shape[1] - 1, window):
        chunk = input_ids[:, start : start + window]
        if chunk.shape[1] < 2:
            break
        logprobs = token_logprobs(model, chunk)
        total, count = total - float(logprobs.sum()), count + logprobs.numel()
    return float(torch.exp(torch.tensor(total / count)))
