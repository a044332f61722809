"""labkit's from-scratch Llama gives the same logits as transformers on the same weights."""

import pytest
import torch

import labkit
from labkit.core.attention import attention, attention_explicit, causal_mask

from .conftest import random_ids

# fp32 logits of SmolLM2 reach |40|; summation order differs between the two implementations,
# so the tolerance is absolute and 1e-3 (measured differences are around 6e-5).
REAL_MODEL_ATOL = 1e-3
TINY_ATOL = 1e-5


def hf_logits(model, input_ids):
    with torch.no_grad():
        return model(input_ids).logits.float()


def test_tiny_matches_transformers():
    hf, ours = labkit.tiny_model("transformers", seed=3), labkit.tiny_model("labkit", seed=3)
    input_ids = torch.randint(0, ours.config.vocab_size, (2, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(ours(input_ids), hf_logits(hf, input_ids), atol=TINY_ATOL)


def test_tiny_seeds_give_different_weights():
    a, b = labkit.tiny_model("labkit", seed=0), labkit.tiny_model("labkit", seed=1)
    assert not torch.equal(a.embed_tokens.weight, b.embed_tokens.weight)


@pytest.mark.slow
def test_smollm2_logits_match_transformers(smollm2, smollm2_labkit):
    hf, tokenizer = smollm2
    input_ids = torch.tensor([labkit.chat_prompt(tokenizer, "What is the capital of France?")])
    expected = hf_logits(hf, input_ids)
    with torch.no_grad():
        got = smollm2_labkit(input_ids)
    assert got.shape == expected.shape == (1, input_ids.shape[1], 49152)
    assert (got - expected).abs().max() < REAL_MODEL_ATOL
    assert torch.equal(got.argmax(-1), expected.argmax(-1))


def test_cached_forward_equals_full_forward():
    model = labkit.tiny_model("labkit", seed=0)
    input_ids = random_ids(1, 12, seed=1)
    with torch.no_grad():
        full = model(input_ids)
        cache = model.new_cache(max_length=12)
        pieces = [model(input_ids[:, :5], cache)] + [
            model(input_ids[:, i : i + 1], cache) for i in range(5, 12)
        ]
    assert cache.length == 12
    assert torch.allclose(torch.cat(pieces, dim=1), full, atol=TINY_ATOL)


def left_padded_layout(real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [B, T] counted from each row's first real token, mask [B, 1, T, T] hiding the padding."""
    positions = (real.cumsum(-1) - 1).clamp(min=0)
    causal = torch.ones(real.shape[1], real.shape[1], dtype=torch.bool).tril()  # [T, T]
    visible = (causal & real[:, None, :]) | torch.eye(real.shape[1], dtype=torch.bool)  # a pad sees itself
    return positions, torch.zeros(visible.shape).masked_fill(~visible, float("-inf"))[:, None]


def test_explicit_positions_and_mask_give_each_row_its_own_logits():
    model = labkit.tiny_model("labkit", seed=0)
    rows = [[5, 9, 13], [11, 3, 8, 21, 4]]
    input_ids = torch.tensor([[0, 0] + rows[0], rows[1]])  # row 0 left-padded
    positions, mask = left_padded_layout(torch.tensor([[False, False, True, True, True], [True] * 5]))
    with torch.no_grad():
        batched = model(input_ids, positions=positions, mask=mask)[:, -1]
        alone = torch.cat([model(torch.tensor([row]))[:, -1] for row in rows])
        same = model(input_ids, positions=torch.arange(5))  # [T] positions, causal mask by default
        assert torch.allclose(same, model(input_ids), atol=TINY_ATOL)
    assert torch.allclose(batched, alone, atol=1e-4)


def test_fused_attention_equals_explicit_formula():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=gen) for shape in [(2, 6, 5, 8), (2, 2, 9, 8), (2, 2, 9, 8)])
    mask = causal_mask(5, 9, torch.device("cpu"))
    assert torch.allclose(attention(q, k, v, mask), attention_explicit(q, k, v, mask), atol=1e-5)


def test_causal_mask_hides_only_the_future():
    mask = causal_mask(2, 4, torch.device("cpu"))  # new tokens at positions 2 and 3
    assert mask.tolist() == [[0, 0, 0, float("-inf")], [0, 0, 0, 0]]


def test_cache_overflow_is_a_clear_error():
    model = labkit.tiny_model("labkit")
    cache = model.new_cache(max_length=4)
    with pytest.raises(ValueError, match="KV cache holds 4 tokens"):
        model(torch.tensor([[1, 2, 3, 4, 5]]), cache)


def test_position_beyond_context_is_a_clear_error():
    model = labkit.tiny_model("labkit")
    too_long = torch.zeros(1, model.config.max_position_embeddings + 1, dtype=torch.long)
    with pytest.raises(ValueError, match="beyond the model's context of 512 tokens"):
        model(too_long)


@pytest.mark.slow
def test_from_hf_rejects_other_architectures(gemma3):
    with pytest.raises(ValueError, match="labkit's from-scratch model is a Llama"):
        labkit.Llama.from_hf(gemma3[0])
