"""Q4_1 weights (llama.cpp's 4-bit format) times Q8_1 activations, on labkit's own CPU kernel.

A weight W [N, K] is stored in groups of 32 inputs: 4-bit codes q, a float16 scale d and minimum m
per group, W ~ d * q + m (5 bits per weight). Each activation row x is rounded per group of 32 to
int8 (Q8_1): dx = absmax / 127, qx = round(x / dx), s = dx * sum(qx). Then, as in ggml's
`ggml_vec_dot_q4_1_q8_1`, the dot product is integer arithmetic plus two floats per group:

    y[i, n] = sum_g  d[n,g] * dx[i,g] * sum_j q[n,j] * qx[i,j]  +  m[n,g] * s[i,g]

`q4_1_linear` runs it on the kernel (kernel.py), `q4_1_linear_reference` in plain torch with the
same roundings, and `Q41Linear` is the layer, with a dequantize-then-matmul fallback; the layer keeps
its weight repacked 16 rows at a time, for the kernel's faster twin (labkit.fast.repack).

    >>> layer = Q41Linear.from_linear(model.layers[0].mlp.down_proj)
    >>> layer(x).shape, layer.uses_kernel
    (torch.Size([1, 576]), True)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from labkit.fast.kernel import PATHS, load_kernel
from labkit.fast.repack import (
    deinterleave_codes,
    deinterleave_table,
    interleave_codes,
    interleave_table,
    repacked_linear,
)
from labkit.quant.schemes import check_float_tensor, quantize_groupwise

GROUP = 32  # inputs per group, for weights (Q4_1) and activations (Q8_1)
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # activations the kernel takes


@dataclass(frozen=True)
class Q41Weight:
    """A [N, K] weight in Q4_1: group g of row n is d[n, g] * q + m[n, g] with q in 0..15."""

    codes: torch.Tensor  # uint8 [N, K/2]: byte j of a group holds input j (low nibble) and j + 16 (high)
    scales: torch.Tensor  # float16 [N, K/32]: d, each group's step
    minimums: torch.Tensor  # float16 [N, K/32]: m, each group's smallest value
    shape: tuple[int, int]  # (N, K): out_features, in_features

    @property
    def nbytes(self) -> int:
        """Bytes read per use: codes, scales and minimums (5 bits per weight)."""
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scales, self.minimums))


def pack_q4_1(codes: torch.Tensor) -> torch.Tensor:
    """uint8 [N, K] codes in 0..15 -> uint8 [N, K/2] in llama.cpp's order (inputs j and j + 16 of a
    group share byte j), so one shift and one mask unpack 32 codes in input order.

        >>> pack_q4_1(torch.arange(32, dtype=torch.uint8)[None] % 16)[0, :2]
        tensor([0, 17], dtype=torch.uint8)
    """
    rows, cols = codes.shape
    halves = codes.reshape(rows, cols // GROUP, 2, GROUP // 2)
    return (halves[:, :, 0] | (halves[:, :, 1] << 4)).reshape(rows, cols // 2)


def unpack_q4_1(packed: torch.Tensor) -> torch.Tensor:
    """The inverse of pack_q4_1: uint8 [N, K/2] -> codes uint8 [N, K] in input order."""
    rows, half = packed.shape
    groups = packed.reshape(rows, half * 2 // GROUP, GROUP // 2)
    return torch.cat([groups & 15, groups >> 4], dim=-1).reshape(rows, half * 2)


def quantize_q4_1(weight: torch.Tensor) -> Q41Weight:
    """weight float [N, K] (K a multiple of 32) -> Q41Weight, via labkit.quant's asymmetric group-wise
    scheme (minimum rounded down and step rounded up to float16, so every error is within d / 2).

        >>> quantize_q4_1(torch.randn(8, 64)).codes.shape
        torch.Size([8, 32])
    """
    check_float_tensor(weight, "weight")
    if weight.dim() != 2 or weight.shape[1] % GROUP:
        raise ValueError(
            f"weight must be [N, K] with K a multiple of {GROUP}, got shape {tuple(weight.shape)}."
        )
    q = quantize_groupwise(weight.detach(), bits=4, group_size=GROUP, symmetric=False)
    return Q41Weight(
        codes=pack_q4_1(q.unpacked_codes()), scales=q.scales, minimums=q.minimums, shape=tuple(weight.shape)
    )


def check_weight(weight: object, of: type = Q41Weight, made_by: str = "quantize_q4_1") -> None:
    """Raise a TypeError unless weight is an `of` (a Q41Weight; q8_linear passes Q80Weight, quantize_q8_0).

    >>> check_weight(torch.zeros(2, 32))
    TypeError: weight must be a Q41Weight (from quantize_q4_1), got Tensor.
    """
    if not isinstance(weight, of):
        raise TypeError(f"weight must be a {of.__name__} (from {made_by}), got {type(weight).__name__}.")


def dequantize_q4_1(weight: Q41Weight) -> torch.Tensor:
    """float32 [N, K]: d * q + m, the weight every path computes with."""
    check_weight(weight)
    rows, cols = weight.shape
    codes = unpack_q4_1(weight.codes).float().reshape(rows, cols // GROUP, GROUP)
    return (codes * weight.scales.float()[..., None] + weight.minimums.float()[..., None]).reshape(rows, cols)


def quantize_q8_1(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [M, K] -> (codes [M, K], dx [M, K/32], s [M, K/32]), float32, rounded exactly as the kernel:
    qx = round_half_even(x * (127 / absmax)), dx = absmax / 127, s = dx * sum(qx).

        >>> quantize_q8_1(torch.linspace(-1, 1, 32)[None])[0][0, :3]
        tensor([-127., -119., -111.])
    """
    check_float_tensor(x, "x")
    if x.dim() != 2 or x.shape[1] % GROUP:
        raise ValueError(f"x must be [M, K] with K a multiple of {GROUP}, got shape {tuple(x.shape)}.")
    rows, cols = x.shape
    groups = x.float().reshape(rows, cols // GROUP, GROUP)
    absmax = groups.abs().amax(-1)
    full_127 = torch.full_like(absmax, 127.0)  # tensor / tensor: IEEE division, as in C++
    inverse = torch.where(absmax > 0, full_127 / absmax, torch.zeros_like(absmax))
    codes = torch.round(groups * inverse[..., None])
    dx = absmax / full_127
    return codes.reshape(rows, cols), dx, dx * codes.sum(-1)


def q4_1_linear_reference(x: torch.Tensor, weight: Q41Weight) -> torch.Tensor:
    """The kernel's arithmetic in plain torch: x [M, K] -> y [M, N] in x's dtype (float32 inside).

    The per-group integer sums are exact (below 2^24 in float32); only the float32 sums over
    groups can differ from the kernel's, in their order.
    """
    check_weight(weight)
    qx, dx, sx = quantize_q8_1(x)
    (rows, _), (out, cols) = x.shape, weight.shape
    if x.shape[1] != cols:
        raise ValueError(f"x must be [M, {cols}] for this weight, got shape {tuple(x.shape)}.")
    q = unpack_q4_1(weight.codes).float().reshape(out, cols // GROUP, GROUP)
    dots = torch.einsum("mgj,ngj->mng", qx.reshape(rows, cols // GROUP, GROUP), q)  # [M, N, G] integers
    scaled = weight.scales.float()[None] * dx[:, None]  # d * dx, [M, N, G]
    y = (scaled * dots + weight.minimums.float()[None] * sx[:, None]).sum(-1)
    return y.to(x.dtype)


def check_activations(x: torch.Tensor, weight: Q41Weight) -> None:
    """Raise unless x is a CPU tensor [..., K] of a dtype the kernel takes."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}.")
    if x.dtype not in KERNEL_DTYPES or x.device.type != "cpu":
        raise TypeError(
            f"x must be a CPU tensor of float32, bfloat16 or float16, got {x.dtype} on {x.device}."
        )
    if x.dim() == 0 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x must end in K={weight.shape[1]} values, got shape {tuple(x.shape)}.")


def q4_1_linear(x: torch.Tensor, weight: Q41Weight, path: str | None = None) -> torch.Tensor:
    """x [..., K] @ W.T on labkit's kernel -> [..., N] in x's dtype.

    path: "scalar", "avx2" or "avx512" to force one (it must run on this CPU), None for
    load_kernel().path. Raises RuntimeError when the kernel is unavailable (Q41Linear falls back).

        >>> q4_1_linear(torch.randn(1, 576), quantize_q4_1(torch.randn(192, 576))).shape
        torch.Size([1, 192])
    """
    check_weight(weight)
    check_activations(x, weight)
    flat = x.reshape(-1, weight.shape[1])
    y = torch.ops.labkit.q4_1_linear(flat, weight.codes, weight.scales, weight.minimums, kernel_path(path))
    return y.reshape(*x.shape[:-1], weight.shape[0])


def kernel_path(path: str | None) -> str:
    """The SIMD path to call the kernel with: `path` if this CPU runs it, else load_kernel()'s choice.
    Raises RuntimeError when the kernel is unavailable, ValueError for a path this CPU cannot run."""
    status = load_kernel()
    if not status.available:
        raise RuntimeError(f"labkit's kernel is unavailable: {status.reason}")
    if path is not None and path not in status.paths:
        raise ValueError(
            f"path={path!r} does not run here: choose one of {status.paths} (the kernel has {PATHS})."
        )
    return path or status.path


class KernelLinear(nn.Module):
    """A linear layer y = x @ W.T + b whose W is stored in one of labkit's kernel formats (Q41Linear,
    q8_linear.Q80Linear): on the kernel for CPU activations of float32, bfloat16 or float16; otherwise
    (no kernel, other dtypes and devices) W is dequantized on every call and multiplied in x's dtype.

    A subclass stores its codes and scales as buffers and says how to quantize, dequantize and call
    the kernel: `quantize` (float [N, K] -> its weight), `dequantized()` and `on_kernel(x)`.
    """

    scheme = ""  # the format's name, shown by repr

    def __init__(self, shape: tuple[int, int], bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = shape
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> KernelLinear:
        """Quantize a trained nn.Linear (in_features a multiple of 32): the layer's own copy of the weight."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be an nn.Linear, got {type(linear).__name__}.")
        return cls(cls.quantize(linear.weight.detach()), linear.bias)

    @property
    def uses_kernel(self) -> bool:
        """Whether forward runs labkit's kernel (for CPU activations of float32, bfloat16 or float16)."""
        return self.codes.device.type == "cpu" and load_kernel().available

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in_features] -> [..., out_features], in x's dtype."""
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(
                f"x must end in in_features={self.in_features} values, got shape {tuple(x.shape)}."
            )
        if self.uses_kernel and x.dtype in KERNEL_DTYPES and x.device.type == "cpu":
            y = self.on_kernel(x)
        else:
            y = F.linear(x, self.dequantized().to(x.dtype))
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, scheme='{self.scheme}'"


class Q41Linear(KernelLinear):
    """y = x @ W.T + b with W in Q4_1 (see KernelLinear for the kernel and its fallback), stored repacked
    16 rows at a time for labkit's kernel (labkit.fast.repack); `q4_weight` gives it back in GGUF's layout.

    >>> layer = Q41Linear.from_linear(nn.Linear(64, 16))
    >>> layer(torch.randn(2, 64)).shape
    torch.Size([2, 16])
    """

    scheme = "q4_1"
    quantize = staticmethod(quantize_q4_1)

    def __init__(self, weight: Q41Weight, bias: torch.Tensor | None = None):
        check_weight(weight)
        super().__init__(weight.shape, bias)
        self.register_buffer(
            "codes", interleave_codes(weight.codes, GROUP // 2)
        )  # uint8 [out/16, in/32, 256]
        self.register_buffer("scales", interleave_table(weight.scales))  # float16 [out/16, in/32, 16]
        self.register_buffer("minimums", interleave_table(weight.minimums))  # float16 [out/16, in/32, 16]

    @property
    def q4_weight(self) -> Q41Weight:
        """The weight in GGUF's layout (codes [out, in/2], scales and minimums [out, in/32])."""
        rows = self.out_features
        return Q41Weight(
            deinterleave_codes(self.codes, rows),
            deinterleave_table(self.scales, rows),
            deinterleave_table(self.minimums, rows),
            (rows, self.in_features),
        )

    def dequantized(self) -> torch.Tensor:
        return dequantize_q4_1(self.q4_weight)

    def on_kernel(self, x: torch.Tensor) -> torch.Tensor:
        return repacked_linear(
            x, self.codes, self.scales, self.minimums, self.out_features, kernel_path(None)
        )
