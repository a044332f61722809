"""A KV cache that never grows past a fixed size: the first `sinks` tokens and the most recent `window`
ones (StreamingLLM, Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks";
notebook 15).

A plain sliding window (`sinks=0`) drops the oldest tokens first, the very first ones included. StreamingLLM
observed that attention pours its leftover weight onto the first few tokens (the "attention sinks"),
whatever they say, so losing them hurts far more than losing any others; keeping four of them next to the
window keeps a model reading text far beyond its trained context.

Positions are positions *in the cache*, as StreamingLLM numbers them (its section 3.2): the model numbers
new tokens from `length`, which never passes sinks + window once a forward pass ends, so no position leaves
the trained context however long the text. When a pass ends with more tokens than that, `advance` drops the
oldest tokens after the sinks, moves the rest left, and rotates each moved key back by the shift (RoPE is a
rotation: a key rotated to position p, then by -d, is the key at position p - d), as Hugging Face's
SinkCache did. Each layer rotates with its own RoPE base: Gemma-3's local layers use 10,000 and its global
ones 1,000,000 (`rope_theta` per layer). In Gemma-3 the cache's positions also bound its local layers' window:
a local layer sees the last `sliding_window` tokens *of the cache*, the sinks among them when they are near.

    >>> cache = SinkKVCache.for_model(model, sinks=4, window=252)
    >>> logits = model(ids[:, :256], cache)     # cache.length == 256
    >>> logits = model(ids[:, 256:512], cache)  # 256 evicted: cache.length == 256 again, cache.evicted == 256
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from labkit.core.arguments import check_int
from labkit.core.attention import apply_rotary, rotary_cos_sin
from labkit.core.gemma3 import Gemma3
from labkit.core.kv_cache import FloatKV
from labkit.core.llama import Llama, NotLabkitLlama


class SinkKVCache(FloatKV):
    """Keys and values [n_layers, batch, n_kv_heads, sinks + window + chunk, head_dim], allocated once:
    the sinks, the window, and room for the `chunk` tokens one forward pass may add before `advance`
    evicts down to sinks + window again. Works wherever a KVCache goes with labkit's Llama and Gemma3.
    rope_theta: the RoPE base of every layer, or one per layer (n_layers of them)."""

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        sinks: int,
        window: int,
        chunk: int = 256,
        rope_theta: float | Sequence[float] = 10000.0,
        batch_size: int = 1,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        check_int("n_layers", n_layers, minimum=1)
        check_int("n_kv_heads", n_kv_heads, minimum=1)
        check_int("head_dim", head_dim, minimum=2)
        if head_dim % 2:
            raise ValueError(f"head_dim must be even (RoPE rotates pairs of features), got {head_dim}.")
        check_int("sinks", sinks, minimum=0, note="0 is a plain sliding window")
        check_int("window", window, minimum=1, note="the most recent tokens kept")
        check_int("chunk", chunk, minimum=1, note="the most tokens one forward pass may add")
        check_int("batch_size", batch_size, minimum=1)
        bases = rope_theta if isinstance(rope_theta, (list, tuple)) else [rope_theta] * n_layers
        if len(bases) != n_layers or any(
            isinstance(b, bool) or not isinstance(b, (int, float)) or not b > 0 for b in bases
        ):
            raise ValueError(
                f"rope_theta must be a positive number (the model's RoPE base) or one for each of the "
                f"{n_layers} layers, got {rope_theta!r}."
            )
        self.sinks = sinks  # first tokens kept forever (StreamingLLM's attention sinks)
        self.window = window  # most recent tokens kept after the sinks
        self.chunk = chunk  # most tokens one forward pass may add
        self.rope_theta = tuple(float(b) for b in bases)  # each layer's RoPE base, to rotate moved keys back
        shape = (n_layers, batch_size, n_kv_heads, sinks + window + chunk, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0  # tokens stored; positions 0..length-1 (never above sinks + window after a pass)
        self.evicted = 0  # tokens dropped from the window so far

    @classmethod
    def for_model(
        cls, model: torch.nn.Module, sinks: int, window: int, chunk: int = 256, batch_size: int = 1
    ) -> SinkKVCache:
        """An empty SinkKVCache for labkit's Llama or Gemma3: its layers, kv heads, head_dim and each layer's
        RoPE base, in its dtype and on its device. sinks + window + chunk must fit the model's context (the furthest
        position a pass reaches).

            >>> SinkKVCache.for_model(model, sinks=4, window=252, chunk=64)
            SinkKVCache(length=0/256 (4 sinks + 252 window), evicted=0, room for 64 a pass, layers=30, ...)
        """
        if not isinstance(model, (Llama, Gemma3)):
            raise NotLabkitLlama(
                f"SinkKVCache.for_model runs labkit's Llama or Gemma3 (the from-scratch models), got "
                f"{type(model).__name__}. Load it with labkit.load_model(name, impl='labkit')."
            )
        c = model.config
        check_int("sinks", sinks, minimum=0, note="0 is a plain sliding window")
        check_int("window", window, minimum=1, note="the most recent tokens kept")
        check_int("chunk", chunk, minimum=1, note="the most tokens one forward pass may add")
        if sinks + window + chunk > c.max_position_embeddings:
            raise ValueError(
                f"sinks + window + chunk = {sinks + window + chunk} positions is beyond the model's context "
                f"of {c.max_position_embeddings}; a pass numbers its tokens up to that. Make them smaller."
            )
        weight = model.embed_tokens.weight
        bases = [
            c.rope_local_theta if isinstance(model, Gemma3) and c.is_sliding(i) else c.rope_theta
            for i in range(c.n_layers)
        ]
        return cls(
            c.n_layers, c.n_kv_heads, c.head_dim, sinks, window, chunk, bases, batch_size,
            weight.dtype, weight.device,
        )  # fmt: skip

    @property
    def kept(self) -> int:
        """Tokens kept between passes: sinks + window."""
        return self.sinks + self.window

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, n_kv_heads, T, D] after the cached tokens; return all of them [B, H, length+T, D]."""
        if k.shape[2] > self.chunk:
            raise ValueError(
                f"This SinkKVCache takes at most chunk={self.chunk} new tokens a forward pass; got "
                f"{k.shape[2]}. Feed the text in pieces of at most {self.chunk} tokens, or create the cache "
                f"with chunk={k.shape[2]}."
            )
        return super().append(layer, k, v)  # length <= sinks + window between passes, so T <= chunk fits

    def advance(self, n_tokens: int) -> None:
        """Count the pass's n_tokens, then evict down to sinks + window: the oldest tokens after the sinks
        go, the rest move left and their keys rotate back by the shift (Xiao et al. 2023, section 3.2)."""
        self.length += n_tokens
        shift = self.length - self.kept
        if shift <= 0:
            return
        start = self.sinks + shift  # the first token that stays after the sinks
        for base in set(self.rope_theta):
            layers = [i for i, b in enumerate(self.rope_theta) if b == base]
            layers = slice(None) if len(layers) == len(self.rope_theta) else layers  # one base: no copy
            cos, sin = rotary_cos_sin(
                torch.tensor([-shift], device=self.keys.device), self.keys.shape[-1], base
            )  # [1, D]: rotating by -shift moves a key from position p to p - shift
            moved = apply_rotary(self.keys[layers, :, :, start : self.length].float(), cos, sin)
            self.keys[layers, :, :, self.sinks : self.kept] = moved.to(self.keys.dtype)
        self.values[:, :, :, self.sinks : self.kept] = self.values[:, :, :, start : self.length].clone()
        self.evicted += shift
        self.length = self.kept

    def reset(self) -> None:
        """Forget every stored token and the evicted count (the tensors stay allocated)."""
        self.length = 0
        self.evicted = 0

    def crop(self, length: int) -> None:
        """Forget every token after the first `length`, while nothing has been evicted; after an eviction
        a ValueError: the dropped tokens cannot come back, so rolling back would not restore the past."""
        if self.evicted:
            raise ValueError(
                f"A SinkKVCache cannot crop after it has evicted tokens ({self.evicted} so far): they are "
                "gone, so rolling back cannot restore what the cache held. Use a KVCache for speculative "
                "decoding."
            )
        super().crop(length)

    def __repr__(self) -> str:
        n_layers, batch, heads, _, head_dim = self.keys.shape
        return (
            f"SinkKVCache(length={self.length}/{self.kept} ({self.sinks} sinks + {self.window} window), "
            f"evicted={self.evicted}, room for {self.chunk} a pass, layers={n_layers}, batch={batch}, "
            f"kv_heads={heads}, head_dim={head_dim}, {self.keys.dtype}, {self.nbytes() / 1e6:.1f} MB)"
        )
