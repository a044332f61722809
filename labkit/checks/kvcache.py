"""Exercise checkers for the KV cache lab, notebook 06 (see labkit/checks/foundation.py for the style).

A cache built on labkit's own KVCache does not count, the step times of Exercise 3 are timed again by the
checker, and why a token of context is cheap is a checked choice.

    >>> checks.check_context_token_cost(ms, positions, step_without, step_with, model, prose, why="shared_pass")
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from labkit.checks.common import not_attempted, read_number, verdict
from labkit.checks.own_answer import refuse_own_answer
from labkit.checks.work import OWN_VERSION, choice_verdict, progressive, refuse_unmeasured, reset
from labkit.core.forward import NoCache, greedy_decode
from labkit.core.kv_cache import KVCache
from labkit.core.paged import PagedKVCache
from labkit.models.sizing import ModelShape, bytes_per_element, format_bytes, model_shape

LABKIT_CACHES = (KVCache, PagedKVCache, NoCache)  # labkit's own caches: a student's cache is not one of them
TIMING_FACTOR = 3.0  # a student's step time may differ from the checker's own re-run by this factor
WHY_CHEAP = {
    "shared_pass": "in one pass the weights are read and every op dispatched once for all its tokens; "
    "one more token adds only its own arithmetic",
    "attention_free": "attention skips the tokens of the context",
    "cached_inside": "the model keeps the context's keys and values inside the pass, so they cost nothing",
}

# 07's: checks/prefill.py
__all__ = ["check_kv_cache_bytes", "check_growing_cache", "check_context_token_cost"]


def _close(answer: float, expected: float, rel: float = 0.005) -> bool:
    return abs(answer - expected) <= rel * abs(expected)


def kv_cache_bytes_verdict(
    answer: float | None, shape: ModelShape | str, tokens: int, batch: int, dtype: str = "fp16"
) -> bool:
    """Exercise: how many bytes does the KV cache of `shape` take for tokens x batch in dtype?"""
    value, refusal = read_number(answer, "a number of bytes", number="a number of bytes")
    if refusal is not None:
        return refusal
    shape = model_shape(shape) if isinstance(shape, str) else shape
    expected = shape.kv_cache_bytes(tokens, batch, dtype)
    if _close(value, expected, 1e-9):  # an exact count (a float answer may carry rounding)
        reset("kv_cache_bytes")
        return verdict(True, f"{expected:,.0f} bytes ({format_bytes(expected)}).")
    hints = [
        (expected / 2, "that is the keys alone (or the values alone): the cache holds both, a factor 2."),
        (
            expected * shape.n_heads / shape.n_kv_heads,
            f"use the {shape.n_kv_heads} key/value heads, not the {shape.n_heads} query heads: with grouped-query "
            "attention only the KV heads are cached.",
        ),
        (expected / batch, f"that is one sequence; the batch holds {batch}, each with its own cache."),
        (
            expected * 8,
            f"that looks like bits: count bytes ({dtype} is {bytes_per_element(dtype):g} bytes per number).",
        ),
        (expected / 1e6, "that looks like megabytes: give the answer in bytes."),
        (expected / 1e9, "that looks like gigabytes: give the answer in bytes."),
        (
            expected / shape.n_layers,
            f"every one of the {shape.n_layers} layers keeps its own keys and values.",
        ),
    ]
    for wrong, hint in hints:
        if _close(value, wrong):
            return verdict(False, hint)
    return verdict(
        False,
        f"{value:,.0f} is not it. "
        + progressive(
            "kv_cache_bytes",
            [
                "The cache holds one key and one value vector per layer, KV head, token and sequence: count them, then "
                "their bytes.",
                f"2 x layers x KV heads x head dim x tokens x batch x bytes per number ({bytes_per_element(dtype):g} for "
                f"{dtype}).",
            ],
        ),
    )


# Notebook 06's Exercise 1: the checker owns its problem, so an answer to a problem a student changed
# counts for nothing; kv_cache_bytes_verdict checks any other (the tests' cases).
KV_CACHE_BYTES_PROBLEM = {"shape": "smollm2-135m", "tokens": 4096, "batch": 8, "dtype": "fp16"}


def check_kv_cache_bytes(answer: float | None) -> bool:
    """Exercise (06, Exercise 1): how many bytes does SmolLM2's KV cache take for 4,096 tokens, a batch of 8, in fp16? (KV_CACHE_BYTES_PROBLEM)."""
    if (refused := refuse_own_answer(answer, "check_kv_cache_bytes", ["kv_cache_bytes"])) is not None:
        return refused
    return kv_cache_bytes_verdict(answer, **KV_CACHE_BYTES_PROBLEM)


def check_growing_cache(cache_class: Callable | None, model: torch.nn.Module, n_tokens: int = 8) -> bool:
    """Exercise: a KV cache that grows with torch.cat. cache_class(n_layers) -> an object with `length`,
    `append(layer, k, v)` returning all keys and values so far, and `advance(n_tokens)`."""
    if cache_class is None:
        return not_attempted("your cache class")
    name = getattr(cache_class, "__name__", "your class")
    if isinstance(cache_class, type) and issubclass(cache_class, LABKIT_CACHES):
        return verdict(False, f"{name} is labkit's own cache (or built on it): {OWN_VERSION}")
    try:
        probe = cache_class(2)
        if isinstance(probe, LABKIT_CACHES):
            return verdict(False, f"{name}(2) makes labkit's own {type(probe).__name__}: {OWN_VERSION}")
        k = torch.randn(1, 2, 3, 4)
        first = probe.append(0, k, k)
        probe.advance(3)
        second = probe.append(0, k[:, :, :1], k[:, :, :1])
    except Exception as error:  # noqa: BLE001  a student's bug is a hint, never a crash
        return verdict(
            False,
            f"{name}(2) then append/advance raised {type(error).__name__}: {error} (append is "
            "given k and v of shape [batch, KV heads, tokens, head dim])",
        )
    if not (isinstance(first, tuple) and len(first) == 2 and isinstance(second, tuple) and len(second) == 2):
        return verdict(False, "append(layer, k, v) must return a pair (all keys, all values).")
    length = getattr(probe, "length", None)
    if length != 3:
        return verdict(
            False,
            f"after advance(3) on an empty cache, yours has length {length!r}: advance adds "
            "n_tokens to length (the model reads it as the position of the next token).",
        )
    if tuple(second[0].shape) != (1, 2, 4, 4):
        return verdict(
            False,
            f"after appending 3 tokens and then 1 more, append returned keys of shape "
            f"{tuple(second[0].shape)}: it must return every key cached so far, the old ones and "
            "the new. Concatenate along dim 2 (the tokens) and keep the result.",
        )
    input_ids = torch.tensor([[1, 504, 3575, 282, 4649, 314]])
    expected_ids, expected_logits = greedy_decode(model, input_ids, n_tokens, NoCache())
    try:
        got_ids, got_logits = greedy_decode(model, input_ids, n_tokens, cache_class(model.config.n_layers))
    except Exception as error:  # noqa: BLE001
        return verdict(False, f"decoding with your cache raised {type(error).__name__}: {error}")
    if not torch.equal(got_ids, expected_ids) or (got_logits - expected_logits).abs().max() > 1e-3:
        return verdict(
            False,
            "the tokens or logits differ from recomputing the whole prefix. Keep one list "
            "entry per layer, and do not let one layer's keys overwrite another's.",
        )
    return verdict(True, f"{n_tokens} tokens identical to recomputation, logits within 1e-3.")


def _slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of ys against xs."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)


def step_seconds_without_cache(model: torch.nn.Module, prompt_ids: torch.Tensor, position: int) -> float:
    """The checker's own timing of one decode step without the cache at `position` (fastest of 2).

    >>> step_seconds_without_cache(model, prose, 256)
    0.21
    """
    from labkit.benchmarks.kvcache import decode_step_seconds  # only when checked

    return decode_step_seconds(model, prompt_ids[:, :position], use_cache=False, repeats=2)


def check_context_token_cost(
    answer: float | None,
    positions: list[int],
    seconds_without: list[float],
    seconds_with: list[float],
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    why: str | None = None,
) -> bool:
    """Exercise (06): how many milliseconds one more token of context adds to a step without the cache, from
    step times measured at `positions` (the slope of a line through them), within 10 %; then why a token is so
    much cheaper inside a long pass than alone (why: one of WHY_CHEAP). The checker times a step at the last
    position again on `model` and `prompt_ids`; the student's time there must be within a factor 3 of it."""
    value, refusal = read_number(
        answer, "a number of milliseconds per token of context", number="a number of milliseconds"
    )
    if refusal is not None:
        return refusal
    unmeasured = refuse_unmeasured(
        "measure the steps with decode_step_seconds(...), as section 3 does",
        seconds_without=seconds_without,
        seconds_with=seconds_with,
    )
    if unmeasured is not None:
        return unmeasured
    mine = step_seconds_without_cache(model, prompt_ids, positions[-1])
    if not mine / TIMING_FACTOR <= seconds_without[-1] <= mine * TIMING_FACTOR:
        return verdict(
            False,
            "the checker timed a step without the cache again at your last position, and your "
            "time there is more than 3 times off: use the step times section 3 measured on "
            "this machine.",
        )
    ms_without, ms_with = [s * 1e3 for s in seconds_without], [s * 1e3 for s in seconds_with]
    slope = _slope(list(positions), ms_without)
    endpoints = (ms_without[-1] - ms_without[0]) / (positions[-1] - positions[0])
    if not (_close(value, slope, 0.10) or _close(value, endpoints, 0.02)):
        return verdict(False, _context_cost_hint(value, slope, list(positions), ms_without, ms_with))
    return choice_verdict(
        why,
        WHY_CHEAP,
        "shared_pass",
        "what does a pass pay once, whatever the number of tokens in it, and what does each token add?",
        name="why",
        exercise="context_token_cost",
        right_so_far="your milliseconds are right",
        passed=f"about {slope:.2f} ms per token of context; the "
        f"checker's own step at position {positions[-1]} took {mine * 1e3:.0f} ms here.",
    )


def _context_cost_hint(
    value: float, slope: float, positions: list[int], ms_without: list[float], ms_with: list[float]
) -> str:
    """The hint for a wrong cost per token of context: a recognised slip, else the idea, then the recipe."""
    hints = [
        (slope / 1e3, "that looks like seconds: give milliseconds per token."),
        (1 / slope, "that is tokens per millisecond: give milliseconds per token."),
        (
            ms_without[-1] / (positions[-1] + 1),
            "that is a whole step's time shared among its tokens, fixed cost "
            "included. One more token adds only the change in time over the "
            "change in position.",
        ),
        (
            _slope(positions, ms_with),
            "that is the slope with the cache; the question is about the steps without it.",
        ),
    ]
    for wrong, hint in hints:
        if _close(value, wrong, 0.10):
            return hint
    return "not yet. " + progressive(
        "context_token_cost",
        [
            "How much does the step time change per token of position?",
            "Fit a straight line to the step times without the cache, in ms, against the position "
            "(np.polyfit(positions, ms, 1)); its slope is the cost of one more token.",
        ],
    )
