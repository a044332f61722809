"""A linear layer that stores its weight quantized, and a function that swaps it into a model.

Batch-1 decoding reads every weight once per token and does little arithmetic with it, so the bytes
of weights set its ceiling: fewer bytes per weight can mean more tokens per second, if the matmul
reads the small codes directly (and if the matmuls, not per-op overhead, were the limit: see
labkit.fast.cost). On the CPU, labkit uses torch's fused weight-only kernels for that:
`torch._weight_int8pack_mm` (int8, one scale per output channel) and `_weight_int4pack_mm_for_cpu`
(int4, groups of 32/64/128/256), both with bfloat16 activations. Where no kernel applies (NF4,
other group sizes, other devices) the layer dequantizes its weight on every call: right answers
and small storage, but slower than float32.

    >>> model, tokenizer = labkit.load_model("smollm2-135m")
    >>> quantize_model(model, scheme="int8")               # every nn.Linear except lm_head
    >>> labkit.chat(model, tokenizer, "What is the capital of France?")
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import torch
import torch.nn.functional as F
from torch import nn

from labkit.core.doors import check_model
from labkit.quant.nf4 import NF4Tensor, nf4_dequantize, nf4_quantize
from labkit.quant.schemes import (
    GroupQuantized,
    absmax_quantize,
    check_size,
    dequantize_groupwise,
    pack_int4,
    quantize_groupwise,
)

SCHEMES = {
    "int8": "int8 absmax per output channel (fused weight-only kernel on CPU)",
    "int4": "int4 group-wise, symmetric (absmax per group; fused kernel on CPU for groups of 32-256)",
    "int4-asym": "int4 group-wise, asymmetric (float16 minimum per group, like GGUF Q4_1)",
    "nf4": "NF4 block-wise (QLoRA / bitsandbytes), block = group_size",
}
DEFAULT_SKIP = ("lm_head", "embed_tokens")  # the output head and the embeddings stay in full precision


INT4_KERNEL_GROUP_SIZES = (32, 64, 128, 256)  # what torch's CPU int4 kernel accepts


def _check_scheme(scheme: str) -> None:
    if not isinstance(scheme, str):
        raise TypeError(f"scheme must be a str, one of: {', '.join(SCHEMES)}; got {type(scheme).__name__}.")
    if scheme not in SCHEMES:
        raise ValueError(f"Unknown scheme {scheme!r}. Choose one of: {', '.join(SCHEMES)}.")


def int8_kernel_available() -> bool:
    """Whether this torch has the fused int8 weight-only matmul (torch >= 2.3)."""
    return hasattr(torch, "_weight_int8pack_mm")


def _int4_kernel_pack(codes: torch.Tensor, group_size: int) -> torch.Tensor | None:
    """codes uint8 [out, in] (0..15) in the CPU int4 kernel's own layout, or None where it does not apply."""
    if (
        not hasattr(torch, "_weight_int4pack_mm_for_cpu")
        or group_size not in INT4_KERNEL_GROUP_SIZES
        or codes.shape[0] % 16
        or codes.device.type != "cpu"
    ):
        return None
    try:
        return torch._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), 1)
    except RuntimeError:  # a CPU build without this kernel: fall back to dequantizing
        return None


def _int4_kernel_codes(packed: torch.Tensor, in_features: int, group_size: int) -> torch.Tensor:
    """Read the codes back out of the kernel's layout: the kernel itself, with scale 1 and zero 0, on
    the identity matrix returns q - 8 exactly (small integers are exact in bfloat16)."""
    n_groups, out_features = in_features // group_size, packed.shape[0]
    unit = torch.stack([torch.ones(n_groups, out_features), torch.zeros(n_groups, out_features)], dim=-1)
    eye = torch.eye(in_features, dtype=torch.bfloat16)
    minus_8 = torch._weight_int4pack_mm_for_cpu(eye, packed.cpu(), group_size, unit.bfloat16().contiguous())
    return (minus_8.float().t() + 8).to(torch.uint8)  # [out, in]


class QuantLinear(nn.Module):
    """y = x @ W^T + b with W [out_features, in_features] stored in a quantized scheme (see SCHEMES).

    Build one from a trained layer with `QuantLinear.from_linear(linear, scheme)`.
    `dequantized_weight()` is the float32 weight the layer computes with; the fused kernels round
    activations (and the int4 kernel its scales) to bfloat16, about 3 significant digits.
    With the int4 kernel, `codes` is in that kernel's CPU-specific layout: rebuild the layer from
    the float weight on another machine rather than copying its state dict.
    """

    def __init__(
        self, linear: nn.Linear, scheme: str = "int8", group_size: int = 64, use_kernels: bool = True
    ):
        super().__init__()
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear: QuantLinear takes an nn.Linear, got {type(linear).__name__}.")
        _check_scheme(scheme)
        check_size(group_size, "group_size", minimum=2)  # int4 and NF4 check more (divides, block sizes)
        weight = linear.weight.detach()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.scheme, self.group_size, self.use_kernels = scheme, group_size, use_kernels
        self.int4_kernel_layout = False  # True when `codes` is in the CPU int4 kernel's layout
        self.bias = (
            None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        )
        if scheme == "int8":
            codes, scale = absmax_quantize(weight, bits=8, granularity="channel")
            self.register_buffer("codes", codes.contiguous())  # int8 [out, in]
            self.register_buffer("scale", scale.reshape(-1))  # float32 [out]
            # for the kernel
            self.register_buffer("scale_bf16", scale.reshape(-1).bfloat16(), persistent=False)
        elif scheme in ("int4", "int4-asym"):
            q = quantize_groupwise(weight, bits=4, group_size=group_size, symmetric=scheme == "int4")
            self.register_buffer("scales", q.scales)  # float16 [out, in/group_size]
            self.register_buffer("minimums", q.minimums)  # float16 [out, in/group_size], or None (symmetric)
            packed = _int4_kernel_pack(q.unpacked_codes(), group_size) if use_kernels else None
            self.int4_kernel_layout = packed is not None
            self.register_buffer("codes", packed if packed is not None else q.codes)  # uint8 [out, in/2]
            if packed is not None:  # the kernel computes (q - 8) * scale + zero per group, in bfloat16
                scales = q.scales.float().t()  # [in/group_size, out]
                zeros = (
                    q.minimums.float().t() + 8 * scales
                    if q.minimums is not None
                    else torch.zeros_like(scales)
                )
                self.register_buffer(
                    "scale_and_zero",
                    torch.stack([scales, zeros], -1).bfloat16().contiguous(),
                    persistent=False,
                )
        else:
            q = nf4_quantize(weight, block_size=group_size)
            self.register_buffer("codes", q.packed)  # uint8 [out * in / 2]
            self.register_buffer("absmax", q.absmax)  # float32 [out * in / group_size]

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, scheme: str = "int8", group_size: int = 64, use_kernels: bool = True
    ) -> QuantLinear:
        """Quantize a trained nn.Linear. group_size: inputs per scale (int4) or values per block (NF4).
        use_kernels=False always takes the plain path (dequantize, then float32 matmul)."""
        return cls(linear, scheme=scheme, group_size=group_size, use_kernels=use_kernels)

    def dequantized_weight(self) -> torch.Tensor:
        """float32 [out_features, in_features]: the weight as the codes and scales restore it."""
        if self.scheme == "int8":
            return self.codes.float() * self.scale[:, None]
        if self.scheme in ("int4", "int4-asym"):
            codes = self.codes
            if self.int4_kernel_layout:
                codes = pack_int4(_int4_kernel_codes(self.codes, self.in_features, self.group_size)).to(
                    codes.device
                )
            return dequantize_groupwise(
                GroupQuantized(
                    codes=codes,
                    scales=self.scales,
                    minimums=self.minimums,
                    shape=(self.out_features, self.in_features),
                    bits=4,
                    group_size=self.group_size,
                )
            )
        return nf4_dequantize(
            NF4Tensor(
                packed=self.codes,
                absmax=self.absmax,
                shape=(self.out_features, self.in_features),
                block_size=self.group_size,
            )
        )

    def uses_kernel(self, x: torch.Tensor) -> bool:
        """Whether forward(x) runs a fused low-bit kernel (else it dequantizes the weight first)."""
        if x.device.type != "cpu" or not self.use_kernels:
            return False
        return (self.scheme == "int8" and int8_kernel_available()) or self.int4_kernel_layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in_features] -> [..., out_features], in x's dtype."""
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(
                f"x must end in in_features={self.in_features} values, got shape {tuple(x.shape)}."
            )
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        if not self.uses_kernel(x):
            return F.linear(x, self.dequantized_weight().to(x.dtype), bias)
        flat = x.reshape(-1, self.in_features).to(torch.bfloat16)
        if self.scheme == "int8":
            out = torch._weight_int8pack_mm(flat, self.codes, self.scale_bf16)  # [M, out], bfloat16
        else:
            out = torch._weight_int4pack_mm_for_cpu(flat, self.codes, self.group_size, self.scale_and_zero)
        out = out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
        return out + bias if bias is not None else out

    @property
    def nbytes(self) -> int:
        """Bytes stored for the weight (codes, scales, zero points) and the bias."""
        stored = [b for name, b in self.named_buffers() if name not in self._non_persistent_buffers_set]
        stored += list(self.parameters())
        return sum(t.numel() * t.element_size() for t in stored)

    def extra_repr(self) -> str:
        group = f", group_size={self.group_size}" if self.scheme != "int8" else ""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, scheme={self.scheme!r}{group}"
        )


def _skipped(name: str, skip: tuple[str, ...]) -> bool:
    """A module is skipped when a pattern matches its full dotted name or its last part."""
    return any(
        fnmatchcase(name, pattern) or fnmatchcase(name.rsplit(".", 1)[-1], pattern) for pattern in skip
    )


def quantize_model(
    model: nn.Module,
    scheme: str = "int8",
    group_size: int = 64,
    skip: tuple[str, ...] | list[str] = DEFAULT_SKIP,
    use_kernels: bool = True,
) -> nn.Module:
    """Replace every nn.Linear of `model` (in place) by a QuantLinear, except those in `skip`.

    skip: module names or shell-style patterns, matched against the full dotted name
        ("model.layers.0.mlp.down_proj") and its last part ("down_proj"); e.g. ("lm_head",), or
        ("lm_head", "*.mlp.*"). Pass () to quantize every linear layer, the output head included.
    Returns the same model, for chaining.

        >>> quantize_model(model, "int4", group_size=32, skip=("lm_head",))
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}.")
    _check_scheme(scheme)
    if isinstance(skip, str):
        raise TypeError(f"skip must be a list or tuple of names, e.g. ({skip!r},), not a string.")
    skip = tuple(skip)
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and not _skipped(name, skip)
    ]
    if not targets:
        raise ValueError(f"No nn.Linear left to quantize in {type(model).__name__} with skip={skip}.")
    # Quantize every layer before swapping any in, so that a bad group_size leaves the model as it was.
    layers = [
        (name, QuantLinear.from_linear(linear, scheme, group_size, use_kernels=use_kernels))
        for name, linear in targets
    ]
    for name, layer in layers:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, layer)
    return model


def quantized_layers(model: nn.Module) -> dict[str, QuantLinear]:
    """The QuantLinear modules of a model, by name."""
    check_model("model", model, "a torch model (nn.Module)")
    return {name: module for name, module in model.named_modules() if isinstance(module, QuantLinear)}
