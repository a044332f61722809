"""NF4 parity with bitsandbytes: the same level indices, absmax and dequantized values, bit for bit."""

import bitsandbytes.functional as bnb
import pytest
import torch

from labkit.quant.nf4 import BLOCK_SIZES, NF4_CODEBOOK, nf4_dequantize, nf4_quantize, normal_float_levels


def sample(shape, seed=0):
    torch.manual_seed(seed)
    w = torch.randn(shape) * 0.02
    w.view(-1)[7] = 0.5  # an outlier: its block gets a large absmax
    return w


def test_codebook_is_bitsandbytes_nf4():
    assert torch.equal(NF4_CODEBOOK, bnb.get_4bit_type("nf4", device="cpu"))


def test_codebook_comes_from_normal_quantiles():
    levels = normal_float_levels()
    assert torch.allclose(levels, NF4_CODEBOOK, atol=1e-6)
    assert levels[7] == 0 and levels[0] == -1 and levels[-1] == 1
    assert (levels[:7] < 0).all() and (levels[8:] > 0).all()  # 7 negative, 8 positive: zero is exact


# Row lengths that are multiples of the block size, as in every weight of the course models.
@pytest.mark.parametrize(
    "shape,block_size",
    [
        ((128, 256), 64),
        ((576, 1536), 64),
        ((192, 576), 64),
        ((64, 512), 128),
        ((16, 2048), 2048),
        ((32, 96), 32),
    ],
)
def test_codes_absmax_and_values_match_bitsandbytes(shape, block_size):
    w = sample(shape)
    packed, state = bnb.quantize_4bit(w, blocksize=block_size, quant_type="nf4")
    mine = nf4_quantize(w, block_size=block_size)
    assert torch.equal(mine.packed, packed.flatten())  # same 4-bit codes, same nibble order
    assert torch.equal(mine.absmax, state.absmax)
    assert torch.equal(nf4_dequantize(mine), bnb.dequantize_4bit(packed, state))  # bit for bit


@pytest.mark.parametrize("shape", [(100,), (3, 7, 5), (64, 576)])
def test_codes_match_bitsandbytes_for_ragged_shapes(shape):
    """A last short block and an odd count of values: the codes and absmax still match."""
    w = sample(shape)
    packed, state = bnb.quantize_4bit(w, blocksize=128, quant_type="nf4")
    mine = nf4_quantize(w, block_size=128)
    assert torch.equal(mine.packed, packed.flatten()) and torch.equal(mine.absmax, state.absmax)


def test_bfloat16_input_matches_too():
    w = sample((64, 256)).bfloat16()
    packed, state = bnb.quantize_4bit(w, blocksize=64, quant_type="nf4")
    mine = nf4_quantize(w)
    assert torch.equal(mine.packed, packed.flatten()) and torch.equal(mine.absmax, state.absmax.float())


def test_round_trip_error_is_at_most_half_the_widest_gap():
    w = sample((64, 256))
    q = nf4_quantize(w)
    absmax = q.absmax.repeat_interleave(64).reshape(w.shape)
    widest_gap = float((NF4_CODEBOOK[1:] - NF4_CODEBOOK[:-1]).max())  # between 0.7230 and 1.0
    assert bool(((nf4_dequantize(q) - w).abs() <= absmax * widest_gap / 2 * (1 + 1e-5)).all())
    assert q.nbytes == 64 * 256 // 2 + 64 * 256 // 64 * 4


def test_nf4_uses_its_levels_more_evenly_than_uniform_int4():
    """On normal data every NF4 level is used, the outer int4 levels hardly at all."""
    w = torch.randn(1024, 256, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(nf4_quantize(w).indices().long(), minlength=16).float()
    assert counts.min() / counts.max() > 0.1


def test_bad_arguments():
    with pytest.raises(ValueError, match="Unsupported NF4 block_size 48"):
        nf4_quantize(sample((64, 256)), block_size=48)
    with pytest.raises(TypeError, match="floating-point"):
        nf4_quantize(torch.ones(4, 64, dtype=torch.uint8))
    assert 64 in BLOCK_SIZES
