"""QuantLinear computes with its dequantized weight; quantize_model swaps the right layers; a quantized
SmolLM2 still knows the capital of France."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import labkit
from labkit.quant import schemes as quant
from labkit.quant.linear import SCHEMES, QuantLinear, int8_kernel_available, quantize_model, quantized_layers
from labkit.quant.nf4 import nf4_dequantize, nf4_quantize


def linear(in_features=256, out_features=96, bias=True, seed=0):
    torch.manual_seed(seed)
    layer = nn.Linear(in_features, out_features, bias=bias)
    with torch.no_grad():
        layer.weight.mul_(0.5)
        layer.weight[2, 3] = 1.5  # an outlier
    return layer


@pytest.fixture
def x():
    return torch.randn(2, 5, 256, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("scheme,group_size", [("int4", 64), ("int4-asym", 32), ("int4", 128), ("nf4", 64)])
def test_plain_path_computes_exactly_with_the_dequantized_weight(scheme, group_size, x):
    layer = linear()
    q = QuantLinear.from_linear(layer, scheme, group_size=group_size, use_kernels=False)
    assert not q.uses_kernel(x)
    expected = F.linear(x, q.dequantized_weight(), layer.bias)
    assert torch.equal(q(x), expected)
    assert q(x).shape == (2, 5, 96)


@pytest.mark.parametrize("scheme,group_size", [("int4", 64), ("int4-asym", 32), ("int4", 128)])
def test_int4_kernel_path_agrees_with_the_plain_path(scheme, group_size, x):
    layer = linear()
    plain = QuantLinear.from_linear(layer, scheme, group_size, use_kernels=False)
    fast = QuantLinear.from_linear(layer, scheme, group_size)
    if not fast.int4_kernel_layout:
        pytest.skip("this torch build has no CPU int4 kernel")
    assert fast.uses_kernel(x)
    # The kernel's own layout decodes back to the very same weight, and stores the same bytes.
    assert torch.equal(fast.dequantized_weight(), plain.dequantized_weight())
    assert fast.nbytes == plain.nbytes
    expected = plain(x)
    assert float((fast(x) - expected).norm() / expected.norm()) < 1e-2  # bfloat16 activations


def test_int4_kernel_is_skipped_where_it_does_not_apply(x):
    assert not QuantLinear.from_linear(linear(), "int4", group_size=16).int4_kernel_layout  # group size
    assert not QuantLinear.from_linear(linear(out_features=100), "int4", 64).int4_kernel_layout  # rows % 16
    odd = QuantLinear.from_linear(linear(out_features=100), "int4", 64)
    assert torch.equal(odd(x), F.linear(x, odd.dequantized_weight(), odd.bias))


def test_dequantized_weights_are_the_quant_functions_round_trips():
    layer = linear(bias=False)
    w = layer.weight.detach()
    assert torch.equal(
        QuantLinear.from_linear(layer, "int8").dequantized_weight(),
        quant.absmax_dequantize(*quant.absmax_quantize(w, 8, "channel")),
    )
    assert torch.equal(
        QuantLinear.from_linear(layer, "int4", group_size=32).dequantized_weight(),
        quant.dequantize_groupwise(quant.quantize_groupwise(w, 4, 32, symmetric=True)),
    )
    assert torch.equal(
        QuantLinear.from_linear(layer, "nf4", group_size=64).dequantized_weight(),
        nf4_dequantize(nf4_quantize(w, 64)),
    )


def test_int8_slow_path_is_exact_and_fast_path_agrees_to_bfloat16_precision(x):
    layer = linear()
    exact = QuantLinear.from_linear(layer, "int8", use_kernels=False)
    expected = F.linear(x, exact.dequantized_weight(), layer.bias)
    assert torch.equal(exact(x), expected)
    fast = QuantLinear.from_linear(layer, "int8")
    assert fast.uses_kernel(x) == int8_kernel_available()
    out = fast(x)
    assert out.dtype == torch.float32 and out.shape == expected.shape
    relative = (out - expected).norm() / expected.norm()
    assert relative < 1e-2  # bfloat16 activations: about 3 significant digits


def test_quantized_outputs_stay_close_to_the_float_layer(x):
    layer = linear()
    with torch.no_grad():
        reference = layer(x)
        errors = {
            s: float((QuantLinear.from_linear(layer, s, 64)(x) - reference).norm() / reference.norm())
            for s in SCHEMES
        }
    assert errors["int8"] < 0.02  # the outlier row's scale is coarse, and the kernel rounds x to bfloat16
    assert max(errors["int4"], errors["int4-asym"], errors["nf4"]) < 0.15
    assert errors["int8"] < min(errors["int4"], errors["nf4"])


def test_bytes_shrink_as_promised():
    layer = linear(bias=False)
    fp32 = 96 * 256 * 4
    assert QuantLinear.from_linear(layer, "int8").nbytes == 96 * 256 + 96 * 4  # int8 codes + fp32 row scales
    assert QuantLinear.from_linear(layer, "int4", 64).nbytes == 96 * 128 + 96 * 4 * 2  # packed + fp16 scales
    assert QuantLinear.from_linear(layer, "nf4", 64).nbytes == 96 * 128 + 96 * 4 * 4  # packed + fp32 absmax
    assert QuantLinear.from_linear(layer, "int4", 64).nbytes < fp32 / 7


def test_bad_arguments_name_the_fix():
    with pytest.raises(ValueError, match="Unknown scheme 'int3'. Choose one of: int8, int4, int4-asym, nf4"):
        QuantLinear.from_linear(linear(), "int3")
    with pytest.raises(ValueError, match="group_size=100 does not divide the 256 columns"):
        QuantLinear.from_linear(linear(), "int4", group_size=100)
    with pytest.raises(ValueError, match="Unsupported NF4 block_size 100"):
        QuantLinear.from_linear(linear(), "nf4", group_size=100)
    with pytest.raises(TypeError, match="takes an nn.Linear, got Embedding"):
        QuantLinear.from_linear(nn.Embedding(10, 4))


def test_quantize_model_skips_the_head_by_default(fresh_tiny_hf):
    n_linear = sum(isinstance(m, nn.Linear) for m in fresh_tiny_hf.modules())
    quantize_model(fresh_tiny_hf, "int8")
    layers = quantized_layers(fresh_tiny_hf)
    assert len(layers) == n_linear - 1 and "lm_head" not in layers
    assert isinstance(fresh_tiny_hf.lm_head, nn.Linear) and isinstance(
        fresh_tiny_hf.model.embed_tokens, nn.Embedding
    )
    assert isinstance(fresh_tiny_hf.model.layers[0].mlp.down_proj, QuantLinear)


def test_skip_list_takes_names_and_patterns(fresh_tiny_hf):
    quantize_model(fresh_tiny_hf, "nf4", skip=("lm_head", "*.mlp.*", "model.layers.1.self_attn.q_proj"))
    names = set(quantized_layers(fresh_tiny_hf))
    assert names == {
        "model.layers.0.self_attn.q_proj",
        "model.layers.0.self_attn.k_proj",
        "model.layers.0.self_attn.v_proj",
        "model.layers.0.self_attn.o_proj",
        "model.layers.1.self_attn.k_proj",
        "model.layers.1.self_attn.v_proj",
        "model.layers.1.self_attn.o_proj",
    }


def test_empty_skip_list_quantizes_the_head_too(fresh_tiny_hf):
    quantize_model(fresh_tiny_hf, "int8", skip=())
    assert isinstance(fresh_tiny_hf.lm_head, QuantLinear)
    # embeddings are not nn.Linear: never swapped
    assert isinstance(fresh_tiny_hf.model.embed_tokens, nn.Embedding)


def test_quantize_model_bad_arguments(fresh_tiny_hf):
    with pytest.raises(TypeError, match=r"skip must be a list or tuple of names, e.g. \('lm_head',\)"):
        quantize_model(fresh_tiny_hf, "int8", skip="lm_head")
    with pytest.raises(ValueError, match="No nn.Linear left to quantize"):
        quantize_model(fresh_tiny_hf, "int8", skip=("*",))
    with pytest.raises(ValueError, match="Unknown scheme"):
        quantize_model(fresh_tiny_hf, "fp8")


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_tiny_model_logits_stay_close(scheme):
    reference = labkit.tiny_model("transformers", seed=0)
    model = quantize_model(
        labkit.tiny_model("transformers", seed=0), scheme, group_size=32 if "int4" in scheme else 64
    )
    ids = torch.tensor([[1, 50, 600, 7000, 42]])
    with torch.no_grad():
        expected, got = reference(ids).logits, model(ids).logits
    limit = 0.02 if scheme == "int8" else 0.2
    assert float((got - expected).norm() / expected.norm()) < limit


def test_labkits_own_llama_quantizes_the_same_way():
    model = quantize_model(labkit.tiny_model("labkit", seed=0), "int8", use_kernels=False)
    reference = quantize_model(labkit.tiny_model("transformers", seed=0), "int8", use_kernels=False)
    ids = torch.tensor([[1, 50, 600, 7000]])
    with torch.no_grad():
        assert torch.allclose(model(ids), reference(ids).logits, atol=1e-4)
    assert len(quantized_layers(model)) == 14  # 2 layers x 7 projections; lm_head skipped


@pytest.mark.slow
@pytest.mark.parametrize("scheme,group_size", [("int8", 64), ("int4", 32), ("nf4", 64)])
def test_quantized_smollm2_still_knows_the_capital_of_france(scheme, group_size):
    model, tokenizer = labkit.load_model("smollm2-135m")
    quantize_model(model, scheme, group_size=group_size)
    answer = labkit.chat(model, tokenizer, "What is the capital of France?", max_new_tokens=12)
    assert "Paris" in answer, answer
    if scheme == "int8":
        assert answer == "The capital of France is Paris."  # int8 does not change the greedy answer
