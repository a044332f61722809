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

from labkit.core.arguments import check_int

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
