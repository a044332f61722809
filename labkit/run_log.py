"""The run log: every number labkit's timing measured in this process, so that a checker can tell a reading
of the student's own run from a number typed in (or copied from the saved notebook, or another machine).

labkit.timing records what each of its functions returns and each single timing behind it; nothing else
writes here. A checker that takes a measured time or rate asks `measured(value)`: the exact float a timing
returned is in the log, a typed 2.0 is not (a float from a clock is never a round number by chance).

    >>> from labkit.timing import best_seconds
    >>> seconds = best_seconds(lambda: sum(range(1000)), repeats=3)
    >>> measured(seconds), measured(2.0)
    (True, False)
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

LOG_SIZE = 100_000  # numbers kept; the oldest go first (a notebook records a few thousand)
_log: deque[float] = deque(maxlen=LOG_SIZE)


def record(values: Iterable[float]) -> None:
    """Add measured numbers (seconds, tokens per second) to the log."""
    _log.extend(float(value) for value in values)


def measured(value: object) -> bool:
    """Whether `value` is a number labkit's timing measured in this process (to the last bit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return float(value) in _log
