"""Timing runs that compete for a noisy machine: interleaved rounds, and medians with their spread.

Timing plain decoding first and speculative decoding afterwards blames any change of the machine's load
on whichever ran then. Here every round times each run once (plain, speculative, plain, speculative, ...),
so a change of load hits them alike, and a figure is the median of the rounds with its min-max spread.

    >>> seconds = interleaved_seconds([plain_run, speculative_run], repeats=3)   # [[s, s, s], [s, s, s]]
    >>> Spread.of([12.1, 12.8, 11.9])
    Spread(median=12.1, low=11.9, high=12.8)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    """The median of a few timed repeats and their range."""

    median: float
    low: float  # the smallest repeat
    high: float  # the largest repeat

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        """Median, min and max of at least one value.

            >>> Spread.of([3.0, 1.0, 2.0])
            Spread(median=2.0, low=1.0, high=3.0)
        """
        if not values:
            raise ValueError("Spread.of needs at least one value.")
        return cls(statistics.median(values), min(values), max(values))

    def format(self, digits: int = 2, unit: str = "") -> str:
        """'2.61x [2.40-2.75]': the median, then the range of the repeats."""
        return f"{self.median:.{digits}f}{unit} [{self.low:.{digits}f}-{self.high:.{digits}f}]"


def interleaved_seconds(runs: Sequence[Callable[[], object]], repeats: int, warmup: bool = False,
                        progress: Callable[[Iterable], Iterable] | None = None) -> list[list[float]]:
    """Seconds of each run(), timed in turns: `repeats` rounds, each timing every run once, in order.

    warmup: one untimed round first (as labkit.bench.interleaved_tokens_per_second does); leave it out when
    the runs are already warm and time is short. progress(iterable) wraps the rounds (e.g. tqdm).
    Returns one list of `repeats` seconds per run.

        >>> interleaved_seconds([lambda: sum(range(1000)), lambda: sum(range(10))], repeats=3)
        [[2.1e-05, 1.9e-05, 2.0e-05], [1.1e-06, 9.0e-07, 9.5e-07]]
    """
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}.")
    if warmup:
        for run in runs:
            run()
    seconds: list[list[float]] = [[] for _ in runs]
    for _ in (progress or iter)(range(repeats)):
        for index, run in enumerate(runs):
            start = time.perf_counter()
            run()
            seconds[index].append(time.perf_counter() - start)
    return seconds
