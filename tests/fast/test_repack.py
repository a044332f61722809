"""Weights repacked 16 rows at a time (labkit/fast/repack.py, q4_repack_kernel.cpp): the layout labkit's
Q41Linear and Q80Linear run on.

Every output of the repacked kernel sums its groups in one fixed order of fused multiply-adds on every
path, and its integer dot products are exact, so the strong checks here are equalities of bits: between
the scalar, AVX2 and AVX-512 paths, and between a row alone and the same row in a batch. Against the
plain-torch reference (`q4_1_linear_reference`), which sums in another order, the float32 bound of
test_kernel.py applies.
"""

import pytest
import torch
from torch import nn

from labkit.fast.kernel import PATHS
from labkit.fast.q4_linear import Q41Linear, q4_1_linear, q4_1_linear_reference, quantize_q4_1, quantize_q8_1
from labkit.fast.q8_linear import Q80Linear, q8_0_linear_reference, quantize_q8_0
from labkit.fast.repack import (
    deinterleave_codes,
    deinterleave_table,
    interleave_codes,
    interleave_table,
    repacked_linear,
)

from .test_kernel import assert_same_arithmetic, random_case

# (M, N, K): rows past every tile (1-4) and past a block of 32, N past a block of 16, K with odd group counts
SHAPES = [(1, 7, 32), (3, 16, 64), (9, 37, 800), (6, 100, 576), (17, 64, 1536), (40, 33, 96)]


def layers(n: int, k: int, seed: int) -> list[nn.Module]:
    """A Q41Linear and a Q80Linear of random weights [n, k], without biases."""
    generator = torch.Generator().manual_seed(seed)
    linear = nn.Linear(k, n, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(n, k, generator=generator) * 0.05)
    return [Q41Linear.from_linear(linear), Q80Linear.from_linear(linear)]


def on_path(layer: nn.Module, x: torch.Tensor, path: str) -> torch.Tensor:
    minimums = getattr(layer, "minimums", None)
    return repacked_linear(x, layer.codes, layer.scales, minimums, layer.out_features, path)


def runnable(status, path: str) -> None:
    if path not in status.paths:
        pytest.skip(f"this CPU cannot run the {path} path (it runs {', '.join(status.paths)})")


@pytest.mark.parametrize("n,k", [(1, 32), (20, 64), (33, 800)])
def test_interleaving_round_trips(n, k):
    weight = quantize_q4_1(torch.randn(n, k))
    packed = interleave_codes(weight.codes, group_bytes=16)
    assert packed.shape == (-(-n // 16), k // 32, 256) and packed.dtype == torch.uint8
    assert torch.equal(deinterleave_codes(packed, n), weight.codes)
    assert torch.equal(deinterleave_table(interleave_table(weight.scales), n), weight.scales)
    head = quantize_q8_0(torch.randn(n, k))
    assert torch.equal(deinterleave_codes(interleave_codes(head.codes, group_bytes=32), n), head.codes)


def test_a_chunk_holds_four_codes_of_each_of_16_rows():
    """Block 0, group 0, chunk 1: bytes 4..7 of rows 0..15, row after row (what one vpdpbusd lane reads)."""
    codes = (
        torch.arange(16 * 16, dtype=torch.int32).reshape(16, 16).to(torch.uint8)
    )  # byte b of row r: 16r + b
    chunk = interleave_codes(codes, group_bytes=16)[0, 0, 64:128].reshape(16, 4)
    assert torch.equal(chunk, codes[:, 4:8])


def test_layers_keep_the_repacked_weight_and_give_back_gguf_s(status):
    linear = nn.Linear(576, 40)
    q4, q8 = Q41Linear.from_linear(linear), Q80Linear.from_linear(linear)
    assert q4.codes.shape == (3, 18, 256) and q8.codes.shape == (3, 18, 512)
    assert torch.equal(q4.q4_weight.codes, quantize_q4_1(linear.weight.detach()).codes)
    assert torch.equal(q8.q8_weight.codes, quantize_q8_0(linear.weight.detach()).codes)
    x = torch.randn(5, 576)
    assert_same_arithmetic(q4(x) - linear.bias, q4_1_linear_reference(x, q4.q4_weight), x, q4.q4_weight)
    torch.testing.assert_close(
        q8(x) - linear.bias, q8_0_linear_reference(x, q8.q8_weight), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_the_repacked_kernel_does_the_reference_arithmetic(status, m, n, k, dtype):
    x, weight = random_case(m, n, k, dtype)
    layer = Q41Linear(weight)
    assert_same_arithmetic(layer(x), q4_1_linear_reference(x, weight), x, weight)
    assert_same_arithmetic(layer(x), q4_1_linear(x, weight), x, weight)  # notebook 13's kernel, another order


@pytest.mark.parametrize("path", ["avx2", "avx512"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_path_gives_the_scalar_bits(status, path, dtype):
    runnable(status, path)
    for m, n, k in SHAPES:
        x, _ = random_case(m, n, k, dtype, seed=7)
        for layer in layers(n, k, seed=8):
            assert torch.equal(on_path(layer, x, path), on_path(layer, x, "scalar")), (path, m, n, k)


@pytest.mark.parametrize("path", PATHS)
def test_a_row_gets_the_same_bits_whatever_shares_its_call(status, path):
    runnable(status, path)
    for m, n, k in SHAPES:
        x, _ = random_case(m, n, k, seed=9)
        for layer in layers(n, k, seed=10):
            alone = torch.cat([on_path(layer, x[i : i + 1], path) for i in range(m)])
            assert torch.equal(on_path(layer, x, path), alone), (path, m, n, k)


@pytest.mark.parametrize("path", PATHS)
def test_activation_rounding_equals_torch_s_on_every_path(status, path):
    """The kernels' Q8_1 rounding (vectorized where the CPU allows) gives torch's reference bits:
    codes, scales dx and s = dx * sum(codes), an all-zero row and outliers included."""
    runnable(status, path)
    x, _ = random_case(37, 1, 1536, seed=11)
    x[3] = 0
    x[5, 40:72] = torch.tensor([0.5, -0.5] * 16)  # ties: v * 127 / absmax = +-127 exactly
    codes, dx, s = torch.ops.labkit.quantize_q8_1(x, path)
    expected = quantize_q8_1(x)
    assert (
        torch.equal(codes.float(), expected[0])
        and torch.equal(dx, expected[1])
        and torch.equal(s, expected[2])
    )


def test_compiled_layers_equal_eager(status):
    q4, q8 = layers(40, 64, seed=12)

    def run(x):
        return torch.relu(q4(x)) + q8(x)

    x = torch.randn(3, 64)
    torch.testing.assert_close(torch.compile(run, fullgraph=True)(x), run(x), rtol=0, atol=0)


def test_bad_layouts_are_named(status):
    q4, q8 = layers(40, 64, seed=13)
    x = torch.randn(2, 64)
    with pytest.raises(
        RuntimeError, match=r"q4_1x16_linear: codes must be contiguous \[ceil\(N/16\), K/32, 256\]"
    ):
        repacked_linear(x, q4.codes[:2], q4.scales, q4.minimums, 40)
    with pytest.raises(
        RuntimeError, match=r"q8_0x16_linear: scales \(and minimums\) must be contiguous float16"
    ):
        repacked_linear(x, q8.codes, q8.scales.float(), None, 40)
    with pytest.raises(RuntimeError, match="q8_0x16_linear: codes must be int8"):
        repacked_linear(x, q4.codes, q4.scales, None, 40)
