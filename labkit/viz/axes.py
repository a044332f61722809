"""Log axes a reader can read: major ticks at round numbers labelled as plain numbers (20, 50, 100, 200,
not 10², with no unlabelled minor ticks), for throughputs that span a decade or two (notebooks 10, 11).

    >>> ax.set(xscale="log", yscale="log", ylabel="tokens / s")
    >>> plain_log_ticks(ax.yaxis)                       # 20, 50, 100, 200: whatever the limits hold
    >>> plain_log_ticks(ax.xaxis, [1, 2, 4, 8, 16, 32])  # the measured batch sizes, and only those
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib.axis import Axis
from matplotlib.ticker import FixedLocator, FuncFormatter, Locator, MaxNLocator, NullLocator

SPARSE, DENSE = (1, 2, 5), (1, 1.5, 2, 3, 4, 5, 7)  # tick mantissas per decade


def round_log_ticks(low: float, high: float) -> list[float]:
    """Round numbers from low to high (both > 0) for a log axis: 1, 2, 5 per decade; 1, 1.5, 2, 3, 4, 5, 7
    where that gives fewer than 3; a few evenly spaced ones where even that does.

        >>> round_log_ticks(12, 260)
        [20.0, 50.0, 100.0, 200.0]
    """
    if not 0 < low <= high:
        raise ValueError(f"A log axis needs 0 < low <= high, got {low} and {high}.")
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    for mantissas in (SPARSE, DENSE):
        ticks = [float(f"{m}e{d}") for d in decades for m in mantissas if low <= float(f"{m}e{d}") <= high]
        if len(ticks) >= 3:
            return ticks
    return [float(t) for t in MaxNLocator(3).tick_values(low, high) if low <= t <= high]


def plain_number(value: float, _position: int | None = None) -> str:
    """'1,500', '20', '0.5': a tick label without powers of ten (a matplotlib formatter's signature)."""
    return f"{round(value):,}" if value >= 1 and value == round(value) else f"{value:g}"


class RoundLogLocator(Locator):
    """Major ticks at round_log_ticks of the axis's current limits, so they follow a later change of them."""

    def __call__(self) -> list[float]:
        return self.tick_values(*self.axis.get_view_interval())

    def tick_values(self, vmin: float, vmax: float) -> list[float]:
        low, high = sorted((vmin, vmax))
        return round_log_ticks(low, high) if low > 0 else []


def plain_log_ticks(axis: Axis, ticks: Sequence[float] | None = None) -> None:
    """Label a log axis with plain numbers: at `ticks` (e.g. the measured batch sizes), or by default at
    round numbers within its limits; its minor ticks go, since they carry no label."""
    axis.set_major_locator(RoundLogLocator() if ticks is None else FixedLocator(list(ticks)))
    axis.set_major_formatter(FuncFormatter(plain_number))
    axis.set_minor_locator(NullLocator())
