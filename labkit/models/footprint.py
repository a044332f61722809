"""A model's memory footprint, one formula at a time: bytes per number, the weights and the KV cache.

    weights  = parameters x bytes per parameter                    (7B in fp16: about 14 GB)
    KV cache = 2 x layers x KV heads x head dim x tokens x batch x bytes per element
               (keys and values)

A quantized format stores more than its codes: GGUF's Q4_0 keeps one fp16 scale per block of 32 4-bit
weights, so it costs 4.5 bits per weight, not 4 (DTYPE_BYTES counts the scales in).

    >>> weight_bytes(7e9, "fp16") / 1e9
    14.0
    >>> kv_cache_bytes(n_layers=30, n_kv_heads=3, head_dim=64, tokens=1)  # SmolLM2-135M, one token in fp16
    23040
    >>> format_bytes(23040)
    '23.0 KB'

Sizes are in bytes; `GB` is 10^9 bytes (as GPU and cloud vendors count), `GiB` 2^30. A whole model's
shape is labkit.models.shapes.ModelShape; labkit.models.sizing puts the pieces together in a table.
"""

from __future__ import annotations

import math
import numbers

import torch

from labkit.core.doors import check_number

GB = 10**9
GiB = 2**30

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4,
    "float32": 4,
    "tf32": 4,
    "fp16": 2,
    "float16": 2,
    "half": 2,
    "bf16": 2,
    "bfloat16": 2,
    "fp8": 1,
    "int8": 1,
    "q8_0": 1.0625,  # GGUF Q8_0: 32 int8 + one fp16 scale per block
    "int4": 0.5,
    "nf4": 0.5,
    "q4_0": 0.5625,  # Q4_0: 32 4-bit values + one fp16 scale per block (4.5 bits)
    "q4_1": 0.625,  # Q4_1: 32 4-bit values + an fp16 scale and an fp16 minimum per block: 5 bits
}


def bytes_per_element(dtype: str | torch.dtype) -> float:
    """Bytes of one number in `dtype`: a torch dtype or a name ("fp16", "bf16", "int8", "int4", ...)."""
    if isinstance(dtype, torch.dtype):
        return torch.empty((), dtype=dtype).element_size()
    key = str(dtype).lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ValueError(f"Unknown dtype {dtype!r}; use a torch dtype or one of: {', '.join(DTYPE_BYTES)}.")
    return DTYPE_BYTES[key]


def check_size(name: str, value: float, whole: bool = True, minimum: int = 1, allowed: str = "") -> None:
    """Raise unless value is an int >= minimum (whole) or a finite number > 0 (not whole): a TypeError for
    another type (bool included), else a ValueError. allowed: what the message says is allowed.

        >>> check_size("n_layers", 0)
        Traceback (most recent call last):
        ValueError: n_layers must be a whole number >= 1, got 0.
    """
    allowed = allowed or (f"a whole number >= {minimum}" if whole else "positive")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral if whole else numbers.Real):
        raise TypeError(
            f"{name} must be {allowed} ({'an int' if whole else 'a number'}), "
            f"got {type(value).__name__} {value!r}."
        )
    if not (value >= minimum if whole else math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be {allowed}, got {value!r}.")


def check_tokens_and_batch(tokens: int, batch: int) -> None:
    """Raise unless tokens is a whole number >= 0 and batch one >= 1 (see check_size)."""
    check_size("tokens", tokens, minimum=0)
    check_size(
        "batch", batch, allowed="a whole number of sequences, at least 1 (batch=1 for a single request)"
    )


def weight_bytes(n_params: float, dtype: str | torch.dtype = "fp16") -> float:
    """Bytes of `n_params` weights stored in `dtype` (7e9 in fp16 -> 1.4e10, about 14 GB)."""
    check_size("n_params", n_params, whole=False)
    return n_params * bytes_per_element(dtype)


KV_SCALE_BYTES = 2  # a quantized KV cache's scales and minimums are float16
KV_GROUP_SIZE = 32  # numbers sharing one scale and minimum in a 4-bit KV cache (GGUF's block size)
QUANTIZED_KV = ("int8", "int4", "int4-rot")  # labkit's quantized KV caches (labkit.quant.quantized_kv)


def kv_row_bytes(dtype: str | torch.dtype, head_dim: int) -> float:
    """Bytes of one cached row (one token's key or value in one head, head_dim numbers), scales counted:
    labkit's "int8" keeps a float16 scale a row, "int4" and "int4-rot" a float16 scale and minimum a group
    of 32; any other dtype is head_dim x its bytes per number (`bytes_per_element`).

        >>> [kv_row_bytes(kind, 64) for kind in ("fp32", "int8", "int4", "int4-rot")]
        [256, 66, 40, 40]
    """
    if dtype == "int8":
        return head_dim + KV_SCALE_BYTES  # a code per number, one scale
    if dtype in QUANTIZED_KV:  # two codes a byte, a scale and minimum a group (the rotation is shared)
        return head_dim // 2 + 2 * KV_SCALE_BYTES * math.ceil(head_dim / min(KV_GROUP_SIZE, head_dim))
    return head_dim * bytes_per_element(dtype)


def kv_cache_bytes(
    n_layers: int,
    n_kv_heads: int,
    head_dim: int,
    tokens: int,
    batch: int = 1,
    dtype: str | torch.dtype = "fp16",
) -> float:
    """Bytes of a KV cache: 2 (keys and values) x layers x KV heads x tokens x batch x the bytes of one row
    of head_dim numbers (`kv_row_bytes`: labkit's int8 and int4 caches count their scales)."""
    for name, value in [("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim)]:
        check_size(name, value)
    check_tokens_and_batch(tokens, batch)
    return 2 * n_layers * n_kv_heads * tokens * batch * kv_row_bytes(dtype, head_dim)


def format_bytes(n_bytes: float) -> str:
    """Bytes as a short human number in decimal units: '14.0 GB', '432.0 MB', '48.0 KB'."""
    check_number("n_bytes", n_bytes)
    for unit, size in [("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)]:
        if abs(n_bytes) >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{n_bytes:.0f} B"
