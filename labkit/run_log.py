"""The run log: every number and result labkit measured in this process, so that a checker can tell a reading
of the student's own run from a number typed in (or copied from the saved notebook, or another machine), or
a result built by hand.

labkit.timing records what each of its functions returns and each single timing behind it; the other
functions that measure (a decode step's costs, a stream's timings, a speculative run's statistics, an
accuracy, a rate of a real engine) record what they return too. A checker asks `measured(value)`:

- a number (seconds, tokens per second, a ratio of two timings) counts when the exact float is in the log: a
  typed 2.0 is not (a float from a clock is never a round number by chance);
- any other result (an Accuracy, a stream's timings, a run's statistics) counts when it is the very object
  a measuring function returned: one built by hand with the same fields is not.

    >>> from labkit.timing import best_seconds
    >>> seconds = best_seconds(lambda: sum(range(1000)), repeats=3)
    >>> measured(seconds), measured(2.0)
    (True, False)
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import TypeVar

LOG_SIZE = 100_000  # numbers kept; the oldest go first (a notebook records a few thousand)
RESULTS_SIZE = 10_000  # result objects kept (held, so that no other object takes a forgotten one's id)
_log: deque[float] = deque(maxlen=LOG_SIZE)
_results: deque[object] = deque(maxlen=RESULTS_SIZE)
R = TypeVar("R")


def record(values: Iterable[float]) -> None:
    """Add measured numbers (seconds, tokens per second) to the log."""
    _log.extend(float(value) for value in values)


def record_result(result: R) -> R:
    """Add a measured result object (not a number) to the log, and return it: `return record_result(x)`.

    >>> stats = record_result(run.stats)
    >>> measured(stats)
    True
    """
    _results.append(result)
    return result


def measured(value: object) -> bool:
    """Whether `value` is a number labkit measured in this process (to the last bit), or a result object a
    measuring function returned (this very object)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return math.isfinite(value) and float(value) in _log
    return any(value is result for result in _results)
