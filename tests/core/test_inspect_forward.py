"""Looking inside a forward pass: the traced shapes follow the config, and the attention weights we
recompute from the recorded q and k are the ones the model really uses (they rebuild its o_proj input)."""

import pytest
import torch

import labkit
from labkit.core.inspect_forward import (
    all_attention_weights,
    attention_output,
    attention_weights,
    format_shape_table,
    previous_token_share,
    shape_rows,
    top_heads,
    trace_forward,
)

from .conftest import random_ids

# float32 attention of one layer: the fused kernel and weights @ v differ by summation order only
# (measured differences on SmolLM2 are below 3e-7).
FLOAT32_ATOL = 1e-5


def expected_shapes(config, batch, tokens):
    """The shapes a Llama must produce, from its config alone."""
    return {
        "embed_tokens": (batch, tokens, config.hidden_size),
        "layers.0.self_attn.q_proj": (batch, tokens, config.n_heads * config.head_dim),
        "layers.0.self_attn.k_proj": (batch, tokens, config.n_kv_heads * config.head_dim),
        "layers.0.self_attn.v_proj": (batch, tokens, config.n_kv_heads * config.head_dim),
        f"layers.{config.n_layers - 1}.self_attn.o_proj": (batch, tokens, config.hidden_size),
        f"layers.{config.n_layers - 1}.mlp.gate_proj": (batch, tokens, config.intermediate_size),
        f"layers.{config.n_layers - 1}.mlp.down_proj": (batch, tokens, config.hidden_size),
        "norm": (batch, tokens, config.hidden_size),
        "lm_head": (batch, tokens, config.vocab_size),
    }


@pytest.fixture(scope="module")
def tiny_trace():
    model = labkit.tiny_model("labkit", seed=0)
    ids = random_ids(2, 7)
    return model, trace_forward(model, ids)


def test_tiny_shapes_follow_the_config(tiny_trace):
    model, trace = tiny_trace
    for name, shape in expected_shapes(model.config, 2, 7).items():
        assert trace.shapes[name] == shape, name
    assert len(trace.q) == len(trace.attn_out) == model.config.n_layers
    assert attention_weights(trace, 0).shape == (2, model.config.n_heads, 7, 7)


def test_tracing_changes_nothing(tiny_trace):
    model, trace = tiny_trace
    with torch.no_grad():
        assert torch.equal(model(trace.input_ids), trace.logits)
    assert not any(module._forward_hooks for module in model.modules()), "a hook was left behind"


def test_weights_are_causal_distributions(tiny_trace):
    _, trace = tiny_trace
    weights = attention_weights(trace, 1)  # [B, H, T, T]
    assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-6)
    assert torch.all(weights.triu(diagonal=1) == 0), "a position attended to a later one"


def test_tiny_weights_rebuild_the_real_attention_output(tiny_trace):
    model, trace = tiny_trace
    for layer in range(model.config.n_layers):
        assert torch.allclose(attention_output(trace, layer), trace.attn_out[layer], atol=FLOAT32_ATOL)


def test_without_rope_the_output_is_not_rebuilt(tiny_trace):
    """The check above can fail: weights computed without the rotary embedding do not match."""
    _, trace = tiny_trace
    wrong = attention_output(trace, 0, attention_weights(trace, 0, rotary=False))
    assert not torch.allclose(wrong, trace.attn_out[0], atol=FLOAT32_ATOL)


def test_transformers_model_is_refused():
    with pytest.raises(TypeError, match="impl='labkit'"):
        trace_forward(labkit.tiny_model("transformers"), torch.tensor([[1, 2, 3]]))


def test_top_heads_and_previous_token_share():
    attention_to = torch.zeros(4, 3)
    attention_to[2, 1], attention_to[0, 2], attention_to[3, 0] = 0.9, 0.7, 0.5
    assert top_heads(attention_to, k=2) == [(2, 1, pytest.approx(0.9)), (0, 2, pytest.approx(0.7))]
    previous = torch.eye(5).roll(-1, dims=1).tril()  # row t puts all its weight on t - 1 (row 0: none)
    weights = torch.stack([previous, torch.eye(5)])[:, None]  # [L=2, H=1, 5, 5]
    assert previous_token_share(weights).flatten().tolist() == [1.0, 0.0]


@pytest.mark.slow
def test_smollm2_trace(smollm2_labkit, tokenizer):
    """On the real model: the shapes of the config, one row per kind, and weights that rebuild every
    layer's attention output; the last position predicts ' Paris' (77% in float32, far from a tie)."""
    model = smollm2_labkit
    ids = torch.tensor([tokenizer("The capital of France is")["input_ids"]])
    trace = trace_forward(model, ids)
    config = model.config
    assert (config.n_layers, config.n_heads, config.n_kv_heads, config.hidden_size) == (30, 9, 3, 576)
    for name, shape in expected_shapes(config, 1, ids.shape[1]).items():
        assert trace.shapes[name] == shape, name
    table = format_shape_table(shape_rows(trace))
    assert "[1, 5, 576] -> [1, 9, 5, 64]" in table and "x 30 layers" in table and "[1, 5, 49152]" in table
    for layer in range(config.n_layers):
        assert torch.allclose(attention_output(trace, layer), trace.attn_out[layer], atol=FLOAT32_ATOL), layer
    weights = all_attention_weights(trace)  # [L, H, T, T]
    assert weights.shape == (30, 9, 5, 5)
    assert tokenizer.decode(trace.logits[0, -1].argmax()) == " Paris"
