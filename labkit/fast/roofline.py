"""How close decoding runs to the memory roofline: bytes read per token against measured bandwidth.

At batch 1 each new token reads every weight once and does about two FLOPs per weight, far below
what the cores can compute: the speed limit is memory bandwidth / bytes read per token (notebook 07).
Utilisation = bytes per token x tokens/s / bandwidth says how much of that limit a path reaches;
the rest is overhead (Python, dispatch, small kernels, threads waiting for each other).

    >>> bandwidth = measured_bandwidth()                    # bytes/s, e.g. 2.6e10
    >>> per_token = weight_bytes_per_token(model)           # 538 MB for SmolLM2 in float32
    >>> per_token * tokens_per_second / bandwidth           # e.g. 0.39
"""

from __future__ import annotations

import time

import torch
from torch import nn

from labkit.quant.linear import QuantLinear

COPY_FLOATS = 32 * 2**20  # 128 MB of float32: far larger than any CPU cache


def measured_bandwidth(repeats: int = 5, floats: int = COPY_FLOATS) -> float:
    """Memory bandwidth in bytes/s: the fastest of `repeats` copies of a large float32 tensor, counting
    each byte read once and written once (as notebook 07 measures it).

        >>> measured_bandwidth() / 1e9
        25.7
    """
    source = torch.ones(floats)
    target = torch.empty_like(source)
    target.copy_(source)  # touch every page once, untimed
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - start)
    return 2 * source.nbytes / best


def read_tensors(module: nn.Module) -> list[torch.Tensor]:
    """The tensors of `module` itself (not its children) that one batch-1 forward call reads in full.

    A QuantLinear on its fused kernel reads its codes and the kernel's bfloat16 scales; otherwise it
    reads what it stores. An embedding reads one row per token, not its table (see `embedding_row`).
    """
    if isinstance(module, nn.Embedding):
        return []
    if isinstance(module, QuantLinear):
        probe = torch.empty(1, module.in_features, device=module.codes.device)
        if module.uses_kernel(probe):
            scales = module.scale_bf16 if module.scheme == "int8" else module.scale_and_zero
            return [module.codes, scales]
        persistent = [b for name, b in module.named_buffers(recurse=False)
                      if b is not None and name not in module._non_persistent_buffers_set]
        return persistent + list(module.parameters(recurse=False))
    return list(module.parameters(recurse=False)) + list(module.buffers(recurse=False))


def weight_bytes_per_token(model: nn.Module) -> int:
    """Bytes of weights one batch-1 decode step reads: every linear layer (the output head included),
    the norms, and one embedding row. Each tensor counts once; the KV cache is not included.

        >>> weight_bytes_per_token(labkit.load_model("smollm2-135m", impl="labkit")[0]) / 1e6
        538.2
    """
    seen, total = set(), 0
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            total += module.weight[0].nbytes  # the one row a token looks up
        for tensor in read_tensors(module):
            if id(tensor) not in seen:
                seen.add(id(tensor))
                total += tensor.numel() * tensor.element_size()
    return total


def bandwidth_utilisation(bytes_per_token: float, tokens_per_second: float, bandwidth: float) -> float:
    """The share of the measured bandwidth a decode path uses: bytes/token x tokens/s / bandwidth.

        >>> bandwidth_utilisation(538e6, 18.9, 26e9)
        0.391...
    """
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be positive bytes/s, got {bandwidth!r}.")
    return bytes_per_token * tokens_per_second / bandwidth
