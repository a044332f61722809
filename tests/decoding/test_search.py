"""Beam search against transformers' `generate(num_beams=k, do_sample=False)`, exact MAP, and notebook 03's
extras: the empty answer's probability, where two searches part, and the annotated beam tree."""

import itertools
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import labkit  # noqa: E402
from labkit.decoding.config import DecodingConfig  # noqa: E402
from labkit.decoding.exact import (  # noqa: E402
    empty_answer_logprob,
    exact_map,
    first_divergence,
    greedy_search,
    sequence_logprob,
    token_logprobs_of,
)
from labkit.decoding.search import beam_search  # noqa: E402
from labkit.viz.search import plot_beam_vs_greedy, split_summary, tree_positions  # noqa: E402


def hf_beams(model, prompt_ids, **kwargs):
    """transformers' n-best list: (generated ids up to and including EOS, score), best first."""
    input_ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        out = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=False,
            num_return_sequences=kwargs["num_beams"],
            output_scores=True,
            return_dict_in_generate=True,
            **kwargs,
        )
    eos = model.generation_config.eos_token_id
    rows = []
    for row, score in zip(out.sequences[:, len(prompt_ids) :].tolist(), out.sequences_scores.tolist()):
        rows.append((row[: row.index(eos) + 1] if eos in row else row, score))
    return rows


def assert_same_beams(result, expected):
    assert list(result.best.token_ids) == expected[0][0]  # the best sequence, token for token
    assert [list(h.token_ids) for h in result.hypotheses] == [ids for ids, _ in expected]  # the n-best list
    assert [h.score for h in result.hypotheses] == pytest.approx([s for _, s in expected], abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize(
    "question, num_beams",
    [
        ("What is the capital of France?", 2),
        ("Write a haiku about the sea.", 3),
        ("Give me three tips for learning to code.", 4),
    ],
)
def test_beam_search_equals_transformers_on_smollm2(smollm2, question, num_beams):
    model, tokenizer = smollm2
    prompt_ids = labkit.chat_prompt(tokenizer, question)
    result = beam_search(model, tokenizer, prompt_ids, num_beams=num_beams, max_new_tokens=12)
    assert_same_beams(result, hf_beams(model, prompt_ids, num_beams=num_beams, max_new_tokens=12))


@pytest.mark.slow
def test_beam_search_on_labkit_llama_equals_transformers(smollm2, smollm2_labkit):
    model, tokenizer = smollm2
    prompt_ids = tokenizer("The capital of France is")["input_ids"]
    result = beam_search(smollm2_labkit, tokenizer, prompt_ids, num_beams=3, max_new_tokens=10)
    expected = hf_beams(model, prompt_ids, num_beams=3, max_new_tokens=10)
    assert list(result.best.token_ids) == expected[0][0]


@pytest.mark.parametrize(
    "num_beams, length_penalty, early_stopping",
    [(2, 1.0, False), (3, 0.0, "never"), (3, 2.0, True), (4, -1.0, False), (3, 1.5, "never"), (5, 1.0, True)],
)
def test_beam_search_options_equal_transformers_on_a_tiny_model(
    tokenizer, num_beams, length_penalty, early_stopping
):
    model = eos_happy_tiny_model()
    prompt_ids = tokenizer("Hello there")["input_ids"]
    config = DecodingConfig(
        num_beams=num_beams, max_new_tokens=8, length_penalty=length_penalty, early_stopping=early_stopping
    )
    result = beam_search(model, tokenizer, prompt_ids, config=config)
    expected = hf_beams(
        model,
        prompt_ids,
        num_beams=num_beams,
        max_new_tokens=8,
        length_penalty=length_penalty,
        early_stopping=early_stopping,
    )
    assert_same_beams(result, expected)


def test_beam_search_with_penalties_and_no_cache_equals_transformers(tokenizer):
    model = eos_happy_tiny_model()
    prompt_ids = tokenizer("Hello there")["input_ids"]
    config = DecodingConfig(num_beams=3, max_new_tokens=8, repetition_penalty=1.5, no_repeat_ngram_size=2)
    expected = hf_beams(
        model,
        prompt_ids,
        **{k: v for k, v in config.hf_kwargs().items() if k not in ("do_sample", "num_return_sequences")},
    )
    assert_same_beams(beam_search(model, tokenizer, prompt_ids, config=config), expected)
    assert_same_beams(beam_search(model, tokenizer, prompt_ids, config=config, use_cache=False), expected)
    labkit_model = labkit.Llama.from_hf(model)
    assert_same_beams(beam_search(labkit_model, tokenizer, prompt_ids, config=config), expected)


def eos_happy_tiny_model():
    """The tiny random model, with the EOS logit raised so that beams finish at different lengths."""
    model = labkit.tiny_model("transformers", seed=3)
    with torch.no_grad():
        model.lm_head.weight[model.generation_config.eos_token_id or 2] *= 40
    model.generation_config.eos_token_id = model.generation_config.eos_token_id or 2
    return model


def test_beam_tree_records_every_step_and_the_best_path(tokenizer):
    model = eos_happy_tiny_model()
    result = beam_search(
        model, tokenizer, tokenizer("Hello there")["input_ids"], num_beams=3, max_new_tokens=6
    )
    assert all(len(step) == 6 for step in result.steps)  # 2 x num_beams candidates per step
    assert all(sum(c.status == "running" for c in step) <= 3 for step in result.steps)
    finished = [c for step in result.steps for c in step if c.status == "finished"]
    assert len(finished) >= len(result.hypotheses)
    assert result.hypotheses == sorted(result.hypotheses, key=lambda h: -h.score)


def test_generate_with_num_beams_yields_the_best_beam(tokenizer):
    model = eos_happy_tiny_model()
    prompt_ids = tokenizer("Hello there")["input_ids"]
    steps = list(
        labkit.generate(model, tokenizer, prompt_ids, config=DecodingConfig(num_beams=3, max_new_tokens=8))
    )
    best = beam_search(model, tokenizer, prompt_ids, num_beams=3, max_new_tokens=8).best
    assert [s.token_id for s in steps] == list(best.token_ids)
    assert steps[-1].finish_reason in ("eos", "length")


# --- exact MAP -----------------------------------------------------------------------------------


class DigitTokenizer:
    """A stand-in tokenizer for an 8-token vocabulary: token i is the digit i, 0 is EOS."""

    eos_token_id = 0

    def __len__(self):
        return 8

    def decode(self, ids, skip_special_tokens=False):
        return "".join(str(int(i)) for i in ids)


def toy_model(seed):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=8,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=0,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8)  # peaked distributions, so beam search and the mode can differ
    return model


def brute_force_map(model, prompt, horizon):
    """Every sequence that ends with EOS within the horizon or has exactly horizon tokens."""
    complete = []
    for length in range(1, horizon + 1):
        for tokens in itertools.product(range(1, 8), repeat=length - 1):
            complete.append(tokens + (0,))
    complete += list(itertools.product(range(1, 8), repeat=horizon))
    scored = [(sequence_logprob(model, prompt, list(t)), t) for t in complete]
    return max(scored)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_map_finds_the_most_probable_sequence(seed):
    model, tokenizer = toy_model(seed), DigitTokenizer()
    prompt = [1, 3, 5]
    result = exact_map(model, tokenizer, prompt, horizon=3)
    logprob, tokens = brute_force_map(model, prompt, 3)
    assert result.best.token_ids == tokens
    assert result.best.logprob == pytest.approx(logprob, abs=1e-4)
    assert result.best.logprob >= result.lower_bound.logprob - 1e-4  # never worse than greedy


def test_exact_map_beats_or_matches_beam_search_and_greedy(tokenizer):
    model, tok = toy_model(4), DigitTokenizer()
    prompt = [1, 2]
    best = exact_map(model, tok, prompt, horizon=4).best
    beams = beam_search(model, tok, prompt, num_beams=2, max_new_tokens=4, length_penalty=0.0)
    assert best.logprob >= beams.best.logprob - 1e-4
    assert best.logprob >= greedy_search(model, tok, prompt, max_new_tokens=4).logprob - 1e-4


def test_exact_map_gives_up_clearly():
    with pytest.raises(RuntimeError, match="max_expansions=1"):
        exact_map(toy_model(0), DigitTokenizer(), [1, 3, 5], horizon=3, max_expansions=1)
    with pytest.raises(ValueError, match="horizon must be a whole number of 1 or more, got 0"):
        exact_map(toy_model(0), DigitTokenizer(), [1], horizon=0)
    with pytest.raises(ValueError, match="max_expansions must be a whole number of 1 or more, got True"):
        exact_map(toy_model(0), DigitTokenizer(), [1], horizon=1, max_expansions=True)


# --- notebook 03's extras -------------------------------------------------------------------------

PROMPT = [1, 3, 5]


def beam_beats_greedy():
    """A toy model, its greedy sequence and a beam search whose best sequence is more probable."""
    for seed in range(50):
        model = toy_model(seed)
        greedy = greedy_search(model, DigitTokenizer(), PROMPT, max_new_tokens=4)
        result = beam_search(
            model, DigitTokenizer(), PROMPT, num_beams=2, max_new_tokens=4, length_penalty=0.0
        )
        if result.best.logprob > greedy.logprob + 0.1 and len(greedy.token_ids) == 4:
            return model, greedy, result
    raise AssertionError("no toy model where beam search beats greedy")


def test_empty_answer_logprob_is_the_probability_of_eos_first():
    model, tokenizer = toy_model(0), DigitTokenizer()
    assert empty_answer_logprob(model, tokenizer, PROMPT) == pytest.approx(
        sequence_logprob(model, PROMPT, [0])
    )
    model.generation_config.eos_token_id = [0, 7]  # two EOS tokens: either one ends the answer
    both = math.log(
        math.exp(sequence_logprob(model, PROMPT, [0])) + math.exp(sequence_logprob(model, PROMPT, [7]))
    )
    assert empty_answer_logprob(model, tokenizer, PROMPT) == pytest.approx(both, abs=1e-5)


def test_first_divergence_finds_the_step_and_scores_both_sequences():
    model = toy_model(1)
    first, second = (3, 4, 5, 0), (3, 6, 5)
    split = first_divergence(model, PROMPT, first, second)
    assert (split.step, split.first_token, split.second_token) == (2, 4, 6)
    assert split.first_logprob == pytest.approx(token_logprobs_of(model, PROMPT, first)[1])
    assert split.second_logprob == pytest.approx(
        sequence_logprob(model, PROMPT, [3, 6]) - sequence_logprob(model, PROMPT, [3]), abs=1e-5
    )
    assert split.first_total == pytest.approx(sequence_logprob(model, PROMPT, first), abs=1e-5)
    assert split.second_total == pytest.approx(sequence_logprob(model, PROMPT, second), abs=1e-5)
    with pytest.raises(ValueError, match="never differ"):
        first_divergence(model, PROMPT, (3, 4), (3, 4, 5))


def test_tree_positions_hold_every_prefix_of_the_best_sequence():
    model, greedy, result = beam_beats_greedy()
    where = tree_positions(result)
    best = result.best.token_ids
    assert [where[tuple(best[:t])][0] for t in range(1, len(best) + 1)] == list(range(1, len(best) + 1))
    assert len(where) == sum(len(step) for step in result.steps)


def test_plot_beam_vs_greedy_marks_the_split_and_writes_both_totals():
    model, greedy, result = beam_beats_greedy()
    split = first_divergence(model, PROMPT, greedy.token_ids, result.best.token_ids)
    assert split.second_total > split.first_total
    assert split.first_logprob >= split.second_logprob  # greedy's token was the argmax where they part
    ax = plot_beam_vs_greedy(result, DigitTokenizer(), greedy.token_ids, split)
    label = ax.get_xlabel()
    assert label == split_summary(split, DigitTokenizer(), len(greedy.token_ids))
    assert f"step {split.step}:" in label and "(beam is more probable)" in label
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend[:3] == ["running", "finished", "pruned"] and "greedy's path" in legend
    plt.close(ax.figure)
