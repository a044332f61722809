"""NF4, the 4-bit NormalFloat data type of QLoRA (Dettmers et al. 2023, section 3), as bitsandbytes stores it.

Weights of a trained layer are close to normally distributed. Instead of 16 evenly spaced levels,
NF4 puts its 16 levels at quantiles of N(0, 1) (scaled to [-1, 1]), so each level is used about
equally often. A block of `block_size` consecutive values (in row-major order) shares one float32
absmax; each value becomes the index of the nearest level to value / absmax.

    >>> q = nf4_quantize(weight)              # block-wise absmax, two 4-bit indices per byte
    >>> restored = nf4_dequantize(q)          # NF4_CODEBOOK[index] * absmax of its block

The codes and values match `bitsandbytes.functional.quantize_4bit(w, quant_type="nf4")` exactly
(tests/quant/test_nf4.py), including its packing: the first value of each pair in the high nibble.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from labkit.quant.schemes import check_float_tensor, check_size

# The 16 NF4 levels exactly as bitsandbytes hard-codes them (float32). normal_float_levels() derives
# them from the normal distribution; tests/quant/test_nf4.py checks that both agree.
NF4_CODEBOOK = torch.tensor(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=torch.float32,
)

ZERO_INDEX = 7  # NF4_CODEBOOK[7] == 0.0
NF4_OFFSET = 0.9677083  # QLoRA's outermost quantile: the levels span N(0, 1) up to ~1.85 sigma
BLOCK_SIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # the block sizes bitsandbytes accepts on CPU


def normal_float_levels(offset: float = NF4_OFFSET) -> torch.Tensor:
    """The NF4 levels from first principles: 7 negative quantiles, 0, and 8 positive ones, of N(0, 1).

    Quantiles at probabilities evenly spaced from 1 - offset to offset (one extra level on the positive
    side, so that 0 is exact), divided by the largest so they span [-1, 1]. Matches NF4_CODEBOOK to ~1e-7.
    """
    if isinstance(offset, bool) or not isinstance(offset, numbers.Real):
        raise TypeError(f"offset must be a float between 0.5 and 1, got {type(offset).__name__} {offset!r}.")
    if not 0.5 < offset < 1:
        raise ValueError(
            f"offset must be a probability strictly between 0.5 and 1 (QLoRA: {NF4_OFFSET}), got {offset!r}."
        )
    normal = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), 1.0)
    positive = normal.icdf(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])  # 8 values
    negative = -normal.icdf(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])  # 7 values
    levels = torch.cat([negative, torch.zeros(1, dtype=torch.float64), positive]).sort().values
    return (levels / levels.max()).float()


@dataclass(frozen=True)
class NF4Tensor:
    """A tensor in NF4: packed 4-bit level indices and one absmax per block."""

    packed: torch.Tensor  # uint8 [ceil(n/2)]: two indices per byte, the first in the high nibble
    absmax: torch.Tensor  # float32 [n_blocks]: max |value| of each block
    shape: tuple[int, ...]  # the original shape
    block_size: int  # consecutive values (row-major) that share one absmax

    @property
    def nbytes(self) -> int:
        return self.packed.numel() + self.absmax.numel() * self.absmax.element_size()

    def indices(self) -> torch.Tensor:
        """uint8 [n]: the level index of every value, unpacked."""
        pairs = torch.stack([self.packed >> 4, self.packed & 0x0F], dim=-1).flatten()
        return pairs[: _numel(self.shape)]


def _numel(shape: tuple[int, ...]) -> int:
    return int(torch.Size(shape).numel())


def _check_block_size(block_size: int) -> None:
    check_size(block_size, "block_size", minimum=BLOCK_SIZES[0])
    if block_size not in BLOCK_SIZES:
        raise ValueError(
            f"Unsupported NF4 block_size {block_size!r}: choose one of {list(BLOCK_SIZES)} "
            "(64 is what bitsandbytes and QLoRA use)."
        )


def nf4_quantize(x: torch.Tensor, block_size: int = 64) -> NF4Tensor:
    """Quantize x (any shape) to NF4 with block-wise absmax over its flattened values.

    Each value is scaled into [-1, 1] by its block's absmax and mapped to the nearest NF4 level (a value
    exactly halfway goes to the lower level, as in bitsandbytes). A last, shorter block is allowed.
    """
    check_float_tensor(x)
    _check_block_size(block_size)
    flat = x.detach().reshape(-1).float().cpu()
    n = flat.numel()
    full = n - n % block_size
    blocks = flat[:full].reshape(-1, block_size)
    absmax = blocks.abs().amax(dim=1)
    # Full blocks multiply by the reciprocal, a last short block divides: bitsandbytes does exactly
    # this, and the codes must match it bit for bit.
    scaled = torch.clamp(blocks * (1.0 / absmax.clamp(min=1e-38))[:, None], -1, 1).reshape(-1)
    if full < n:
        last_absmax = flat[full:].abs().max().clamp(min=1e-38)
        absmax = torch.cat([absmax, last_absmax[None]])
        scaled = torch.cat([scaled, torch.clamp(flat[full:] / last_absmax, -1, 1)])
    midpoints = (NF4_CODEBOOK[:-1] + NF4_CODEBOOK[1:]) / 2  # decision boundaries between levels
    indices = torch.bucketize(scaled, midpoints).to(torch.uint8)  # nearest level; ties go down
    if n % 2:  # pad to whole bytes with the level of 0.0, as bitsandbytes does
        indices = torch.cat([indices, indices.new_full((1,), ZERO_INDEX)])
    packed = (indices[0::2] << 4) | indices[1::2]
    return NF4Tensor(packed=packed, absmax=absmax, shape=tuple(x.shape), block_size=block_size)


# Both levels of every possible byte, [256, 2]: one table lookup decodes a byte (two values) at once.
_BYTE_TO_LEVELS = torch.stack(
    [NF4_CODEBOOK[torch.arange(256) >> 4], NF4_CODEBOOK[torch.arange(256) & 0x0F]], dim=1
)


def nf4_dequantize(q: NF4Tensor) -> torch.Tensor:
    """float32 tensor of q.shape: NF4_CODEBOOK[index] * absmax of the index's block."""
    if not isinstance(q, NF4Tensor):
        raise TypeError(f"q must be an NF4Tensor (what nf4_quantize returns), got {type(q).__name__}.")
    n = _numel(q.shape)
    if n % q.block_size == 0 and q.block_size % 2 == 0:  # whole blocks (every weight of the course models)
        levels = torch.nn.functional.embedding(q.packed.int(), _BYTE_TO_LEVELS.to(q.packed.device))
        return (levels.reshape(-1, q.block_size) * q.absmax[:, None]).reshape(q.shape)
    values = NF4_CODEBOOK.to(q.packed.device)[q.indices().long()]
    block_of = torch.arange(n, device=values.device) // q.block_size
    return (values * q.absmax[block_of]).reshape(q.shape)
