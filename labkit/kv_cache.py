"""A contiguous, preallocated key/value cache: attention's memory of the tokens already seen.

Keys and values of every layer live in two tensors of shape
[n_layers, batch, n_kv_heads, max_length, head_dim]; a forward pass appends the new tokens' keys and
values at `length` and reads back everything up to it, so each decode step costs O(length), not the
O(length^2) of recomputing the whole prefix.

    >>> cache = model.new_cache(max_length=256)
    >>> logits = model(prompt_ids, cache)          # prefill: cache.length == prompt length
    >>> logits = model(next_id[:, None], cache)    # decode: cache.length grows by one
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, n_layers: int, batch_size: int, n_kv_heads: int, max_length: int,
                 head_dim: int, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
        if max_length < 1:
            raise ValueError(f"max_length must be at least 1, got {max_length}.")
        shape = (n_layers, batch_size, n_kv_heads, max_length, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0  # tokens stored so far (the same for every layer once a forward pass ends)

    @property
    def max_length(self) -> int:
        return self.keys.shape[3]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, n_kv_heads, T, D] after the cached tokens; return all of them [B, H, length+T, D]."""
        end = self.length + k.shape[2]
        if end > self.max_length:
            raise ValueError(
                f"The KV cache holds {self.max_length} tokens; {self.length} are stored and "
                f"{k.shape[2]} more do not fit. Create it with a larger max_length."
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

    def nbytes(self) -> int:
        """Bytes held by the key and value tensors."""
        return self.keys.nbytes + self.values.nbytes
