"""Exercise checkers for long context, notebook 15 (see labkit/checks/foundation.py for the style). Each
runs the student's function on problems it sets itself; a function that calls labkit's own fold of a tile or
its memory calculator does not count.

    >>> checks.check_softmax_merge(merge)
    >>> checks.check_windowed_cache_bytes(cache_bytes)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from labkit.checks.common import not_attempted, verdict
from labkit.checks.work import progressive, reset, run_own
from labkit.core.tiled_attention import add_tile
from labkit.models.footprint import kv_cache_bytes
from labkit.models.shapes import ModelShape

__all__ = ["check_softmax_merge", "check_windowed_cache_bytes"]

MERGE_REFERENCES = [add_tile]  # the tiled loop's own fold (attend_in_tiles cannot merge two states)
CACHE_REFERENCES = [ModelShape.kv_cache_bytes, ModelShape.kv_bytes_per_token, kv_cache_bytes]


# --- exercise 1: merge two partial softmaxes -------------------------------------------------------------


def partial_softmax(scores: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The online softmax's state over one block of keys: scores [T, n], values [n, D] ->
    (m [T, 1] the row max, l [T, 1] the sum of exp(s - m), acc [T, D] the sum of exp(s - m) v)."""
    m = scores.amax(dim=-1, keepdim=True)
    p = torch.exp(scores - m)
    return m, p.sum(dim=-1, keepdim=True), p @ values


def merge_problems(generator: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor, list[int], str]]:
    """(scores [T, S], values [S, D], block sizes, what the case tests), set by the checker."""

    def scores(t, s, scale=1.0):
        return torch.randn(t, s, generator=generator, dtype=torch.float64) * scale

    def values(s, d=8):
        return torch.randn(s, d, generator=generator, dtype=torch.float64)

    high = scores(3, 12)
    high[:, :6] += 120.0  # exp(120) overflows float32: only the max-relative form survives
    late = scores(4, 10)
    late[:, 7:] += 30.0  # the second block holds every row's max: the first block's sums must shrink
    return [
        (scores(2, 8), values(8), [4, 4], "two equal blocks"),
        (late, values(10), [7, 3], "the larger scores in the second block"),
        (high, values(12), [6, 6], "scores near 120, where exp overflows float32 without the max"),
        (scores(5, 15, 3.0), values(15, 16), [5, 4, 6], "three blocks, merged left to right"),
    ]


def merge_hint(got: tuple, expected: tuple) -> str:
    """What a wrong merge most likely forgot: the max, the sum's rescaling, or the accumulator's (said at
    once); else the idea, then the formula, as the misses repeat."""
    m, l, acc = (torch.as_tensor(x, dtype=torch.float64) for x in got)  # noqa: E741  (the papers' name)
    want_m, want_l, want_acc = expected
    if not torch.allclose(m, want_m, rtol=1e-6, atol=1e-9):
        return "the merged max m should be the larger of the two blocks' maxima, row by row."
    if not torch.allclose(l, want_l, rtol=1e-6, atol=1e-12):
        return (
            "each block's sum l counts exp(s - its own max): bring both to the merged max first, "
            "multiplying by exp(old max - new max)."
        )
    if not torch.allclose(torch.as_tensor(acc), want_acc, rtol=1e-6, atol=1e-9):
        return "the accumulator acc needs the same rescaling as l, exp(old max - new max), before the two add up."
    return progressive("merge", ["bring both blocks to one max before adding.", MERGE_IDEA])


def check_softmax_merge(merge: Callable | None) -> bool:
    """Exercise (15): merge(a, b) -> the online softmax's state over two blocks of keys, where a and b are
    each (m [T, 1], l [T, 1], acc [T, D]) over one block. The checker splits its own scores and values into
    blocks, folds them with merge, and compares acc / l with softmax(scores) @ values."""
    if merge is None:
        return not_attempted("your function merge(a, b)")
    generator = torch.Generator().manual_seed(15)
    for scores, values, blocks, what in merge_problems(generator):
        states = [
            partial_softmax(s, v)
            for s, v in zip(scores.split(blocks, dim=-1), values.split(blocks, dim=0), strict=True)
        ]
        merged = states[0]
        for state in states[1:]:
            expected = exact_merge(merged, state)
            got, error = run_own(merge, merged, state, references=MERGE_REFERENCES)
            if error:
                return verdict(False, f"merge on {what}: {error}")
            if not (isinstance(got, tuple | list) and len(got) == 3):
                return verdict(False, f"merge on {what} returned {type(got).__name__}: return (m, l, acc).")
            shapes = tuple(tuple(torch.as_tensor(x).shape) for x in got)
            if shapes != tuple(tuple(x.shape) for x in expected):
                return verdict(False, f"merge on {what}: (m, l, acc) came back with shapes {shapes}.")
            if not all(bool(torch.isfinite(torch.as_tensor(x)).all()) for x in got):
                return verdict(False, f"merge on {what} gave inf or nan: subtract a max before every exp.")
            merged = tuple(torch.as_tensor(x, dtype=torch.float64) for x in got)
            if not all(
                torch.allclose(g, e, rtol=1e-6, atol=1e-9) for g, e in zip(merged, expected, strict=True)
            ):
                return verdict(False, f"merge on {what}: {merge_hint(got, expected)}")
        out = merged[2] / merged[1]
        if not torch.allclose(out, torch.softmax(scores, dim=-1) @ values, rtol=1e-6, atol=1e-9):
            return verdict(False, f"on {what}, acc / l is not softmax(scores) @ values: {MERGE_IDEA}")
    reset("merge")
    return verdict(
        True,
        "two blocks' softmaxes brought to one max and added: attention over any number of tiles, without "
        "the score matrix (FlashAttention's online softmax).",
    )


MERGE_IDEA = (
    "with m = max(m_a, m_b): l = l_a exp(m_a - m) + l_b exp(m_b - m), and acc the same way; "
    "then acc / l is the softmax-weighted sum of the values."
)


def exact_merge(a: tuple, b: tuple) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The online softmax's merge (Milakov & Gimelshein 2018), in float64."""
    m = torch.maximum(a[0], b[0])
    alpha, beta = torch.exp(a[0] - m), torch.exp(b[0] - m)
    return m, a[1] * alpha + b[1] * beta, a[2] * alpha + b[2] * beta


# --- exercise 2: a windowed cache's bytes -----------------------------------------------------------------

CACHE_PROBLEMS = [  # (tokens, global layers, local layers, window, kv heads, head dim, bytes per number, what)
    (8192, 30, 0, 0, 3, 64, 4, "SmolLM2 in float32: no local layers"),
    (32768, 3, 15, 512, 1, 256, 2, "Gemma-3-270M in bfloat16 at 32k tokens"),
    (300, 3, 15, 512, 1, 256, 2, "a context shorter than the window"),
    (131072, 10, 52, 1024, 8, 128, 1, "a 27B-like model, 8-bit cache, at 128k tokens"),
    (4096, 8, 24, 4096, 4, 128, 2, "a window exactly as long as the context"),
]


def windowed_bytes(tokens, global_layers, local_layers, window, kv_heads, head_dim, bytes_per_number) -> int:
    """Keys and values of every layer: global layers keep every token, local ones the last `window`."""
    kept = global_layers * tokens + local_layers * min(tokens, window)
    return 2 * kept * kv_heads * head_dim * bytes_per_number


def cache_bytes_hint(got: float, problem: tuple) -> str:
    """The usual slip behind a wrong byte count (said at once); else the idea, then the formula."""
    tokens, global_layers, local_layers, window, *rest = problem
    right = windowed_bytes(*problem[:7])
    per_token_row = math.prod(rest[:3])
    if math.isclose(got, right / 2):
        return "the cache holds keys and values: two rows per token and layer."
    if math.isclose(got, 2 * (global_layers + local_layers) * tokens * per_token_row):
        return "a local layer keeps only the last `window` tokens, however long the context."
    if math.isclose(got, 2 * (global_layers + local_layers) * min(tokens, window) * per_token_row):
        return "only the local layers stop at the window: the global ones keep every token."
    if math.isclose(got, 2 * (global_layers * tokens + local_layers * window) * per_token_row):
        return "a context shorter than the window keeps only its own tokens, in every layer."
    idea = (
        "count rows: per layer, 2 (K and V) x tokens kept x kv_heads, each head_dim numbers of "
        "bytes_per_number bytes; a local layer keeps min(tokens, window)."
    )
    return progressive("cache_bytes", [idea, CACHE_IDEA])


def check_windowed_cache_bytes(cache_bytes: Callable | None) -> bool:
    """Exercise (15): cache_bytes(tokens, global_layers, local_layers, window, kv_heads, head_dim,
    bytes_per_number) -> the KV cache's bytes for one sequence, local layers keeping the last `window`
    tokens (Gemma 3's ring). Checked on the checker's own models and contexts."""
    if cache_bytes is None:
        return not_attempted("your function cache_bytes(tokens, global_layers, local_layers, window, ...)")
    for *problem, what in CACHE_PROBLEMS:
        got, error = run_own(cache_bytes, *problem, references=CACHE_REFERENCES)
        if error:
            return verdict(False, f"cache_bytes on {what}: {error}")
        if isinstance(got, bool) or not isinstance(got, int | float) or not math.isfinite(got):
            return verdict(False, f"cache_bytes on {what} returned {got!r}: return a number of bytes.")
        if not math.isclose(got, windowed_bytes(*problem), rel_tol=1e-9):
            return verdict(False, f"cache_bytes on {what}: {cache_bytes_hint(got, tuple(problem))}")
    reset("cache_bytes")
    return verdict(
        True,
        "global layers grow with the context, local ones stop at the window: at long context the few "
        "global layers hold almost all of the cache.",
    )


CACHE_IDEA = (
    "bytes = 2 x (global_layers x tokens + local_layers x min(tokens, window)) x kv_heads x head_dim x "
    "bytes_per_number."
)
