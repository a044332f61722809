"""Exercise checkers for running models locally and choosing one, notebook 12 (style: checks/foundation.py).

>>> checks.check_greedy_agreement(greedy_agreement)
>>> checks.check_decode_bound(answer)
>>> checks.check_memory_needed(answer_gb)
>>> checks.check_thread_speedup(answer, limited_by, thread_rates)
"""

from __future__ import annotations

import math
from collections.abc import Callable

from labkit.checks.common import matching_hint, not_attempted, read_number, verdict
from labkit.checks.work import choice_miss, progressive, refuse_unmeasured, reset, run_own
from labkit.engines.compare import greedy_agreement
from labkit.models.catalog import fits_here, load_catalog

__all__ = ["check_decode_bound", "check_greedy_agreement", "check_memory_needed", "check_thread_speedup"]

AGREEMENT_CASES = [
    ([5, 6, 7, 8], [5, 6, 7, 8], 4),
    ([5, 6, 7, 8], [5, 9, 7, 8], 4),
    ([1, 2, 3], [4, 2, 3], 3),
    (list(range(40)), list(range(40)), 32),
    ([1, 2, 3, 4], [1, 2], 4),
    ([], [1], 32),
]


def check_greedy_agreement(fn: Callable | None) -> bool:
    """Exercise: fn(reference_ids, other_ids, n) -> how many of the first n tokens match before they part.
    Calling labkit's own greedy_agreement does not count."""
    if fn is None:
        return not_attempted("your function greedy_agreement(reference, other, n)")
    for reference, other, n in AGREEMENT_CASES:
        expected = greedy_agreement(reference, other, n)
        got, error = run_own(fn, list(reference), list(other), n, references=[greedy_agreement])
        if error:
            return verdict(
                False,
                f"greedy_agreement({reference[:6]}, {other[:6]}, {n}): {error}. Mind answers of "
                "different lengths.",
            )
        if got == expected:
            continue
        matches = sum(a == b for a, b in zip(reference[:n], other[:n]))
        if got == matches:
            return verdict(
                False,
                f"for {reference[:6]} vs {other[:6]} you counted every matching position; after "
                "the first difference the texts part, so stop counting there.",
            )
        return verdict(
            False,
            f"for {reference[:6]} vs {other[:6]} with n={n} you have {got!r}. Count the tokens the "
            "two share from the start, up to the first difference and at most n.",
        )
    return verdict(
        True, "count the shared start, at most n tokens: after one difference the contexts differ."
    )


def decode_bound_verdict(
    answer: float | None, params_b: float, bits_per_weight: float, bandwidth_gb_s: float
) -> bool:
    """Exercise: the batch-1 decode limit in tokens/s of a model of `params_b` billion weights stored at
    `bits_per_weight`, on a machine that reads `bandwidth_gb_s` GB/s (every token reads every weight once)."""
    value, refusal = read_number(
        answer, "a number of tokens per second", number="a number of tokens per second"
    )
    if refusal is not None:
        return refusal
    bytes_per_token = params_b * 1e9 * bits_per_weight / 8
    expected = bandwidth_gb_s * 1e9 / bytes_per_token
    if math.isclose(value, expected, rel_tol=0.02):
        reset("decode_bound")
        return verdict(
            True,
            f"{expected:.1f} tokens/s: {bandwidth_gb_s:g} GB/s / {bytes_per_token / 1e9:.2f} GB "
            "read per token. A real engine reaches part of it (notebook 07: about a third).",
        )
    if math.isclose(value, expected / 8, rel_tol=0.02):
        return verdict(False, "a weight of b bits is b / 8 bytes: divide the bits per weight by 8.")
    if math.isclose(value, 1 / expected, rel_tol=0.02):
        return verdict(False, "upside down: that is seconds per token.")
    if math.isclose(value, expected * 1.073741824, rel_tol=0.02) or math.isclose(
        value, expected / 1.073741824, rel_tol=0.02
    ):
        return verdict(False, "close: keep GB = 1e9 bytes for both the bandwidth and the weights.")
    return verdict(
        False,
        f"{value:g} is not it. "
        + progressive(
            "decode_bound",
            [
                "Every token reads every weight once: how many bytes is that, and how many times a second can the memory "
                "deliver them?",
                "Bytes per token = parameters x bits / 8; tokens/s = bandwidth / that.",
            ],
        ),
    )


# Notebook 12's Exercise 2: the checker owns its problem, so an answer to a problem a student changed
# counts for nothing; decode_bound_verdict checks any other (the tests' cases).
DECODE_BOUND_PROBLEM = {"params_b": 8.0, "bits_per_weight": 4.5, "bandwidth_gb_s": 50}


def check_decode_bound(answer: float | None) -> bool:
    """Exercise (12, Exercise 2): the batch-1 decode limit of an 8B model at 4.5 bits a weight on a 50 GB/s laptop? (DECODE_BOUND_PROBLEM)."""
    return decode_bound_verdict(answer, **DECODE_BOUND_PROBLEM)


def memory_needed_verdict(answer_gb: float | None, model: str, quant: str, context_tokens: int) -> bool:
    """Exercise: GB (1e9 bytes) of weights + fp16 KV cache to run catalog `model` at `quant` with
    `context_tokens` of context (no runtime or OS share)."""
    if answer_gb is None:
        return not_attempted("a number of GB")
    entry = next((m for m in load_catalog() if m.name == model), None)
    if entry is None:
        raise ValueError(f"{model!r} is not in data/models/catalog.csv.")
    fit = fits_here(entry, memory_bytes=1e15, quant=quant, context_tokens=context_tokens)
    expected = fit.total_bytes / 1e9
    try:
        value = float(answer_gb)
    except (TypeError, ValueError):
        return verdict(False, f"give a number of GB, not {type(answer_gb).__name__}.")
    if math.isclose(value, expected, rel_tol=0.03):
        reset("memory_needed")
        return verdict(
            True,
            f"{expected:.2f} GB: {fit.weight_bytes / 1e9:.2f} GB of weights + "
            f"{fit.kv_cache_bytes / 1e9:.2f} GB of KV cache for {fit.context_tokens} tokens.",
        )
    if math.isclose(value, fit.weight_bytes / 1e9, rel_tol=0.03):
        return verdict(False, "that is the weights alone: the context needs its KV cache too.")
    if math.isclose(
        value, (fit.weight_bytes + fit.kv_cache_bytes * entry.n_heads / entry.n_kv_heads) / 1e9, rel_tol=0.03
    ):
        return verdict(
            False, "the cache holds KV heads only (grouped-query attention), not every query head."
        )
    return verdict(
        False,
        f"{value:g} GB is not it. "
        + progressive(
            "memory_needed",
            [
                "Two things take memory here: the weights at this quantization, and the KV cache of the whole context.",
                "Weights = parameters x bits / 8; KV cache = 2 x layers x KV heads x head_dim x 2 bytes x tokens.",
            ],
        ),
    )


# Notebook 12's Exercise 3: the checker owns its problem, so an answer to a problem a student changed
# counts for nothing; memory_needed_verdict checks any other (the tests' cases).
MEMORY_NEEDED_PROBLEM = {"model": "meta-llama/Llama-3.1-8B-Instruct", "quant": "q4", "context_tokens": 8192}


def check_memory_needed(answer_gb: float | None) -> bool:
    """Exercise (12, Exercise 3): GB of Llama-3.1-8B-Instruct's q4 weights and float16 KV cache for 8,192 tokens? (MEMORY_NEEDED_PROBLEM)."""
    return memory_needed_verdict(answer_gb, **MEMORY_NEEDED_PROBLEM)


# what a token's time is spent on, from a 1- vs 2-thread speed-up: the choices of exercise 4
THREAD_LIMITS = {
    "work": "each op's arithmetic, which two cores split between them",
    "even": "the second core saves about what the threads lose meeting after each op",
    "wake-ups": "threads meeting, and a sleeping one waking, after every op",
}


def thread_limit(speedup: float) -> str:
    """Which of THREAD_LIMITS a two-thread speed-up shows.

    >>> thread_limit(0.36)
    'wake-ups'
    """
    return "work" if speedup >= 1.5 else "even" if speedup >= 0.9 else "wake-ups"


def check_thread_speedup(
    answer: float | None, limited_by: str | None, thread_rates: dict[int, float]
) -> bool:
    """Exercise (12): how many times the tokens/s of one thread does llama.cpp make with two, in this process
    (thread_rates[2] / thread_rates[1], the measured rates, within 3 %), and what is a token's time spent on
    (one of THREAD_LIMITS)?"""
    value, refusal = read_number(
        answer,
        "a ratio (tokens/s with 2 threads / tokens/s with 1) and what a token's time is spent on",
        others=(limited_by,),
    )
    if refusal is not None:
        return refusal
    unmeasured = refuse_unmeasured(
        "measure each rate with median_of(... answer_rate ...), as the cell above does",
        thread_rates=thread_rates,
    )
    if unmeasured is not None:
        return unmeasured
    one, two = thread_rates[1], thread_rates[2]
    expected = two / one
    hints = [
        (1 / expected, "upside down: the rate with 2 threads goes on top."),
        (100 * expected, "give a ratio, not a percentage."),
        (two - one, "that is a difference in tokens/s; give the ratio."),
        (
            2.0,
            "2x is what two cores would give if nothing but the work were shared: that is the hypothesis. "
            "Compare the two measured rates.",
        ),
    ]
    if abs(value - expected) > 0.03 * expected:
        return verdict(
            False,
            matching_hint(value, hints, rel_tol=0.03)
            or progressive(
                "thread_speedup",
                [
                    f"{value:g} is not what your two measurements give: compare the rate with 2 threads to the rate with 1.",
                    f"{value:g} is not it. Divide the tokens/s with 2 threads by the tokens/s with 1.",
                ],
            ),
        )
    reset("thread_speedup")
    miss = choice_miss(
        limited_by,
        THREAD_LIMITS,
        thread_limit(expected),
        "set your ratio beside the 2x of a perfect split and the 1x of a second core that changes nothing.",
    )
    if miss:
        return verdict(False, f"the ratio is right; {miss}")
    return verdict(
        True,
        "labkit sets OMP_WAIT_POLICY=PASSIVE for torch, so in this process a waiting thread sleeps "
        "and is woken after each op; under ACTIVE (section 4's other tries) it spins, ready at once.",
    )
