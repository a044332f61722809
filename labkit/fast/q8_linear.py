"""Q8_0 weights (llama.cpp's 8-bit format, the output head of its Q4_1 files) times Q8_1 activations.

A weight W [N, K] is stored in groups of 32 inputs: int8 codes q in -127..127 and one float16 scale
d per group, W ~ d * q (8.5 bits per weight, no minimum). The activations are rounded to int8 per
group exactly as for Q4_1 (`q4_linear.quantize_q8_1`), and the dot product is integer arithmetic
plus one float per group, as in ggml's `ggml_vec_dot_q8_0_q8_0`:

    y[i, n] = sum_g  d[n,g] * dx[i,g] * sum_j q[n,j] * qx[i,j]

It runs on the same kernel as Q4_1 (the op `torch.ops.labkit.q8_0_linear`). For SmolLM2's head
(49152 x 576) it reads 30 MB per token where torch's int8 per-channel kernel
(`_weight_int8pack_mm`, float32 activations) reads 28 MB, at about twice the speed here.

    >>> head = Q80Linear.from_linear(model.lm_head)
    >>> head(x).shape, head.uses_kernel
    (torch.Size([1, 49152]), True)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from labkit.fast.q4_linear import (
    GROUP,
    KernelLinear,
    check_activations,
    check_weight,
    kernel_path,
    quantize_q8_1,
)
from labkit.fast.repack import (
    deinterleave_codes,
    deinterleave_table,
    interleave_codes,
    interleave_table,
    repacked_linear,
)
from labkit.quant.schemes import check_float_tensor

LIMIT = 127  # codes lie in -127..127, so |w| and x * sign(w) fit the unsigned x signed multiply-add


@dataclass(frozen=True)
class Q80Weight:
    """A [N, K] weight in Q8_0: group g of row n is d[n, g] * q with q in -127..127."""

    codes: torch.Tensor  # int8 [N, K]
    scales: torch.Tensor  # float16 [N, K/32]: d, each group's step
    shape: tuple[int, int]  # (N, K): out_features, in_features

    @property
    def nbytes(self) -> int:
        """Bytes read per use: codes and scales (8.5 bits per weight)."""
        return (
            self.codes.numel() * self.codes.element_size() + self.scales.numel() * self.scales.element_size()
        )


def quantize_q8_0(weight: torch.Tensor) -> Q80Weight:
    """weight float [N, K] (K a multiple of 32) -> Q80Weight: d = absmax / 127 rounded to float16,
    q = round(w / d) clamped to -127..127 (a weight that was Q8_0 already comes back exactly).

        >>> quantize_q8_0(torch.randn(8, 64)).codes.shape
        torch.Size([8, 64])
    """
    check_float_tensor(weight, "weight")
    if weight.dim() != 2 or weight.shape[1] % GROUP:
        raise ValueError(
            f"weight must be [N, K] with K a multiple of {GROUP}, got shape {tuple(weight.shape)}."
        )
    rows, cols = weight.shape
    groups = weight.detach().float().reshape(rows, cols // GROUP, GROUP)
    scales = (groups.abs().amax(-1) / LIMIT).half()  # [N, G]
    step = scales.float().clamp_min(torch.finfo(torch.float16).tiny)[..., None]  # an all-zero group: codes 0
    codes = torch.round(groups / step).clamp(-LIMIT, LIMIT).to(torch.int8)
    return Q80Weight(codes=codes.reshape(rows, cols), scales=scales, shape=(rows, cols))


def dequantize_q8_0(weight: Q80Weight) -> torch.Tensor:
    """float32 [N, K]: d * q, the weight every path computes with."""
    check_weight(weight, Q80Weight, "quantize_q8_0")
    rows, cols = weight.shape
    codes = weight.codes.float().reshape(rows, cols // GROUP, GROUP)
    return (codes * weight.scales.float()[..., None]).reshape(rows, cols)


def q8_0_linear_reference(x: torch.Tensor, weight: Q80Weight) -> torch.Tensor:
    """The kernel's arithmetic in plain torch: x [M, K] -> y [M, N] in x's dtype (float32 inside)."""
    check_weight(weight, Q80Weight, "quantize_q8_0")
    qx, dx, _ = quantize_q8_1(x)
    (rows, _), (out, cols) = x.shape, weight.shape
    if x.shape[1] != cols:
        raise ValueError(f"x must be [M, {cols}] for this weight, got shape {tuple(x.shape)}.")
    q = weight.codes.float().reshape(out, cols // GROUP, GROUP)
    dots = torch.einsum("mgj,ngj->mng", qx.reshape(rows, cols // GROUP, GROUP), q)  # [M, N, G] integers
    return (weight.scales.float()[None] * dx[:, None] * dots).sum(-1).to(x.dtype)


def q8_0_linear(x: torch.Tensor, weight: Q80Weight, path: str | None = None) -> torch.Tensor:
    """x [..., K] @ W.T on labkit's kernel -> [..., N] in x's dtype; path as in q4_linear.q4_1_linear.

    >>> q8_0_linear(torch.randn(1, 576), quantize_q8_0(torch.randn(192, 576))).shape
    torch.Size([1, 192])
    """
    check_weight(weight, Q80Weight, "quantize_q8_0")
    check_activations(x, weight)
    y = torch.ops.labkit.q8_0_linear(
        x.reshape(-1, weight.shape[1]), weight.codes, weight.scales, kernel_path(path)
    )
    return y.reshape(*x.shape[:-1], weight.shape[0])


class Q80Linear(KernelLinear):
    """y = x @ W.T + b with W in Q8_0 (see q4_linear.KernelLinear for the kernel and its fallback), stored
    repacked 16 rows at a time (labkit.fast.repack); `q8_weight` gives it back in GGUF's layout.

    >>> Q80Linear.from_linear(nn.Linear(64, 16))(torch.randn(2, 64)).shape
    torch.Size([2, 16])
    """

    scheme = "q8_0"
    quantize = staticmethod(quantize_q8_0)

    def __init__(self, weight: Q80Weight, bias: torch.Tensor | None = None):
        check_weight(weight, Q80Weight, "quantize_q8_0")
        super().__init__(weight.shape, bias)
        self.register_buffer("codes", interleave_codes(weight.codes, GROUP))  # int8 [out/16, in/32, 512]
        self.register_buffer("scales", interleave_table(weight.scales))  # float16 [out/16, in/32, 16]

    @property
    def q8_weight(self) -> Q80Weight:
        """The weight in GGUF's layout (codes [out, in], scales [out, in/32])."""
        rows = self.out_features
        return Q80Weight(
            deinterleave_codes(self.codes, rows),
            deinterleave_table(self.scales, rows),
            (rows, self.in_features),
        )

    def dequantized(self) -> torch.Tensor:
        return dequantize_q8_0(self.q8_weight)

    def on_kernel(self, x: torch.Tensor) -> torch.Tensor:
        return repacked_linear(x, self.codes, self.scales, None, self.out_features, kernel_path(None))
