"""The normalized Hadamard matrix: a rotation that spreads a row's outliers over the row (notebook 15).

Sylvester's construction doubles a matrix of +-1: H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]], so the size is
a power of two. Divided by sqrt(n) it is orthogonal and its own transpose, so it is its own inverse:
H = H^T and H H = I. Multiplying a row x by H mixes every entry into every other with weight 1/sqrt(n):
one large entry becomes n entries of |x_i| / sqrt(n), and a group-wise quantizer whose step the largest
entry sets loses less (QuaRot, Ashkboos et al. 2024; llama.cpp rotates its quantized KV cache so).

    >>> h = hadamard(4)
    >>> h * 2
    tensor([[ 1.,  1.,  1.,  1.],
            [ 1., -1.,  1., -1.],
            [ 1.,  1., -1., -1.],
            [ 1., -1., -1.,  1.]])
    >>> torch.equal(h @ h, torch.eye(4))
    True
"""

from __future__ import annotations

import math

import torch

from labkit.core.arguments import check_int


def is_power_of_two(n: int) -> bool:
    """Whether n is 1, 2, 4, 8, ... (the sizes Sylvester's construction reaches)."""
    return n >= 1 and n & (n - 1) == 0


def hadamard(n: int, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """The normalized Hadamard matrix [n, n] of Sylvester's construction, n a power of two: entries
    +-1/sqrt(n), symmetric and orthogonal (H = H^T, H H = I).

        >>> hadamard(64).shape, float(hadamard(64)[0, 0])
        (torch.Size([64, 64]), 0.125)
    """
    check_int("n", n, minimum=1)
    if not is_power_of_two(n):
        raise ValueError(
            f"n must be a power of two for Sylvester's Hadamard matrix (1, 2, 4, ..., 64, 128), got {n}."
        )
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], dim=1), torch.cat([h, -h], dim=1)])  # Sylvester 1867: H_2n from H_n
    return (h / math.sqrt(n)).to(dtype=dtype, device=device)
