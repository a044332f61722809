"""A contiguous, preallocated key/value cache: attention's memory of the tokens already seen.

Keys and values of every layer live in two tensors of shape
[n_layers, batch, n_kv_heads, max_length, head_dim]; a forward pass appends the new tokens' keys and
values at `length` and reads back everything up to it, so each decode step costs O(length), not the
O(length^2) of recomputing the whole prefix.

    >>> cache = model.new_cache(max_length=256)
    >>> logits = model(prompt_ids, cache)          # prefill: cache.length == prompt length
    >>> logits = model(next_id[:, None], cache)    # decode: cache.length grows by one

Any object with the members of `Cache` works as a cache for labkit's Llama and for every decoding
loop; `labkit.core.paged.PagedKVCache` is the other one (notebook 06), `labkit.core.forward.NoCache` the
stand-in that recomputes instead. A caller that passes the positions itself needs only an `Appendable`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from labkit.core.arguments import check_int


class Appendable(Protocol):
    """What labkit's Llama needs from a cache when the caller passes the positions (`Llama.forward`'s
    `positions=`): only `append`. The serving engine's `BatchKV` and `PackedKV` and labkit.fast's
    `StaticKVCache` place each token at its own slot and count nothing themselves.

    A cache may also bring the attention that reads it, as `attend(q, k, v, mask)` with the shapes of
    `labkit.core.attention.attention`: the engine's caches bring `labkit.fast.row_attention`, whose rows
    keep their bits whatever else shares the batch."""

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, n_kv_heads, T, D] of `layer`; return the keys, values [B, H, S, D] to attend to."""


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

    def reorder(self, indices: torch.Tensor) -> None:
        """Row i now holds what row indices[i] held, indices [B] (beam search keeps its surviving beams)."""

    def crop(self, length: int) -> None:
        """Forget every token after the first `length` (speculative decoding rolls back rejected drafts)."""


class StoredTokens:
    """What a contiguous cache keeps about its tokens, whatever it stores them as (KVCache: floats;
    labkit.quant.quantized_kv.QuantizedKVCache: codes and scales): how many are stored, the checks before
    storing more, and moving that count. A subclass gives `batch_size` and `max_length`."""

    length: int  # tokens stored so far (the same for every layer once a forward pass ends)
    batch_size: int
    max_length: int

    def end_after(self, k: torch.Tensor) -> int:
        """Where the cached tokens will end once k [B, n_kv_heads, T, D] is stored; a ValueError when the
        batch is not the cache's or the tokens do not fit."""
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
        return end

    def advance(self, n_tokens: int) -> None:
        """Mark n_tokens more as stored (called once per forward pass, after every layer appended)."""
        self.length += n_tokens

    def reset(self) -> None:
        """Forget every stored token (the tensors stay allocated)."""
        self.length = 0

    def crop(self, length: int) -> None:
        """Forget every token after the first `length` (speculative decoding rolls back rejected drafts)."""
        check_crop_length(length, self.length)
        self.length = length


class FloatKV(StoredTokens):
    """Keys and values kept as two float tensors [n_layers, batch, n_kv_heads, slots, head_dim], written
    and read by position: what KVCache and labkit.core.sink_cache.SinkKVCache share. A subclass allocates
    `keys` and `values`."""

    keys: torch.Tensor
    values: torch.Tensor

    @property
    def max_length(self) -> int:
        """Tokens the tensors have room for."""
        return self.keys.shape[3]

    @property
    def batch_size(self) -> int:
        return self.keys.shape[1]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, n_kv_heads, T, D] after the cached tokens; return all of them [B, H, length+T, D]."""
        end = self.end_after(k)
        self.keys[layer, :, :, self.length : end] = k
        self.values[layer, :, :, self.length : end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def reorder(self, indices: torch.Tensor) -> None:
        """Row i now holds what row indices[i] held, indices [B] (beam search keeps its surviving beams)."""
        check_reorder_indices(indices, self.batch_size)
        self.keys = self.keys.index_select(1, indices.to(self.keys.device))
        self.values = self.values.index_select(1, indices.to(self.values.device))

    def nbytes(self) -> int:
        """Bytes held by the key and value tensors (all of max_length, used or not)."""
        return self.keys.nbytes + self.values.nbytes

    def bytes_per_token(self) -> int:
        """Bytes one more token of context costs, for the whole batch: 2 x layers x B x H_kv x D x bytes."""
        return self.nbytes() // self.max_length

    def used_bytes(self) -> int:
        """Bytes of the tokens stored so far (the rest of the preallocation is reserved but empty)."""
        return self.length * self.bytes_per_token()


class KVCache(FloatKV):
    """Keys and values [n_layers, batch, n_kv_heads, max_length, head_dim], allocated once up front."""

    def __init__(
        self,
        n_layers: int,
        batch_size: int,
        n_kv_heads: int,
        max_length: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        check_int("batch_size", batch_size, minimum=1)
        check_int("max_length", max_length, minimum=1, note="room for the prompt plus the new tokens")
        shape = (n_layers, batch_size, n_kv_heads, max_length, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    def __repr__(self) -> str:
        n_layers, batch, heads, max_length, head_dim = self.keys.shape
        return (
            f"KVCache(length={self.length}/{max_length}, layers={n_layers}, batch={batch}, kv_heads={heads}, "
            f"head_dim={head_dim}, {self.keys.dtype}, {self.nbytes() / 1e6:.1f} MB)"
        )


def check_crop_length(length: int, stored: int) -> None:
    """Raise a ValueError unless 0 <= length <= stored."""
    check_int("length", length, minimum=0, maximum=stored, note="the tokens stored")


def check_reorder_indices(indices: torch.Tensor, batch_size: int) -> None:
    """Raise a ValueError unless indices is [batch_size] of row numbers in [0, batch_size)."""
    if indices.dim() != 1 or indices.shape[0] != batch_size or indices.is_floating_point():
        raise ValueError(
            f"indices must be {batch_size} integer row numbers, got shape {tuple(indices.shape)}."
        )
    if bool((indices < 0).any()) or bool((indices >= batch_size).any()):
        raise ValueError(f"indices must be row numbers in [0, {batch_size}), got {indices.tolist()}.")


def cache_for(config, weight: torch.Tensor, batch_size: int = 1, max_length: int | None = None) -> KVCache:
    """An empty KVCache sized for a model's config (its n_layers, n_kv_heads, head_dim and context,
    max_position_embeddings), in the dtype and on the device of its `weight` (default: the whole context).
    What `Llama.new_cache` and `Gemma3.new_cache` return.

        >>> cache_for(model.config, model.embed_tokens.weight, max_length=256).keys.shape
        torch.Size([30, 1, 3, 256, 64])
    """
    context = config.max_position_embeddings
    if max_length is not None and max_length > context:
        raise ValueError(
            f"max_length={max_length} is beyond the model's context of {context} tokens; ask for at most "
            f"{context} (prompt + new tokens)."
        )
    return KVCache(
        n_layers=config.n_layers,
        batch_size=batch_size,
        n_kv_heads=config.n_kv_heads,
        max_length=context if max_length is None else max_length,
        head_dim=config.head_dim,
        dtype=weight.dtype,
        device=weight.device,
    )
