"""The decoding lab's checkers (notebook 03): Exercise 1's problem is the checker's own, beam_step must be the
student's own, and Exercise 3's blocked hypothesis must be the one the search really finds."""

import math

import pytest
import torch

from labkit import checks
from labkit.checks.decoding import SEQUENCE_CONTINUATION, SEQUENCE_PROMPT, sequence_ids
from labkit.decoding import search
from labkit.decoding.scoring import continuation_logprob
from labkit.decoding.search import Hypothesis, beam_search

PROMPT = [1, 504, 3575]
CHANGED = "not the exercise's own"


def test_sequence_logprob_refuses_another_model(tiny_hf, capsys):
    """Exercise 1 is set on SmolLM2-135M: the tiny model's right answer, for the exercise's own ids, counts
    for nothing."""
    prompt, continuation = map(list, sequence_ids())
    right_for_tiny = continuation_logprob(tiny_hf, prompt, continuation)
    assert not checks.check_sequence_logprob(right_for_tiny, tiny_hf, prompt, continuation)
    out = capsys.readouterr().out
    assert f"model is {CHANGED}" in out and "under SmolLM2-135M as loaded at the top of" in out, out


@pytest.mark.slow
def test_sequence_logprob_is_the_exercises_own(smollm2, tokenizer, capsys):
    """The ids are the notebook's (SEQUENCE_PROMPT, SEQUENCE_CONTINUATION); the right answer for an empty
    continuation (0) or for another prompt counts for nothing."""
    model = smollm2[0]
    prompt = tokenizer(SEQUENCE_PROMPT)["input_ids"]
    continuation = tokenizer(SEQUENCE_CONTINUATION, add_special_tokens=False)["input_ids"]
    right = continuation_logprob(model, prompt, continuation)
    assert checks.check_sequence_logprob(right, model, prompt, continuation)
    assert checks.check_sequence_logprob(right, model, torch.tensor(prompt), tuple(continuation))
    capsys.readouterr()
    assert not checks.check_sequence_logprob(0.0, model, prompt, [])
    assert f"continuation_ids is {CHANGED}" in capsys.readouterr().out
    italy = tokenizer("The capital of Italy is")["input_ids"]
    rome = tokenizer(" Rome.", add_special_tokens=False)["input_ids"]
    assert not checks.check_sequence_logprob(continuation_logprob(model, italy, rome), model, italy, rome)
    assert f"prompt_ids, continuation_ids are {CHANGED}" in capsys.readouterr().out
    right_for_italy = continuation_logprob(model, italy, continuation)
    assert not checks.check_sequence_logprob(right_for_italy, model, italy, continuation)
    out = capsys.readouterr().out
    assert f"prompt_ids is {CHANGED}" in out and 'log p(" Paris." | "The capital of France is")' in out, out


def beam_step(scores, logprobs, k):
    totals = (scores[:, None] + logprobs).reshape(-1)
    best, index = totals.topk(k)
    return index // logprobs.shape[1], index % logprobs.shape[1], best


def test_beam_step_of_labkit_does_not_count(capsys):
    assert checks.check_beam_step(beam_step)
    capsys.readouterr()
    for borrowed in (search.beam_step, lambda s, lp, k: search.beam_step(s, lp, k)):
        assert not checks.check_beam_step(borrowed)
        assert "does not count" in capsys.readouterr().out


def test_beam_step_hints_grow(capsys):
    def per_beam(scores, logprobs, k):  # the best token of each beam, not the k best pairs
        best, tokens = (scores[:, None] + logprobs).max(-1)
        return torch.arange(k), tokens, best

    assert not checks.check_beam_step(per_beam)
    first = capsys.readouterr().out
    assert not checks.check_beam_step(per_beam)
    second = capsys.readouterr().out
    assert "index // V" not in first and "index // V" in second


@pytest.fixture(scope="module")
def searches(tiny_hf, tokenizer):
    """The best hypotheses of the 4-beam, 30-token search of PROMPT, without and with repeats blocked."""
    return tuple(
        beam_search(tiny_hf, tokenizer, PROMPT, num_beams=4, max_new_tokens=30, **extra).best
        for extra in ({}, {"no_repeat_ngram_size": 3})
    )


def test_blocking_cost_accepts_only_the_real_blocked_search(tiny_hf, tokenizer, searches, capsys):
    looping, blocked = searches
    ratio = math.exp(looping.logprob - blocked.logprob)
    args = (tiny_hf, tokenizer, PROMPT)
    assert not checks.check_blocking_cost(None, looping, None, *args)
    assert "Not attempted" in capsys.readouterr().out
    assert checks.check_blocking_cost(ratio, looping, blocked, *args)
    assert "nats" in capsys.readouterr().out
    # an invented log-probability
    made_up = Hypothesis(blocked.token_ids, blocked.logprob - 3.0, blocked.score)
    for wrong in (made_up, looping, blocked.logprob):
        gap = looping.logprob - getattr(wrong, "logprob", wrong)
        assert not checks.check_blocking_cost(math.exp(gap), looping, wrong, *args)
        out = capsys.readouterr().out
        assert "search again" in out or "result.best" in out


def test_blocking_cost_checks_the_looping_search_too(tiny_hf, tokenizer, searches, capsys):
    """A made-up looping text (the blocked one, or one with an invented log-probability) is refused: the
    checker runs the search without blocking again."""
    looping, blocked = searches
    args = (tiny_hf, tokenizer, PROMPT)
    assert not checks.check_blocking_cost(1.0, None, blocked, *args)
    assert "Not attempted" in capsys.readouterr().out
    invented = Hypothesis(looping.token_ids, looping.logprob + 2.0, looping.score)
    for wrong in (blocked, invented):
        assert not checks.check_blocking_cost(
            math.exp(wrong.logprob - blocked.logprob), wrong, blocked, *args
        )
        out = capsys.readouterr().out
        assert out.startswith("❌ Not yet: looping:") and "search again" in out, out


def test_blocking_cost_hints(tiny_hf, tokenizer, searches, capsys):
    looping, blocked = searches
    gap = looping.logprob - blocked.logprob
    args = (looping, blocked, tiny_hf, tokenizer, PROMPT)
    assert not checks.check_blocking_cost(gap, *args)
    assert "exponentiate" in capsys.readouterr().out
    assert not checks.check_blocking_cost(math.exp(-gap), *args)
    assert "other way round" in capsys.readouterr().out
    assert not checks.check_blocking_cost(math.exp(gap) + 5, *args)
    assert "exp" not in capsys.readouterr().out  # the first miss names the idea, not the formula
