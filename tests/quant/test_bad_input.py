"""Bad input at the boundary: the public functions of labkit.quant refuse a bad argument when called, with
a ValueError (bad value) or TypeError (wrong type) that names the argument."""

import numpy as np
import pytest
import torch
from torch import nn

from labkit.quant import gguf_blocks, nf4, schemes
from labkit.quant.linear import QuantLinear, quantize_model


def w(rows=4, cols=64):
    return torch.randn(rows, cols, generator=torch.Generator().manual_seed(0))


ONE_Q8_0_BLOCK = np.zeros(gguf_blocks.BLOCK_BYTES["Q8_0"], np.uint8)  # 34 bytes, 32 values


# --- schemes.py: bit widths, group sizes, tensors -------------------------------------------------------------


@pytest.mark.parametrize("bits", [0, -4, 1, 9, 4.0, True, "4", None])
@pytest.mark.parametrize(
    "fn", [schemes.absmax_quantize, schemes.zeropoint_quantize, schemes.quantize_groupwise]
)
def test_bad_bit_widths_are_refused(fn, bits):
    with pytest.raises(ValueError, match=r"bits=.*choose one of \[2, 3, 4, 5, 6, 7, 8\]"):
        fn(w(), bits=bits)


@pytest.mark.parametrize(
    "group_size,error,match",
    [
        (0, ValueError, r"group_size must be an int >= 2, got 0"),
        (-32, ValueError, r"group_size must be an int >= 2, got -32"),
        (1, ValueError, r"group_size must be an int >= 2, got 1"),
        (32.0, TypeError, r"group_size must be an int >= 2, got float 32.0"),
        (True, TypeError, r"group_size must be an int >= 2, got bool"),
        ("32", TypeError, r"group_size must be an int >= 2, got str"),
        (48, ValueError, r"group_size=48 does not divide the 64 columns.*\[16, 32, 64\]"),
        (128, ValueError, r"group_size=128 does not divide the 64 columns"),
    ],
)
def test_bad_group_sizes_are_refused(group_size, error, match):
    with pytest.raises(error, match=match):
        schemes.quantize_groupwise(w(), bits=4, group_size=group_size)


@pytest.mark.parametrize(
    "bad",
    [
        torch.ones(4, 64, dtype=torch.int8),
        torch.ones(4, 64, dtype=torch.bool),
        torch.ones(4, 64, dtype=torch.int64),
    ],
)
@pytest.mark.parametrize(
    "fn,arg",
    [
        (schemes.absmax_quantize, "x"),
        (schemes.zeropoint_quantize, "x"),
        (schemes.quantize_groupwise, "w"),
        (nf4.nf4_quantize, "x"),
    ],
)
def test_non_float_tensors_are_refused(fn, arg, bad):
    with pytest.raises(TypeError, match=rf"^{arg} must be a floating-point tensor .* got {bad.dtype}"):
        fn(bad)


@pytest.mark.parametrize(
    "fn,arg", [(schemes.absmax_quantize, "x"), (schemes.quantize_groupwise, "w"), (nf4.nf4_quantize, "x")]
)
def test_non_tensors_and_empty_tensors_are_refused(fn, arg):
    with pytest.raises(TypeError, match=rf"^{arg} must be a torch.Tensor, got list"):
        fn([[0.1, 0.2]])
    with pytest.raises(ValueError, match=rf"^{arg} is empty"):
        fn(torch.empty(0, 64))


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"bits": 0}, ValueError, r"bits must be an int >= 1, got 0"),
        ({"bits": 4.5}, TypeError, r"bits must be an int >= 1, got float"),
        ({"bits": 4, "group_size": 0}, ValueError, r"group_size must be an int >= 1, got 0"),
        ({"bits": 4, "group_size": -32}, ValueError, r"group_size must be an int >= 1, got -32"),
        ({"bits": 4, "group_size": 32.0}, TypeError, r"group_size must be an int >= 1, got float"),
        (
            {"bits": 4, "group_size": 32, "scale_bits": 0},
            ValueError,
            r"scale_bits must be an int >= 1, got 0",
        ),
        ({"bits": True}, TypeError, r"bits must be an int >= 1, got bool"),
    ],
)
def test_bits_per_weight_refuses_bad_sizes(kwargs, error, match):
    with pytest.raises(error, match=match):
        schemes.bits_per_weight(**kwargs)


def test_dequantize_functions_refuse_what_no_quantize_function_returns():
    codes, scale = schemes.absmax_quantize(w(), granularity="channel")
    with pytest.raises(ValueError, match=r"scale of shape \(3, 1\) does not fit codes of shape \(4, 64\)"):
        schemes.absmax_dequantize(codes, scale[:3])
    with pytest.raises(TypeError, match="scale must be a torch.Tensor, got float"):
        schemes.absmax_dequantize(codes, 0.5)
    with pytest.raises(TypeError, match="codes must be a torch.Tensor, got list"):
        schemes.absmax_dequantize([1, 2], scale)
    codes, scale, zero = schemes.zeropoint_quantize(w(), granularity="channel")
    with pytest.raises(ValueError, match=r"zero_point of shape \(2, 1\) does not fit codes"):
        schemes.zeropoint_dequantize(codes, scale, zero[:2])
    with pytest.raises(TypeError, match="q must be a GroupQuantized .* got tuple"):
        schemes.dequantize_groupwise((codes, scale))


def test_int4_packing_refuses_bad_codes():
    with pytest.raises(TypeError, match="codes must be a uint8 tensor .* got torch.int32"):
        schemes.pack_int4(torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(TypeError, match="codes must be a torch.Tensor, got list"):
        schemes.pack_int4([1, 2])
    with pytest.raises(ValueError, match=r"even last dimension, got shape \(3,\)"):
        schemes.pack_int4(torch.tensor([1, 2, 3], dtype=torch.uint8))
    with pytest.raises(TypeError, match="packed must be a uint8 tensor .* got torch.float32"):
        schemes.unpack_int4(torch.ones(4))


def test_round_scale_up_and_quantization_error_refuse_bad_arguments():
    with pytest.raises(TypeError, match="dtype must be a floating-point torch.dtype .* got torch.int8"):
        schemes.round_scale_up(torch.ones(3), torch.int8)
    with pytest.raises(TypeError, match="scale must be a floating-point tensor"):
        schemes.round_scale_up(torch.ones(3, dtype=torch.int32), torch.float16)
    with pytest.raises(ValueError, match=r"restored must have w's shape \(4, 64\), got \(4, 32\)"):
        schemes.quantization_error(w(), w(4, 32))
    with pytest.raises(TypeError, match="restored must be a torch.Tensor"):
        schemes.quantization_error(w(), None)


# --- nf4.py -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "block_size,error,match",
    [
        (0, ValueError, r"block_size must be an int >= 32, got 0"),
        (-64, ValueError, r"block_size must be an int >= 32, got -64"),
        (48, ValueError, r"Unsupported NF4 block_size 48: choose one of \[32, 64,"),
        (64.0, TypeError, r"block_size must be an int >= 32, got float 64.0"),
        (True, TypeError, r"block_size must be an int >= 32, got bool"),
        (None, TypeError, r"block_size must be an int >= 32, got NoneType"),
    ],
)
def test_nf4_refuses_bad_block_sizes(block_size, error, match):
    with pytest.raises(error, match=match):
        nf4.nf4_quantize(w(), block_size=block_size)


@pytest.mark.parametrize(
    "offset,error",
    [
        (0.5, ValueError),
        (1.0, ValueError),
        (1.5, ValueError),
        (-0.2, ValueError),
        ("0.97", TypeError),
        (True, TypeError),
    ],
)
def test_normal_float_levels_refuses_a_bad_offset(offset, error):
    with pytest.raises(error, match=r"offset must be a .*between 0.5 and 1"):
        nf4.normal_float_levels(offset)


def test_nf4_dequantize_refuses_other_objects():
    with pytest.raises(TypeError, match="q must be an NF4Tensor .* got GroupQuantized"):
        nf4.nf4_dequantize(schemes.quantize_groupwise(w(), 4, 32))


# --- linear.py --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["int8", "int4", "int4-asym", "nf4"])
@pytest.mark.parametrize(
    "group_size,error",
    [(0, ValueError), (-64, ValueError), (64.0, TypeError), (True, TypeError), ("64", TypeError)],
)
def test_quant_linear_refuses_bad_group_sizes(scheme, group_size, error):
    with pytest.raises(error, match=r"group_size must be an int >= 2"):
        QuantLinear.from_linear(nn.Linear(64, 32), scheme, group_size=group_size)


def test_quant_linear_refuses_bad_layers_schemes_and_inputs():
    with pytest.raises(TypeError, match="linear: QuantLinear takes an nn.Linear, got Conv1d"):
        QuantLinear(nn.Conv1d(4, 4, 1))
    with pytest.raises(
        TypeError, match="scheme must be a str, one of: int8, int4, int4-asym, nf4; got NoneType"
    ):
        QuantLinear.from_linear(nn.Linear(64, 32), None)
    layer = QuantLinear.from_linear(nn.Linear(64, 32), "int4", group_size=32)
    with pytest.raises(ValueError, match=r"x must end in in_features=64 values, got shape \(2, 63\)"):
        layer(torch.randn(2, 63))
    assert layer(torch.randn(2, 64)).shape == (2, 32)


@pytest.mark.parametrize(
    "group_size,error,match",
    [
        (0, ValueError, "group_size must be an int >= 2, got 0"),
        (16.0, TypeError, "group_size must be an int >= 2, got float"),
        (64, ValueError, "group_size=64 does not divide the 32 columns"),  # the second layer's in_features
    ],
)
def test_quantize_model_refuses_bad_group_sizes_and_leaves_the_model_as_it_was(group_size, error, match):
    model = nn.Sequential(nn.Linear(64, 32), nn.Linear(32, 16))
    with pytest.raises(error, match=match):
        quantize_model(model, "int4", group_size=group_size, skip=())
    assert all(type(m) is nn.Linear for m in model)  # no layer was swapped before the error


def test_quantize_model_refuses_a_non_module_and_a_non_string_scheme():
    with pytest.raises(TypeError, match="model must be an nn.Module, got dict"):
        quantize_model({"layer": nn.Linear(4, 4)})
    with pytest.raises(TypeError, match="scheme must be a str"):
        quantize_model(nn.Sequential(nn.Linear(64, 32)), scheme=8)


# --- gguf_blocks.py ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind,n_bytes", [("Q8_0", 33), ("Q8_0", 35), ("Q4_0", 17), ("Q4_0", 20), ("Q4_1", 21)]
)
def test_gguf_buffers_that_are_not_whole_blocks_are_refused(kind, n_bytes):
    block = gguf_blocks.BLOCK_BYTES[kind]
    match = rf"raw has {n_bytes} bytes: not a whole number of {kind} blocks \({block} bytes each\).*multiple of {block}"
    decode = gguf_blocks.DECODERS[kind]
    with pytest.raises(ValueError, match=match):
        decode(np.zeros(n_bytes, np.uint8))
    with pytest.raises(ValueError, match=match):
        gguf_blocks.dequantize_gguf(torch.zeros(n_bytes, dtype=torch.uint8), kind)
    with pytest.raises(ValueError, match=match.replace("raw has", "raw_block has")):
        gguf_blocks.block_fields(np.zeros(n_bytes, np.uint8), kind)


@pytest.mark.parametrize("shape", [(2, 32), (31,), (4, 4), (33,), (8, -4), (-1, 32), (0, 32)])
def test_gguf_shape_that_does_not_hold_the_decoded_values_is_refused(shape):
    with pytest.raises(
        ValueError, match=r"shape .* holds -?\d+ values, but raw decodes to 32 \(1 Q8_0 blocks of 32\)"
    ):
        gguf_blocks.dequantize_gguf(ONE_Q8_0_BLOCK, "Q8_0", shape)


@pytest.mark.parametrize("shape", ["32", (32.0,), (True, 32), 32.0])
def test_gguf_shape_of_the_wrong_type_is_refused(shape):
    with pytest.raises(TypeError, match="shape must be a tuple of ints"):
        gguf_blocks.dequantize_gguf(ONE_Q8_0_BLOCK, "Q8_0", shape)


@pytest.mark.parametrize("shape", [(1, 32), (32,), [4, 8], 32, (np.int64(2), 16)])
def test_gguf_shapes_that_hold_the_values_still_work(shape):
    values = gguf_blocks.dequantize_gguf(ONE_Q8_0_BLOCK, "Q8_0", shape)
    assert values.numel() == 32 and values.dtype == torch.float32


@pytest.mark.parametrize("kind", ["Q4_K", "q8_0", "F32", ""])
@pytest.mark.parametrize("fn", [gguf_blocks.dequantize_gguf, gguf_blocks.block_fields])
def test_unknown_gguf_kinds_are_refused(fn, kind):
    match = rf"Unsupported GGUF block format '{kind}': kind must be one of Q8_0, Q4_0, Q4_1"
    with pytest.raises(ValueError, match=match):
        fn(ONE_Q8_0_BLOCK, kind)


def test_gguf_kind_and_raw_of_the_wrong_type_are_refused():
    with pytest.raises(TypeError, match="kind must be a GGUF block format name .* got NoneType"):
        gguf_blocks.dequantize_gguf(ONE_Q8_0_BLOCK, None)
    with pytest.raises(TypeError, match="raw: GGUF blocks are raw bytes: .* not list"):
        gguf_blocks.decode_q8_0([0] * 34)
    with pytest.raises(TypeError, match="raw: GGUF blocks are raw bytes: .* not float32"):
        gguf_blocks.decode_q4_0(np.zeros(18, np.float32))
    with pytest.raises(TypeError, match="raw_block: GGUF blocks are raw bytes: .* not bytes"):
        gguf_blocks.block_fields(bytes(20), "Q4_1")


def test_block_fields_wants_exactly_one_block():
    with pytest.raises(
        ValueError, match=r"raw_block has 68 bytes \(2 Q8_0 blocks\): .* exactly one Q8_0 block \(34"
    ):
        gguf_blocks.block_fields(np.zeros(68, np.uint8), "Q8_0")
    assert gguf_blocks.block_fields(ONE_Q8_0_BLOCK, "Q8_0")["codes"] == [0] * 32
