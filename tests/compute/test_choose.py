"""Choosing one answer among n samples (notebook 14): the vote counts normalized answers, best-of-n follows
the mean log-probability, MBR the text most like the others, the oracle finds any right answer, and the
unbiased pass@k equals the share of k-subsets that hold a right sample."""

import itertools
import math

import pytest

from labkit.compute.choose import (
    CHOOSERS,
    Sample,
    best_of_n,
    mbr_choice,
    oracle,
    pass_at_k,
    self_consistency,
)


def sample(answer, logprob=-1.0, text=None):
    return Sample(text if text is not None else str(answer), answer, 2, logprob)


def test_self_consistency_votes_on_answers_and_breaks_ties_by_order():
    assert self_consistency([sample("54"), sample("55"), sample("55", text=" 55.")]) == "55"
    assert self_consistency([sample("9"), sample("10"), sample("10"), sample("9")]) == "9"
    assert self_consistency([sample(None, text="no idea"), sample("3")]) == "3"
    assert self_consistency([sample(None, text="no idea")]) is None


def test_best_of_n_keeps_the_most_likely_sample_per_token():
    assert best_of_n([sample("54", -1.0), sample("55", -0.2), sample("56", -3.0)]) == "55"
    # a sample of no tokens has no score
    assert best_of_n([sample("54", math.nan), sample("55", -5.0)]) == "55"
    assert best_of_n([sample("54", math.nan)]) == "54"


def test_mbr_keeps_the_text_most_like_the_others():
    assert mbr_choice([sample("7"), sample("55"), sample("55", text="55.")]) == "55"
    assert mbr_choice([sample("7")]) == "7"


def test_oracle_is_right_whenever_any_sample_is():
    samples = [sample("54"), sample("55")]
    assert oracle(samples, "55") == "55" and oracle(samples, "56") == "54"
    with pytest.raises(TypeError, match="answer"):
        oracle(samples, 55)


@pytest.mark.parametrize("n, c, k", [(16, 2, 1), (16, 2, 8), (6, 3, 2), (5, 0, 3), (5, 5, 1), (7, 4, 6)])
def test_pass_at_k_is_the_share_of_k_subsets_holding_a_right_sample(n, c, k):
    right = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(right, k))
    assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_the_choosers_are_listed_and_refuse_bad_samples():
    assert set(CHOOSERS.values()) == {self_consistency, best_of_n, mbr_choice}
    for choose in CHOOSERS.values():
        with pytest.raises(ValueError, match="at least one"):
            choose([])
        with pytest.raises(TypeError, match="list of Sample"):
            choose(sample("3"))
    with pytest.raises(ValueError, match="k must be"):
        pass_at_k(4, 1, 5)
