"""labkit's Q8_0 x Q8_1 kernel (the output head's format in llama.cpp's Q4_1 files; labkit/fast/q8_linear.py).

The tolerances are derived as in test_kernel.py:
- kernel vs `q8_0_linear_reference`: exact per-group integer sums in both, so they differ only in the
  order of the float32 sums over groups, |error| <= 1e-5 * sum_g |d * dx * dot_g| (G <= 48);
- kernel vs x @ dequantize(W).T: x is rounded to int8 per group, each input off by at most
  absmax / 254, so |error[i, n]| <= sum_g absmax[i, g] / 254 * sum_{j in g} |W[n, j]|.
"""

import pytest
import torch
from torch import nn

from labkit.fast.q4_linear import GROUP, quantize_q8_1
from labkit.fast.q8_linear import (
    Q80Linear,
    dequantize_q8_0,
    q8_0_linear,
    q8_0_linear_reference,
    quantize_q8_0,
)

FLOAT32_SUMS = 1e-5  # relative to sum_g |term_g|: float32 sums over at most 48 groups
# (M, N, K): 1, 3, 18, 48 groups
SHAPES = [(1, 7, 32), (2, 13, 96), (3, 100, 576), (5, 37, 1536), (1, 1000, 576)]


def random_case(m: int, n: int, k: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    weight = quantize_q8_0(torch.randn(n, k, generator=generator) * 0.05)
    x = torch.randn(m, k, generator=generator)
    x[:, :GROUP] *= 20  # one group with an outlier-sized range
    return x, weight


def summation_bound(x: torch.Tensor, weight) -> torch.Tensor:
    """[M, N]: FLOAT32_SUMS times sum over groups of |d * dx * integer dot|."""
    qx, dx, _ = quantize_q8_1(x)
    n, k = weight.shape
    dots = torch.einsum(
        "mgj,ngj->mng",
        qx.double().reshape(len(x), k // GROUP, GROUP),
        weight.codes.double().reshape(n, k // GROUP, GROUP),
    )
    return FLOAT32_SUMS * (weight.scales.double()[None] * dx.double()[:, None] * dots).abs().sum(-1)


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_kernel_equals_reference_arithmetic(status, m, n, k):
    x, weight = random_case(m, n, k)
    y, expected = q8_0_linear(x, weight), q8_0_linear_reference(x, weight)
    assert y.shape == expected.shape == (m, n)
    assert ((y.double() - expected.double()).abs() <= summation_bound(x, weight)).all()


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_kernel_within_activation_rounding_of_float_matmul(status, m, n, k):
    x, weight = random_case(m, n, k, seed=1)
    w = dequantize_q8_0(weight).double()
    exact = x.double() @ w.T
    absmax = x.double().reshape(m, k // GROUP, GROUP).abs().amax(-1)  # [M, G]
    bound = absmax / 254 @ w.abs().reshape(n, k // GROUP, GROUP).sum(-1).T + summation_bound(x, weight)
    y = q8_0_linear(x, weight).double()
    assert ((y - exact).abs() <= bound).all()
    assert (y - exact).norm() < 0.02 * exact.norm()


@pytest.mark.parametrize("path", ["scalar", "avx2", "avx512"])
def test_every_path_agrees_with_the_reference_on_extreme_codes(status, path):
    """Codes at -127 and 127 (and zeros) with every sign of x: the sign trick of the SIMD paths must hold."""
    if path not in status.paths:
        pytest.skip(f"this CPU cannot run the {path} path (it runs {', '.join(status.paths)})")
    for m, n, k in SHAPES:
        x, weight = random_case(m, n, k, seed=2)
        codes = weight.codes.clone()
        codes[:, ::3], codes[:, 1::5], codes[:, 2::7] = 127, -127, 0
        extreme = type(weight)(codes, weight.scales, weight.shape)
        y, expected = q8_0_linear(x, extreme, path=path), q8_0_linear_reference(x, extreme)
        assert ((y.double() - expected.double()).abs() <= summation_bound(x, extreme)).all(), (path, m, n, k)


def test_quantizing_a_q8_0_weight_again_gives_it_back():
    """SmolLM2's head was Q8_0 in its GGUF: a weight already on the Q8_0 grid must come back exactly."""
    weight = dequantize_q8_0(random_case(1, 64, 576)[1])
    assert torch.equal(dequantize_q8_0(quantize_q8_0(weight)), weight)
    zero = quantize_q8_0(torch.zeros(2, 64))
    assert (zero.codes == 0).all() and torch.isfinite(dequantize_q8_0(zero)).all()


@pytest.mark.slow
def test_real_head_is_within_activation_rounding(status, smollm2_labkit, tokenizer):
    model = smollm2_labkit
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        hidden = model.norm(model.embed_tokens(ids))[0, -2:]  # [2, 576] real rows, for the head's shape
    weight = quantize_q8_0(model.lm_head.weight.detach())
    original = hidden @ model.lm_head.weight.detach().T
    y = q8_0_linear(hidden, weight)
    assert (
        (y.double() - q8_0_linear_reference(hidden, weight).double()).abs() <= summation_bound(hidden, weight)
    ).all()
    assert (y - original).norm() < 0.02 * original.norm()


def test_compiled_call_equals_eager(status):
    x, weight = random_case(2, 24, 64)
    layer = Q80Linear(weight, bias=torch.randn(24))

    def run(x):
        return torch.relu(layer(x)) + q8_0_linear(x, weight)

    torch.testing.assert_close(torch.compile(run, fullgraph=True)(x), run(x), rtol=0, atol=0)


def test_q80linear_on_kernel_and_fallback(status):
    linear = nn.Linear(64, 24)
    layer = Q80Linear.from_linear(linear)
    x = torch.randn(3, 64)
    assert layer.uses_kernel and "q8_0" in repr(layer)
    expected = q8_0_linear_reference(x, layer.q8_weight) + linear.bias
    assert ((layer(x) - expected).abs().double() <= summation_bound(x, layer.q8_weight) + 1e-6).all()
    assert layer(x.double()).dtype == torch.float64  # a dtype the kernel does not take: the fallback


def test_bad_input_is_named(status):
    x, weight = random_case(1, 16, 64)
    with pytest.raises(ValueError, match="K=64"):
        q8_0_linear(torch.randn(1, 63), weight)
    with pytest.raises(TypeError, match="Q80Weight"):
        q8_0_linear(x, dequantize_q8_0(weight))
    with pytest.raises(ValueError, match="path='avx9'"):
        q8_0_linear(x, weight, path="avx9")
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_q8_0(torch.randn(4, 48))
    with pytest.raises(TypeError, match="nn.Linear"):
        Q80Linear.from_linear(torch.randn(4, 64))
