"""labkit.fast's fused QKV and gate/up projections compute what the unfused model computes.

The fused matmul takes the same dot products as the three (or two) it replaces, perhaps summed in
another order, so logits agree to float32 rounding: on tiny() (logits of order 1) ~1e-6, on SmolLM2
(logits of order 25) ~1e-5. The tolerances below leave room for other CPUs' kernels and still catch any
real mistake (a swapped head, a wrong split: differences of order 0.1-10). Greedy tokens are compared
only on prompts whose float32 top-2 margins stay far above that noise (checked first), so equality
never rests on a near-tie.
"""

import copy

import pytest
import torch
from torch import nn

import labkit
from labkit.core.forward import greedy_decode
from labkit.fast import optimize
from labkit.fast.fuse import FusedAttention, FusedMLP, fuse_projections, is_fused, stacked_linear
from labkit.models.eval_data import eval_prompts
from labkit.quant.linear import quantize_model
from labkit.serving.engine import Engine

TINY_ATOL = 1e-4  # logits of order 1
SMOLLM2_ATOL = 1e-3  # logits of order 25
MIN_MARGIN = 1e-3  # reference top-2 margins must exceed this for greedy tokens to be compared
NEW_TOKENS = 32


def random_prompt(seed: int, batch: int = 1, length: int = 8) -> torch.Tensor:
    return torch.randint(0, 49152, (batch, length), generator=torch.Generator().manual_seed(seed))


def greedy(model, input_ids: torch.Tensor, n_tokens: int = NEW_TOKENS):
    """(tokens [B, n], logits [B, n, V]) of greedy decoding with a fresh KV cache."""
    cache = model.new_cache(input_ids.shape[0], input_ids.shape[1] + n_tokens)
    return greedy_decode(model, input_ids, n_tokens, cache)


def assert_same_greedy(reference, model, input_ids: torch.Tensor, atol: float) -> None:
    """The same greedy tokens and logits within atol, on a prompt free of near-ties (checked)."""
    ref_tokens, ref_logits = greedy(reference, input_ids)
    top2 = ref_logits.topk(2, dim=-1).values
    assert float((top2[..., 0] - top2[..., 1]).min()) > MIN_MARGIN, "pick a prompt without near-ties"
    tokens, logits = greedy(model, input_ids)
    assert torch.equal(tokens, ref_tokens)
    torch.testing.assert_close(logits, ref_logits, atol=atol, rtol=0)


@pytest.fixture
def pair():
    """(unfused tiny Llama, the same weights fused)."""
    model = labkit.tiny_model(impl="labkit")
    return model, fuse_projections(copy.deepcopy(model))


@pytest.mark.parametrize("seed,batch", [(0, 1), (1, 1), (3, 1), (4, 2)])
def test_fused_tiny_model_decodes_the_same_tokens_and_logits(pair, seed, batch, one_thread):
    reference, fused = pair
    assert_same_greedy(reference, fused, random_prompt(seed, batch), TINY_ATOL)


def test_fused_layers_stack_the_original_weights(pair):
    reference, fused = pair
    attention, mlp = reference.layers[1].self_attn, reference.layers[1].mlp
    fused_attention, fused_mlp = fused.layers[1].self_attn, fused.layers[1].mlp
    assert isinstance(fused_attention, FusedAttention) and isinstance(fused_mlp, FusedMLP) and is_fused(fused)
    assert torch.equal(
        fused_attention.qkv_proj.weight,
        torch.cat([attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight]),
    )
    assert torch.equal(fused_mlp.gate_up_proj.weight, torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
    assert torch.equal(fused_attention.o_proj.weight, attention.o_proj.weight)
    linears = [m for m in fused.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 4 * fused.config.n_layers + 1  # qkv, o, gate_up, down per block; the head


def test_fused_model_in_the_serving_engine_matches_the_unfused_model_alone(pair, tokenizer, one_thread):
    # The engine's batches carry their own positions and padding mask: the fused attention's mask path.
    reference, fused = pair
    prompts = ["Hi", "The sea is", "Once upon a time, in a land far away,", "def fibonacci(n):"]
    engine = Engine(fused, tokenizer, max_num_seqs=4, record_logits=True)
    ids = [engine.add_request(prompt, max_new_tokens=6) for prompt in prompts]
    engine.run_until_done()
    assert max(m.batch_size for m in engine.step_metrics) == 4
    for request_id, prompt in zip(ids, prompts):
        steps = list(labkit.generate(reference, tokenizer, prompt, max_new_tokens=6, return_logits=True))
        assert engine.requests[request_id].output_ids == [s.token_id for s in steps], prompt
        logits = torch.stack(engine.requests[request_id].logits)
        torch.testing.assert_close(logits, torch.stack([s.logits for s in steps]), atol=TINY_ATOL, rtol=0)


@pytest.mark.parametrize("steps", [("int8",), ("int4",)])
def test_quantizing_the_fused_model_gives_the_same_codes(steps):
    # int8 scales each output row, int4 each group of 32 inputs of a row: stacking rows changes nothing.
    unfused = optimize(labkit.tiny_model(impl="labkit"), steps)
    fused = optimize(labkit.tiny_model(impl="labkit"), ("fuse",) + steps)
    attention, fused_attention = unfused.layers[0].self_attn, fused.layers[0].self_attn
    parts = [attention.q_proj, attention.k_proj, attention.v_proj]
    expected = torch.cat([part.dequantized_weight() for part in parts])
    assert torch.equal(fused_attention.qkv_proj.dequantized_weight(), expected)
    mlp, fused_mlp = unfused.layers[0].mlp, fused.layers[0].mlp
    expected = torch.cat([mlp.gate_proj.dequantized_weight(), mlp.up_proj.dequantized_weight()])
    assert torch.equal(fused_mlp.gate_up_proj.dequantized_weight(), expected)


def test_fusing_refuses_what_it_cannot_fuse():
    model = fuse_projections(labkit.tiny_model(impl="labkit"))
    with pytest.raises(ValueError, match="fused already"):
        fuse_projections(model)
    with pytest.raises(ValueError, match="Fuse before quantizing"):
        fuse_projections(quantize_model(labkit.tiny_model(impl="labkit"), "int8"))
    with pytest.raises(ValueError, match="labkit's Llama"):
        fuse_projections(labkit.tiny_model(impl="transformers"))
    with pytest.raises(ValueError, match="bias-free"):
        stacked_linear([nn.Linear(4, 2), nn.Linear(4, 2)])


def test_fusing_leaves_the_transformers_peer_untouched():
    hf_model = labkit.tiny_model(impl="transformers")
    before = {name: p.clone() for name, p in hf_model.state_dict().items()}
    fuse_projections(labkit.Llama.from_hf(hf_model))
    assert all(torch.equal(before[name], p) for name, p in hf_model.state_dict().items())


@pytest.mark.slow
@pytest.mark.parametrize("prompt_index", [2, 3, 4])  # prompts whose float32 margins stay >= 0.03
def test_fused_smollm2_decodes_the_same_32_tokens(smollm2, prompt_index, one_thread):
    hf_model, tokenizer = smollm2
    reference = labkit.Llama.from_hf(hf_model)
    fused = fuse_projections(labkit.Llama.from_hf(hf_model))
    input_ids = torch.tensor([eval_prompts(tokenizer)[prompt_index]])
    assert_same_greedy(reference, fused, input_ids, SMOLLM2_ATOL)
