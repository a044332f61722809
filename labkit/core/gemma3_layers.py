"""The modules of one Gemma-3 decoder layer, apart from the model that stacks them (labkit.core.gemma3).

What Gemma 3 changes against a Llama block (Gemma Team 2025, "Gemma 3 Technical Report", sec. 2):

- RMSNorm scales by (1 + weight), in float32, and casts back only after the scaling;
- QK-norm: an RMSNorm over each head's query and key (width head_dim) before RoPE;
- four norms per layer: before and after attention, before and after the MLP (sandwich norms);
- attention scores scaled by query_pre_attn_scalar ** -0.5 (not always head_dim ** -0.5), and no
  soft-capping of them (Gemma 2's; QK-norm replaces it);
- a gated GELU MLP (tanh approximation) instead of SwiGLU;
- each layer is local (a sliding window of keys, its own RoPE base) or global (every key before it).

    >>> block = Block(Gemma3Config.tiny(), sliding=True)
    >>> x = block(x, cos, sin, mask, cache=None, layer=0)      # x [B, T, hidden] -> [B, T, hidden]

Module names mirror transformers' `Gemma3DecoderLayer`, so its weights load by name.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from labkit.core.attention import apply_rotary, attention, last_keys
from labkit.core.gemma3_config import Gemma3Config
from labkit.core.kv_cache import Cache


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * (1 + weight), in float32, cast back to x's dtype at the end.

    The weight is stored as an offset from 1 (zeros: the identity scale), as Gemma's checkpoints hold it.
    """

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., size] -> [..., size], same dtype."""
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * (1.0 + self.weight.float())).to(x.dtype)


class Attention(nn.Module):
    """Grouped-query attention with QK-norm; a local layer's mask hides keys beyond its window."""

    def __init__(self, config: Gemma3Config, sliding: bool):
        super().__init__()
        c = self.config = config
        self.sliding = sliding  # a local layer: sliding-window mask, the local RoPE base
        self.q_proj = nn.Linear(c.hidden_size, c.n_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.n_kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.n_kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.n_heads * c.head_dim, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
        self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        cache: Cache | None,
        layer: int,
    ) -> torch.Tensor:
        """x [B, T, hidden] -> [B, T, hidden]; cos, sin [T, D] (or [B, 1, T, D]) of this layer's RoPE base; mask
        [T, S] (or [B, 1, T, S]) of this layer's kind, S = the cache's tokens + T, or only the last S of them
        (a local layer given its window's columns reads only those keys). With a cache, k and v are
        appended to it first, and a cache that brings its own attention (`attend`: the serving engine's,
        batch-invariant) is read with it, at Gemma's scale query_pre_attn_scalar ** -0.5."""
        c = self.config
        batch, new_tokens, _ = x.shape
        q = self.q_proj(x).view(batch, new_tokens, c.n_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, new_tokens, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, new_tokens, c.n_kv_heads, c.head_dim).transpose(1, 2)
        q, k = self.q_norm(q), self.k_norm(k)  # QK-norm, per head (Gemma 3 report, sec. 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if cache is not None:
            k, v = cache.append(layer, k, v)  # [B, n_kv_heads, past + T, D]
        if mask.shape[-1] < k.shape[-2]:  # a local layer's mask covers only the keys its window sees
            k, v = last_keys(k, mask.shape[-1]), last_keys(v, mask.shape[-1])
        attend = getattr(cache, "attend", attention)
        out = attend(q, k, v, mask, c.query_pre_attn_scalar**-0.5)  # [B, n_heads, T, D]
        return self.o_proj(out.transpose(1, 2).reshape(batch, new_tokens, c.n_heads * c.head_dim))


class MLP(nn.Module):
    """Gated GELU feed-forward (GeGLU, Shazeer 2020): down(gelu_tanh(gate(x)) * up(x))."""

    def __init__(self, config: Gemma3Config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., hidden] -> [..., hidden]."""
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class Block(nn.Module):
    """One Gemma-3 layer, norms on both sides: x + post(attn(pre(x))), then x + post(mlp(pre(x)))."""

    def __init__(self, config: Gemma3Config, sliding: bool):
        super().__init__()
        size, eps = config.hidden_size, config.rms_norm_eps
        self.input_layernorm = RMSNorm(size, eps)
        self.self_attn = Attention(config, sliding)
        self.post_attention_layernorm = RMSNorm(size, eps)
        self.pre_feedforward_layernorm = RMSNorm(size, eps)
        self.mlp = MLP(config)
        self.post_feedforward_layernorm = RMSNorm(size, eps)

    def forward(self, x, cos, sin, mask, cache, layer):
        """x [B, T, hidden] -> [B, T, hidden] (arguments as `Attention.forward`)."""
        attended = self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer)
        x = x + self.post_attention_layernorm(attended)
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))
