"""Capacity: how much one serving engine holds (seats, KV blocks, tokens per step) and its defaults.

Three numbers bound a continuous-batching engine, under the names vLLM gives them:

- `max_num_seqs`: seats, the sequences that decode side by side (a batch row each);
- `n_blocks` x `block_size`: the paged KV pool, in tokens. By default each seat gets room for
  DEFAULT_TOKENS_PER_SEQ tokens, or the model's whole context if that is shorter;
- `max_num_batched_tokens`: what one forward pass may feed, the step's token budget. By default a whole
  context (a prompt goes in at once, in a step of its own), or DEFAULT_CHUNKED_BUDGET with chunked
  prefill, shared by every decode's token and the prompt chunks beside them.

The pool is the number that costs memory. For SmolLM2-135M in float32 a token's keys and values take
30 layers x 2 (K, V) x 3 KV heads x 64 dims x 4 bytes = 46,080 bytes, so the default pool of 8 seats,
8 x 1024 tokens = 512 blocks of 16, takes 8192 x 46,080 bytes = 377 MB.

    >>> default_blocks(max_num_seqs=8, context=8192, block_size=16)
    512
    >>> default_budget(None, chunked_prefill=True, context=8192, max_num_seqs=8)
    256
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from labkit.core.arguments import check_int

if TYPE_CHECKING:
    from labkit.serving.scheduler import SchedulerConfig

DEFAULT_TOKENS_PER_SEQ = (
    1024  # the default pool holds this many tokens per sequence (or the context, if less)
)
DEFAULT_CHUNKED_BUDGET = (
    256  # tokens per step with chunked prefill, unless max_num_batched_tokens says otherwise
)


def default_budget(budget: int | None, chunked_prefill: bool, context: int, max_num_seqs: int) -> int:
    """Tokens per step: as given; else a whole context (prefill first) or DEFAULT_CHUNKED_BUDGET (chunked)."""
    if budget is not None:
        return budget
    return max(DEFAULT_CHUNKED_BUDGET if chunked_prefill else context, max_num_seqs)


def default_blocks(max_num_seqs: int, context: int, block_size: int) -> int:
    """KV blocks for DEFAULT_TOKENS_PER_SEQ tokens a seat (the context, if shorter), rounded up.

    >>> default_blocks(max_num_seqs=4, context=512, block_size=16)    # 4 x 512 tokens
    128
    """
    return math.ceil(max_num_seqs * min(context, DEFAULT_TOKENS_PER_SEQ) / block_size)


def default_window_blocks(max_num_seqs: int, window: int, block_size: int, budget: int, n_blocks: int) -> int:
    """Blocks of a Gemma3's sliding-window layers' pool that are never short of what the global pool admits.

    A step that feeds a sequence tokens c .. c + n - 1 holds the local blocks of keys c - W + 1 .. c + n - 1
    (W the window; local blocks are taken one scheduled chunk at a time): W - 1 + n positions, which touch
    at most f(n) = ceil((W - 2 + n) / B) + 1 blocks of B tokens (n = 0: a prompt that waits a step; n = 1:
    a decode). With W - 2 = q B + r (0 <= r < B), f(n) - f(0) counts block boundaries crossed: the first
    after g = (B - r) % B + 1 tokens, each next after B more. Over at most S = max_num_seqs seats (a sample
    still to fork counts; its first copy is one block) feeding at most T = budget tokens in all, the most
    boundaries are k = min(S, T // g) first ones and (T - k g) // B more, so the pool never holds more than

        S * f(0) + k + (T - k * g) // B

    blocks while a step runs, whatever arrives: admission, a chunk's blocks and a decode's never wait on the
    local pool (the tiny Gemma3's random workloads in tests/serving/test_window_pool.py reach it). It is
    also capped at n_blocks, the global pool's size: a local table never has more entries than its global
    one (with prefill first, T is a whole context, and this cap is what binds).

    >>> default_window_blocks(max_num_seqs=8, window=512, block_size=16, budget=256, n_blocks=512)
    286
    """
    q, r = divmod(window - 2, block_size) if window >= 2 else (0, 0)
    first = (block_size - r) % block_size + 1  # tokens to a sequence's first new block boundary
    crossed = min(max_num_seqs, budget // first)
    idle = q + (1 if r else 0) + 1  # f(0): the blocks of W - 1 keys, worst aligned
    return min(max_num_seqs * idle + crossed + (budget - crossed * first) // block_size, n_blocks)


def check_sizes(
    max_num_seqs: object,
    block_size: object,
    n_blocks: object,
    max_num_batched_tokens: object,
    step_history: object,
    max_waiting: object,
) -> None:
    """Refuse, by name, a size the Engine cannot take: max_num_seqs, block_size, n_blocks and
    max_num_batched_tokens are whole numbers from 1, step_history and max_waiting from 0; the last four
    may be None (their default).

        >>> check_sizes(8, 16, None, None, None, -1)
        Traceback (most recent call last):
        InvalidArgument: max_waiting must be a whole number of 0 or more, got -1.
    """
    check_int("max_num_seqs", max_num_seqs, minimum=1)
    check_int("block_size", block_size, minimum=1)
    for name, value in (
        ("n_blocks", n_blocks),
        ("max_num_batched_tokens", max_num_batched_tokens),
        ("step_history", step_history),
        ("max_waiting", max_waiting),
    ):
        if value is not None:  # None: the default
            check_int(name, value, minimum=0 if name in ("step_history", "max_waiting") else 1)


def window_pool_size(
    model: object, n_window_blocks: object, config: SchedulerConfig, block_size: int, n_blocks: int
) -> int | None:
    """Blocks of a Gemma3's sliding-window layers' pool: as given, or `default_window_blocks` (never short of
    what the global pool admits); None for a model without window layers, which must not be given one."""
    from labkit.core.gemma3 import Gemma3  # here, not at the top: it loads torch

    window = getattr(model.config, "sliding_window", None) if isinstance(model, Gemma3) else None
    if window is None:
        if n_window_blocks is not None:
            raise ValueError(
                f"n_window_blocks={n_window_blocks!r} sizes a Gemma3's sliding-window layers' pool; "
                f"{type(model).__name__} has none. Leave it None."
            )
        return None
    if n_window_blocks is not None:
        check_int("n_window_blocks", n_window_blocks, minimum=1)
        return n_window_blocks
    budget, seats = config.max_num_batched_tokens, config.max_num_seqs
    return default_window_blocks(seats, window, block_size, budget, n_blocks)
