"""Fewer bytes per weight: weight-only int8 / int4 with the output head too, and bfloat16.

Batch-1 decoding reads every weight once per token, so the bytes read per token bound its speed.
SmolLM2 ties its output head to the token embedding: 49152 x 576 floats, a fifth of the model and the
largest single matrix. `labkit.quant.quantize_model` leaves the head in float32 by default (it is the
layer most sensitive to rounding); here it is quantized too, as llama.cpp's files do (its own int8
copy: the embedding stays float32, since a lookup reads one row per token, not the table).

    >>> quantize_weights(model, "int4")        # every linear layer, the head included
    >>> to_bfloat16(model)                     # the rest: embeddings, norms, activations, KV cache
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from labkit.core.llama import Llama
from labkit.fast.q4_linear import KernelLinear, Q41Linear
from labkit.fast.q8_linear import Q80Linear
from labkit.quant.linear import QuantLinear, quantize_model

WEIGHT_SCHEMES = {  # name -> (quantize_model scheme of the blocks' layers, group size, scheme of the head)
    "int8": ("int8", 32, "int8"),  # one scale per output channel (the group size is unused)
    # groups of 32 with a scale and a minimum each, head int8: GGUF Q4_1's mix
    "int4": ("int4-asym", 32, "int8"),
    # the same grid on labkit's own integer kernel, head Q8_0: the GGUF's own mix
    "q4_1": ("q4_1", 32, "q8_0"),
}


def quantize_weights(model: Llama, scheme: str) -> Llama:
    """Quantize every linear layer of `model` in place, the output head included; returns the model.

    scheme: "int8" (per output channel everywhere) or "int4" (asymmetric, groups of 32, in the blocks;
    int8 per channel for the head), both on torch's fused weight-only CPU kernels (bfloat16 activations
    inside the kernel); or "q4_1": int4's grid in the blocks and Q8_0 (int8, groups of 32) in the head,
    the GGUF file's own mix, on labkit's own kernel, which rounds each activation group to int8 and
    multiplies integers, as llama.cpp does (float32 activations in and out). Why int4 looks like this: SmolLM2's float32 weights are dequantized GGUF Q4_1
    (groups of 32, a scale and a minimum each), so the asymmetric grid of 32 lands back on them almost
    exactly, where the symmetric one adds its own rounding (perplexity on data/eval +35 %); the head
    is Q8_0 in that file, and int4 on it costs +7 % perplexity, int8 +0.2 %, at the same speed here.

        >>> quantize_weights(labkit.tiny_model(impl="labkit"), "int4").lm_head
        QuantLinear(in_features=64, out_features=49152, scheme='int8')
    """
    if scheme not in WEIGHT_SCHEMES:
        raise ValueError(f"Unknown weight scheme {scheme!r}; choose one of: {', '.join(WEIGHT_SCHEMES)}.")
    layers, group_size, head = WEIGHT_SCHEMES[scheme]
    if layers == "q4_1":
        swap_linear_layers(model.layers, Q41Linear.from_linear)
        model.lm_head = Q80Linear.from_linear(model.lm_head)  # its own copy, on the same kernel
    else:
        quantize_model(model.layers, layers, group_size=group_size, skip=())
        model.lm_head = QuantLinear.from_linear(model.lm_head, head, group_size=group_size)  # its own copy
    return model


def swap_linear_layers(module: nn.Module, make: Callable[[nn.Linear], nn.Module]) -> None:
    """Replace every nn.Linear under `module` (in place) by make(linear); all are built before any is swapped."""
    built = [(name, make(linear)) for name, linear in module.named_modules() if isinstance(linear, nn.Linear)]
    for name, layer in built:
        parent, _, child = name.rpartition(".")
        setattr(module.get_submodule(parent) if parent else module, child, layer)


def to_bfloat16(model: Llama) -> Llama:
    """Store every floating-point weight that is not quantized in bfloat16 (in place); returns the model.

    Activations and the KV cache follow the embedding's dtype, so they become bfloat16 too; the
    logits stay float32 (Llama.forward casts them) and RMSNorm still averages in float32. QuantLinear
    layers keep their codes and scales as they are: their kernels take bfloat16 activations anyway,
    so with them this step removes two casts per layer. Tied weights stay tied.

        >>> to_bfloat16(labkit.tiny_model(impl="labkit")).embed_tokens.weight.dtype
        torch.bfloat16
    """
    for module in model.modules():
        if isinstance(module, (QuantLinear, KernelLinear)):
            continue
        for param in module.parameters(recurse=False):
            if param.is_floating_point() and param.dtype != torch.bfloat16:
                param.data = param.data.to(torch.bfloat16)  # the same Parameter: tying survives
    return model
