"""Exercise checkers for the KV cache lab, notebooks 06-07 (see labkit/checks/foundation.py for the style)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from labkit.checks.common import not_attempted, verdict
from labkit.core.forward import NoCache, greedy_decode
from labkit.models.sizing import GB, ModelShape, bytes_per_element, format_bytes, model_shape
from labkit.metrics import RequestMetrics

__all__ = [
    "check_kv_cache_bytes", "check_growing_cache", "check_arithmetic_intensity", "check_ttft_tpot",
    "check_max_context", "check_context_token_cost",
    "check_bfloat16_speedup",
]


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


def check_arithmetic_intensity(answer: float | None, batch: int, bytes_per_weight: float = 4) -> bool:
    """Exercise: FLOPs per byte of weights read, for a linear layer applied to `batch` token vectors
    (activations ignored)."""
    if answer is None:
        return not_attempted("a number of FLOPs per byte")
    value = _number(answer)
    if value is None:
        return verdict(False, f"give a number, not {type(answer).__name__}.")
    expected = 2 * batch / bytes_per_weight
    if _close(value, expected, 0.02):
        return verdict(True, f"{expected:g} FLOPs per byte: every weight read serves {batch} multiply-adds.")
    hints = [
        (expected / 2, "a multiply-add counts as 2 FLOPs (one multiply, one add)."),
        (1 / expected, "intensity is FLOPs divided by bytes, not bytes divided by FLOPs."),
        (expected / batch, f"the weights are read once for the whole batch, and each of the {batch} rows uses "
                           "them: the FLOPs grow with the batch, the bytes do not."),
        (2 * batch, f"each weight is {bytes_per_weight:g} bytes, not 1."),
    ]
    for wrong, hint in hints:
        if _close(value, wrong, 0.02):
            return verdict(False, hint)
    return verdict(False, f"{value:g} is not it. FLOPs = 2 x batch x d_in x d_out; bytes = d_in x d_out x "
                           f"{bytes_per_weight:g}.")


def check_ttft_tpot(fn: Callable | None) -> bool:
    """Exercise: fn(token_times) -> (ttft, tpot), from the arrival times of the tokens in seconds since the
    request started."""
    if fn is None:
        return not_attempted("your function ttft_tpot(token_times)")
    cases = [[0.5, 0.6, 0.7, 0.9], [1.2, 1.25, 1.3], [0.08, 0.3]]
    for times in cases:
        n = len(times)
        expected = RequestMetrics(n, times[0], (times[-1] - times[0]) / (n - 1), times[-1], tuple(times))
        try:
            ttft, tpot = fn(list(times))
        except Exception as error:  # noqa: BLE001
            return verdict(False, f"ttft_tpot({times}) raised {type(error).__name__}: {error}")
        if not math.isclose(ttft, expected.ttft_s, rel_tol=1e-6):
            return verdict(False, f"for {times} your TTFT is {ttft!r}: TTFT is the arrival time of the first token.")
        if not math.isclose(tpot, expected.tpot_s, rel_tol=1e-6):
            if math.isclose(tpot, times[-1] / n, rel_tol=1e-6):
                return verdict(False, "TPOT leaves out the first token (its wait is the TTFT, mostly prefill): "
                                       "(last - first) / (n - 1).")
            if math.isclose(tpot, (times[-1] - times[0]) / n, rel_tol=1e-6):
                return verdict(False, f"for {times} you divided by n: {n} tokens leave only {n - 1} gaps after the "
                                       "first one.")
            return verdict(False, f"for {times} your TPOT is {tpot!r}: TPOT is the mean gap between the later "
                                   "tokens, (last - first) / (n - 1).")
    return verdict(True, "TTFT is the first arrival; TPOT the mean gap after it, as labkit.metrics computes them.")


def check_max_context(answer: int | None, shape: ModelShape | str, memory_gb: float, batch: int = 1,
                      dtype: str = "fp16") -> bool:
    """Exercise: the longest context per sequence that fits in memory_gb (10^9 bytes) after the weights."""
    if answer is None:
        return not_attempted("a number of tokens")
    shape = model_shape(shape) if isinstance(shape, str) else shape
    value = _number(answer)
    if value is None:
        return verdict(False, f"give a number of tokens, not {type(answer).__name__}.")
    expected = shape.max_tokens(memory_gb * GB, batch, dtype)
    if expected == 0:
        if value <= 0:
            return verdict(True, "nothing fits: the weights alone take more than the memory.")
        return verdict(False, f"start with the weights: they take {format_bytes(shape.weight_bytes(dtype))}, and "
                               f"the memory holds {memory_gb} GB. What do they leave for the KV cache?")
    if _close(value, expected, 0.01):
        return verdict(True, f"about {expected:,} tokens per sequence (KV cache "
                              f"{format_bytes(shape.kv_cache_bytes(expected, batch, dtype))}).")
    ignoring_weights = int(memory_gb * GB // shape.kv_cache_bytes(1, batch, dtype))
    if _close(value, ignoring_weights, 0.01):
        return verdict(False, "subtract the weights first: only what they leave is free for the KV cache.")
    if _close(value, expected * batch, 0.01):
        return verdict(False, f"that is the total over the batch; give tokens per sequence (divide by {batch}).")
    return verdict(False, f"{value:,.0f} is not it. (memory - weights) / KV bytes per token per sequence / batch.")


def check_bfloat16_speedup(answer: float | None, float32_seconds: float, bfloat16_seconds: float) -> bool:
    """Exercise (notebook 07): how many times faster is the measured bfloat16 decode step than the float32
    one? The right answer is the ratio of the two measured step times, within 3 %."""
    if answer is None:
        return not_attempted("a speed-up, e.g. 1.5 (the float32 step's time / the bfloat16 step's)")
    value = _number(answer)
    if value is None:
        return verdict(False, f"give a number, not {type(answer).__name__}.")
    expected = float32_seconds / bfloat16_seconds
    if _close(value, expected, 0.03):
        if expected >= 1.7:
            reading = "close to the 2x that half the bytes buys a step limited by reading its weights."
        elif expected >= 1:
            reading = ("far from the 2x that half the bytes would buy a memory-bound step: the kernels' own work "
                       "per weight and the per-op overhead set this step's pace, not the bytes.")
        else:
            reading = ("slower with half the bytes: this CPU's bfloat16 kernels cost more per weight than its "
                       "float32 ones (without bfloat16 instructions they convert every weight first).")
        return verdict(True, f"{expected:.2f}x, {reading}")
    hints = [
        (1 / expected, "that is the bfloat16 step's time as a share of the float32 step's: a speed-up divides the "
                       "old (float32) time by the new one."),
        (100 * expected, "give a ratio of times, not a percentage."),
        (1 - 1 / expected, "that is the share of the time saved; give the ratio of the two times."),
    ]
    for wrong, hint in hints:
        if _close(value, wrong, 0.03):
            return verdict(False, hint)
    if _close(value, 2.0, 0.01):
        return verdict(False, "2x is what halving the bytes would buy a step limited by reading its weights: that "
                               "is the hypothesis. Read the two measured step times and divide them.")
    return verdict(False, f"{value:g} is not it. Divide the float32 step's measured time by the bfloat16 step's "
                           "(the `measured` of each report, not the `predicted`).")


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
