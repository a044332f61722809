"""Exercise checkers for sampling, notebook 04 (see labkit/checks/foundation.py for the style; 05's are in
beyond.py). A function that calls labkit's own filter does not count.

    >>> checks.check_top_k_filter(my_top_k)
    ✅ Correct: your top-k matches labkit.decoding.sampling.top_k_filter (ties included).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from labkit.checks.common import not_attempted, read_number, verdict
from labkit.checks.work import progressive, reset, run_own
from labkit.decoding import diversity
from labkit.decoding.diversity import distinct_n
from labkit.decoding.sampling import top_k_filter, top_p_filter

__all__ = ["check_top_k_filter", "check_top_p_filter", "check_distinct_n", "check_tail_share"]


def _test_logits() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ties = torch.tensor([[3.0, 1.0, 3.0, 2.0, 2.0, 2.0, 0.0, -1.0]])
    return [torch.randn(2, 50, generator=generator) * 2, ties]


def check_top_k_filter(function: Callable | None) -> bool:
    """Exercise (04): top_k(logits [B, V], k) -> logits with all but the k highest set to -inf."""
    if function is None:
        return not_attempted("your function top_k(logits, k)")
    for logits in _test_logits():
        for k in (1, 3, 5):
            got, error = run_own(function, logits.clone(), k, references=[top_k_filter])
            if error:
                return verdict(False, error)
            expected = top_k_filter(logits, k)
            if not isinstance(got, torch.Tensor) or got.shape != logits.shape:
                return verdict(
                    False, f"return a tensor of the same shape as the logits {tuple(logits.shape)}."
                )
            if not torch.equal(torch.isfinite(got), torch.isfinite(expected)):
                n_kept, n_right = int(torch.isfinite(got).sum()), int(torch.isfinite(expected).sum())
                which = (
                    f"the logits {logits.tolist()}"
                    if logits.numel() <= 10
                    else f"random logits of shape {tuple(logits.shape)}"
                )
                how = (
                    "too few: a token tied with the k-th largest logit stays too"
                    if n_kept < n_right
                    else "too many: only the k largest logits (and ties with the k-th) stay"
                    if n_kept > n_right
                    else "the right number of tokens, but not the largest ones"
                )
                return verdict(
                    False,
                    f"with k={k} on {which}, you keep {how}. "
                    + progressive(
                        "top_k",
                        [
                            "Each row has a threshold: its k-th largest logit. What happens to a logit equal to it?",
                            "Compare with the k-th largest value (logits.topk(k).values[..., -1:]), so ties with it "
                            "stay.",
                        ],
                    ),
                )
            if not torch.equal(got[torch.isfinite(got)], logits[torch.isfinite(got)]):
                return verdict(False, "the kept logits changed: a filter only masks, it never rescales.")
    reset("top_k")
    return verdict(True, "your top-k matches labkit.decoding.sampling.top_k_filter (ties included).")


def check_top_p_filter(function: Callable | None) -> bool:
    """Exercise (04): top_p(logits [B, V], p) -> logits with only the smallest head of mass >= p kept."""
    if function is None:
        return not_attempted("your top-p function (logits, p) -> logits")
    for logits in _test_logits()[:1]:
        for p in (0.1, 0.5, 0.9):
            got, error = run_own(function, logits.clone(), p, references=[top_p_filter])
            if error:
                return verdict(False, error)
            if not isinstance(got, torch.Tensor) or got.shape != logits.shape:
                return verdict(
                    False, f"return a tensor of the same shape as the logits {tuple(logits.shape)}."
                )
            expected = torch.isfinite(top_p_filter(logits, p))
            kept = torch.isfinite(got)
            if not torch.equal(kept, expected):
                mass = float(torch.softmax(logits, -1)[kept].sum() / logits.shape[0])
                if torch.equal(kept.sum(-1), expected.sum(-1)):
                    return verdict(
                        False,
                        f"with p={p} you keep the right number of tokens in each row, but not the "
                        f"most likely ones: they hold {mass:.2f} of the mass per row on average. "
                        "In which order is your mask, and in which order are the logits?",
                    )
                return verdict(
                    False,
                    f"with p={p} your kept set holds {mass:.2f} of the mass per row on average. "
                    "Keep the most likely tokens until their cumulative probability first "
                    "reaches p, including the token that crosses p.",
                )
    return verdict(True, "your nucleus matches labkit.decoding.sampling.top_p_filter.")


def check_distinct_n(function: Callable | None) -> bool:
    """Exercise (04): distinct_n(texts, n) -> unique word n-grams / all word n-grams, pooled."""
    if function is None:
        return not_attempted("your function distinct_n(texts, n)")
    cases = [(["a b a b", "a b c"], 2), (["the cat sat on the mat"], 1), (["x y z", "x y z"], 3)]
    for texts, n in cases:
        got, error = run_own(function, texts, n, references=[diversity.distinct_n])
        if error:
            return verdict(False, error)
        expected = distinct_n(texts, n)
        if not isinstance(got, (int, float)) or abs(got - expected) > 1e-9:
            per_text = sum(distinct_n([text], n) for text in texts) / len(texts)
            how = (
                "that is the mean of each text's own ratio"
                if isinstance(got, (int, float)) and abs(got - per_text) < 1e-9
                else "that is not unique / all"
            )
            return verdict(
                False,
                f"distinct_n({texts!r}, {n}) gave {got!r}: {how}. Pool the word n-grams of all "
                "texts first, then divide the number of unique ones by the number of all.",
            )
    return verdict(True, "distinct-n measures how rarely phrases repeat.")


def check_tail_share(answer: float | None, steps, p: float = 0.9) -> bool:
    """Exercise (04): the share of sampled tokens that top_p=p would have cut at their step.
    steps: `labkit.generate(..., return_logits=True)`'s steps (each with .logits [V] and .token_id)."""
    value, refusal = read_number(answer, "a share between 0 and 1")
    if refusal is not None:
        return refusal
    steps = list(steps)
    if not steps or any(getattr(step, "logits", None) is None for step in steps):
        return verdict(False, "every step needs its logits: generate with return_logits=True.")
    cut, cut_mass = 0, 0.0
    for step in steps:
        logits = step.logits.detach().float().reshape(1, -1)
        kept = torch.isfinite(top_p_filter(logits, p))[0]
        cut += not bool(kept[step.token_id])
        cut_mass += float(logits.softmax(-1)[0][~kept].sum())
    n = len(steps)
    share, mean_cut = cut / n, cut_mass / n
    if abs(value - share) <= 0.5 / n:
        reset("tail_share")
        return verdict(
            True, f"{cut} of {n} sampled tokens ({share:.0%}) fell outside the nucleus of their step."
        )
    hints = [
        (
            abs(value - (1 - share)) <= 0.5 / n,
            "that is the share of tokens inside the nucleus; count those outside "
            "it, the ones top_p would have cut.",
        ),
        (
            value > 1 and abs(value / 100 - share) <= 0.5 / n,
            "that looks like a percentage: give a share between 0 and 1.",
        ),
        (value > 1 and float(value).is_integer(), "that looks like a count: divide by the number of steps."),
        (
            abs(value - mean_cut) <= 0.005,
            "that is the probability mass the nucleus cuts per step, what you would "
            "expect to draw; count the sampled tokens that actually fell outside it.",
        ),
    ]
    for matched, hint in hints:
        if matched:
            return verdict(False, hint)
    return verdict(
        False,
        "not yet. "
        + progressive(
            "tail_share",
            [
                "For each sampled token, ask whether the nucleus of its own step would have kept it; count those it "
                "would not.",
                f"For each step, apply top_p_filter to step.logits[None] with p={p} and ask whether step.token_id is "
                "still finite; the share is the number cut over the number of steps.",
            ],
        ),
    )
