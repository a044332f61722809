"""Accuracy on a handful of items, with the uncertainty that a handful leaves (notebook 14).

Right on 9 of 60 items is 15 %, but another 60 items of the same kind could easily give 10 % or 25 %:
each item is a coin flip with the model's unknown success rate p. A **95 % confidence interval** says
which rates are plausible after k successes in n trials. The textbook interval p ± 1.96 sqrt(p(1-p)/n)
(Wald's) is too narrow for small n and collapses to a single point at 0 of n or n of n. The **Wilson
score interval** (Wilson 1927; recommended by Brown, Cai & DasGupta 2001) inverts the score test instead:

    centre = (p + z²/2n) / (1 + z²/n)
    half   = z / (1 + z²/n) * sqrt(p(1-p)/n + z²/4n²)        p = k/n, z = 1.96 for 95 %

It always lies inside [0, 1], and it is never empty: 0 of 20 still allows rates up to 16 %. Two methods
whose intervals overlap widely have not been told apart by the run; two methods on the same items are
told apart by a paired test instead (`paired_with`, labkit.compute.paired), which an interval cannot be.

    >>> accuracy([True, False, False, True, False])
    Accuracy(correct=2, total=5)
    >>> str(accuracy([True, False, False, True, False]))
    '40 % [12-77 %] (2 of 5)'
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from labkit.compute.paired import PairedTest, mcnemar
from labkit.core.arguments import check_int

Z95 = 1.959964  # the standard normal's 97.5th percentile: a two-sided 95 % interval


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """(low, high): the Wilson score interval for a success rate, after `successes` of `trials`.

    >>> [round(x, 3) for x in wilson_interval(9, 60)]
    [0.081, 0.261]
    >>> [round(x, 3) for x in wilson_interval(0, 20)]
    [0.0, 0.161]
    """
    check_int("trials", trials, minimum=1)
    check_int("successes", successes, minimum=0, maximum=trials, note="at most trials")
    if isinstance(z, bool) or not isinstance(z, (int, float)) or not z > 0:
        raise ValueError(f"z must be a number above 0 (1.96 for a 95 % interval), got {z!r}.")
    p, n = successes / trials, trials
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact ends where rounding would leave a hair
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True)
class Accuracy:
    """How many of `total` items were right, with the rate and its 95 % Wilson interval; `flags`, one True or
    False per item in order, where it was scored item by item (accuracy(...)), for a paired test."""

    correct: int
    total: int
    flags: tuple[bool, ...] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_int("total", self.total, minimum=1, note="items scored")
        check_int("correct", self.correct, minimum=0, maximum=self.total, note="at most total")

    @property
    def rate(self) -> float:
        """correct / total, in [0, 1]."""
        return self.correct / self.total

    @property
    def interval(self) -> tuple[float, float]:
        """(low, high) of the 95 % Wilson interval, in [0, 1]."""
        return wilson_interval(self.correct, self.total)

    def overlaps(self, other: Accuracy) -> bool:
        """Whether the two 95 % intervals overlap: if they do, the run has not told the two rates apart.

        >>> Accuracy(9, 60).overlaps(Accuracy(12, 60)), Accuracy(9, 60).overlaps(Accuracy(40, 60))
        (True, False)
        """
        (low, high), (other_low, other_high) = self.interval, other.interval
        return low <= other_high and other_low <= high

    def paired_with(self, other: Accuracy) -> PairedTest:
        """McNemar's paired test of this method (first) against `other` on the same items.

        >>> accuracy([True, True, False]).paired_with(accuracy([False, True, False])).only_first
        1
        """
        if not isinstance(other, Accuracy):
            raise ValueError(f"other must be an Accuracy (from accuracy(...)), got {type(other).__name__}.")
        if self.flags is None or other.flags is None:
            raise ValueError(
                "a paired test needs each item's flag: score both methods with accuracy(...) (or a run's "
                ".accuracy(...)), not Accuracy(correct, total)."
            )
        return mcnemar(self.flags, other.flags)

    def __str__(self) -> str:
        low, high = self.interval
        return (
            f"{100 * self.rate:.0f} % [{100 * low:.0f}-{100 * high:.0f} %] ({self.correct} of {self.total})"
        )


def accuracy(correct: Iterable[bool]) -> Accuracy:
    """The Accuracy of one right-or-wrong flag per item.

    >>> accuracy(answer == item.answer for answer, item in zip(answers, items))
    Accuracy(correct=9, total=60)
    """
    flags = list(correct)
    if not flags or not all(isinstance(flag, bool) for flag in flags):
        raise ValueError(
            "correct must hold one True or False per item (at least one item), got "
            f"{flags[:5]!r}{' ...' if len(flags) > 5 else ''}."
        )
    return Accuracy(sum(flags), len(flags), tuple(flags))
