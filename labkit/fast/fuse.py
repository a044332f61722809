"""Fused projections: one matmul where labkit's Llama runs three (q, k, v) or two (gate, up).

At batch 1 every projection is a matrix-vector product that reads its weight once: the bytes stay
the same, but each call costs a fixed overhead (the Python call, the dispatcher, the kernel's start)
that does not shrink with the matrix. Stacking the weights of projections that read the same input
gives one taller matrix and one call; the outputs are the same dot products, so the fused model
computes what the unfused one does, up to float32 rounding (gpt-fast's `wqkv`, vLLM's
`QKVParallelLinear` and `MergedColumnParallelLinear`).

    >>> model = labkit.tiny_model(impl="labkit")
    >>> fuse_projections(model)                    # in place; returns the model
    >>> model.layers[0].self_attn.qkv_proj         # Linear(in_features=64, out_features=128)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from labkit.core.kv_cache import Cache
from labkit.core.llama import (
    MLP,
    Attention,
    Llama,
    LlamaConfig,
    apply_rotary,
    attend_and_project,
    check_llama,
)


def stacked_linear(layers: list[nn.Module]) -> nn.Linear:
    """One bias-free nn.Linear whose weight stacks the layers' weights row-wise (outputs in order).

    layers: nn.Linear [out_i, in] each, same `in`, no bias -> nn.Linear [sum(out_i), in], a copy.

        >>> stacked_linear([nn.Linear(4, 2, bias=False), nn.Linear(4, 3, bias=False)]).weight.shape
        torch.Size([5, 4])
    """
    plain = [layer for layer in layers if type(layer) is nn.Linear and layer.bias is None]
    if len(plain) < len(layers):
        kinds = ", ".join(type(layer).__name__ for layer in layers)
        raise ValueError(
            f"Only plain bias-free nn.Linear layers can be fused, got: {kinds}. "
            "Fuse before quantizing: labkit.fast.optimize(model, steps=('fuse', 'int8'))."
        )
    with torch.no_grad():
        weight = torch.cat([layer.weight for layer in layers], dim=0)
    fused = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    fused.weight = nn.Parameter(weight, requires_grad=False)
    return fused


class FusedAttention(nn.Module):
    """labkit's `Attention` with q, k, v from one matmul and RoPE applied to q and k in one call.

    qkv_proj: [hidden] -> [(n_heads + 2 n_kv_heads) x head_dim], the rows of q_proj, k_proj, v_proj.
    forward has Attention's signature and result: x [B, T, hidden] -> [B, T, hidden].
    """

    def __init__(self, attention_module: Attention):
        super().__init__()
        self.config: LlamaConfig = attention_module.config
        a = attention_module
        self.qkv_proj = stacked_linear([a.q_proj, a.k_proj, a.v_proj])
        self.o_proj = a.o_proj

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: Cache | None,
        layer: int,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x [B, T, hidden] -> [B, T, hidden], exactly as `Attention.forward`."""
        c = self.config
        batch, new_tokens, _ = x.shape
        heads = c.n_heads + 2 * c.n_kv_heads
        qkv = self.qkv_proj(x).view(batch, new_tokens, heads, c.head_dim).transpose(1, 2)  # [B, heads, T, D]
        qk = apply_rotary(qkv[:, : c.n_heads + c.n_kv_heads], cos, sin)  # q and k heads rotate alike
        q, k = qk.split([c.n_heads, c.n_kv_heads], dim=1)
        v = qkv[:, c.n_heads + c.n_kv_heads :]
        return attend_and_project(q, k, v, self.o_proj, cache, layer, mask)


class FusedMLP(nn.Module):
    """SwiGLU with gate and up from one matmul: down(silu(gate) * up), gate_up_proj = [gate; up] rows.

    forward: x [B, T, hidden] -> [B, T, hidden], as `MLP.forward`.
    """

    def __init__(self, mlp: MLP):
        super().__init__()
        self.intermediate_size = mlp.gate_proj.out_features
        self.gate_up_proj = stacked_linear([mlp.gate_proj, mlp.up_proj])
        self.down_proj = mlp.down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)  # [B, T, inter] each
        return self.down_proj(F.silu(gate) * up)


def is_fused(model: Llama) -> bool:
    """Whether every block of `model` already runs fused projections."""
    return all(
        isinstance(block.self_attn, FusedAttention) and isinstance(block.mlp, FusedMLP)
        for block in model.layers
    )


def fuse_projections(model: Llama) -> Llama:
    """Replace each block's attention and MLP (in place) by their fused versions; returns the model.

    The fused weights are new tensors (q/k/v and gate/up copied once); o_proj and down_proj are kept.
    Fuse before quantizing: quantize_model then quantizes qkv_proj and gate_up_proj like any linear.

        >>> fuse_projections(labkit.tiny_model(impl="labkit")).layers[0].mlp.gate_up_proj.out_features
        256
    """
    check_llama(model, "fuse_projections")
    if is_fused(model):
        raise ValueError("This model's projections are fused already.")
    replacements = [(FusedAttention(block.self_attn), FusedMLP(block.mlp)) for block in model.layers]
    for block, (fused_attention, fused_mlp) in zip(model.layers, replacements):
        block.self_attn, block.mlp = fused_attention, fused_mlp
    return model
