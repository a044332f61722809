"""Notebook 04's diversity-vs-quality measurement: batched sampling and the independent judge."""

import math

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

import labkit
from labkit.core.forward import forward, prefill
from labkit.decoding.config import DecodingConfig
from labkit.decoding.judge import judge_bits_per_byte, sample_batch, summarize, until_eos
from labkit.viz.sampling import plot_diversity_quality

PROMPT = "Write a story."


@pytest.mark.parametrize("impl", ["labkit", "transformers"])
def test_batched_rows_equal_single_sequence_runs_with_the_same_seed(tokenizer, one_thread, impl):
    model = labkit.tiny_model(impl, seed=1)
    prompt_ids = tokenizer(PROMPT)["input_ids"]
    config = DecodingConfig(temperature=1.0, top_p=0.9, max_new_tokens=8)
    rows = sample_batch(model, tokenizer, prompt_ids, config, n=3, seed=5)
    singles = [
        labkit.generate_ids(model, tokenizer, prompt_ids, config=config.replace(seed=5 + i)) for i in range(3)
    ]
    assert rows == singles
    assert len({tuple(row) for row in rows}) > 1  # different seeds, different samples


def test_a_shared_prefill_is_cropped_back_and_reused(tokenizer, one_thread):
    model = labkit.tiny_model("transformers", seed=1)
    prompt_ids = tokenizer(PROMPT)["input_ids"]
    shared = prefill(model, torch.tensor([prompt_ids] * 2), max_length=len(prompt_ids) + 6)
    configs = [
        DecodingConfig(temperature=0.7, max_new_tokens=6),
        DecodingConfig(temperature=1.5, max_new_tokens=6),
    ]
    with_shared = [
        sample_batch(model, tokenizer, prompt_ids, c, n=2, seed=0, prefilled=shared) for c in configs
    ]
    assert with_shared == [sample_batch(model, tokenizer, prompt_ids, c, n=2, seed=0) for c in configs]


def test_sample_batch_checks_its_arguments(tokenizer):
    model = labkit.tiny_model("labkit")
    with pytest.raises(ValueError, match="n must be a whole number of 1 or more, got 0"):
        sample_batch(model, tokenizer, [1, 2], DecodingConfig(temperature=1.0), n=0)
    with pytest.raises(ValueError, match="stop"):
        sample_batch(model, tokenizer, [1, 2], DecodingConfig(temperature=1.0, stop=["."]), n=2)
    assert until_eos([5, 6, 2, 7, 2], {2}) == [5, 6, 2]


def test_judge_score_equals_a_manual_forward_pass(tokenizer, one_thread):
    judge = labkit.tiny_model("transformers", seed=2)
    texts = ["Once upon a time", "The sea was calm tonight, and the lamp", "Once upon a time"]
    bits = judge_bits_per_byte(judge, tokenizer, PROMPT + "\n\n", texts)
    prompt = tokenizer(PROMPT + "\n\n")["input_ids"]
    for text, value in zip(texts, bits.tolist()):
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]
        logprobs = torch.log_softmax(
            forward(judge, torch.tensor([prompt + piece]))[0, len(prompt) - 1 : -1], dim=-1
        )
        nats = -logprobs.gather(-1, torch.tensor(piece)[:, None]).sum()
        assert value == pytest.approx(float(nats) / math.log(2) / len(text.encode()), rel=1e-4)
    assert bits[0] == bits[2]


def test_summary_and_plot():
    result = summarize("T=1", ["a b c", "a b d"], torch.tensor([1.0, 3.0]))
    assert result.distinct_2 == 0.75 and result.mean == 2.0 and result.median == 2.0
    assert result.low == pytest.approx(2.0 - 1.96 * math.sqrt(2) / math.sqrt(2))
    ax = plot_diversity_quality([result, summarize("greedy", ["a b c"] * 2, torch.tensor([0.5, 0.5]))])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "T=1: 2.00 bits/byte",
        "greedy: 0.50 bits/byte",
    ]
    assert ax.yaxis_inverted()


@pytest.mark.slow
def test_gemma_judge_matches_one_text_at_a_time(gemma3):
    judge, judge_tokenizer = gemma3
    texts = ["The keeper climbed the stairs.", "In a storm, the light went out and the ships"]
    together = judge_bits_per_byte(judge, judge_tokenizer, PROMPT + "\n\n", texts)
    alone = torch.cat([judge_bits_per_byte(judge, judge_tokenizer, PROMPT + "\n\n", [t]) for t in texts])
    assert torch.allclose(together, alone, rtol=1e-4)
    assert 0.1 < float(together.min()) < float(together.max()) < 10


def test_nudged_spreads_only_points_that_nearly_coincide():
    from labkit.viz.sampling import nudged

    assert nudged([0.5, 0.88, 0.885]) == [0.5, 0.8725, 0.8925]
    assert nudged([0.1, 0.5]) == [0.1, 0.5]
