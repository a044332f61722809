"""How close decoding runs to the memory roofline: bytes read per token against measured bandwidth.

At batch 1 each new token reads every weight once and does about two FLOPs per weight, far below
what the cores can compute: memory bandwidth / bytes read per token is a ceiling no path passes
(notebook 07). Utilisation = bytes per token x tokens/s / bandwidth says how much of that ceiling a
path reaches; labkit.fast.cost says where the rest of the time goes (on a CPU, mostly per-op overhead
and kernels slower than the memory).

    >>> bandwidth = read_bandwidth()                        # bytes/s, e.g. 1.9e10
    >>> per_token = weight_bytes_per_token(model)           # 538 MB for SmolLM2 in float32
    >>> per_token * tokens_per_second / bandwidth           # e.g. 0.39
"""

from __future__ import annotations

import torch
from torch import nn

from labkit.fast.regime import Probed
from labkit.quant.linear import QuantLinear
from labkit.timing import repeat_seconds

READ_FLOATS = 64 * 2**20  # 256 MB of float32: eight times the largest CPU cache here, like a model's weights


def read_bandwidth_probe(repeats: int = 5, floats: int = READ_FLOATS) -> Probed:
    """The course's one memory bandwidth, in bytes/s: `repeats` sums of a large float32 tensor, each byte
    read once, at torch's current thread count; their median and relative spread (labkit.fast.regime). A
    decode step *reads* its weights, so this (not a copy, which also writes) is the figure its bytes are
    divided by, in every notebook.

        >>> read_bandwidth_probe()
        Probed(value=19200000000.0, spread=0.06)
    """
    source = torch.ones(floats)  # repeat_seconds' warm-up call touches every page once
    return Probed.of([source.nbytes / seconds for seconds in repeat_seconds(source.sum, repeats)])


def read_bandwidth(repeats: int = 5, floats: int = READ_FLOATS) -> float:
    """The read bandwidth in bytes/s: the median of read_bandwidth_probe's `repeats` sums.

    >>> read_bandwidth() / 1e9
    19.2
    """
    return read_bandwidth_probe(repeats, floats).value


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
        persistent = [
            b
            for name, b in module.named_buffers(recurse=False)
            if b is not None and name not in module._non_persistent_buffers_set
        ]
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
