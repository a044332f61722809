"""labkit.quant: round trips stay within half a step, packing is lossless, bad input is refused clearly."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.checks.quant import quantized_megabytes_verdict
from labkit.quant import schemes as quant


def weight(rows=64, cols=256, seed=0, outlier=None):
    torch.manual_seed(seed)
    w = torch.randn(rows, cols) * 0.02
    if outlier is not None:
        w[3, 5] = outlier
    return w


@pytest.mark.parametrize("bits", [8, 6, 4, 2])
@pytest.mark.parametrize("granularity", ["tensor", "channel"])
def test_absmax_round_trip_error_is_at_most_half_a_step(bits, granularity):
    w = weight(outlier=0.5)
    codes, scale = quant.absmax_quantize(w, bits=bits, granularity=granularity)
    assert codes.dtype == torch.int8 and codes.shape == w.shape
    assert int(codes.abs().max()) == quant.qmax_symmetric(bits)  # the largest |w| gets the largest code
    error = (quant.absmax_dequantize(codes, scale) - w).abs()
    assert bool((error <= scale / 2 * (1 + 1e-5)).all())
    expected_shape = () if granularity == "tensor" else (64, 1)
    assert tuple(scale.shape) == expected_shape


def test_per_channel_scales_shield_other_rows_from_an_outlier():
    w = weight(outlier=1.0)  # one big weight in row 3
    per_tensor = quant.absmax_dequantize(*quant.absmax_quantize(w, granularity="tensor"))
    per_channel = quant.absmax_dequantize(*quant.absmax_quantize(w, granularity="channel"))
    other_rows = torch.arange(64) != 3
    tensor_error = (per_tensor - w)[other_rows].abs().mean()
    channel_error = (per_channel - w)[other_rows].abs().mean()
    assert channel_error < tensor_error / 10


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("granularity", ["tensor", "channel"])
def test_zeropoint_round_trip_and_exact_zero(bits, granularity):
    w = weight() + 0.01  # shifted: an asymmetric range
    w[0, 0] = 0.0
    codes, scale, zero = quant.zeropoint_quantize(w, bits=bits, granularity=granularity)
    assert codes.dtype == torch.uint8 and int(codes.max()) <= 2**bits - 1
    restored = quant.zeropoint_dequantize(codes, scale, zero)
    assert bool(((restored - w).abs() <= scale / 2 * (1 + 1e-5) + 1e-7).all())
    assert float(restored[0, 0]) == 0.0  # zero is exactly representable


def test_zeropoint_beats_absmax_on_one_sided_data():
    x = torch.rand(1000)  # all positive: absmax wastes the negative half of its codes
    absmax = quant.absmax_dequantize(*quant.absmax_quantize(x, bits=4))
    zeropoint = quant.zeropoint_dequantize(*quant.zeropoint_quantize(x, bits=4))
    assert (zeropoint - x).abs().mean() < 0.6 * (absmax - x).abs().mean()


@given(st.lists(st.integers(0, 15), min_size=2, max_size=64).filter(lambda v: len(v) % 2 == 0))
def test_pack_int4_is_lossless_and_halves_the_bytes(values):
    codes = torch.tensor(values, dtype=torch.uint8)
    packed = quant.pack_int4(codes)
    assert packed.numel() == len(values) // 2
    assert torch.equal(quant.unpack_int4(packed), codes)


def test_pack_int4_layout():
    assert quant.pack_int4(torch.tensor([[1, 2, 15, 0]], dtype=torch.uint8)).tolist() == [[0x21, 0x0F]]


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_groupwise_int4_round_trip(symmetric, group_size):
    w = weight(outlier=0.3)
    q = quant.quantize_groupwise(w, bits=4, group_size=group_size, symmetric=symmetric)
    assert q.codes.shape == (64, 128) and q.codes.dtype == torch.uint8  # two codes per byte
    assert q.scales.shape == (64, 256 // group_size) and q.scales.dtype == torch.float16
    restored = quant.dequantize_groupwise(q)
    step = q.scales.float().repeat_interleave(group_size, dim=1)
    assert bool(((restored - w).abs() <= step / 2 * (1 + 1e-5)).all())
    codes = q.unpacked_codes()
    assert int(codes.max()) <= 15 and (symmetric is False or int(codes.min()) >= 1)
    assert (q.minimums is None) == symmetric


def test_smaller_groups_give_smaller_error():
    w = weight(cols=512, outlier=0.4)
    errors = [
        quant.quantization_error(w, quant.dequantize_groupwise(quant.quantize_groupwise(w, 4, g)))[
            "relative_rms"
        ]
        for g in (512, 128, 32)
    ]
    assert errors[0] > errors[1] > errors[2]


def test_groupwise_other_widths_and_nbytes():
    w = weight()
    q8 = quant.quantize_groupwise(w, bits=8, group_size=64)
    assert q8.codes.shape == w.shape  # not packed
    assert quant.quantization_error(w, quant.dequantize_groupwise(q8))["relative_rms"] < 0.01
    q4 = quant.quantize_groupwise(w, bits=4, group_size=64, symmetric=False)
    assert q4.nbytes == 64 * 128 + 64 * 4 * 2 + 64 * 4 * 2  # codes + float16 scales + float16 minimums
    assert quant.bits_per_weight(4, 32) == 4.5  # GGUF's Q4_0: a float16 d per 32
    assert quant.bits_per_weight(4, 32, symmetric=False) == 5.0  # GGUF's Q4_1: float16 d and m per 32
    assert quant.bits_per_weight(8) == 8.0


def test_asymmetric_groups_re_encode_gguf_q4_1_weights_without_loss():
    """Weights that came out of a Q4_1 file already sit on a 16-level grid per group of 32: the
    asymmetric scheme finds the same grid, so re-quantizing them changes (almost) nothing."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    original = (rng.standard_normal((32, 256)) * 0.02).astype(np.float32)
    q4_1 = torch.from_numpy(
        gguf.dequantize(
            gguf.quantize(original, gguf.GGMLQuantizationType.Q4_1), gguf.GGMLQuantizationType.Q4_1
        )
    )
    asymmetric = quant.dequantize_groupwise(quant.quantize_groupwise(q4_1, 4, 32, symmetric=False))
    symmetric = quant.dequantize_groupwise(quant.quantize_groupwise(q4_1, 4, 32, symmetric=True))
    assert quant.quantization_error(q4_1, asymmetric)["relative_rms"] < 0.01
    assert quant.quantization_error(q4_1, symmetric)["relative_rms"] > 0.05


def test_scales_round_up_so_the_largest_value_fits():
    scale = torch.tensor([0.1, 1 / 3, 0.2])
    stored = quant.round_scale_up(scale, torch.float16)
    assert bool((stored.float() >= scale).all()) and stored.dtype == torch.float16


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 8), st.sampled_from([16, 32]), st.floats(1e-4, 10.0), st.integers(0, 1000))
def test_groupwise_error_bound_holds_for_any_scale(rows, group_size, magnitude, seed):
    torch.manual_seed(seed)
    w = torch.randn(rows, 64) * magnitude
    q = quant.quantize_groupwise(w, bits=4, group_size=group_size, symmetric=True)
    step = q.scales.float().repeat_interleave(group_size, dim=1)
    assert bool(((quant.dequantize_groupwise(q) - w).abs() <= step / 2 * (1 + 1e-4)).all())


def test_all_zero_input_round_trips():
    zeros = torch.zeros(4, 64)
    assert torch.equal(quant.absmax_dequantize(*quant.absmax_quantize(zeros, granularity="channel")), zeros)
    assert torch.equal(
        quant.dequantize_groupwise(quant.quantize_groupwise(zeros, 4, 32, symmetric=False)), zeros
    )


@pytest.mark.parametrize("bits", [1, 9, 16, 4.0])
def test_unsupported_bit_widths_are_refused(bits):
    with pytest.raises(ValueError, match="Unsupported bit width .* choose one of"):
        quant.absmax_quantize(weight(), bits=bits)
    with pytest.raises(ValueError, match="Unsupported bit width"):
        quant.quantize_groupwise(weight(), bits=bits)


def test_group_size_that_does_not_divide_names_the_divisors():
    with pytest.raises(
        ValueError, match=r"group_size=48 does not divide the 256 columns.*\[16, 32, 64, 128, 256\]"
    ):
        quant.quantize_groupwise(weight(), bits=4, group_size=48)


def test_non_float_tensors_are_refused():
    with pytest.raises(TypeError, match="floating-point tensor .* got torch.int8"):
        quant.absmax_quantize(torch.ones(4, 4, dtype=torch.int8))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        quant.zeropoint_quantize([0.1, 0.2])
    with pytest.raises(TypeError, match="floating-point"):
        quant.quantize_groupwise(torch.ones(4, 64, dtype=torch.int32))


def test_other_bad_arguments():
    with pytest.raises(ValueError, match="granularity must be one of"):
        quant.absmax_quantize(weight(), granularity="row")
    with pytest.raises(ValueError, match="granularity='channel' takes a \\[out_features, in_features\\]"):
        quant.absmax_quantize(torch.randn(2, 3, 4), granularity="channel")
    with pytest.raises(ValueError, match="takes a \\[rows, cols\\] weight"):
        quant.quantize_groupwise(torch.randn(64))
    with pytest.raises(ValueError, match="codes in 0..15"):
        quant.pack_int4(torch.tensor([16, 1], dtype=torch.uint8))


def test_bfloat16_input_is_accepted():
    w = weight().bfloat16()
    codes, scale = quant.absmax_quantize(w, granularity="channel")
    assert (quant.absmax_dequantize(codes, scale) - w.float()).abs().max() <= scale.max() / 2 * (1 + 1e-5)


# The notebook's exercise checkers: right answers pass, typical mistakes get the hint that fixes them.


def test_check_absmax_quantize(capsys):
    from labkit import checks

    def right(w):
        scale = w.abs().amax(dim=1, keepdim=True) / 127
        return torch.round(w / scale).to(torch.int8), scale

    def per_tensor(w):
        scale = w.abs().max() / 127
        return torch.round(w / scale).to(torch.int8), scale

    def by_128(w):
        scale = w.abs().amax(dim=1, keepdim=True) / 128
        return torch.round(w / scale).to(torch.int8), scale

    def truncates(w):
        scale = w.abs().amax(dim=1, keepdim=True) / 127
        return (w / scale).to(torch.int8), scale

    assert checks.check_absmax_quantize(right)
    for wrong, hint in [
        (per_tensor, "each row its own scale"),
        (by_128, "not 128"),
        (truncates, "truncates toward zero"),
        (None, "Not attempted"),
    ]:
        assert not checks.check_absmax_quantize(wrong)
        assert hint in capsys.readouterr().out


def test_check_quantized_megabytes(capsys):

    n = 106_000_000
    assert quantized_megabytes_verdict(n * 4.5 / 8 / 1e6, n, bits=4, group_size=32)
    assert not quantized_megabytes_verdict(n * 4 / 8 / 1e6, n, bits=4, group_size=32)
    assert "16-bit scale" in capsys.readouterr().out
    assert not quantized_megabytes_verdict(n * 4.5 / 8, n)
    assert "bytes, not megabytes" in capsys.readouterr().out


def test_check_q4_1_decoder(capsys):
    import numpy as np

    from labkit import checks

    block = np.arange(20, dtype=np.uint8) * 13 % 251
    block[:4] = np.array([0.01, -0.05], dtype=np.float16).view(np.uint8)

    def right(raw):
        d, m = raw[:2].view(np.float16)[0], raw[2:4].view(np.float16)[0]
        q = np.concatenate([raw[4:] & 0x0F, raw[4:] >> 4])
        return np.float32(d) * q.astype(np.float32) + np.float32(m)

    def neighbours(raw):  # bitsandbytes-style pairing: the wrong order for GGUF
        d, m = raw[:2].view(np.float16)[0], raw[2:4].view(np.float16)[0]
        q = np.stack([raw[4:] & 0x0F, raw[4:] >> 4], axis=1).reshape(-1)
        return np.float32(d) * q.astype(np.float32) + np.float32(m)

    def forgets_m(raw):
        return right(raw) - np.float32(raw[2:4].view(np.float16)[0])

    assert checks.check_q4_1_decoder(right, block)
    assert not checks.check_q4_1_decoder(neighbours, block)
    assert "wrong order" in capsys.readouterr().out
    assert not checks.check_q4_1_decoder(forgets_m, block)
    assert "minimum m" in capsys.readouterr().out
