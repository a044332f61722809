"""GGUF's simple block formats, decoded from raw bytes with torch: Q8_0, Q4_0 and Q4_1.

llama.cpp stores each row of a weight as blocks of 32 values. A block is a float16 scale d (and, for
Q4_1, a float16 minimum m) followed by the 32 codes:

    format  bytes  layout                                  value of code q
    Q8_0     34    d, 32 x int8                            d * q
    Q4_0     18    d, 16 bytes of 4-bit codes              d * (q - 8)
    Q4_1     20    d, m, 16 bytes of 4-bit codes           d * q + m

In Q4_0/Q4_1 byte j holds value j in its low nibble and value j + 16 in its high nibble (unlike
bitsandbytes, which pairs neighbours). The course model ships as Q4_1 (its embedding as Q8_0):

    >>> raw, kind, shape = read_gguf_tensor(EMBEDDED_MODELS["smollm2-135m"].locate_gguf(), "blk.0.ffn_down.weight")
    >>> weight = dequantize_gguf(raw, kind, shape)     # float32 [576, 1536], like gguf.dequantize
"""

from __future__ import annotations

import math
import numbers
import os
from pathlib import Path

import numpy as np
import torch

from labkit.core.arguments import check_text

BLOCK_VALUES = 32  # values per block in all three formats
BLOCK_BYTES = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}  # bytes per block


def _check_kind(kind: str) -> None:
    if not isinstance(kind, str):
        raise TypeError(
            f"kind must be a GGUF block format name ({', '.join(BLOCK_BYTES)}), got {type(kind).__name__}."
        )
    if kind not in BLOCK_BYTES:
        raise ValueError(
            f"Unsupported GGUF block format {kind!r}: kind must be one of {', '.join(BLOCK_BYTES)}, the "
            "formats labkit decodes. For the others (Q4_K, Q6_K, ...) use gguf.dequantize(data, qtype)."
        )


def _as_blocks(raw: torch.Tensor | np.ndarray, kind: str, what: str = "raw") -> torch.Tensor:
    """Raw bytes (any shape, uint8) -> uint8 [n_blocks, bytes per block]. what: the argument's name, for errors."""
    _check_kind(kind)
    if isinstance(raw, np.ndarray) and raw.dtype == np.uint8:
        raw = torch.from_numpy(np.ascontiguousarray(raw))
    if not isinstance(raw, torch.Tensor) or raw.dtype != torch.uint8:
        raise TypeError(
            f"{what}: GGUF blocks are raw bytes: pass a uint8 tensor or array, "
            f"not {getattr(raw, 'dtype', type(raw).__name__)}."
        )
    size = BLOCK_BYTES[kind]
    if raw.numel() % size:
        raise ValueError(
            f"{what} has {raw.numel()} bytes: not a whole number of {kind} blocks ({size} bytes each). "
            f"Pass a multiple of {size} bytes."
        )
    return raw.reshape(-1, size)


def _check_shape(shape, n_values: int, kind: str) -> tuple[int, ...]:
    """shape as a tuple of ints >= 1 whose product is n_values, the count of values the blocks decode to."""
    shape = (shape,) if isinstance(shape, numbers.Integral) else shape
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in shape
    ):
        raise TypeError(f"shape must be a tuple of ints such as (rows, cols), got {shape!r}.")
    if any(n < 1 for n in shape) or math.prod(shape) != n_values:
        raise ValueError(
            f"shape {tuple(shape)} holds {math.prod(shape)} values, but raw decodes to {n_values} "
            f"({n_values // BLOCK_VALUES} {kind} blocks of {BLOCK_VALUES}): pass sizes >= 1 "
            f"whose product is {n_values}."
        )
    return tuple(int(n) for n in shape)


def _half(two_bytes: torch.Tensor) -> torch.Tensor:
    """uint8 [n, 2] (little-endian float16) -> float32 [n, 1]."""
    return two_bytes.contiguous().view(torch.float16).float()


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [n, 16] -> uint8 [n, 32]: the 16 low nibbles (values 0-15), then the 16 high ones (16-31)."""
    return torch.cat([packed & 0x0F, packed >> 4], dim=1)


def decode_q8_0(raw: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Q8_0 blocks -> float32 [n_blocks * 32]: d * q."""
    blocks = _as_blocks(raw, "Q8_0")
    d, q = _half(blocks[:, :2]), blocks[:, 2:].contiguous().view(torch.int8).float()
    return (q * d).reshape(-1)


def decode_q4_0(raw: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Q4_0 blocks -> float32 [n_blocks * 32]: d * (q - 8)."""
    blocks = _as_blocks(raw, "Q4_0")
    d, q = _half(blocks[:, :2]), _nibbles(blocks[:, 2:]).to(torch.int8) - 8
    return (d * q.float()).reshape(-1)


def decode_q4_1(raw: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Q4_1 blocks -> float32 [n_blocks * 32]: d * q + m."""
    blocks = _as_blocks(raw, "Q4_1")
    d, m, q = _half(blocks[:, :2]), _half(blocks[:, 2:4]), _nibbles(blocks[:, 4:]).float()
    return (d * q + m).reshape(-1)


DECODERS = {"Q8_0": decode_q8_0, "Q4_0": decode_q4_0, "Q4_1": decode_q4_1}


def dequantize_gguf(
    raw: torch.Tensor | np.ndarray, kind: str, shape: tuple[int, ...] | None = None
) -> torch.Tensor:
    """Decode raw blocks of format `kind` to float32, reshaped to `shape` (torch order, rows last-dim)."""
    _check_kind(kind)
    values = DECODERS[kind](raw)
    return values.reshape(_check_shape(shape, values.numel(), kind)) if shape is not None else values


def read_gguf_tensor(source, name: str) -> tuple[np.ndarray, str, tuple[int, ...]]:
    """The raw bytes of one tensor of a GGUF file: (uint8 [rows, bytes per row], format name, shape).

    source: the file's path, or a `gguf.GGUFReader` already open on it (parsing the file's header
    takes a few seconds, so open it once to read several tensors).
    shape is in torch order ([out_features, in_features]); GGUF lists dimensions the other way round.
    """
    from gguf import GGUFReader  # imported here: reading the file is the only use

    if not isinstance(source, (str, os.PathLike, GGUFReader)):
        raise TypeError(
            f"source must be a GGUF file's path or a gguf.GGUFReader open on it, got {type(source).__name__}."
        )
    check_text("name", name, example="'blk.0.attn_q.weight'")
    reader = source if isinstance(source, GGUFReader) else GGUFReader(source)
    filename = Path(getattr(reader.data, "filename", None) or "the GGUF file").name
    for tensor in reader.tensors:
        if tensor.name == name:
            shape = tuple(int(n) for n in reversed(tensor.shape))
            return np.array(tensor.data), tensor.tensor_type.name, shape  # a copy: the file stays read-only
    names = [t.name for t in reader.tensors]
    raise KeyError(f"No tensor {name!r} in {filename}; it has {len(names)}, e.g. {names[:4]}.")


def block_fields(raw_block: torch.Tensor | np.ndarray, kind: str) -> dict[str, object]:
    """One block's fields, for reading by eye: scale d (and minimum m) as floats, codes as ints."""
    block = _as_blocks(raw_block, kind, "raw_block")
    if block.shape[0] != 1:
        raise ValueError(
            f"raw_block has {block.numel()} bytes ({block.shape[0]} {kind} blocks): block_fields "
            f"takes exactly one {kind} block ({BLOCK_BYTES[kind]} bytes)."
        )
    fields: dict[str, object] = {"d": float(_half(block[:, :2]))}
    if kind == "Q8_0":
        fields["codes"] = block[0, 2:].contiguous().view(torch.int8).tolist()
    elif kind == "Q4_0":
        fields["codes"] = _nibbles(block[:, 2:])[0].tolist()
    else:
        fields["m"] = float(_half(block[:, 2:4]))
        fields["codes"] = _nibbles(block[:, 4:])[0].tolist()
    return fields
