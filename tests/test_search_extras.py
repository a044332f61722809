"""Notebook 03's extras: the empty answer's probability, where two searches part, and the annotated beam tree."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from labkit.decoding.exact import (empty_answer_logprob, first_divergence, greedy_search,  # noqa: E402
                                   sequence_logprob, token_logprobs_of)
from labkit.decoding.search import beam_search  # noqa: E402
from labkit.viz.search import plot_beam_vs_greedy, split_summary, tree_positions  # noqa: E402

PROMPT = [1, 3, 5]


class DigitTokenizer:
    """A stand-in tokenizer for an 8-token vocabulary: token i is the digit i, 0 is EOS."""

    eos_token_id = 0

    def __len__(self):
        return 8

    def decode(self, ids, skip_special_tokens=False):
        return "".join(str(int(i)) for i in ids)


def toy_model(seed):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         bos_token_id=1, eos_token_id=0, pad_token_id=0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8)  # peaked distributions, so beam search and greedy can differ
    return model


def beam_beats_greedy():
    """A toy model, its greedy sequence and a beam search whose best sequence is more probable."""
    for seed in range(50):
        model = toy_model(seed)
        greedy = greedy_search(model, DigitTokenizer(), PROMPT, max_new_tokens=4)
        result = beam_search(model, DigitTokenizer(), PROMPT, num_beams=2, max_new_tokens=4, length_penalty=0.0)
        if result.best.logprob > greedy.logprob + 0.1 and len(greedy.token_ids) == 4:
            return model, greedy, result
    raise AssertionError("no toy model where beam search beats greedy")


def test_empty_answer_logprob_is_the_probability_of_eos_first():
    model, tokenizer = toy_model(0), DigitTokenizer()
    assert empty_answer_logprob(model, tokenizer, PROMPT) == pytest.approx(sequence_logprob(model, PROMPT, [0]))
    model.generation_config.eos_token_id = [0, 7]  # two EOS tokens: either one ends the answer
    both = math.log(math.exp(sequence_logprob(model, PROMPT, [0])) + math.exp(sequence_logprob(model, PROMPT, [7])))
    assert empty_answer_logprob(model, tokenizer, PROMPT) == pytest.approx(both, abs=1e-5)


def test_first_divergence_finds_the_step_and_scores_both_sequences():
    model = toy_model(1)
    first, second = (3, 4, 5, 0), (3, 6, 5)
    split = first_divergence(model, PROMPT, first, second)
    assert (split.step, split.first_token, split.second_token) == (2, 4, 6)
    assert split.first_logprob == pytest.approx(token_logprobs_of(model, PROMPT, first)[1])
    assert split.second_logprob == pytest.approx(sequence_logprob(model, PROMPT, [3, 6]) -
                                                 sequence_logprob(model, PROMPT, [3]), abs=1e-5)
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
