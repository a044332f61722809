"""Exercise checkers for deterministic decoding, notebook 03 (see labkit/checks/foundation.py for the style).

    >>> checks.check_beam_step(my_beam_step)
    ✅ Correct: ...
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from labkit.checks.common import not_attempted, run_student, verdict
from labkit.decoding.scoring import continuation_logprob

__all__ = ["check_sequence_logprob", "check_beam_step", "check_blocking_cost"]


def check_sequence_logprob(answer: float | None, model: torch.nn.Module, prompt_ids: list[int],
                           continuation_ids: list[int]) -> bool:
    """Exercise (03): log p(continuation | prompt), summed over the continuation's tokens."""
    if answer is None:
        return not_attempted("the summed log-probability (a negative float)")
    expected = continuation_logprob(model, prompt_ids, continuation_ids)
    if abs(float(answer) - expected) < 1e-3 * max(1.0, abs(expected)):
        return verdict(True, f"log p = {expected:.3f}, so p = {torch.tensor(expected).exp():.2e}.")
    if float(answer) > 0:
        return verdict(False, "a log-probability is never positive: use log_softmax, not the raw logits.")
    return verdict(False, f"{float(answer):.3f} is not it. Hint: the logits at position t score token t+1, so "
                           "the first continuation token is scored by the prompt's last position.")


def check_beam_step(function: Callable | None) -> bool:
    """Exercise (03): beam_step(scores [k], logprobs [k, V], k) -> (parents, tokens, new_scores), each [k],
    the k best (beam, token) extensions by summed log-probability, best first."""
    if function is None:
        return not_attempted("your function beam_step(scores, logprobs, k)")
    generator = torch.Generator().manual_seed(1)
    scores = torch.tensor([-1.0, -1.5, -4.0])
    logprobs = torch.log_softmax(torch.randn(3, 20, generator=generator) * 2, dim=-1)
    got, error = run_student(function, scores.clone(), logprobs.clone(), 3)
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
        return verdict(False, "not the right extensions. Hint: add each beam's score to its row of logprobs, "
                               "flatten to [k * V], take topk, then parent = index // V and token = index % V.")
    if not torch.allclose(new_scores.float(), expected[2], atol=1e-5):
        return verdict(False, "the right extensions, but the scores should be the summed log-probabilities.")
    return verdict(True, "one step of beam search: score every (beam, token), keep the k best.")


def _logprob(hypothesis) -> float | None:
    """A hypothesis's summed log-probability (its .logprob), or a float as given; None stays None."""
    return None if hypothesis is None else float(getattr(hypothesis, "logprob", hypothesis))


def check_blocking_cost(answer: float | None, looping, blocked) -> bool:
    """Exercise (03): how many times more probable is the looping beam than the one with repeats blocked?
    looping / blocked: their best hypotheses (or their summed log-probabilities)."""
    looping, blocked = _logprob(looping), _logprob(blocked)
    if blocked is None:
        return not_attempted("`blocked` with the best hypothesis of the search with no_repeat_ngram_size=3")
    if answer is None:
        return not_attempted("how many times more probable the looping text is")
    gap = looping - blocked  # nats
    expected = math.exp(gap)
    if abs(answer - expected) <= 0.02 * expected:
        return verdict(True, f"the loop is {expected:.3g} times as probable as the text without it "
                             f"({gap:.2f} nats): the model itself prefers the repeats. More probable is not better.")
    if abs(answer - gap) <= 0.02 * abs(gap) + 1e-3:
        return verdict(False, "that is the gap in log-probability (nats). A probability is e to the power of its "
                               "log: exponentiate the gap.")
    if abs(answer - 1 / expected) <= 0.02 / expected:
        return verdict(False, "that is the ratio the other way round: the looping text's probability over the "
                               "blocked one's.")
    return verdict(False, "not yet. p = exp(log p), so the ratio of two probabilities is exp of the difference of "
                           "their summed log-probabilities (.logprob).")
