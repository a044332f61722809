"""Integer quantization as quantize/dequantize pairs of pure functions (notebook 08).

A weight w is stored as small integer codes q and a float scale s (and sometimes a zero point z):

    absmax (symmetric)   s = max|w| / (2^(b-1) - 1)         q = round(w / s)       w ~ q * s
    zero-point (asym.)   s = (max - min) / (2^b - 1)         q = round(w / s) + z   w ~ (q - z) * s
    group-wise, asym.    s = (max - min) / (2^b - 1) per group  q = round((w - min) / s)  w ~ q * s + min

One scale per tensor is simplest; one per output channel (row of a [out, in] weight) or one per
group of `group_size` consecutive inputs follows the data more closely, so outliers cost less.
Rounding to the nearest code keeps every in-range error within half a step: |w - w~| <= s / 2.

    >>> codes, scale = absmax_quantize(weight, bits=8, granularity="channel")
    >>> restored = absmax_dequantize(codes, scale)
    >>> q = quantize_groupwise(weight, bits=4, group_size=64)   # 4-bit codes, two per byte
    >>> restored = dequantize_groupwise(q)

NF4 lives in labkit/nf4.py, the GGUF block formats in labkit/gguf_blocks.py, and the layer that
runs on quantized weights in labkit/quant_linear.py.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

GRANULARITIES = ("tensor", "channel")  # one scale for the whole tensor, or one per row (output channel)
INT_BITS = range(2, 9)  # widths the integer schemes accept: 2 to 8 bits
GROUP_SCALE_DTYPE = torch.float16  # group-wise scales are stored in 16 bits, as in GGUF and GPTQ files


def check_tensor(x: torch.Tensor, what: str = "x") -> None:
    """Raise a TypeError unless x is a torch.Tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(x).__name__}.")


def check_float_tensor(x: torch.Tensor, what: str = "x") -> None:
    """Raise a TypeError naming the fix unless x is a non-empty floating-point tensor."""
    check_tensor(x, what)
    if not x.is_floating_point():
        raise TypeError(
            f"{what} must be a floating-point tensor (float32, bfloat16, float16), got {x.dtype}: "
            "it looks quantized already. Convert with .float() if it holds real values."
        )
    if x.numel() == 0:
        raise ValueError(f"{what} is empty: there is nothing to quantize.")


def check_size(value: int, what: str, minimum: int = 1) -> None:
    """Raise unless value is an int (not a bool) >= minimum: a TypeError for another type, else a ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an int >= {minimum}, got {type(value).__name__} {value!r}.")
    if value < minimum:
        raise ValueError(f"{what} must be an int >= {minimum}, got {value!r}.")


def check_bits(bits: int, allowed=INT_BITS) -> None:
    """Raise a ValueError unless bits is an int (not a bool) in `allowed`."""
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in allowed:
        raise ValueError(
            f"Unsupported bit width bits={bits!r}: choose one of {list(allowed)}. "
            "(16 or 32 bits is not quantization: use .half() or .float().)"
        )


def _check_granularity(x: torch.Tensor, granularity: str) -> None:
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, not {granularity!r}.")
    if granularity == "channel" and x.dim() != 2:
        raise ValueError(
            f"granularity='channel' takes a [out_features, in_features] weight, got shape "
            f"{tuple(x.shape)}. Use granularity='tensor' for other shapes."
        )


def _reduce(x: torch.Tensor, granularity: str, fn) -> torch.Tensor:
    """fn(x) over the whole tensor (a 0-d result) or over each row ([rows, 1])."""
    return fn(x) if granularity == "tensor" else fn(x, dim=1, keepdim=True)


def qmax_symmetric(bits: int) -> int:
    """Largest code of a symmetric b-bit scheme: 127 for 8 bits, 7 for 4 (-qmax..qmax, zero exact)."""
    return 2 ** (bits - 1) - 1


def absmax_quantize(
    x: torch.Tensor, bits: int = 8, granularity: str = "tensor"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric (absmax) quantization. x -> (codes int8 shaped like x, scale float32).

    scale is 0-d for granularity="tensor", [rows, 1] for "channel" (x [out, in]).

        >>> absmax_quantize(torch.tensor([0.5, -1.0, 0.25]), bits=8)
        (tensor([  64, -127,   32], dtype=torch.int8), tensor(0.0079))
    """
    check_float_tensor(x)
    check_bits(bits)
    _check_granularity(x, granularity)
    qmax = qmax_symmetric(bits)
    absmax = _reduce(x.float().abs(), granularity, torch.amax)
    scale = absmax / qmax
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero row: any scale works
    codes = torch.clamp(torch.round(x.float() / scale), -qmax, qmax)
    return codes.to(torch.int8), scale


def _check_fits(codes: torch.Tensor, other: torch.Tensor, what: str) -> None:
    """Raise unless codes and other are tensors whose shapes broadcast together."""
    check_tensor(codes, "codes")
    check_tensor(other, what)
    try:
        torch.broadcast_shapes(codes.shape, other.shape)
    except RuntimeError:
        raise ValueError(
            f"{what} of shape {tuple(other.shape)} does not fit codes of shape {tuple(codes.shape)}: "
            f"pass the {what} the quantize function returned (0-d, or [rows, 1] per channel)."
        ) from None


def absmax_dequantize(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """codes * scale, in float32 (the inverse of absmax_quantize, up to rounding)."""
    _check_fits(codes, scale, "scale")
    return codes.float() * scale


def zeropoint_quantize(
    x: torch.Tensor, bits: int = 8, granularity: str = "tensor"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric (zero-point) quantization. x -> (codes uint8 in 0..2^b-1, scale, zero_point).

    The range [min, max] (widened to include 0, so that 0.0 is exact) maps onto all 2^b codes; the
    integer zero_point is the code of 0.0. scale and zero_point are 0-d or [rows, 1] like absmax.

        >>> zeropoint_quantize(torch.tensor([0.0, 1.0, 3.0]), bits=8)
        (tensor([  0,  85, 255], dtype=torch.uint8), tensor(0.0118), tensor(0))
    """
    check_float_tensor(x)
    check_bits(bits)
    _check_granularity(x, granularity)
    levels = 2**bits - 1
    x32 = x.float()
    low = torch.clamp(_reduce(x32, granularity, torch.amin), max=0.0)
    high = torch.clamp(_reduce(x32, granularity, torch.amax), min=0.0)
    scale = (high - low) / levels
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero_point = torch.clamp(torch.round(-low / scale), 0, levels)
    codes = torch.clamp(torch.round(x32 / scale) + zero_point, 0, levels)
    return codes.to(torch.uint8), scale, zero_point.to(torch.int32)


def zeropoint_dequantize(codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor) -> torch.Tensor:
    """(codes - zero_point) * scale, in float32."""
    _check_fits(codes, scale, "scale")
    _check_fits(codes, zero_point, "zero_point")
    return (codes.float() - zero_point.float()) * scale


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Two 4-bit codes per byte: codes uint8 [..., K] in 0..15 (K even) -> uint8 [..., K/2].

    Element 2i goes to the low nibble, element 2i+1 to the high nibble.

        >>> pack_int4(torch.tensor([1, 2], dtype=torch.uint8))   # 0x21
        tensor([33], dtype=torch.uint8)
    """
    _check_uint8(codes, "codes")
    if codes.dim() == 0 or codes.shape[-1] % 2:
        raise ValueError(
            f"pack_int4 needs codes with an even last dimension, got shape {tuple(codes.shape)}."
        )
    if codes.numel() and int(codes.max()) > 15:
        raise ValueError(f"pack_int4 takes codes in 0..15, got a {int(codes.max())}.")
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def _check_uint8(x: torch.Tensor, what: str) -> None:
    check_tensor(x, what)
    if x.dtype != torch.uint8:
        raise TypeError(
            f"{what} must be a uint8 tensor (4-bit codes, two per byte when packed), got {x.dtype}."
        )


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """The inverse of pack_int4: uint8 [..., K/2] -> codes uint8 [..., K]."""
    _check_uint8(packed, "packed")
    low, high = packed & 0x0F, packed >> 4
    return torch.stack([low, high], dim=-1).flatten(-2)


def round_scale_up(scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """scale stored in `dtype`, nudged up one step where rounding made it smaller, so the largest
    value still fits in the code range (and every error stays within half a stored step)."""
    check_float_tensor(scale, "scale")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype such as torch.float16, got {dtype!r}.")
    stored = scale.to(dtype)
    too_small = stored.float() < scale
    return torch.where(too_small, torch.nextafter(stored, torch.full_like(stored, float("inf"))), stored)


def _round_down(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """value stored in `dtype`, nudged down one step where rounding made it larger."""
    stored = value.to(dtype)
    too_big = stored.float() > value
    return torch.where(too_big, torch.nextafter(stored, torch.full_like(stored, float("-inf"))), stored)


@dataclass(frozen=True)
class GroupQuantized:
    """A [rows, cols] weight quantized in groups of `group_size` consecutive inputs along each row.

    symmetric:  w ~ (q - 2^(b-1)) * scale          (absmax per group, like GGUF's Q4_0)
    asymmetric: w ~ q * scale + minimum            (min and max per group, like GGUF's Q4_1)
    """

    codes: torch.Tensor  # uint8: [rows, cols/2] two codes per byte when bits == 4, else [rows, cols]
    scales: torch.Tensor  # float16 [rows, cols/group_size]: one step size per group
    minimums: torch.Tensor | None  # float16 [rows, cols/group_size]: each group's offset; None if symmetric
    shape: tuple[int, int]  # the original (rows, cols)
    bits: int  # bits per code
    group_size: int  # inputs that share one scale

    @property
    def symmetric(self) -> bool:
        return self.minimums is None

    @property
    def nbytes(self) -> int:
        """Bytes actually stored: codes, scales and minimums."""
        parts = [self.codes, self.scales] + ([self.minimums] if self.minimums is not None else [])
        return sum(t.numel() * t.element_size() for t in parts)

    def unpacked_codes(self) -> torch.Tensor:
        """uint8 [rows, cols] codes in 0..2^bits-1."""
        return unpack_int4(self.codes) if self.bits == 4 else self.codes


def quantize_groupwise(
    w: torch.Tensor, bits: int = 4, group_size: int = 64, symmetric: bool = True
) -> GroupQuantized:
    """Quantize w [rows, cols] with one scale (and minimum) per group of `group_size` columns.

    symmetric: absmax per group, codes -qmax..qmax stored with an offset of 2^(b-1).
    asymmetric: the group's [min, max] onto codes 0..2^b-1, w ~ q * scale + min (no code wasted
    on a side of zero the group does not use). Scales and minimums are stored in float16; 4-bit
    codes are packed two per byte. Every error stays within half a step (scale / 2).

        >>> q = quantize_groupwise(torch.randn(8, 128), bits=4, group_size=32)
        >>> q.codes.shape, q.scales.shape
        (torch.Size([8, 64]), torch.Size([8, 4]))
    """
    check_float_tensor(w, "w")
    check_bits(bits)
    if w.dim() != 2:
        raise ValueError(f"quantize_groupwise takes a [rows, cols] weight, got shape {tuple(w.shape)}.")
    rows, cols = w.shape
    check_size(group_size, "group_size", minimum=2)
    if cols % group_size:
        divisors = [g for g in range(16, cols + 1, 16) if cols % g == 0] or [cols]
        raise ValueError(
            f"group_size={group_size!r} does not divide the {cols} columns of the weight. "
            f"Choose a divisor of {cols}, e.g. {divisors}."
        )
    groups = w.float().reshape(rows, cols // group_size, group_size)
    if symmetric:
        qmax = qmax_symmetric(bits)
        scales = round_scale_up(groups.abs().amax(-1) / qmax, GROUP_SCALE_DTYPE)
        scales = torch.where(scales > 0, scales, torch.ones_like(scales))
        codes = torch.clamp(torch.round(groups / scales.float()[..., None]), -qmax, qmax) + 2 ** (bits - 1)
        minimums = None
    else:
        levels = 2**bits - 1
        minimums = _round_down(groups.amin(-1), GROUP_SCALE_DTYPE)  # stored at or below the true minimum
        scales = round_scale_up((groups.amax(-1) - minimums.float()) / levels, GROUP_SCALE_DTYPE)
        scales = torch.where(scales > 0, scales, torch.ones_like(scales))
        codes = torch.round((groups - minimums.float()[..., None]) / scales.float()[..., None])
        codes = torch.clamp(codes, 0, levels)
    codes = codes.to(torch.uint8).reshape(rows, cols)
    return GroupQuantized(
        codes=pack_int4(codes) if bits == 4 else codes,
        scales=scales,
        minimums=minimums,
        shape=(rows, cols),
        bits=bits,
        group_size=group_size,
    )


def dequantize_groupwise(q: GroupQuantized) -> torch.Tensor:
    """float32 [rows, cols]: (q - 2^(b-1)) * scale (symmetric) or q * scale + minimum (asymmetric)."""
    if not isinstance(q, GroupQuantized):
        raise TypeError(
            f"q must be a GroupQuantized (what quantize_groupwise returns), got {type(q).__name__}."
        )
    rows, cols = q.shape
    codes = q.unpacked_codes().float().reshape(rows, cols // q.group_size, q.group_size)
    if q.minimums is None:
        return ((codes - float(2 ** (q.bits - 1))) * q.scales.float()[..., None]).reshape(rows, cols)
    return (codes * q.scales.float()[..., None] + q.minimums.float()[..., None]).reshape(rows, cols)


def bits_per_weight(
    bits: int, group_size: int | None = None, symmetric: bool = True, scale_bits: int = 16
) -> float:
    """Average storage per weight: the code plus its share of the group's scale (and minimum).

    The default is what quantize_groupwise stores: float16 scales (and float16 minimums).

        >>> bits_per_weight(4, group_size=32)                    # like GGUF's Q4_0
        4.5
        >>> bits_per_weight(4, group_size=32, symmetric=False)   # like GGUF's Q4_1
        5.0
    """
    check_size(bits, "bits")
    check_size(scale_bits, "scale_bits")
    if group_size is None:
        return float(bits)
    check_size(group_size, "group_size")
    return bits + scale_bits * (1 if symmetric else 2) / group_size


def quantization_error(w: torch.Tensor, restored: torch.Tensor) -> dict[str, float]:
    """Error statistics of a round trip: max and mean absolute error, and relative RMS error."""
    check_float_tensor(w, "w")
    check_tensor(restored, "restored")
    if restored.shape != w.shape:
        raise ValueError(f"restored must have w's shape {tuple(w.shape)}, got {tuple(restored.shape)}.")
    diff = restored.float() - w.float()
    return {
        "max_abs": float(diff.abs().max()),
        "mean_abs": float(diff.abs().mean()),
        "relative_rms": float(diff.pow(2).mean().sqrt() / w.float().pow(2).mean().sqrt()),
    }
