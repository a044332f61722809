"""Mirostat, MBR and its similarity measures, the decoding plots and widget, the decoding checkers."""

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

import labkit
from labkit import checks
from labkit.decoding.diversity import distinct_n, greedy_repetition, repeated_ngram_fraction
from labkit.decoding.mbr import chrf, mbr_decode, mbr_select, token_f1
from labkit.decoding.mirostat import (
    mirostat_generate,
    mirostat_update,
    mirostat_v1_filter,
    mirostat_v1_k,
    mirostat_v2_filter,
    zipf_exponent,
)
from labkit.decoding.sampling import top_p_filter
from labkit.decoding.search import beam_search
from labkit.viz import plots, widgets
from labkit.viz.search import plot_beam_tree


def test_mirostat_v2_filter_cuts_tokens_above_mu_bits():
    probs = torch.tensor([[0.5, 0.25, 0.125, 0.125]])
    kept = torch.isfinite(mirostat_v2_filter(probs.log(), mu=2.0))
    assert kept.tolist() == [[True, True, False, False]]  # surprises 1, 2, 3, 3 bits
    assert torch.isfinite(mirostat_v2_filter(probs.log(), mu=0.1)).sum() == 1  # the top token always stays


def test_mirostat_update_moves_mu_against_the_error():
    assert mirostat_update(6.0, surprise=8.0, tau=3.0, eta=0.1) == pytest.approx(5.5)
    assert mirostat_update(6.0, surprise=1.0, tau=3.0, eta=0.1) == pytest.approx(6.2)


def test_zipf_fit_recovers_the_exponent_and_v1_keeps_k_tokens():
    ranks = torch.arange(1, 1001, dtype=torch.float64)
    probs = ranks**-1.2
    probs = (probs / probs.sum()).float()
    assert zipf_exponent(probs) == pytest.approx(1.2, abs=1e-3)
    k = mirostat_v1_k(probs, mu=4.0)
    assert torch.isfinite(mirostat_v1_filter(probs.log()[None], mu=4.0)).sum() == k >= 1


@pytest.mark.slow
def test_mirostat_holds_the_surprise_near_tau(smollm2):
    model, tokenizer = smollm2
    prompt = labkit.chat_prompt(tokenizer, "Write a short story about a robot.")
    means = []
    for tau in (1.0, 2.0):
        run = mirostat_generate(model, tokenizer, prompt, tau=tau, eta=0.2, max_new_tokens=40, seed=0)
        tail = run.surprises[8:]
        means.append(sum(tail) / len(tail))
        assert abs(means[-1] - tau) < 1.0, (tau, run.surprises)
        assert run.steps[0].mu == 2 * tau
    assert means[0] < means[1]  # a higher target gives more surprising text


def test_mirostat_is_seeded_and_checks_its_arguments(tokenizer):
    model = labkit.tiny_model("labkit")
    first = mirostat_generate(model, tokenizer, "Hi", tau=8.0, max_new_tokens=10, seed=1, version=1)
    assert (
        first.token_ids
        == mirostat_generate(model, tokenizer, "Hi", tau=8.0, max_new_tokens=10, seed=1, version=1).token_ids
    )
    assert len(first.steps) == 10 and all(s.kept >= 1 for s in first.steps)
    with pytest.raises(ValueError, match="tau must be a target surprise in bits > 0"):
        mirostat_generate(model, tokenizer, "Hi", tau=0.0)
    with pytest.raises(ValueError, match=r"eta must be a learning rate in \(0, 1\]"):
        mirostat_generate(model, tokenizer, "Hi", eta=2.0)


def test_chrf_and_token_f1():
    assert chrf("the cat sat", "the cat sat") == 100.0
    assert chrf("the cat sat", "thecatsat") == 100.0  # whitespace is ignored
    assert chrf("abc", "xyz") == 0.0
    assert 0 < chrf("the cat sat", "the cat sat down") < 100
    assert chrf("the cat", "the cat sat") < chrf("the cat sat", "the cat")  # recall weighs more (beta = 2)
    assert token_f1("a red car", "the red car") == pytest.approx(2 / 3)


def test_mbr_select_picks_the_consensus():
    index, expected = mbr_select(["The capital is Paris.", "Paris is the capital.", "Bananas are yellow."])
    assert index in (0, 1) and expected[2] < min(expected[:2])
    assert mbr_select(["a b", "a b", "c d"], similarity="token_f1")[0] == 0
    with pytest.raises(ValueError, match="at least 2 candidates"):
        mbr_select(["only one"])
    with pytest.raises(ValueError, match="Unknown similarity 'bleu'"):
        mbr_select(["a", "b"], similarity="bleu")


def test_mbr_decode_returns_one_of_its_seeded_samples(tokenizer):
    model = labkit.tiny_model("labkit")
    result = mbr_decode(model, tokenizer, "Hi", n_samples=3, max_new_tokens=6, seed=4)
    assert result.best == result.candidates[result.index] and len(result.candidates) == 3
    assert result == mbr_decode(model, tokenizer, "Hi", n_samples=3, max_new_tokens=6, seed=4)


def test_diversity_measures():
    assert distinct_n(["a b a b", "a b c"], 2) == pytest.approx(0.6)
    assert repeated_ngram_fraction([1, 2, 3, 4], 2) == 0.0
    assert repeated_ngram_fraction([7] * 10, 2) == pytest.approx(8 / 9)


def test_decoding_plots_draw(tokenizer):
    logits = torch.randn(49152, generator=torch.Generator().manual_seed(0))
    ax = plots.plot_kept_vs_cut(logits, top_p_filter(logits[None], 0.5)[0], tokenizer, top_k=8)
    assert "tokens kept" in ax.get_title()
    model = labkit.tiny_model("transformers", seed=3)
    result = beam_search(model, tokenizer, tokenizer("Hello")["input_ids"], num_beams=2, max_new_tokens=3)
    ax = plot_beam_tree(result, tokenizer)
    assert len(ax.get_xticklabels()) == 4
    ax = plots.plot_surprise({"run": [1.0, 2.0, 3.0]}, tau=2.0)
    assert len(ax.lines) == 2


def test_sampling_explorer_redraws_and_resamples(tokenizer):
    model = labkit.tiny_model("labkit")
    explorer = widgets.sampling_explorer(model, tokenizer, tokenizer("Hi")["input_ids"], max_new_tokens=5)
    first_text, first_chart = explorer.text.value, explorer.chart.value
    assert first_chart[:4] == b"\x89PNG" and first_text
    explorer.top_k.value = 1  # top-1 sampling is greedy
    greedy = labkit.generate_text(model, tokenizer, tokenizer("Hi")["input_ids"], max_new_tokens=5)
    assert explorer.chart.value != first_chart
    assert __import__("html").escape(greedy) in explorer.text.value
    explorer.temperature.value = 0.0
    assert not explorer.config.do_sample
    assert "run the notebook" in repr(explorer)


def own_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """A student's top-k filter, written out: keep the k largest logits of each row, mask the rest."""
    kth = logits.topk(min(k, logits.shape[-1]), dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def own_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """A student's nucleus filter: the smallest set of most likely tokens whose mass reaches p."""
    ordered, order = logits.sort(dim=-1, descending=True)
    before = ordered.softmax(-1).cumsum(-1) - ordered.softmax(-1)  # the mass of the tokens ranked above
    masked = ordered.masked_fill(before >= p, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, masked)


def own_distinct(texts: list[str], n: int) -> float:
    """A student's distinct-n: unique word n-grams over all of them, pooled over the texts (0 if none)."""
    grams = []
    for text in texts:
        words = text.split()
        grams += [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def test_decoding_checkers_pass_solutions_and_hint_on_mistakes(capsys):
    assert checks.check_top_k_filter(own_top_k) and not checks.check_top_k_filter(lambda x, k: x)
    assert checks.check_top_p_filter(own_top_p) and not checks.check_top_p_filter(lambda x, p: x)
    assert checks.check_distinct_n(own_distinct) and not checks.check_distinct_n(lambda t, n: 1.0)
    assert not checks.check_beam_step(lambda scores, logprobs, k: 1 / 0)
    assert not checks.check_top_k_filter(None)
    out = capsys.readouterr().out
    assert "Not attempted" in out and "ZeroDivisionError" in out and out.count("❌ Not yet") >= 4


def test_decoding_checkers_refuse_labkits_own_version(capsys):
    from labkit.decoding.sampling import top_k_filter

    assert not checks.check_top_k_filter(top_k_filter)
    assert not checks.check_top_p_filter(top_p_filter) and not checks.check_distinct_n(distinct_n)
    assert capsys.readouterr().out.count("does not count") == 3


def test_greedy_repetition_measures_the_greedy_continuation(tokenizer):
    model = labkit.tiny_model("labkit")
    prompt = tokenizer("Hello there")["input_ids"]
    steps = list(labkit.generate(model, tokenizer, prompt, max_new_tokens=12, return_logits=True))
    result = greedy_repetition(model, tokenizer, prompt, max_new_tokens=12)
    assert result.repeated_4grams == repeated_ngram_fraction([s.token_id for s in steps], 4)
    first = steps[0].logits.log_softmax(-1)
    assert 0 < result.mean_entropy <= torch.log(torch.tensor(float(first.shape[-1]))) + 1e-4
    assert result.ended == (steps[-1].finish_reason == "eos")
