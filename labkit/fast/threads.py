"""Thread settings as a measured step: how many torch threads decode fastest on this machine, now.

torch starts one intra-op thread per physical core. At batch 1 each matmul is small, and its threads
meet at a barrier after every op: on an idle machine two threads still beat one, but when another
process keeps a core busy, the thread that waits for it stalls every op and one thread can be several
times faster (llama.cpp behaves the same way). So the count is measured, not assumed.

    >>> best, seconds = fastest_thread_count(lambda: decode(model, 16))
    >>> with using_threads(best):
    ...     labkit.generate_text(model, tokenizer, prompt, max_new_tokens=128)
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

import torch

from labkit.core.arguments import check_int


def thread_candidates(cores: int | None = None) -> tuple[int, ...]:
    """1, 2, 4, ... up to the number of logical cores, and that number itself.

    >>> thread_candidates(6)
    (1, 2, 4, 6)
    """
    cores = cores or os.cpu_count() or 1
    powers = [2**i for i in range(cores.bit_length()) if 2**i <= cores]
    return tuple(sorted(set(powers) | {cores}))


def using_threads(count: int) -> AbstractContextManager[None]:
    """Run the block with torch.set_num_threads(count), then restore the count before it. The count is
    checked when called, not when the `with` block is entered.

        >>> with using_threads(2):
        ...     median_seconds(lambda: model(ids))
    """
    check_int("count", count, minimum=1)
    return threads_set(count)


@contextmanager
def threads_set(count: int) -> Iterator[None]:
    """using_threads' block, its count already checked."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def fastest_thread_count(
    run: Callable[[], object], candidates: Sequence[int] | None = None, repeats: int = 3
) -> tuple[int, dict[int, float]]:
    """Time run() under each thread count: (the fastest count, {count: median seconds}).

    Each count gets one untimed warm-up call; then the counts take turns, `repeats` rounds, so that
    a change in the machine's load mid-probe hits every count alike. torch's thread count is restored
    afterwards. run: a short piece of the real work, e.g. 16 decode steps.

        >>> fastest_thread_count(lambda: decode(model, 16), candidates=(1, 2))
        (1, {1: 0.61, 2: 2.9})
    """
    candidates = tuple(candidates or thread_candidates())
    check_int("repeats", repeats, minimum=1)
    if not candidates:
        raise ValueError(f"candidates must hold at least one thread count, got {candidates!r}.")
    times: dict[int, list[float]] = {count: [] for count in candidates}
    for round_ in range(repeats + 1):
        for count in candidates:
            with using_threads(count):
                start = time.perf_counter()
                run()
                if round_:  # round 0 is the warm-up
                    times[count].append(time.perf_counter() - start)
    seconds = {count: statistics.median(values) for count, values in times.items()}
    return min(seconds, key=seconds.get), seconds
