"""labkit's own Q4_1 x Q8_1 CPU kernel (labkit/fast/q4_kernel.cpp, kernel.py, q4_linear.py).

Two tolerances, both derived rather than tuned:

- Kernel vs `q4_1_linear_reference` (the same integer arithmetic in torch): the per-group integer
  dot products are exact in both, so they differ only in the order of the float32 sums over the
  G <= 48 groups: |error| <= G * 2^-24 * sum_g |term_g| < 1e-5 * sum_g |term_g|, where term_g is
  d*dx*dot or m*s. With bfloat16 x, both round that float32 result to bfloat16, and a tiny
  difference can flip the last bit: one more bfloat16 step, 2^-7 |y|.
- Kernel vs the float matmul x @ dequantize(W).T: the kernel multiplies the same weights by x
  rounded to int8 per group of 32, x ~ dx * qx with dx = absmax / 127, so every input is off by at
  most dx / 2 = absmax / 254 (a relative error of 1/254 of the group's largest input). Hence
  |error[i, n]| <= sum_g absmax[i, g] / 254 * sum_{j in g} |W[n, j]|, plus float32 rounding.
"""

import os
import shutil
import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn

from labkit.fast.kernel import PATH_ENV_VAR, PATHS, load_kernel
from labkit.fast.q4_linear import (
    GROUP,
    Q41Linear,
    dequantize_q4_1,
    q4_1_linear,
    q4_1_linear_reference,
    quantize_q4_1,
    quantize_q8_1,
    unpack_q4_1,
)
from labkit.fast.q8_linear import q8_0_linear, quantize_q8_0

FLOAT32_SUMS = 1e-5  # relative to sum_g |term_g|: the float32 sums over at most 48 groups
BF16_STEP = 2.0**-7  # one bfloat16 rounding step, relative to |y|
SHAPES = [(1, 7, 32), (2, 13, 64), (3, 100, 576), (5, 37, 1536), (4, 576, 576)]  # (M, N, K)


def compiler_present() -> bool:
    return shutil.which(os.environ.get("CXX", "c++")) is not None and shutil.which("ninja") is not None


@pytest.fixture(scope="module")
def status():
    """The kernel's status; the kernel must build wherever a compiler and ninja are installed."""
    status = load_kernel()
    if not status.available and not compiler_present():
        pytest.skip(f"no C++ compiler or ninja on this machine: {status.reason}")
    assert status.available, status.reason
    return status


@pytest.fixture
def reloaded():
    """Load the kernel again after the test changed the environment, and again at its end."""
    yield lambda: load_kernel(reload=True)
    load_kernel(reload=True)


def term_sizes(x: torch.Tensor, weight) -> torch.Tensor:
    """[M, N]: sum over groups of |d * dx * dot| + |m * s|, what float32 rounding is relative to."""
    qx, dx, sx = quantize_q8_1(x)
    n, k = weight.shape
    q = unpack_q4_1(weight.codes).double().reshape(n, k // GROUP, GROUP)
    dots = torch.einsum("mgj,ngj->mng", qx.double().reshape(len(x), k // GROUP, GROUP), q)
    scaled = (weight.scales.double()[None] * dx.double()[:, None] * dots).abs()
    return (scaled + (weight.minimums.double()[None] * sx.double()[:, None]).abs()).sum(-1)


def assert_same_arithmetic(y: torch.Tensor, expected: torch.Tensor, x: torch.Tensor, weight) -> None:
    """y and expected agree up to float32 summation order (and one bfloat16 step for bfloat16)."""
    assert y.dtype == expected.dtype == x.dtype and y.shape == expected.shape
    bound = FLOAT32_SUMS * term_sizes(x, weight)
    if y.dtype == torch.bfloat16:
        bound = bound + BF16_STEP * expected.double().abs()
    excess = (y.double() - expected.double()).abs() - bound
    assert excess.max() <= 0, f"off by {excess.max():.3g} beyond the float32 rounding bound"


def rounding_bound(x: torch.Tensor, weight) -> torch.Tensor:
    """[M, N]: the most that rounding x to int8 per group can change x @ W~.T (see the module docstring)."""
    m, k = x.shape
    absmax = x.double().reshape(m, k // GROUP, GROUP).abs().amax(-1)  # [M, G]
    # [N, G]
    w_abs = dequantize_q4_1(weight).double().abs().reshape(weight.shape[0], k // GROUP, GROUP).sum(-1)
    return absmax / 254 @ w_abs.T + FLOAT32_SUMS * (
        x.double().abs() @ dequantize_q4_1(weight).double().abs().T
    )


def random_case(m: int, n: int, k: int, dtype=torch.float32, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    weight = quantize_q4_1(torch.randn(n, k, generator=generator) * 0.05)
    x = torch.randn(m, k, generator=generator)
    x[:, :GROUP] *= 20  # one group with an outlier-sized range, as real activations have
    return x.to(dtype), weight


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_kernel_equals_reference_arithmetic(status, m, n, k, dtype):
    x, weight = random_case(m, n, k, dtype)
    assert_same_arithmetic(q4_1_linear(x, weight), q4_1_linear_reference(x, weight), x, weight)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_kernel_within_activation_rounding_of_float_matmul(status, m, n, k, dtype):
    x, weight = random_case(m, n, k, dtype, seed=1)
    y = q4_1_linear(x, weight).double()
    exact = x.double() @ dequantize_q4_1(weight).double().T
    bound = rounding_bound(x.float(), weight) + (BF16_STEP * exact.abs() if dtype == torch.bfloat16 else 0)
    assert ((y - exact).abs() <= bound).all()
    assert (y - exact).norm() < 0.02 * exact.norm()  # and typically far inside the worst case


def test_zero_rows_and_leading_dimensions(status):
    x, weight = random_case(3, 16, 64)
    x[1] = 0  # absmax 0: codes 0, scale 0, no division by zero
    y = q4_1_linear(x.reshape(1, 3, 64), weight)
    assert y.shape == (1, 3, 16) and torch.isfinite(y).all()
    assert_same_arithmetic(y[0], q4_1_linear_reference(x, weight), x, weight)


@pytest.mark.slow
def test_real_smollm2_layers(status, smollm2_labkit, tokenizer):
    model = smollm2_labkit
    block = model.layers[15]
    layers = {"q_proj": block.self_attn.q_proj, "down_proj": block.mlp.down_proj}
    inputs = {}
    hooks = [
        layer.register_forward_hook(lambda module, args, out, name=name: inputs.__setitem__(name, args[0]))
        for name, layer in layers.items()
    ]
    ids = tokenizer(
        "The capital of France is Paris, and the capital of Italy is", return_tensors="pt"
    ).input_ids
    with torch.no_grad():
        model(ids)
    for hook in hooks:
        hook.remove()
    for name, linear in layers.items():
        x = inputs[name][0, -4:].detach()  # 4 real activation rows, outliers included
        weight = quantize_q4_1(linear.weight.detach())
        y = q4_1_linear(x, weight)
        assert_same_arithmetic(y, q4_1_linear_reference(x, weight), x, weight)
        exact = x.double() @ dequantize_q4_1(weight).double().T
        assert ((y.double() - exact).abs() <= rounding_bound(x, weight)).all(), name
        # SmolLM2's weights are dequantized Q4_1: requantizing is close
        original = x @ linear.weight.detach().T
        assert (y - original).norm() < 0.05 * original.norm(), name


@pytest.mark.parametrize("path", ["avx2", "avx512"])
def test_every_simd_path_agrees_with_scalar(status, path):
    if path not in status.paths:
        pytest.skip(
            f"this CPU cannot run the {path} path (it runs {', '.join(status.paths)}); "
            "avx512 needs avx512f, avx512bw and avx512vnni"
        )
    for m, n, k in SHAPES:
        x, weight = random_case(m, n, k, seed=2)
        assert_same_arithmetic(
            q4_1_linear(x, weight, path=path), q4_1_linear(x, weight, path="scalar"), x, weight
        )


# rows past every tile (1-4), K with groups left over
TILE_SHAPES = [(9, 37, 800), (6, 100, 576), (17, 64, 1536)]


def both_formats(x: torch.Tensor, n: int, seed: int):
    """Calls (x, path) -> y for a random Q4_1 weight and a random Q8_0 head, both [n, x.shape[1]]."""
    generator = torch.Generator().manual_seed(seed)
    weight = quantize_q4_1(torch.randn(n, x.shape[1], generator=generator) * 0.05)
    head = quantize_q8_0(torch.randn(n, x.shape[1], generator=generator) * 0.05)
    return [
        lambda x, path: q4_1_linear(x, weight, path=path),
        lambda x, path: q8_0_linear(x, head, path=path),
    ]


@pytest.mark.parametrize("path", PATHS)
def test_a_row_gets_the_same_bits_whatever_shares_its_call(status, path):
    """Batch invariance: the kernel multiplies tiles of rows, but each row's sums run in one fixed order,
    so a row's output is bit for bit the same alone or with any others (what the engine relies on)."""
    if path not in status.paths:
        pytest.skip(f"this CPU cannot run the {path} path (it runs {', '.join(status.paths)})")
    for m, n, k in TILE_SHAPES:
        x, _ = random_case(m, n, k, seed=3)
        for call in both_formats(x, n, seed=4):
            alone = torch.cat([call(x[i : i + 1], path) for i in range(m)])
            assert torch.equal(call(x, path), alone), (path, m, n, k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_avx2_and_avx512_give_the_same_bits(status, dtype):
    """Both SIMD paths sum every group into the same four chains and add them in the same order, so the
    kernel's outputs do not depend on which of the two a CPU runs (torch's own ops around it still may)."""
    if "avx512" not in status.paths:
        pytest.skip(f"this CPU runs {', '.join(status.paths)}: there is no second SIMD path to compare")
    for m, n, k in TILE_SHAPES:
        x, _ = random_case(m, n, k, dtype=dtype, seed=5)
        for call in both_formats(x, n, seed=6):
            assert torch.equal(call(x, "avx2"), call(x, "avx512")), (m, n, k)


def test_path_from_environment(status, reloaded, monkeypatch):
    monkeypatch.setenv(PATH_ENV_VAR, "scalar")
    assert reloaded().path == "scalar"
    monkeypatch.setenv(PATH_ENV_VAR, "avx1024")
    with pytest.raises(ValueError, match="avx1024"):
        reloaded()
    monkeypatch.delenv(PATH_ENV_VAR)
    assert reloaded().path == status.paths[-1]


def test_compiled_call_equals_eager(status):
    x, weight = random_case(2, 24, 64)
    layer = Q41Linear(weight, bias=torch.randn(24))

    def run(x):
        return torch.relu(layer(x)) + q4_1_linear(x, weight)

    compiled = torch.compile(run, fullgraph=True)
    torch.testing.assert_close(compiled(x), run(x), rtol=0, atol=0)


def test_q41linear_on_kernel(status):
    linear = nn.Linear(64, 24)
    layer = Q41Linear.from_linear(linear)
    x = torch.randn(3, 64)
    assert layer.uses_kernel
    assert_same_arithmetic(
        layer(x) - linear.bias, q4_1_linear_reference(x, layer.q4_weight), x, layer.q4_weight
    )
    assert layer(x.double()).dtype == torch.float64  # a dtype the kernel does not take: the fallback


def test_bad_input_is_named(status):
    x, weight = random_case(1, 16, 64)
    with pytest.raises(ValueError, match="K=64"):
        q4_1_linear(torch.randn(1, 63), weight)
    with pytest.raises(TypeError, match="int8|float32"):
        q4_1_linear(x.to(torch.int8), weight)
    with pytest.raises(TypeError, match="Q41Weight"):
        q4_1_linear(x, dequantize_q4_1(weight))
    with pytest.raises(ValueError, match="path='avx9'"):
        q4_1_linear(x, weight, path="avx9")
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_q4_1(torch.randn(4, 48))


def test_failed_build_falls_back_with_one_warning(reloaded, monkeypatch):
    def no_compiler():
        raise RuntimeError("Error building extension 'labkit_q4': c++: command not found")

    monkeypatch.setattr("labkit.fast.kernel.build_library", no_compiler)
    linear = nn.Linear(64, 24)
    x = torch.randn(3, 64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = reloaded()
        layer = Q41Linear.from_linear(linear)
        y = layer(x)
        layer(x), load_kernel()
    assert not status.available and status.path is None and "command not found" in status.reason
    assert not layer.uses_kernel
    ours = [str(w.message) for w in caught if "labkit" in str(w.message)]
    assert len(ours) == 1 and "falls back to torch's kernels" in ours[0]
    torch.testing.assert_close(y, x @ dequantize_q4_1(layer.q4_weight).T + linear.bias)
    with pytest.raises(RuntimeError, match="unavailable"):
        q4_1_linear(x, layer.q4_weight)


FALLBACK_SCRIPT = """
import warnings, torch
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    from labkit.fast.kernel import load_kernel
    from labkit.fast.q4_linear import Q41Linear, dequantize_q4_1
    status = load_kernel()
    linear = torch.nn.Linear(64, 8)
    layer = Q41Linear.from_linear(linear)
    x = torch.randn(2, 64)
    y = layer(x)
    load_kernel()
ok = torch.allclose(y, x @ dequantize_q4_1(layer.q4_weight).T + linear.bias, atol=1e-6)
print(status.available, layer.uses_kernel, ok, sum("labkit" in str(w.message) for w in caught))
print(status.reason)
"""


def test_missing_compiler_in_a_fresh_process(tmp_path):
    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler"), "LABKIT_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", FALLBACK_SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary, reason = done.stdout.splitlines()[:2]
    assert summary == "False False True 1", done.stdout
    assert "no-such-compiler" in reason or "Error building" in reason, reason
