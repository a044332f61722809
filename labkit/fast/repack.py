"""Quantized weights repacked 16 rows at a time: the layout labkit's Q41Linear and Q80Linear run on.

The kernel of notebook 13 (q4_kernel.cpp, `q4_1_linear`) multiplies one weight row at a time, so each
group's integer dot product ends in a register of partial sums of its own, to be added up, converted to
float and scaled alone. At many activation rows (a prefill, a 16-row decode step) that float work, not
memory, bounds it. Interleave the codes of 16 weight rows, 4 bytes at a time, and one group's 16 dot
products land in the 16 lanes of one register (q4_repack_kernel.cpp): one conversion, one scale and one
fused multiply-add then serve 16 outputs. llama.cpp repacks its Q4_0, Q8_0 and IQ4_NL weights the same
way when it loads them (its CPU "repack" buffers).

Measured (idle 2-core AMD EPYC with AVX-512, medians, the activations' rounding vectorized in both):
one 3072 x 576 Q4_1 layer at 414 rows took 6.5 ms one row at a time and 1.4 ms repacked (AVX2 path:
9.4 and 4.4 ms), at 16 rows 0.24 and 0.06 ms; in the serving engine (SmolLM2, fuse+q4_1, 16 chat
requests) the 414-token prefill went from 535-750 to 173-229 ms and a 16-row decode step from
43-56 to 27-36 ms, in turns. SmolLM2's Q8_0 head at one row: 0.60 -> 0.42 ms (AVX2: 0.78 -> 0.47).

The layout, for a weight with G = K / 32 groups a row and B bytes a group (16 for Q4_1, 32 for Q8_0):
    codes  [N, G * B]  ->  [ceil(N / 16), G, B / 4, 16, 4], flattened to [ceil(N / 16), G, 16 * B]:
                           block b, group g, chunk t, row j: bytes 4t..4t+3 of row 16b + j's group g
    scales, minimums [N, G]  ->  [ceil(N / 16), G, 16]
with zero rows padding N to a multiple of 16. Every output sums its groups in one order on every path, so
the scalar, AVX2 and AVX-512 paths give the same bits and a row's output does not depend on its batch.

    >>> packed = interleave_codes(weight.codes, group_bytes=16)     # Q4_1: uint8 [960, 288] -> [60, 18, 256]
    >>> y = repacked_linear(x, packed, interleave_table(weight.scales), interleave_table(weight.minimums), 960)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

GROUP = 32  # inputs per group
ROWS = 16  # weight rows interleaved per block
CHUNK = 4  # bytes of one row in each chunk: what vpdpbusd multiplies per lane


def blocks(rows: int) -> int:
    """Blocks of 16 rows that hold `rows` rows."""
    return -(-rows // ROWS)


def interleave_codes(codes: torch.Tensor, group_bytes: int) -> torch.Tensor:
    """codes [N, G * B] of one byte each, a row's groups end to end, B = group_bytes (16: Q4_1's uint8
    [N, K/2]; 32: Q8_0's int8 [N, K]) -> [ceil(N/16), G, 16 * B].

        >>> interleave_codes(torch.zeros(20, 288, dtype=torch.uint8), group_bytes=16).shape
        torch.Size([2, 18, 256])
    """
    rows, width = codes.shape
    groups = width // group_bytes
    padded = F.pad(codes, (0, 0, 0, blocks(rows) * ROWS - rows))
    chunked = padded.reshape(blocks(rows), ROWS, groups, group_bytes // CHUNK, CHUNK)
    return chunked.permute(0, 2, 3, 1, 4).reshape(blocks(rows), groups, ROWS * group_bytes).contiguous()


def deinterleave_codes(packed: torch.Tensor, rows: int) -> torch.Tensor:
    """The inverse of interleave_codes: [ceil(N/16), G, 16 * B] -> [rows, G * B]."""
    count, groups, width = packed.shape
    chunked = packed.reshape(count, groups, width // (ROWS * CHUNK), ROWS, CHUNK)
    return chunked.permute(0, 3, 1, 2, 4).reshape(count * ROWS, groups * width // ROWS)[:rows].contiguous()


def interleave_table(table: torch.Tensor) -> torch.Tensor:
    """A per-group table (scales or minimums) [N, G] -> [ceil(N/16), G, 16]."""
    rows, groups = table.shape
    padded = F.pad(table, (0, 0, 0, blocks(rows) * ROWS - rows))
    return padded.reshape(blocks(rows), ROWS, groups).transpose(1, 2).contiguous()


def deinterleave_table(packed: torch.Tensor, rows: int) -> torch.Tensor:
    """The inverse of interleave_table: [ceil(N/16), G, 16] -> [rows, G]."""
    count, groups, _ = packed.shape
    return packed.transpose(1, 2).reshape(count * ROWS, groups)[:rows].contiguous()


def repacked_linear(
    x: torch.Tensor,
    codes: torch.Tensor,
    scales: torch.Tensor,
    minimums: torch.Tensor | None,
    n: int,
    path: str = "auto",
) -> torch.Tensor:
    """x [..., K] @ W.T -> [..., n] in x's dtype, W [n, K] repacked: Q4_1 (uint8 codes, with minimums) or
    Q8_0 (int8 codes, minimums None), on labkit's kernel; path "auto", "scalar", "avx2" or "avx512"."""
    flat = x.reshape(-1, x.shape[-1])
    if minimums is None:
        y = torch.ops.labkit.q8_0x16_linear(flat, codes, scales, n, path)
    else:
        y = torch.ops.labkit.q4_1x16_linear(flat, codes, scales, minimums, n, path)
    return y.reshape(*x.shape[:-1], n)
