"""labkit.fast's quantized and bfloat16 steps: what they store, and that SmolLM2 stays as good.

Quality is measured as data/eval perplexity (labkit.quant.evaluation's text and windows; the first 1024
tokens, two 512-token windows, to keep the test short) and as greedy agreement with float32, teacher-
forced along float32's own greedy continuation of the eval prompts, counted only where float32's top-2
margin is at least STABLE_MARGIN: a lower margin is a near-tie that the rounding of 8-bit weights or
bfloat16 activations may flip on any CPU (measured here, the widest margin flipped was 0.30 logits, by
int8's head; bfloat16 flips first tokens of margin 0.08 and 0.02, which is where its greedy text
differs from float32's).
"""

import copy

import pytest
import torch

import labkit
from labkit.core.forward import forward, greedy_decode
from labkit.decoding.scoring import perplexity
from labkit.fast import optimize
from labkit.fast.precision import quantize_weights, to_bfloat16
from labkit.models.eval_data import eval_ids, eval_prompts
from labkit.quant.linear import QuantLinear

# step -> the largest relative perplexity change allowed against float32 (measured: int8 -0.2 %,
# int4 +0.2 %, bf16 +0.1 %, int4 + bf16 -0.2 %, q4_1 (int8 activations too, head Q8_0) +0.6 %, q4_1 + bf16 +0.8 %;
# symmetric int4 of groups of 32 would be +52 %)
PERPLEXITY_BOUNDS = {
    ("fuse", "int8"): 0.01,
    ("fuse", "int4"): 0.02,
    ("fuse", "bf16"): 0.01,
    ("fuse", "int4", "bf16"): 0.02,
    ("fuse", "q4_1"): 0.02,
    ("fuse", "q4_1", "bf16"): 0.02,
}
# step -> relative error of tiny()'s logits allowed (measured: 1.0 %, 9.7 %, 0.6 %, 9.7 %, 9.7 %): random
# Gaussian weights have no structure for 16 levels to follow, but a wrong scale or layout gives ~100 %
TINY_RELATIVE_ERROR = {
    ("fuse", "int8"): 0.02,
    ("fuse", "int4"): 0.15,
    ("fuse", "bf16"): 0.01,
    ("fuse", "int4", "bf16"): 0.15,
    ("fuse", "q4_1"): 0.15,
}
STABLE_MARGIN = 1.0  # logits; about 3x the widest margin any step flipped here
NEW_TOKENS = 32


def test_quantize_weights_quantizes_the_head_too_and_keeps_the_embedding():
    model = quantize_weights(labkit.tiny_model(impl="labkit"), "int4")
    assert isinstance(model.lm_head, QuantLinear) and model.lm_head.scheme == "int8"
    assert all(
        isinstance(m.q_proj, QuantLinear) and m.q_proj.scheme == "int4-asym" and m.q_proj.group_size == 32
        for m in (block.self_attn for block in model.layers)
    )
    assert model.embed_tokens.weight.dtype == torch.float32  # a lookup reads one row: no need to shrink it
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    with pytest.raises(ValueError, match="choose one of: int8, int4"):
        quantize_weights(labkit.tiny_model(impl="labkit"), "nf4")


def test_bfloat16_step_converts_the_float_parts_keeps_ties_and_quantized_layers():
    model = to_bfloat16(labkit.tiny_model(impl="labkit"))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.lm_head.weight is model.embed_tokens.weight  # still tied
    assert model.new_cache(1, 8).keys.dtype == torch.bfloat16
    assert model(torch.tensor([[1, 2, 3]])).dtype == torch.float32  # logits stay float32
    quantized = optimize(labkit.tiny_model(impl="labkit"), ("fuse", "int4", "bf16"))
    head = quantized.lm_head
    assert head.scale.dtype == torch.float32 and head.codes.dtype == torch.int8
    assert quantized.layers[0].self_attn.qkv_proj.scales.dtype == torch.float16  # as quantized


def test_steps_on_a_labkit_copy_leave_the_transformers_peer_as_it_was():
    hf_model = labkit.tiny_model(impl="transformers")
    before = {name: p.clone() for name, p in hf_model.state_dict().items()}
    optimize(labkit.Llama.from_hf(hf_model), ("fuse", "int8", "bf16"))
    after = hf_model.state_dict()
    assert all(
        after[name].dtype == torch.float32 and torch.equal(before[name], after[name]) for name in before
    )


@pytest.mark.parametrize("steps", list(TINY_RELATIVE_ERROR))
def test_tiny_model_logits_stay_close_to_float32(steps, one_thread):
    reference = labkit.tiny_model(impl="labkit")
    model = optimize(copy.deepcopy(reference), steps)
    input_ids = torch.randint(0, 49152, (2, 12), generator=torch.Generator().manual_seed(0))
    expected, logits = forward(reference, input_ids), forward(model, input_ids)
    assert float((logits - expected).norm() / expected.norm()) < TINY_RELATIVE_ERROR[steps]


@pytest.fixture(scope="module")
def float32_reference(smollm2):
    """(float32 perplexity, [(prompt + float32 greedy continuation [1, T], prompt length)], logits)."""
    hf_model, tokenizer = smollm2
    model = labkit.Llama.from_hf(hf_model)
    sequences, logits = [], []
    for prompt in eval_prompts(tokenizer):
        input_ids = torch.tensor([prompt])
        tokens, _ = greedy_decode(model, input_ids, NEW_TOKENS, model.new_cache(1, len(prompt) + NEW_TOKENS))
        sequence = torch.cat([input_ids, tokens], dim=1)
        sequences.append((sequence, len(prompt)))
        logits.append(forward(model, sequence)[0, len(prompt) - 1 : -1])  # [NEW_TOKENS, V]
    return perplexity(model, eval_ids(tokenizer, 1024)), sequences, logits


@pytest.mark.slow
@pytest.mark.parametrize("steps", list(PERPLEXITY_BOUNDS))
def test_smollm2_perplexity_and_greedy_agreement(smollm2, float32_reference, steps):
    hf_model, tokenizer = smollm2
    reference_ppl, sequences, reference_logits = float32_reference
    model = optimize(labkit.Llama.from_hf(hf_model), steps)
    ppl = perplexity(model, eval_ids(tokenizer, 1024))
    assert abs(ppl / reference_ppl - 1) < PERPLEXITY_BOUNDS[steps], (ppl, reference_ppl)
    compared = 0
    for (sequence, prompt_length), expected in zip(sequences, reference_logits):
        logits = forward(model, sequence)[0, prompt_length - 1 : -1]
        top2 = expected.topk(2, dim=-1).values
        stable = (top2[:, 0] - top2[:, 1]) >= STABLE_MARGIN
        assert torch.equal(logits.argmax(-1)[stable], expected.argmax(-1)[stable])
        compared += int(stable.sum())
    assert compared >= len(sequences) * NEW_TOKENS // 2  # most positions are far from a tie
