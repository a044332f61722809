"""Exercise checkers for the KV cache lab, notebook 06 (see labkit/checks/foundation.py for the style)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from labkit.checks.common import not_attempted, verdict
from labkit.core.forward import NoCache, greedy_decode
from labkit.models.sizing import ModelShape, bytes_per_element, format_bytes, model_shape

__all__ = ["check_kv_cache_bytes", "check_growing_cache", "check_context_token_cost"]  # 07's: checks/prefill.py


def _close(answer: float, expected: float, rel: float = 0.005) -> bool:
    return abs(answer - expected) <= rel * abs(expected)


def _number(answer) -> float | None:
    try:
        return float(answer)
    except (TypeError, ValueError):
        return None


def check_kv_cache_bytes(answer: float | None, shape: ModelShape | str, tokens: int, batch: int,
                         dtype: str = "fp16") -> bool:
    """Exercise: how many bytes does the KV cache of `shape` take for tokens x batch in dtype?"""
    if answer is None:
        return not_attempted("a number of bytes (2 x layers x KV heads x head dim x tokens x batch x bytes)")
    shape = model_shape(shape) if isinstance(shape, str) else shape
    value = _number(answer)
    if value is None:
        return verdict(False, f"give a number of bytes, not {type(answer).__name__}.")
    expected = shape.kv_cache_bytes(tokens, batch, dtype)
    if _close(value, expected, 1e-9):  # an exact count (a float answer may carry rounding)
        return verdict(True, f"{expected:,.0f} bytes ({format_bytes(expected)}).")
    hints = [
        (expected / 2, "that is the keys alone (or the values alone): the cache holds both, a factor 2."),
        (expected * shape.n_heads / shape.n_kv_heads,
         f"use the {shape.n_kv_heads} key/value heads, not the {shape.n_heads} query heads: with grouped-query "
         "attention only the KV heads are cached."),
        (expected / batch, f"that is one sequence; the batch holds {batch}, each with its own cache."),
        (expected * 8, "that looks like bits: count bytes (fp16 is 2 bytes per number)."),
        (expected / 1e6, "that looks like megabytes: give the answer in bytes."),
        (expected / 1e9, "that looks like gigabytes: give the answer in bytes."),
        (expected / shape.n_layers, f"every one of the {shape.n_layers} layers keeps its own keys and values."),
    ]
    for wrong, hint in hints:
        if _close(value, wrong):
            return verdict(False, hint)
    return verdict(False, f"{value:,.0f} is not it. 2 x layers x KV heads x head dim x tokens x batch x "
                           f"bytes per number ({bytes_per_element(dtype):g} for {dtype}).")


def check_growing_cache(cache_class: Callable | None, model: torch.nn.Module, n_tokens: int = 8) -> bool:
    """Exercise: a KV cache that grows with torch.cat. cache_class(n_layers) -> an object with `length`,
    `append(layer, k, v)` returning all keys and values so far, and `advance(n_tokens)`."""
    if cache_class is None:
        return not_attempted("your cache class")
    name = getattr(cache_class, "__name__", "your class")
    try:
        probe = cache_class(2)
        k = torch.randn(1, 2, 3, 4)
        first = probe.append(0, k, k)
        probe.advance(3)
        second = probe.append(0, k[:, :, :1], k[:, :, :1])
    except Exception as error:  # noqa: BLE001  a student's bug is a hint, never a crash
        return verdict(False, f"{name}(2) then append/advance raised {type(error).__name__}: {error} (append is "
                               "given k and v of shape [batch, KV heads, tokens, head dim])")
    if not (isinstance(first, tuple) and len(first) == 2 and isinstance(second, tuple) and len(second) == 2):
        return verdict(False, "append(layer, k, v) must return a pair (all keys, all values).")
    length = getattr(probe, "length", None)
    if length != 3:
        return verdict(False, f"after advance(3) on an empty cache, yours has length {length!r}: advance adds "
                               "n_tokens to length (the model reads it as the position of the next token).")
    if tuple(second[0].shape) != (1, 2, 4, 4):
        return verdict(False, f"after appending 3 tokens and then 1 more, append returned keys of shape "
                               f"{tuple(second[0].shape)}: it must return every key cached so far, the old ones and "
                               "the new. Concatenate along dim 2 (the tokens) and keep the result.")
    input_ids = torch.tensor([[1, 504, 3575, 282, 4649, 314]])
    expected_ids, expected_logits = greedy_decode(model, input_ids, n_tokens, NoCache())
    try:
        got_ids, got_logits = greedy_decode(model, input_ids, n_tokens, cache_class(model.config.n_layers))
    except Exception as error:  # noqa: BLE001
        return verdict(False, f"decoding with your cache raised {type(error).__name__}: {error}")
    if not torch.equal(got_ids, expected_ids) or (got_logits - expected_logits).abs().max() > 1e-3:
        return verdict(False, "the tokens or logits differ from recomputing the whole prefix. Keep one list "
                               "entry per layer, and do not let one layer's keys overwrite another's.")
    return verdict(True, f"{n_tokens} tokens identical to recomputation, logits within 1e-3.")


def _slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of ys against xs."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)


def check_context_token_cost(answer: float | None, positions: list[int], seconds_without: list[float],
                             seconds_with: list[float]) -> bool:
    """Exercise (06): how many milliseconds one more token of context adds to a step without the cache,
    from step times measured at `positions` (the slope of a line through them), within 10 %."""
    if answer is None:
        return not_attempted("a number of milliseconds per token of context")
    value = _number(answer)
    if value is None:
        return verdict(False, f"give a number of milliseconds, not {type(answer).__name__}.")
    ms_without, ms_with = [s * 1e3 for s in seconds_without], [s * 1e3 for s in seconds_with]
    slope = _slope(list(positions), ms_without)
    endpoints = (ms_without[-1] - ms_without[0]) / (positions[-1] - positions[0])
    if _close(value, slope, 0.10) or _close(value, endpoints, 0.02):
        cached = sum(ms_with) / len(ms_with)
        return verdict(True, f"each token of context adds about {slope:.2f} ms to a step without the cache, while a "
                             f"cached step, one token alone, takes {cached:.0f} ms: {cached / slope:.0f}x more. In one "
                             "pass over many tokens the weights are read once for all of them (notebook 07).")
    hints = [
        (slope / 1e3, "that looks like seconds: give milliseconds per token."),
        (1 / slope, "that is tokens per millisecond: give milliseconds per token."),
        (ms_without[-1] / (positions[-1] + 1), "that is a whole step's time shared among its tokens, fixed cost "
                                               "included. One more token adds only the change in time over the "
                                               "change in position."),
        (_slope(list(positions), ms_with), "that is the slope with the cache; the question is about the steps "
                                           "without it."),
    ]
    for wrong, hint in hints:
        if _close(value, wrong, 0.10):
            return verdict(False, hint)
    return verdict(False, "not yet. Fit a straight line to the step times without the cache, in ms, against the "
                           "position (np.polyfit(positions, ms, 1)); its slope is the cost of one more token.")
