"""Drafters: prompt lookup finds the right continuation, early exit shares the target's weights and computes
exactly its first k layers, a model drafter's cache survives rejections, and q matches the policy."""

import pytest
import torch

import labkit
from labkit.decoding.config import DecodingConfig
from labkit.speculative.drafters import ModelDrafter, PromptLookupDrafter, early_exit_model
from labkit.speculative.generate import Drafter
from labkit.speculative.policy import SamplingPolicy


def test_prompt_lookup_copies_what_followed_the_last_ngram():
    drafter = PromptLookupDrafter(max_ngram_size=3)
    assert isinstance(drafter, Drafter)
    # "7 8" occurred before, followed by 9 10 11: propose that
    assert drafter.propose([5, 7, 8, 9, 10, 11, 6, 7, 8], gamma=3) == ([9, 10, 11], None)
    # up to the end
    assert drafter.propose([5, 7, 8, 9, 10, 11, 6, 7, 8], gamma=10) == ([9, 10, 11, 6, 7, 8], None)
    # the longest n-gram wins: "1 2 3" matches at 4..6 (-> 9); "2 3" alone would match later (-> 5)
    assert drafter.propose([1, 2, 3, 9, 0, 2, 3, 5, 1, 2, 3], gamma=1) == ([9], None)
    # the most recent occurrence wins among equally long matches
    assert drafter.propose([4, 1, 4, 2, 4], gamma=1) == ([2], None)


def test_prompt_lookup_without_a_match_proposes_nothing():
    drafter = PromptLookupDrafter(max_ngram_size=2, min_ngram_size=2)
    assert drafter.propose([1, 2, 3, 4, 5], gamma=4) == ([], None)
    assert drafter.propose([7], gamma=4) == ([], None)
    assert PromptLookupDrafter(1).propose([1, 2, 3, 4, 5, 1], gamma=2) == ([2, 3], None)


@pytest.mark.parametrize(
    "kwargs", [{"max_ngram_size": 0}, {"max_ngram_size": "3"}, {"max_ngram_size": 2, "min_ngram_size": 3}]
)
def test_prompt_lookup_rejects_bad_sizes(kwargs):
    with pytest.raises(ValueError, match="ngram_size"):
        PromptLookupDrafter(**kwargs)


def test_early_exit_shares_weights_and_equals_the_first_layers():
    model = labkit.tiny_model("labkit")
    draft = early_exit_model(model, 1)
    assert draft.config.n_layers == 1 and len(draft.layers) == 1
    assert draft.layers[0] is model.layers[0]
    assert draft.lm_head.weight.data_ptr() == model.embed_tokens.weight.data_ptr()  # the tied head, no copy
    assert draft.norm is model.norm
    ids = torch.tensor([[1, 504, 3575, 282]])
    positions = torch.arange(4)
    cos, sin = labkit.core.llama.rotary_cos_sin(positions, model.config.head_dim, model.config.rope_theta)
    with torch.no_grad():
        x = model.layers[0](model.embed_tokens(ids), cos, sin, None, 0)
        expected = model.lm_head(model.norm(x))
        assert torch.allclose(draft(ids), expected, atol=1e-5)
        assert not torch.allclose(draft(ids), model(ids), atol=1e-3)  # it is a different (cheaper) model


def test_early_exit_from_a_transformers_model_and_bad_depths():
    hf_model = labkit.tiny_model("transformers")
    draft = early_exit_model(hf_model, 2)
    assert draft.embed_tokens.weight.data_ptr() == hf_model.model.embed_tokens.weight.data_ptr()
    for bad in (0, 3, 1.5, True):
        with pytest.raises(
            ValueError, match=r"n_layers must be a whole number from 1 to 2 \(the model's layers\)"
        ):
            early_exit_model(hf_model, bad)


def test_model_drafter_greedy_proposals_are_the_draft_models_greedy_tokens(tokenizer):
    draft_model = labkit.tiny_model("labkit", seed=1)
    drafter = ModelDrafter(draft_model)
    drafter.prepare(labkit.tiny_model("labkit"), tokenizer, SamplingPolicy())
    context = [1, 504, 3575, 282]
    tokens, q = drafter.propose(context, 4)
    assert q is None and tokens == labkit.generate_ids(draft_model, tokenizer, context, max_new_tokens=4)
    # the target kept 2 drafts and chose its own token: the cache is cropped, and the proposal is still exact
    context2 = context + tokens[:2] + [42]
    again, _ = drafter.propose(context2, 3)
    assert again == labkit.generate_ids(draft_model, tokenizer, context2, max_new_tokens=3)
    assert drafter.sequence.ids == context2 + again[:2]  # kept across calls: only new tokens were fed


def test_model_drafter_sampling_returns_the_policy_distributions(tokenizer):
    draft_model = labkit.tiny_model("labkit", seed=1)
    config = DecodingConfig(temperature=0.5, top_k=3)
    policy = SamplingPolicy(config.transforms(4), 0.5, torch.Generator().manual_seed(0))
    drafter = ModelDrafter(draft_model)
    drafter.prepare(labkit.tiny_model("labkit"), tokenizer, policy)
    context = [1, 504, 3575, 282]
    tokens, q = drafter.propose(context, 3)
    assert q.shape == (3, 49152) and torch.allclose(q.sum(-1), torch.ones(3))
    assert ((q > 0).sum(-1) == 3).all()  # top-k 3, applied to the draft as to the target
    with torch.no_grad():
        logits = draft_model(torch.tensor([context + tokens[:2]]))[0, 3:]
    assert torch.allclose(q, policy.probs(logits, context, tokens), atol=1e-5)
    assert all(q[i, t] > 0 for i, t in enumerate(tokens))


def test_model_drafter_needs_a_model():
    with pytest.raises(TypeError, match="model must be a causal LM"):
        ModelDrafter("HuggingFaceTB/SmolLM2-135M")
