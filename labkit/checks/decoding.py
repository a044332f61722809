"""Exercise checkers for deterministic decoding, notebook 03 (see labkit/checks/foundation.py for the style).

beam_step must be the student's own (a call that reaches labkit's beam_step does not count), and the blocked
hypothesis of Exercise 3 is searched again by the checker, so only the real one passes.

    >>> checks.check_beam_step(my_beam_step)
    ✅ Correct: ...
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import torch

from labkit.checks.common import not_attempted, verdict
from labkit.checks.own_answer import refuse_own_answer
from labkit.checks.work import EXERCISE_MODEL, progressive, refuse_other_model, reset, run_own
from labkit.decoding import search
from labkit.decoding.scoring import continuation_logprob
from labkit.models.loading import load_tokenizer

__all__ = ["check_sequence_logprob", "check_beam_step", "check_blocking_cost"]
_SEARCHED: dict[tuple, object] = {}  # (model, prompt, options) -> the best hypothesis the checker found
# Exercise 1's problem: log p(SEQUENCE_CONTINUATION | SEQUENCE_PROMPT) under SmolLM2-135M
SEQUENCE_PROMPT, SEQUENCE_CONTINUATION = "The capital of France is", " Paris."


@cache
def sequence_ids() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(prompt ids, continuation ids) of Exercise 1, tokenized by SmolLM2's tokenizer as notebook 03 does."""
    tokenizer = load_tokenizer("smollm2-135m")
    prompt = tokenizer(SEQUENCE_PROMPT)["input_ids"]
    return tuple(prompt), tuple(tokenizer(SEQUENCE_CONTINUATION, add_special_tokens=False)["input_ids"])


def _token_ids(ids: object) -> object:
    """`ids` (a list, tuple or tensor of token ids) as a tuple of ints; as given when it is not token ids."""
    try:
        return tuple(int(i) for i in torch.as_tensor(ids).reshape(-1).tolist())
    except (TypeError, ValueError, RuntimeError):
        return ids


def check_sequence_logprob(
    answer: float | None, model: torch.nn.Module, prompt_ids: list[int], continuation_ids: list[int]
) -> bool:
    """Exercise (03): log p(continuation | prompt), summed over the continuation's tokens: the exercise's own
    SEQUENCE_CONTINUATION after SEQUENCE_PROMPT under SmolLM2-135M (another model or other ids are refused)."""
    if (refused := refuse_own_answer(answer, "check_sequence_logprob", ["continuation_logprob"])) is not None:
        return refused
    if answer is None:
        return not_attempted("the summed log-probability (a negative float)")
    prompt, continuation = sequence_ids()
    changed = refuse_other_model(
        model,
        problem=f'log p("{SEQUENCE_CONTINUATION}" | "{SEQUENCE_PROMPT}") under {EXERCISE_MODEL}',
        prompt_ids=(_token_ids(prompt_ids), prompt),
        continuation_ids=(_token_ids(continuation_ids), continuation),
    )
    if changed is not None:
        return changed
    expected = continuation_logprob(model, list(prompt), list(continuation))
    if abs(float(answer) - expected) < 1e-3 * max(1.0, abs(expected)):
        reset("sequence_logprob")
        return verdict(True, f"log p = {expected:.3f}, so p = {torch.tensor(expected).exp():.2e}.")
    if float(answer) > 0:
        return verdict(False, "a log-probability is never positive: use log_softmax, not the raw logits.")
    return verdict(
        False,
        f"{float(answer):.3f} is not it. "
        + progressive(
            "sequence_logprob",
            [
                "Score only the continuation's tokens, each given everything before it, and add their log-probabilities.",
                "The logits at position t score token t+1, so the first continuation token is scored by the prompt's "
                "last position.",
            ],
        ),
    )


def check_beam_step(function: Callable | None) -> bool:
    """Exercise (03): beam_step(scores [k], logprobs [k, V], k) -> (parents, tokens, new_scores), each [k],
    the k best (beam, token) extensions by summed log-probability, best first."""
    if function is None:
        return not_attempted("your function beam_step(scores, logprobs, k)")
    generator = torch.Generator().manual_seed(1)
    scores = torch.tensor([-1.0, -1.5, -4.0])
    logprobs = torch.log_softmax(torch.randn(3, 20, generator=generator) * 2, dim=-1)
    got, error = run_own(function, scores.clone(), logprobs.clone(), 3, references=[search.beam_step])
    if error:
        return verdict(False, error)
    totals = (scores[:, None] + logprobs).reshape(-1)
    best, index = totals.topk(3)
    expected = (index // 20, index % 20, best)
    try:
        parents, tokens, new_scores = (torch.as_tensor(x) for x in got)
    except (TypeError, ValueError):
        return verdict(False, "return three tensors: (parents, tokens, new_scores).")
    if not (torch.equal(parents.long(), expected[0]) and torch.equal(tokens.long(), expected[1])):
        return verdict(
            False,
            "not the right extensions. "
            + progressive(
                "beam_step",
                [
                    "Every (beam, token) pair is a candidate, scored by its beam's score plus the token's log-probability: "
                    "keep the k best of all of them together, not the best of each beam.",
                    "Add each beam's score to its row of logprobs, flatten to [k * V], take topk, then parent = index // V "
                    "and token = index % V.",
                ],
            ),
        )
    if not torch.allclose(new_scores.float(), expected[2], atol=1e-5):
        return verdict(False, "the right extensions, but the scores should be the summed log-probabilities.")
    reset("beam_step")
    return verdict(True, "one step of beam search: score every (beam, token), keep the k best.")


def _same_search(hypothesis, model: torch.nn.Module, tokenizer, prompt, **options) -> str | None:
    """None when `hypothesis` is the best of beam_search(model, tokenizer, prompt, **options), run again here;
    else what is wrong with it."""
    if not hasattr(hypothesis, "token_ids") or not hasattr(hypothesis, "logprob"):
        return f"give the search's best hypothesis (result.best), not a {type(hypothesis).__name__}."
    key = (id(model), repr(prompt), tuple(sorted(options.items())))
    if key not in _SEARCHED:  # a search takes seconds: run each once per session
        _SEARCHED[key] = search.beam_search(model, tokenizer, prompt, **options).best
    best = _SEARCHED[key]
    if tuple(hypothesis.token_ids) != tuple(best.token_ids) or abs(hypothesis.logprob - best.logprob) > 1e-3:
        settings = ", ".join(f"{name}={value}" for name, value in options.items())
        return (
            "the checker ran the search again and found another best hypothesis: run beam_search on the same "
            f"prompt with {settings}, and take its .best."
        )
    return None


def check_blocking_cost(
    answer: float | None, looping, blocked, model: torch.nn.Module, tokenizer, prompt
) -> bool:
    """Exercise (03): how many times more probable is the looping beam than the one with repeats blocked?
    looping / blocked: the best hypotheses of the 4-beam, 30-token search of `prompt` without and with
    no_repeat_ngram_size=3; the checker runs both searches again and accepts only their bests."""
    if blocked is None:
        return not_attempted("`blocked` with the best hypothesis of the search with no_repeat_ngram_size=3")
    if looping is None:
        return not_attempted("`looping` with the best hypothesis of the search without no_repeat_ngram_size")
    if answer is None:
        return not_attempted("how many times more probable the looping text is")
    for name, hypothesis, blocking in (
        ("looping", looping, {}),
        ("blocked", blocked, {"no_repeat_ngram_size": 3}),
    ):
        wrong = _same_search(hypothesis, model, tokenizer, prompt, num_beams=4, max_new_tokens=30, **blocking)
        if wrong:
            return verdict(False, f"{name}: {wrong}")
    gap = looping.logprob - blocked.logprob  # nats
    expected = math.exp(gap)
    if abs(answer - expected) <= 0.02 * expected:
        reset("blocking_cost")
        return verdict(True, f"{expected:.3g} times as probable ({gap:.2f} nats).")
    if abs(answer - gap) <= 0.02 * abs(gap) + 1e-3:
        return verdict(
            False,
            "that is the gap in log-probability (nats). A probability is e to the power of its "
            "log: exponentiate the gap.",
        )
    if abs(answer - 1 / expected) <= 0.02 / expected:
        return verdict(
            False,
            "that is the ratio the other way round: the looping text's probability over the blocked one's.",
        )
    return verdict(
        False,
        "not yet. "
        + progressive(
            "blocking_cost",
            [
                "Each hypothesis carries its summed log-probability: how does a log turn back into a probability?",
                "p = exp(log p), so the ratio of two probabilities is exp of the difference of their summed "
                "log-probabilities (.logprob).",
            ],
        ),
    )
