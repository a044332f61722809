"""Attention's arithmetic, apart from the model's modules: rotary position embeddings (RoPE), the causal
mask (and its sliding-window form, for local layers), and scaled dot-product attention over grouped
key/value heads.

A query at position i scores every key at position <= i: softmax(q k^T / sqrt(D) + mask) v, where the mask
adds -inf above the diagonal. RoPE rotates each pair of a query's (and a key's) features by an angle that
grows with its position, so the score q . k depends only on how far apart the two tokens are. With
grouped-query attention several query heads share one key/value head, which shrinks the KV cache.

    >>> cos, sin = rotary_cos_sin(torch.arange(5), head_dim=64, theta=100000.0)    # [5, 64] each
    >>> q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)                # q [1, 9, 5, 64], k [1, 3, 5, 64]
    >>> out = attention(q, k, v, causal_mask(5, 5, q.device))                      # [1, 9, 5, 64]

labkit.core.llama's `Attention` module projects x into q, k, v and calls these; so does
labkit.core.gemma3_layers' (Gemma 3's local layers use `sliding_window_mask`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from labkit.core.arguments import check_int
from labkit.core.doors import check_tensor
from labkit.core.kv_cache import Cache


def rotary_cos_sin(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape [T, head_dim] for RoPE (Su et al. 2021, eq. 34), half-split layout.

    positions [T] (every row at the same positions) -> [T, D]; or [B, T] (one row of positions per
    sequence, the serving engine's mixed batches) -> [B, 1, T, D], broadcasting over the heads.
    """
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim)
    if positions.dim() == 2:
        angles = positions.float()[:, :, None] * inv_freq  # [B, T, head_dim/2]
        angles = torch.cat([angles, angles], dim=-1)[:, None]  # [B, 1, T, head_dim]
        return angles.cos(), angles.sin()
    angles = positions.float()[:, None] * inv_freq[None, :]  # [T, head_dim/2]
    angles = torch.cat([angles, angles], dim=-1)  # [T, head_dim]
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (x_i, x_{i+d/2}) pair of x [B, H, T, D] by its position's angle."""
    half = x.shape[-1] // 2
    rotated_half = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos + rotated_half * sin).to(x.dtype)


def attend_and_project(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o_proj: nn.Module,
    cache: Cache | None,
    layer: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """The rest of attention once q [B, n_heads, T, D] and k, v [B, n_kv_heads, T, D] are rotated:
    append k, v to the cache, attend (with the cache's own `attend` if it has one, else `attention`), merge
    the heads and project -> [B, T, hidden].

    Example: `attend_and_project(q, k, v, attn.o_proj, None, 0, None)` is causal self-attention.
    """
    batch, n_heads, new_tokens, head_dim = q.shape
    if cache is not None:
        k, v = cache.append(layer, k, v)  # [B, n_kv_heads, past + T, D]
    if mask is None:
        mask = causal_mask(new_tokens, k.shape[-2], q.device)  # [T, past + T]
    # a cache may bring its own attention (the serving engine's caches: batch-invariant)
    attend = getattr(cache, "attend", attention)
    out = attend(q, k, v, mask)  # [B, n_heads, T, D]
    return o_proj(out.transpose(1, 2).reshape(batch, new_tokens, n_heads * head_dim))


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + mask) v (Vaswani et al. 2017, eq. 1), with torch's fused kernel; `scale`
    replaces 1 / sqrt(D) where a model sets its own (Gemma 3: query_pre_attn_scalar ** -0.5).

    q [B, H, T, D]; k, v [B, H_kv, S, D] with H a multiple of H_kv (grouped-query attention,
    Ainslie et al. 2023: each K/V head serves H / H_kv query heads); mask [T, S] or [B, 1, T, S] additive.
    `attention_explicit` spells out the same arithmetic; the fused kernel is several times faster.
    """
    check_attention_inputs(q, k, v, mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype), scale=scale, enable_gqa=True)


def attention_explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The same as `attention`, written out step by step (shapes as there)."""
    check_attention_inputs(q, k, v, mask)
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + mask  # [B, H, T, S]
    return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v


def check_attention_inputs(q: object, k: object, v: object, mask: object) -> None:
    """Refuse, by name, q, k, v that are not tensors [B, H, T, D], or a mask not [T, S] or [B, 1, T, S]."""
    for name, value, dims in (("q", q, 4), ("k", k, 4), ("v", v, 4), ("mask", mask, (2, 4))):
        check_tensor(name, value, "[T, S] or [B, 1, T, S]" if name == "mask" else "[B, H, T, D]", dims=dims)


def causal_mask(new_tokens: int, total_tokens: int, device: torch.device) -> torch.Tensor:
    """[T, S] additive mask: the i-th new token (at position S-T+i) sees keys 0..S-T+i, not later."""
    check_int("total_tokens", total_tokens, minimum=check_int("new_tokens", new_tokens, minimum=0))
    query_pos = torch.arange(total_tokens - new_tokens, total_tokens, device=device)[:, None]
    key_pos = torch.arange(total_tokens, device=device)[None, :]
    return torch.zeros(new_tokens, total_tokens, device=device).masked_fill(
        key_pos > query_pos, float("-inf")
    )


def sliding_window_mask(
    new_tokens: int, total_tokens: int, window: int, device: torch.device
) -> torch.Tensor:
    """[T, S] additive mask of a local (sliding-window) layer: `causal_mask`, and every key more than
    window - 1 positions back hidden too, so a query sees at most `window` keys, itself included
    (Beltagy et al. 2020; Gemma 3's local layers, window 512).

        >>> sliding_window_mask(1, 4, window=2, device="cpu")     # the token at position 3 sees 2 and 3
        tensor([[-inf, -inf, 0., 0.]])
    """
    check_int("window", window, minimum=1)
    mask = causal_mask(new_tokens, total_tokens, device)  # checks the two counts
    query_pos = torch.arange(total_tokens - new_tokens, total_tokens, device=device)[:, None]
    key_pos = torch.arange(total_tokens, device=device)[None, :]
    return mask.masked_fill(key_pos <= query_pos - window, float("-inf"))


def window_columns(new_tokens: int, total_tokens: int, window: int) -> slice:
    """The keys that T = new_tokens queries at positions S-T..S-1 of a local layer can see, S = total_tokens:
    the last T + window - 1 (or all S, when fewer). Every other column of `sliding_window_mask` is -inf, so a
    local layer reads only these keys (a decode step at 8,192 tokens, window 512: 512 keys, not 8,192).

        >>> window_columns(1, 8192, 512)
        slice(7680, None, None)
    """
    return slice(max(0, total_tokens - new_tokens - window + 1), None)


def last_keys(rows, count: int):
    """The last `count` rows of keys or values [B, H, S, D] -> [B, H, count, D] (a view): a tensor's, or
    `rows.last(count)` for a cache's handle that is not a tensor (CodeReadingKVCache's CodeRows)."""
    return rows[:, :, rows.shape[-2] - count :] if isinstance(rows, torch.Tensor) else rows.last(count)
