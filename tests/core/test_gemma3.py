"""labkit's from-scratch Gemma-3 gives transformers' logits on the same weights: on a tiny random model whose
window (4 keys) the sequences outrun, and on the real Gemma-3-270M; its KV-cached decode equals its full
forward past the window; and greedy generation through labkit's loop equals transformers' `generate`."""

import dataclasses

import pytest
import torch
from transformers import Gemma3ForCausalLM

import labkit
from labkit.core.attention import sliding_window_mask, window_columns
from labkit.core.forward import decode_step, prefill
from labkit.core.gemma3 import Gemma3, Gemma3Config
from labkit.core.gemma3_config import check_supported
from labkit.core.paged import BlockPool

from .conftest import GEMMA3_VOCAB, random_ids

# Tiny random weights give logits of order 1; the two implementations differ only in summation order
# (measured below 1e-6), so 1e-5 leaves room without hiding a wrong mask, position or norm.
TINY_ATOL = 1e-5
# fp32 logits of Gemma-3-270M reach about |32|; the tolerance of SmolLM2's parity (tests/core/test_llama.py).
# Measured: 0.0 (both run the same float32 operations in the same order on this prompt).
REAL_MODEL_ATOL = 1e-3
# bfloat16: both run the same operations, RoPE tables rounded to bfloat16 as transformers does (measured:
# 0.0); 0.5 is a few bfloat16 steps of logits this large (0.125 to 0.25 each), room for one kernel that
# rounds differently.
BF16_ATOL = 0.5
SEQUENCE = 12  # three times the tiny window of 4 keys
# Greedy tokens are compared only where every step's top-2 margin is far above the parity noise:
# on this prompt the smallest of the 16 margins is 0.22 (float32, the dequantized Q4_K_M weights).
GREEDY_PROMPT = "def fibonacci(n):"
GREEDY_TOKENS = 16
MIN_MARGIN = 0.1

# One torch thread: the tiny model's steps are millisecond-sized ops (6x slower handed between two threads
# on a busy 2-core machine), and there the real model's test was faster on one too (5 s against 12 s).
pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_pair(seed: int = 0, **changes) -> tuple[Gemma3, Gemma3ForCausalLM]:
    """(labkit's Gemma3, transformers' Gemma3ForCausalLM with eager attention) on one set of random weights
    of `Gemma3Config.tiny()` with `changes`. Every norm weight is random too, not transformers' zeros, so a
    norm that scaled by weight instead of (1 + weight) would show."""
    config = dataclasses.replace(Gemma3Config.tiny(), **changes)
    torch.manual_seed(seed)
    hf = Gemma3ForCausalLM(config.to_hf()).eval()
    hf.set_attn_implementation("eager")
    with torch.no_grad():
        for name, weight in hf.named_parameters():
            if name.endswith("norm.weight"):
                weight.normal_(0.0, 0.5)
    return Gemma3.from_hf(hf), hf


def max_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    return (a - b).abs().max().item()


@pytest.fixture(scope="module")
def tiny_gemma():
    return tiny_pair()


def test_tiny_matches_transformers_past_the_window(tiny_gemma):
    model, hf = tiny_gemma
    assert model.config.sliding_window == 4 and [block.self_attn.sliding for block in model.layers] == [
        True,
        True,
        False,
    ]
    ids = random_ids(2, SEQUENCE, seed=1, vocab=GEMMA3_VOCAB)
    with torch.no_grad():
        logits, expected = model(ids), hf(ids).logits
    assert logits.dtype == torch.float32 and logits.shape == (2, SEQUENCE, GEMMA3_VOCAB)
    assert max_difference(logits, expected) < TINY_ATOL


def test_the_window_hides_the_old_keys_of_the_local_layers(tiny_gemma):
    """The same weights with a window wider than the sequence: equal logits while every key is inside the
    window of 4, different ones after (so the parity above rests on the window)."""
    model, _ = tiny_gemma
    wide = Gemma3(dataclasses.replace(model.config, sliding_window=64))
    wide.load_state_dict(model.state_dict())
    ids = random_ids(1, SEQUENCE, seed=1, vocab=GEMMA3_VOCAB)
    with torch.no_grad():
        narrow_logits, wide_logits = model(ids)[0], wide(ids)[0]
    assert max_difference(narrow_logits[:4], wide_logits[:4]) < TINY_ATOL
    assert (narrow_logits[4:] - wide_logits[4:]).abs().amax(-1).min() > 100 * TINY_ATOL


def test_final_logit_softcapping_matches_transformers():
    model, hf = tiny_pair(seed=2, final_logit_softcapping=0.5)
    ids = random_ids(1, SEQUENCE, seed=3, vocab=GEMMA3_VOCAB)
    with torch.no_grad():
        logits, expected = model(ids), hf(ids).logits
    assert logits.abs().max() < 0.5
    assert max_difference(logits, expected) < TINY_ATOL


@pytest.mark.parametrize("cache_kind", ["kv", "paged"])
def test_prefill_then_decode_equals_the_full_forward_past_the_window(tiny_gemma, cache_kind):
    """labkit's incremental path (forward.prefill, then decode_step one token at a time) through the
    contiguous and the paged KV cache: 3 prompt tokens, then 9 steps, 8 of them past the window."""
    model, _ = tiny_gemma
    ids = random_ids(2, SEQUENCE, seed=4, vocab=GEMMA3_VOCAB)
    with torch.no_grad():
        full = model(ids)
    if cache_kind == "kv":
        cache = model.new_cache(batch_size=2, max_length=SEQUENCE)
    else:
        cache = BlockPool.for_model(model, n_blocks=8, block_size=4).new_cache(batch_size=2)
    logits, cache = prefill(model, ids[:, :3], cache)
    steps = [logits] + [decode_step(model, ids[:, position], cache) for position in range(3, SEQUENCE - 1)]
    assert cache.length == SEQUENCE - 1
    assert max_difference(torch.stack(steps, dim=1), full[:, 2 : SEQUENCE - 1]) < TINY_ATOL


def test_a_prompt_after_a_cached_prefix_sees_the_same_window(tiny_gemma):
    """Two prefills of 5 and 7 tokens on one cache: the second's local layers hide the first's old keys."""
    model, _ = tiny_gemma
    ids = random_ids(1, SEQUENCE, seed=5, vocab=GEMMA3_VOCAB)
    cache = model.new_cache(max_length=SEQUENCE)
    with torch.no_grad():
        pieces = torch.cat([model(ids[:, :5], cache), model(ids[:, 5:], cache)], dim=1)
        assert max_difference(pieces, model(ids)) < TINY_ATOL


def test_a_decode_steps_local_layers_read_only_the_keys_their_window_sees(tiny_gemma, monkeypatch):
    """After 10 cached tokens, a step's local layers attend over the window's 4 keys, the global one over all
    11; a prefill chunk of 3 after them over 3 + 4 - 1 = 6. The logits stay the full forward's."""
    import labkit.core.gemma3_layers as layers

    model, _ = tiny_gemma
    ids = random_ids(1, 14, seed=6, vocab=GEMMA3_VOCAB)
    read = []
    attend = layers.attention
    monkeypatch.setattr(
        layers, "attention", lambda q, k, v, *rest: read.append(k.shape[-2]) or attend(q, k, v, *rest)
    )
    cache = model.new_cache(max_length=14)
    kinds = [model.config.is_sliding(i) for i in range(model.config.n_layers)]
    with torch.no_grad():
        model(ids[:, :10], cache)
        read.clear()
        step = model(ids[:, 10:11], cache)
        assert read == [4 if local else 11 for local in kinds]
        read.clear()
        chunk = model(ids[:, 11:], cache)
        assert read == [6 if local else 14 for local in kinds]
        full = model(ids)
    assert max_difference(torch.cat([step, chunk], dim=1), full[:, 10:]) < TINY_ATOL


def test_window_columns_are_the_last_keys_any_query_of_the_step_sees():
    for new, total, window in [(1, 8192, 512), (3, 6, 2), (5, 5, 4), (1, 3, 512)]:
        mask = sliding_window_mask(new, total, window, torch.device("cpu"))
        seen = (mask == 0).any(dim=0).nonzero().flatten()
        assert window_columns(new, total, window) == slice(seen.min().item(), None)


def test_sliding_window_mask_keeps_the_last_window_keys():
    mask = sliding_window_mask(3, 6, window=2, device=torch.device("cpu"))  # queries at positions 3, 4, 5
    seen = (mask == 0).int().tolist()
    assert seen == [[0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 1, 1]]


def test_what_labkit_does_not_build_is_refused_by_name():
    hf_config = Gemma3Config.tiny().to_hf()
    hf_config.attn_logit_softcapping = 50.0
    hf_config.rope_parameters["full_attention"] = {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}
    with pytest.raises(ValueError, match="'linear'.*soft-capped attention scores.*impl='transformers'"):
        check_supported(hf_config)
    with pytest.raises(ValueError, match="layer_types must be a tuple of n_layers=2 names"):
        Gemma3Config(n_layers=2)


# --- the real Gemma-3-270M ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_gemma3_270m_logits_match_transformers(gemma3):
    hf, tokenizer = gemma3
    model = Gemma3.from_hf(hf)
    assert list(model.config.layer_types) == hf.config.layer_types and model.config.sliding_window == 512
    ids = torch.tensor([tokenizer(GREEDY_PROMPT)["input_ids"]])
    with torch.no_grad():
        logits, expected = model(ids), hf(ids).logits.float()
    assert logits.shape == expected.shape == (1, ids.shape[1], GEMMA3_VOCAB)
    assert max_difference(logits, expected) < REAL_MODEL_ATOL
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))


@pytest.mark.slow
def test_gemma3_270m_bfloat16_logits_match_transformers():
    hf, tokenizer = labkit.load_model("gemma3-270m", dtype="bfloat16")
    model = Gemma3.from_hf(hf)
    assert model.embed_tokens.weight.dtype == torch.bfloat16
    ids = torch.tensor([tokenizer(GREEDY_PROMPT)["input_ids"]])
    with torch.no_grad():
        assert max_difference(model(ids), hf(ids).logits.float()) < BF16_ATOL


@pytest.mark.slow
def test_load_model_labkit_gemma3_generates_what_transformers_generates(gemma3):
    """load_model(impl='labkit') builds labkit's Gemma3; labkit's greedy loop (prefill, then decode_step
    on its KV cache) gives transformers' `generate(do_sample=False)` tokens, at margins that no parity
    noise could flip."""
    hf, tokenizer = gemma3
    model, _ = labkit.load_model("gemma3-270m", impl="labkit")
    assert isinstance(model, labkit.Gemma3)
    ids = torch.tensor([tokenizer(GREEDY_PROMPT)["input_ids"]])
    steps = list(labkit.generate(model, tokenizer, ids, max_new_tokens=GREEDY_TOKENS, return_logits=True))
    top2 = torch.stack([step.logits for step in steps]).topk(2, dim=-1).values
    assert (top2[:, 0] - top2[:, 1]).min() > MIN_MARGIN
    with torch.no_grad():
        expected = hf.generate(ids, do_sample=False, max_new_tokens=GREEDY_TOKENS)[0, ids.shape[1] :]
    assert len(steps) == GREEDY_TOKENS
    assert [step.token_id for step in steps] == expected.tolist()
