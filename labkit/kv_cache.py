"""A contiguous, preallocated key/value cache: attention's memory of the tokens already seen.

Keys and values of every layer live in two tensors of shape
[n_layers, batch, n_kv_heads, max_length, head_dim]; a forward pass appends the new tokens' keys and
values at `length` and reads back everything up to it, so each decode step costs O(length), not the
O(length^2) of recomputing the whole prefix.

    >>> cache = model.new_cache(max_length=256)
    >>> logits = model(prompt_ids, cache)          # prefill: cache.length == prompt length
    >>> logits = model(next_id[:, None], cache)    # decode: cache.length grows by one

Any object with the same four members (`length`, `append`, `advance`, `reset`) works as a cache for
labkit's Llama; `labkit.paged.PagedKVCache` is the other one (notebook 06).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class Cache(Protocol):
    """What labkit's Llama needs from a cache (the contiguous `KVCache` and the `PagedKVCache`)."""

    length: int  # tokens stored so far; the next token goes at this position

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, n_kv_heads, T, D] of `layer`; return all its keys, values [B, H, length+T, D]."""

    def advance(self, n_tokens: int) -> None:
        """Called once per forward pass, after every layer appended its T = n_tokens new entries."""

    def reset(self) -> None:
        """Forget every stored token."""


class KVCache:
    """Keys and values [n_layers, batch, n_kv_heads, max_length, head_dim], allocated once up front."""

    def __init__(self, n_layers: int, batch_size: int, n_kv_heads: int, max_length: int,
                 head_dim: int, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a whole number of sequences, at least 1, got {batch_size!r}.")
        if not isinstance(max_length, int) or max_length < 1:
            raise ValueError(
                f"max_length must be at least 1 token, got {max_length!r}. Size the cache for the prompt "
                "plus the new tokens."
            )
        shape = (n_layers, batch_size, n_kv_heads, max_length, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0  # tokens stored so far (the same for every layer once a forward pass ends)

    @property
    def max_length(self) -> int:
        return self.keys.shape[3]

    @property
    def batch_size(self) -> int:
        return self.keys.shape[1]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, n_kv_heads, T, D] after the cached tokens; return all of them [B, H, length+T, D]."""
        if k.shape[0] != self.batch_size:
            raise ValueError(
                f"This KV cache was made for a batch of {self.batch_size} sequences; the model was given "
                f"{k.shape[0]}. Create the cache with batch_size={k.shape[0]}."
            )
        end = self.length + k.shape[2]
        if end > self.max_length:
            raise ValueError(
                f"The KV cache holds {self.max_length} tokens; {self.length} are stored and "
                f"{k.shape[2]} more do not fit. Create it with a larger max_length (at least {end})."
            )
        self.keys[layer, :, :, self.length:end] = k
        self.values[layer, :, :, self.length:end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def advance(self, n_tokens: int) -> None:
        """Mark n_tokens more as stored (called once per forward pass, after every layer appended)."""
        self.length += n_tokens

    def reset(self) -> None:
        """Forget every stored token (the tensors stay allocated)."""
        self.length = 0

    def crop(self, length: int) -> None:
        """Forget every token after the first `length` (speculative decoding rolls back rejected drafts)."""
        if not isinstance(length, int) or isinstance(length, bool) or not 0 <= length <= self.length:
            raise ValueError(f"length must be a whole number from 0 to the {self.length} tokens stored, got {length!r}.")
        self.length = length

    def nbytes(self) -> int:
        """Bytes held by the key and value tensors (all of max_length, used or not)."""
        return self.keys.nbytes + self.values.nbytes

    def bytes_per_token(self) -> int:
        """Bytes one more token of context costs, for the whole batch: 2 x layers x B x H_kv x D x bytes."""
        return self.nbytes() // self.max_length

    def used_bytes(self) -> int:
        """Bytes of the tokens stored so far (the rest of the preallocation is reserved but empty)."""
        return self.length * self.bytes_per_token()

    def __repr__(self) -> str:
        n_layers, batch, heads, max_length, head_dim = self.keys.shape
        return (f"KVCache(length={self.length}/{max_length}, layers={n_layers}, batch={batch}, kv_heads={heads}, "
                f"head_dim={head_dim}, {self.keys.dtype}, {self.nbytes() / 1e6:.1f} MB)")


def greedy_decode(model: torch.nn.Module, input_ids: torch.Tensor, n_tokens: int,
                  cache: Cache | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding of labkit's Llama with any cache, or with none (recompute the prefix every step).

    input_ids [B, T] -> (new token ids [B, n_tokens], their logits [B, n_tokens, V]). The cache must be
    empty; it is filled by the prompt (prefill), then by one token per step (decode). Used to compare
    caches with each other: the same model, the same loop, only the cache differs.
    """
    if n_tokens < 1:
        raise ValueError(f"n_tokens must be at least 1, got {n_tokens}.")
    if cache is not None and cache.length != 0:
        raise ValueError(f"The cache already holds {cache.length} tokens; pass an empty one (cache.reset()).")
    tokens, all_logits = [], []
    sequence = input_ids
    with torch.no_grad():
        logits = model(input_ids, cache)[:, -1]
        for step in range(n_tokens):
            next_ids = logits.argmax(dim=-1)  # [B]
            tokens.append(next_ids)
            all_logits.append(logits)
            if step == n_tokens - 1:
                break
            if cache is None:
                sequence = torch.cat([sequence, next_ids[:, None]], dim=1)
                logits = model(sequence)[:, -1]
            else:
                logits = model(next_ids[:, None], cache)[:, -1]
    return torch.stack(tokens, dim=1), torch.stack(all_logits, dim=1)
