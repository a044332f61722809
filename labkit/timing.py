"""Timing, shared by the library, the benchmarks and the notebooks: repeats after a warm-up, their median
or best, and runs timed in turns so that a change of the machine's load hits them all alike. Each result
goes into the run log (labkit.run_log), where a checker finds the student's own measurements.

Every clock read waits for a GPU's queued work first (`synchronize`): a CUDA call returns before its
kernel ran, and a timer that does not wait measures the launch, not the work. On a CPU it does nothing.

    >>> median_seconds(lambda: a @ b, repeats=9)              # one function
    0.0151
    >>> interleaved_tokens_per_second([fp32_run, int4_run], repeats=3)   # several, in turns
    [12.8, 27.2]

A quick run (`LABKIT_QUICK=1`, which `make test` sets) times fewer repeats or sizes in the notebook cells
whose outputs the tests do not compare; the saved notebooks ran the full sizes (`make notebooks` sets 0):

    >>> full_or_quick(3, 1, "repeats")                        # under LABKIT_QUICK=1
    quick run (LABKIT_QUICK=1): repeats 1, not 3; the saved outputs ran 3
    1
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from labkit.core.arguments import check_int, check_text
from labkit.core.doors import check_callable, check_items
from labkit.run_log import record

QUICK_ENV_VAR = "LABKIT_QUICK"  # "1": time fewer repeats or sizes where no test compares the numbers
QUICK_VALUES = {"1": True, "true": True, "yes": True, "": False, "0": False, "false": False, "no": False}
T = TypeVar("T")


def quick() -> bool:
    """Whether this is a quick run: LABKIT_QUICK=1 (set by `make test`, so CI); unset or 0 is a full run.

    >>> quick()                                           # in JupyterLab, or under `make notebooks`
    False
    """
    value = os.environ.get(QUICK_ENV_VAR, "").strip().lower()
    if value not in QUICK_VALUES:
        raise ValueError(f"{QUICK_ENV_VAR}={os.environ[QUICK_ENV_VAR]!r}: use 1 (quick run) or 0 (full run).")
    return QUICK_VALUES[value]


def full_or_quick(full: T, quick_value: T, what: str) -> T:
    """`full`, or in a quick run `quick_value`, saying so in one printed line. For timing cells whose
    outputs the tests do not compare: the notebooks are saved from full runs, and say so.

        >>> full_or_quick([1, 2, 4, 8], [1, 8], "batch sizes")   # under LABKIT_QUICK=1
        quick run (LABKIT_QUICK=1): batch sizes [1, 8], not [1, 2, 4, 8]; the saved outputs ran [1, 2, 4, 8]
        [1, 8]
    """
    check_text("what", what, example="'batch sizes'")
    if not quick():
        return full
    print(f"quick run ({QUICK_ENV_VAR}=1): {what} {quick_value}, not {full}; the saved outputs ran {full}")
    return quick_value


def synchronize() -> None:
    """Wait for the GPU's queued work, where CUDA is in use; nothing on a CPU."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def clock() -> float:
    """time.perf_counter() once the device's queued work is done."""
    synchronize()
    return time.perf_counter()


def check_repeats(repeats: object) -> None:
    """A ValueError unless repeats is a whole number of timed calls, at least 1."""
    check_int("repeats", repeats, minimum=1)


def repeat_seconds(run: Callable[[], object], repeats: int = 5) -> list[float]:
    """Wall time of each of `repeats` calls of run(), after one untimed warm-up call."""
    check_callable("run", run, "a function of no arguments that does the work once")
    check_repeats(repeats)
    run()
    times = []
    for _ in range(repeats):
        start = clock()
        run()
        times.append(clock() - start)
    record(times)
    return times


def time_once(run: Callable[[], T]) -> tuple[T, float]:
    """run() once, timed: (what it returned, its wall seconds), the seconds kept in the run log. For work that
    is not repeated, because its result is used (a request whose answer is read).

    >>> answer, seconds = time_once(lambda: client.chat.completions.create(model=MODEL, messages=chat))
    """
    check_callable("run", run, "a function of no arguments that does the work once")
    start = clock()
    result = run()
    seconds = clock() - start
    record([seconds])
    return result, seconds


def best_seconds(run: Callable[[], object], repeats: int = 5) -> float:
    """Shortest wall time of run() over `repeats` calls, after one untimed warm-up call: the run least
    disturbed by anything else the machine was doing (for what a machine *can* do: bandwidth, peak).

    >>> best_seconds(lambda: a @ b)
    0.0172
    """
    return min(repeat_seconds(run, repeats))  # one of the recorded times


def median_seconds(run: Callable[[], object], repeats: int = 5) -> float:
    """Median wall time of run() over `repeats` calls, after one untimed warm-up call.

    >>> median_seconds(lambda: torch.nn.functional.linear(x, weight), repeats=9)
    0.0151
    """
    median = statistics.median(repeat_seconds(run, repeats))
    record([median])
    return median


def median_tokens_per_second(run: Callable[[], int], repeats: int) -> float:
    """Median over `repeats` timed runs of run() -> tokens produced (after one untimed warm-up)."""
    check_repeats(repeats)
    run()
    rates = []
    for _ in range(repeats):
        start = clock()
        tokens = run()
        rates.append(tokens / (clock() - start))
    median = statistics.median(rates)
    record([*rates, median])
    return median


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


def interleaved_seconds(
    runs: Sequence[Callable[[], object]],
    repeats: int,
    warmup: bool = False,
    progress: Callable[[Iterable], Iterable] | None = None,
) -> list[list[float]]:
    """Seconds of each run(), timed in turns: `repeats` rounds, each timing every run once, in order.

    A change of the machine's load mid-way hits every run alike, where timing one run after another would
    blame it on whichever ran then. warmup: one untimed round first (the compile of a compiled path); leave
    it out when the runs are already warm and time is short. progress(iterable) wraps the rounds, warm-up
    included (e.g. tqdm). Returns one list of `repeats` seconds per run.

        >>> interleaved_seconds([lambda: sum(range(1000)), lambda: sum(range(10))], repeats=3)
        [[2.1e-05, 1.9e-05, 2.0e-05], [1.1e-06, 9.0e-07, 9.5e-07]]
    """
    check_repeats(repeats)
    seconds: list[list[float]] = [[] for _ in runs]
    for round_ in (progress or iter)(range(repeats + bool(warmup))):
        for index, run in enumerate(runs):
            start = clock()
            run()
            if round_ or not warmup:
                seconds[index].append(clock() - start)
    record(time for times in seconds for time in times)
    return seconds


def interleaved_tokens_per_second(
    runs: list[Callable[[], int]], repeats: int, progress: Callable | None = None, warmup: bool = True
) -> list[float]:
    """Median tokens/s of each run() -> tokens produced, timed in turns by interleaved_seconds: one
    untimed warm-up round (unless warmup is False: a check that the runs run, not of their speed), then
    `repeats` rounds in which every run is timed once.
    progress(iterable) wraps the rounds (e.g. tqdm); the default shows nothing.

        >>> interleaved_tokens_per_second([fp32_run, int4_run], repeats=3)
        [12.8, 27.2]
    """
    check_items("runs", runs, "functions of no arguments that return the tokens they produced", of=Callable)
    check_repeats(repeats)
    if not isinstance(warmup, bool):
        raise TypeError(f"warmup must be True or False (one untimed round first, or none), got {warmup!r}.")
    tokens: list[list[int]] = [[] for _ in runs]

    def counted(index: int) -> Callable[[], None]:
        return lambda: tokens[index].append(runs[index]())

    seconds = interleaved_seconds(
        [counted(i) for i in range(len(runs))], repeats, warmup=warmup, progress=progress
    )
    rates = [
        statistics.median(n / t for n, t in zip(counts[bool(warmup) :], times))
        for counts, times in zip(tokens, seconds)
    ]
    record(rates)
    return rates
