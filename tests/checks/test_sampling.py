"""Notebook 04's checkers: labkit's own filter or distinct_n under another name is a miss, hints grow, and the
tail-share pass message reports the count without the interpretation the exercise asks for."""

import math

import pytest
import torch

from labkit import checks
from labkit.decoding import diversity, sampling
from labkit.decoding.request import Step

BORROWED = "does not count"


def top_k(logits, k):
    return logits.masked_fill(logits < logits.topk(k).values[..., -1:], -math.inf)


def top_p(logits, p):
    probs, order = torch.softmax(logits, -1).sort(-1, descending=True)
    remove = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, order, probs.cumsum(-1) - probs >= p)
    return logits.masked_fill(remove, -math.inf)


def own_distinct_n(texts, n):
    grams = [tuple(w[i : i + n]) for text in texts for w in [text.split()] for i in range(len(w) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


@pytest.mark.parametrize(
    "checker, own, labkit_version",
    [
        (checks.check_top_k_filter, top_k, sampling.top_k_filter),
        (checks.check_top_p_filter, top_p, sampling.top_p_filter),
        (checks.check_distinct_n, own_distinct_n, diversity.distinct_n),
    ],
)
def test_labkit_version_under_another_name_does_not_count(checker, own, labkit_version, capsys):
    assert checker(own)
    capsys.readouterr()
    renamed = labkit_version  # the same object under the student's name
    wrapped = lambda *args: labkit_version(*args)  # noqa: E731  a thin wrapper
    for borrowed in (renamed, wrapped):
        assert not checker(borrowed)
        assert BORROWED in capsys.readouterr().out


def test_top_k_first_miss_names_the_idea(capsys):
    def without_ties(logits, k):
        return torch.full_like(logits, -math.inf).scatter(-1, logits.topk(k).indices, logits.topk(k).values)

    assert not checks.check_top_k_filter(without_ties)
    first = capsys.readouterr().out
    assert not checks.check_top_k_filter(without_ties)
    assert "topk(k)" not in first and "topk(k)" in capsys.readouterr().out


def test_tail_share_pass_message_leaves_the_interpretation_to_the_student(capsys):
    logits = torch.tensor([0.4, 0.3, 0.15, 0.1, 0.03, 0.02]).log()  # top_p=0.9 cuts the last two
    steps = [Step(token, "", float(logits[token]), None, logits) for token in (0, 4, 1, 2)]
    assert checks.check_tail_share(0.25, steps, p=0.9)
    passed = capsys.readouterr().out
    for interpretation in ("as often as its mass", "almost surely", "Truncation removes", "held"):
        assert interpretation not in passed
    assert not checks.check_tail_share(0.6, steps, p=0.9)
    assert "step.token_id" not in capsys.readouterr().out  # the first miss names the idea, not the code
