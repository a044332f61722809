"""KV cache vs recomputation, time per token by position, prefill vs decode (SmolLM2, fp32, batch 1).

Every figure comes from labkit's own loop pieces, `labkit.generate.prefill` and `decode_step` (what
`generate` runs), on labkit's Llama; only the cache differs. Greedy, and no stop at EOS, so every
run produces exactly the number of tokens asked for.

Aims (issue 4): 512 new tokens with the cache at least 10x faster than without; with the cache, the
time per token at position 1024 at most 1.25x that at position 64.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch

from labkit.benchmarks.comparison import comparison
from labkit.benchmarks.progress import progress
from labkit.core.arguments import check_int
from labkit.core.doors import check_items, check_model, check_record, check_tensor
from labkit.core.forward import NoCache, decode_step, prefill
from labkit.core.llama import Llama
from labkit.core.paged import BlockPool
from labkit.models.loading import load_model
from labkit.this_machine import machine_name
from labkit.timing import best_seconds, time_once

BENCH_PROMPT = "The history of the Roman Empire begins with"
FILLER = (
    "The river rose slowly through the spring, and the people of the valley watched the water climb "
    "the old stone walls, counting the days until the harvest. "
)


def timed_generation(
    model: Llama, input_ids: torch.Tensor, new_tokens: int, cache=None
) -> tuple[list[int], list[float]]:
    """Greedy `new_tokens` after input_ids [1, T]: (token ids, seconds since start at each token).

    cache: None for a fresh contiguous cache, NoCache() to recompute, or any other empty cache (paged).
    """
    start = time.perf_counter()
    logits, cache = prefill(model, input_ids, cache, max_length=input_ids.shape[1] + new_tokens)
    tokens, times = [], []
    for index in range(new_tokens):
        token = logits.argmax(dim=-1)
        tokens.append(int(token[0]))
        times.append(time.perf_counter() - start)
        if index < new_tokens - 1:
            logits = decode_step(model, token, cache)
    return tokens, times


def step_seconds(model: Llama, input_ids: torch.Tensor, steps: int, cache=None) -> list[float]:
    """With a cache: prefill input_ids [1, T], then the duration of each of `steps` decode steps."""
    _, times = timed_generation(model, input_ids, steps + 1, cache)
    return [b - a for a, b in zip(times, times[1:])]


def decode_step_seconds(model: Llama, prompt_ids: torch.Tensor, use_cache: bool, repeats: int = 3) -> float:
    """The fastest of `repeats` decode steps at position T, after the prompt prompt_ids [1, T] and a warm-up
    step (labkit.timing.best_seconds, so the run log keeps it).

    With the cache the prompt is prefilled once and each step runs one token against T cached keys and
    values; without it each step runs the model over all T + 1 tokens. The fastest step is the one
    least disturbed by anything else the machine was doing.

        >>> decode_step_seconds(model, filler_ids(tokenizer, 256), use_cache=False)
        0.58
    """
    check_model("model", model)
    check_tensor("prompt_ids", prompt_ids, "[1, T] of token ids", dims=2)
    check_int("repeats", repeats, minimum=1)
    position = prompt_ids.shape[1]
    # repeats steps after a warm-up step, each one position on (with the cache, each grows it by one)
    cache = (
        prefill(model, prompt_ids, max_length=position + repeats + 1)[1] if use_cache else NoCache(prompt_ids)
    )
    token = torch.tensor([13], device=prompt_ids.device)  # any next token will do for timing
    return best_seconds(lambda: decode_step(model, token, cache), repeats)


def fit_nonnegative(columns: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """Least squares y ~ sum(c_i * columns[i]) with every c_i >= 0: the best of the unconstrained fits on
    each subset of the columns whose coefficients all come out non-negative.

    Timing noise on a busy machine cannot then bend a fit into, say, a negative n² term.
    columns: arrays of shape [N]; y: [N]; returns the coefficients [len(columns)].

        >>> n = np.arange(1.0, 9.0)
        >>> fit_nonnegative([n**2, n, np.ones_like(n)], 2 * n**2 + 3)
        array([2., 0., 3.])
    """
    check_items("columns", columns, "arrays [N] (numpy)", of=np.ndarray)
    if not isinstance(y, np.ndarray) or any(column.shape != y.shape for column in columns):
        raise TypeError(f"y must be an array [N] of the columns' shape, got {type(y).__name__}.")
    design = np.stack(columns, axis=1)
    best, best_error = np.zeros(len(columns)), np.inf
    for mask in range(1, 2 ** len(columns)):
        chosen = [i for i in range(len(columns)) if mask >> i & 1]
        coefficients = np.linalg.lstsq(design[:, chosen], y, rcond=None)[0]
        if (coefficients >= 0).all():
            full = np.zeros(len(columns))
            full[chosen] = coefficients
            error = np.sum((design @ full - y) ** 2)
            if error < best_error:
                best, best_error = full, error
    return best


def filler_ids(tokenizer, n_tokens: int) -> torch.Tensor:
    """[1, n_tokens] token ids of ordinary prose (repeated), to stand in for a long prompt."""
    check_record("tokenizer", tokenizer, "a tokenizer (as load_model returns it)", has=("__call__", "decode"))
    check_int("n_tokens", n_tokens, minimum=1)
    piece = tokenizer(FILLER, add_special_tokens=False)["input_ids"]
    ids = (piece * (n_tokens // len(piece) + 1))[:n_tokens]
    return torch.tensor([ids])


def cache_vs_recompute(
    model: Llama, prompt: torch.Tensor, new_tokens: int, repeats: int
) -> tuple[float, float, bool]:
    """Seconds for N new tokens with the cache (median of `repeats`) and without it (once: minutes at N = 512),
    and whether both gave the same tokens."""
    progress("kvcache", f"{new_tokens} new tokens with the cache, {repeats} runs")
    cached_runs = [timed_generation(model, prompt, new_tokens) for _ in range(repeats)]
    cached_s = statistics.median(times[-1] for _, times in cached_runs)
    progress("kvcache", f"{new_tokens} new tokens without the cache, 1 run (the slow one)")
    recomputed_tokens, recomputed_times = timed_generation(model, prompt, new_tokens, NoCache())
    return cached_s, recomputed_times[-1], recomputed_tokens == cached_runs[0][0]


def time_per_token_by_position(
    model: Llama, tokenizer, near: int, far: int, steps: int, repeats: int
) -> tuple[float, float]:
    """Median seconds per decode step with the cache at position `near` and at `far` (alternated)."""
    progress("kvcache", f"time per token at positions {near} and {far}")
    per_step = {near: [], far: []}
    for _ in range(repeats):
        for position in (near, far):
            per_step[position] += step_seconds(model, filler_ids(tokenizer, position), steps)
    return statistics.median(per_step[near]), statistics.median(per_step[far])


def prefill_decode_paged(
    model: Llama, tokenizer, prompt_length: int, steps: int, repeats: int
) -> tuple[float, float, float]:
    """Tokens/s of a `prompt_length` prefill, of decode right after it, and of decode with a paged cache."""
    progress("kvcache", f"prefill of {prompt_length} tokens vs decode, contiguous and paged")
    long_prompt = filler_ids(tokenizer, prompt_length)
    prefill_s, decode_s, paged_s = [], [], []
    block_size = 16
    pool = BlockPool.for_model(
        model, n_blocks=(prompt_length + steps + 2) // block_size + 2, block_size=block_size
    )
    for _ in range(repeats):
        prefill_s.append(time_once(lambda: prefill(model, long_prompt, max_length=prompt_length + 1))[1])
        decode_s += step_seconds(model, long_prompt, steps)
        paged_cache = pool.new_cache(max_length=prompt_length + steps + 1)
        paged_s += step_seconds(model, long_prompt, steps, paged_cache)
        paged_cache.free()
    return (
        prompt_length / statistics.median(prefill_s),
        1 / statistics.median(decode_s),
        1 / statistics.median(paged_s),
    )


@dataclass(frozen=True)
class KVCacheMeasurements:
    """One run's numbers, for the printed summary and the JSON records."""

    new_tokens: int  # tokens generated with and without the cache
    cached_s: float  # seconds for new_tokens with the cache (median of the runs)
    recomputed_s: float  # ... without it (one run)
    same_tokens: bool  # whether both gave the same tokens
    near: int  # the two positions whose time per token is compared
    far: int
    tpot_near: float  # seconds per decode step with the cache at `near`, and at `far`
    tpot_far: float
    prompt_length: int  # the prompt of the prefill vs decode and paged vs contiguous rows
    prefill_rate: float  # tokens/s of its prefill
    decode_rate: float  # tokens/s of decode right after it, contiguous cache
    paged_rate: float  # ... paged cache


def measure_all(repeats: int, quick: bool) -> KVCacheMeasurements:
    """Load SmolLM2-135M on labkit's Llama and take every measurement of the bench (smaller with quick)."""
    new_tokens = 8 if quick else 512
    near, far = (16, 64) if quick else (64, 1024)
    prompt_length = 32 if quick else 512
    steps = 3 if quick else 16
    model, tokenizer = load_model("smollm2-135m", impl="labkit")
    prompt = torch.tensor([tokenizer(BENCH_PROMPT)["input_ids"]])
    timed_generation(model, prompt, 4)  # warm-up
    cached_s, recomputed_s, same_tokens = cache_vs_recompute(model, prompt, new_tokens, repeats)
    tpot_near, tpot_far = time_per_token_by_position(model, tokenizer, near, far, steps, repeats)
    rates = prefill_decode_paged(model, tokenizer, prompt_length, steps, repeats)
    return KVCacheMeasurements(
        new_tokens, cached_s, recomputed_s, same_tokens, near, far, tpot_near, tpot_far, prompt_length, *rates
    )


def print_summary(m: KVCacheMeasurements, repeats: int) -> None:
    """The bench's table: a line per measurement, with its aim where it has one."""
    print(f"kvcache: SmolLM2-135M fp32 on labkit's Llama, batch 1, greedy, median of {repeats}")
    print(f"machine: {machine_name()}")
    print(
        f"{m.new_tokens} new tokens:      with cache {m.cached_s:8.2f} s   without {m.recomputed_s:8.2f} s   "
        f"speed-up {m.recomputed_s / m.cached_s:6.1f}x  (aim >= 10x; same tokens: {m.same_tokens})"
    )
    print(
        f"time per token:      position {m.near}: {m.tpot_near * 1e3:7.1f} ms   position {m.far}: "
        f"{m.tpot_far * 1e3:7.1f} ms   ratio {m.tpot_far / m.tpot_near:5.2f}  (aim <= 1.25)"
    )
    print(
        f"prefill vs decode:   prefill {m.prompt_length} tokens {m.prefill_rate:8.1f} tokens/s   decode batch 1 "
        f"{m.decode_rate:6.1f} tokens/s   ratio {m.prefill_rate / m.decode_rate:6.1f}x"
    )
    print(
        f"paged vs contiguous: decode at position {m.prompt_length}: paged {m.paged_rate:6.1f} tokens/s, "
        f"contiguous {m.decode_rate:6.1f} tokens/s   ratio {m.paged_rate / m.decode_rate:5.2f}"
    )


def records(m: KVCacheMeasurements) -> list[dict]:
    """The bench's four comparisons, each labkit's number against its baseline."""
    return [
        comparison(
            "kvcache_new_tokens",
            "tokens_per_second",
            m.new_tokens / m.cached_s,
            m.new_tokens / m.recomputed_s,
            f"no cache (recompute the prefix), {m.new_tokens} new tokens",
        ),
        comparison(
            "kvcache_time_per_token_by_position",
            "seconds_per_token",
            m.tpot_far,
            m.tpot_near,
            f"with the cache: position {m.far} vs position {m.near}",
        ),
        comparison(
            "prefill_vs_decode",
            "tokens_per_second",
            m.prefill_rate,
            m.decode_rate,
            f"prefill of a {m.prompt_length}-token prompt vs decode at batch 1",
        ),
        comparison(
            "paged_vs_contiguous",
            "tokens_per_second",
            m.paged_rate,
            m.decode_rate,
            f"decode at position {m.prompt_length}: paged cache vs contiguous cache",
        ),
    ]


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    measured = measure_all(repeats, quick)
    print_summary(measured, repeats)
    return records(measured)
