"""Exercise checkers for the decoding lab, notebooks 03-05 (see labkit/checks/foundation.py for the style).

    >>> checks.check_top_k_filter(my_top_k)
    ✅ Correct: your top-k matches labkit.decoding.sampling.top_k_filter (ties included).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from labkit.checks.common import not_attempted, verdict
from labkit.decoding.diversity import distinct_n
from labkit.decoding.mbr import mbr_select
from labkit.decoding.mirostat import mirostat_update
from labkit.decoding.sampling import top_k_filter, top_p_filter
from labkit.decoding.scoring import continuation_logprob

__all__ = [
    "check_top_k_filter", "check_top_p_filter", "check_sequence_logprob", "check_beam_step",
    "check_distinct_n", "check_mirostat_update", "check_mbr_pick",
]


def _test_logits() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ties = torch.tensor([[3.0, 1.0, 3.0, 2.0, 2.0, 2.0, 0.0, -1.0]])
    return [torch.randn(2, 50, generator=generator) * 2, ties]


def _run(function: Callable, *args):
    """(result, None) or (None, a message saying what went wrong)."""
    try:
        return function(*args), None
    except Exception as error:  # a student's function may fail in any way; report it, never raise
        return None, f"calling it raised {type(error).__name__}: {error}"


def check_top_k_filter(function: Callable | None) -> bool:
    """Exercise (04): top_k(logits [B, V], k) -> logits with all but the k highest set to -inf."""
    if function is None:
        return not_attempted("your function top_k(logits, k)")
    for logits in _test_logits():
        for k in (1, 3, 5):
            got, error = _run(function, logits.clone(), k)
            if error:
                return verdict(False, error)
            expected = top_k_filter(logits, k)
            if not isinstance(got, torch.Tensor) or got.shape != logits.shape:
                return verdict(False, f"return a tensor of the same shape as the logits {tuple(logits.shape)}.")
            if not torch.equal(torch.isfinite(got), torch.isfinite(expected)):
                n_kept, n_right = int(torch.isfinite(got).sum()), int(torch.isfinite(expected).sum())
                which = (f"the logits {logits.tolist()}" if logits.numel() <= 10 else
                         f"random logits of shape {tuple(logits.shape)}")
                how = ("too few: a token tied with the k-th largest logit stays too" if n_kept < n_right else
                       "too many: only the k largest logits (and ties with the k-th) stay" if n_kept > n_right else
                       "the right number of tokens, but not the largest ones")
                return verdict(False, f"with k={k} on {which}, you keep {how}. Hint: compare with the k-th "
                                       "largest value (logits.topk(k).values[..., -1:]), so ties with it stay.")
            if not torch.equal(got[torch.isfinite(got)], logits[torch.isfinite(got)]):
                return verdict(False, "the kept logits changed: a filter only masks, it never rescales.")
    return verdict(True, "your top-k matches labkit.decoding.sampling.top_k_filter (ties included).")


def check_top_p_filter(function: Callable | None) -> bool:
    """Exercise (04): top_p(logits [B, V], p) -> logits with only the smallest head of mass >= p kept."""
    if function is None:
        return not_attempted("your function top_p(logits, p)")
    for logits in _test_logits()[:1]:
        for p in (0.1, 0.5, 0.9):
            got, error = _run(function, logits.clone(), p)
            if error:
                return verdict(False, error)
            if not isinstance(got, torch.Tensor) or got.shape != logits.shape:
                return verdict(False, f"return a tensor of the same shape as the logits {tuple(logits.shape)}.")
            expected = torch.isfinite(top_p_filter(logits, p))
            kept = torch.isfinite(got)
            if not torch.equal(kept, expected):
                mass = float(torch.softmax(logits, -1)[kept].sum() / logits.shape[0])
                return verdict(False, f"with p={p} your kept set holds {mass:.2f} of the mass per row on average. "
                                       "Keep the most likely tokens until their cumulative probability first "
                                       "reaches p, including the token that crosses p.")
    return verdict(True, "your nucleus matches labkit.decoding.sampling.top_p_filter.")


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
    got, error = _run(function, scores.clone(), logprobs.clone(), 3)
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


def check_distinct_n(function: Callable | None) -> bool:
    """Exercise (04): distinct_n(texts, n) -> unique word n-grams / all word n-grams, pooled."""
    if function is None:
        return not_attempted("your function distinct_n(texts, n)")
    cases = [(["a b a b", "a b c"], 2), (["the cat sat on the mat"], 1), (["x y z", "x y z"], 3)]
    for texts, n in cases:
        got, error = _run(function, texts, n)
        if error:
            return verdict(False, error)
        expected = distinct_n(texts, n)
        if not isinstance(got, (int, float)) or abs(got - expected) > 1e-9:
            per_text = sum(distinct_n([text], n) for text in texts) / len(texts)
            how = ("that is the mean of each text's own ratio" if isinstance(got, (int, float)) and
                   abs(got - per_text) < 1e-9 else "that is not unique / all")
            return verdict(False, f"distinct_n({texts!r}, {n}) gave {got!r}: {how}. Pool the word n-grams of all "
                                   "texts first, then divide the number of unique ones by the number of all.")
    return verdict(True, "distinct-n measures how rarely phrases repeat.")


def check_mirostat_update(function: Callable | None) -> bool:
    """Exercise (05): update(mu, surprise, tau, eta) -> the next mu."""
    if function is None:
        return not_attempted("your function update(mu, surprise, tau, eta)")
    for args in [(6.0, 8.0, 3.0, 0.1), (6.0, 1.0, 3.0, 0.5), (2.0, 2.0, 2.0, 1.0)]:
        got, error = _run(function, *args)
        if error:
            return verdict(False, error)
        expected = mirostat_update(*args)
        if not isinstance(got, (int, float)) or abs(got - expected) > 1e-9:
            mu, surprise, tau, _ = args
            wrong_way = isinstance(got, (int, float)) and (got - mu) * (surprise - tau) > 0
            how = "mu moved the wrong way" if wrong_way else "not the controller's step"
            return verdict(False, f"update{args} gave {got!r}: {how}. mu moves by eta times the error "
                                   "(surprise - tau), against it: a token more surprising than tau must *lower* mu, "
                                   "so fewer surprising tokens pass next time.")
    return verdict(True, "mu moves against the surprise error, a feedback controller.")


def check_mbr_pick(answer: int | None, candidates: list[str]) -> bool:
    """Exercise (05): the index MBR with chrF picks among candidates."""
    if answer is None:
        return not_attempted("the index (0, 1 or 2) of the candidate with the highest mean chrF to the others")
    expected, means = mbr_select(candidates, "chrf")
    if answer == expected:
        return verdict(True, f"{candidates[expected]!r} agrees most with the others (mean chrF {means[expected]:.1f}).")
    if isinstance(answer, int) and 0 <= answer < len(candidates):
        return verdict(False, f"candidate {answer} has mean chrF {means[answer]:.1f}; another one scores higher. "
                               "Average chrf(candidate, other) over the *other* candidates only.")
    return verdict(False, f"give an index between 0 and {len(candidates) - 1}, got {answer!r}.")
