"""Two methods on the same items: a paired test (McNemar's), not two intervals side by side (notebook 14).

Greedy decoding and a vote over 16 samples answer the same 60 sums. Items both get right, or both get
wrong, say nothing about which method is better; only the items where exactly one is right do. If the
two were equally good, each such item would be a fair coin: "only the first right" as likely as "only the
second". McNemar's exact test asks how surprising the split is under that coin: with b items only the
first got right and c only the second, the two-sided p-value is

    p = min(1, 2 * P(X <= min(b, c)))        X ~ Binomial(b + c, 1/2)

A p-value under 0.05 tells the two apart at the 5 % level. Pairing is stronger than comparing two 95 %
intervals: the intervals each carry the spread of the items, which pairing cancels, so two intervals can
overlap while the paired test tells the methods apart (and overlapping intervals never prove a tie).

    >>> paired = mcnemar([True, True, False, False, True], [False, True, False, False, False])
    >>> paired.only_first, paired.only_second, round(paired.p_value, 3)
    (2, 0, 0.5)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.05  # a p-value below this tells the two methods apart


@dataclass(frozen=True)
class PairedTest:
    """McNemar's exact test on two methods' right-or-wrong flags for the same items."""

    only_first: int  # items only the first method got right (b)
    only_second: int  # items only the second got right (c)
    both: int  # items both got right
    neither: int  # items both got wrong

    @property
    def p_value(self) -> float:
        """Two-sided: how likely a split at least this uneven is if each disagreement were a fair coin."""
        disagreements, fewer = self.only_first + self.only_second, min(self.only_first, self.only_second)
        tail = sum(math.comb(disagreements, k) for k in range(fewer + 1)) / 2**disagreements
        return min(1.0, 2 * tail)

    @property
    def apart(self) -> bool:
        """Whether the test tells the two methods apart at the 5 % level (p < 0.05)."""
        return self.p_value < LEVEL

    def __str__(self) -> str:
        return (
            f"only the first right on {self.only_first}, only the second on {self.only_second} "
            f"(both {self.both}, neither {self.neither}): p = {self.p_value:.3g}, "
            f"{'apart' if self.apart else 'not told apart'} at the 5 % level"
        )


def mcnemar(first: Sequence[bool], second: Sequence[bool]) -> PairedTest:
    """The paired test of two methods from one right-or-wrong flag per item each, the items in one order.

    >>> str(mcnemar([True] * 9 + [False] * 51, [True] * 2 + [False] * 58))
    'only the first right on 7, only the second on 0 (both 2, neither 51): p = 0.0156, apart at the 5 % level'
    """
    first, second = list(first), list(second)
    for name, flags in (("first", first), ("second", second)):
        if not flags or not all(isinstance(flag, bool) for flag in flags):
            raise ValueError(
                f"{name} must hold one True or False per item (at least one), got {flags[:5]!r}."
            )
    if len(first) != len(second):
        raise ValueError(
            f"a paired test needs both methods on the same items: {len(first)} flags against {len(second)}."
        )
    pairs = list(zip(first, second))
    return PairedTest(
        only_first=pairs.count((True, False)),
        only_second=pairs.count((False, True)),
        both=pairs.count((True, True)),
        neither=pairs.count((False, False)),
    )
