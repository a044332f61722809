"""One function names a decode step's regime from its measured terms and floors, with its margin, and says
"borderline" when a probe's own spread could move the step across a line (notebook 07).

A machine probe (read bandwidth, a matmul peak, the thread wake-up) is the median of a few repeats, and
its **spread** is their interquartile range as a share of that median (of 5 repeats: the 2nd and 4th
fastest): ±6 % says the middle half of the repeats spanned 6 % of the median, and one disturbed repeat
widens it no more than it moves the median. The regime is read as in labkit.fast.cost: the largest term
names it (overhead-, wake-bound; the KV cache: memory-bound); when the matmul kernels lead, their floors
do: **memory-bound** when the memory floor is at least SHARE of their time, else **compute-bound** when
the compute floor is, else **kernel-bound**.

Each of those choices is a line: a floor's share against SHARE, or the leading term against its rival
(the largest term that would name another regime) at a ratio of 1. The **margin** is share / line - 1,
for the nearest line whose crossing would change the label. A share within its probe's spread of its
line is **borderline**: the label is what the lines say, and the reading names both sides.

    >>> reading = regime_of(terms, {"memory": 0.48, "compute": 0.07}, {"memory": 0.08}, "float32")
    >>> reading.name
    'borderline memory-bound / kernel-bound'
    >>> reading.reason
    "the bandwidth probe's spread is ±8%, and 48% is within it of the 50% line"
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

SHARE = 0.5  # a floor at or above this share of the kernels' time names their regime (memory or compute)
NOT_A_FLOOR = 1.25  # a "floor" the kernels beat by more than this is no floor: its probe does not bound them
LABELS = ("overhead-bound", "wake-bound", "memory-bound", "compute-bound", "kernel-bound")
TERM_LABELS = {"overhead": "overhead-bound", "thread wake-ups": "wake-bound", "KV cache": "memory-bound"}
TIMING_WORDS = "the timing spread (the bandwidth and {dtype} peak probes)"  # stands in for the step's own
SPREAD_WORDS = {
    "memory": "the bandwidth probe's spread",
    "KV cache": "the bandwidth probe's spread",
    "compute": "the {dtype} peak probe's spread",
    "thread wake-ups": "the wake-up probe's spread",
    "overhead": "the overhead probe's spread",
    "matmul kernels": TIMING_WORDS,
}


class Probed(NamedTuple):
    """A machine probe's reading: the median of its repeats and their relative spread."""

    value: float  # the median of the repeats
    spread: float  # their interquartile range over the median (relative_spread)

    @classmethod
    def of(cls, repeats: Sequence[float]) -> Probed:
        """The median and relative spread of at least one repeat.

        >>> Probed.of([30e9, 31e9, 32e9, 33e9, 34e9])
        Probed(value=32000000000.0, spread=0.0625)
        """
        return cls(statistics.median(repeats), relative_spread(repeats))


def relative_spread(repeats: Sequence[float]) -> float:
    """The interquartile range of a probe's repeats over their median (0 for one repeat): of 5 repeats,
    (4th - 2nd) / 3rd in sorted order, so that one repeat disturbed by another process does not widen it.

    A median of zero (a probe whose repeats all vanished under the noise, as a step no slower than its
    matmuls alone) has no relative spread: 0 when the repeats agree, infinite when they do not.

    >>> relative_spread([30e9, 31e9, 32e9, 33e9, 40e9])    # (33 - 31) / 32; the disturbed 40 changes nothing
    0.0625
    >>> relative_spread([0.0, 0.0])
    0.0
    """
    if len(repeats) < 2:
        return 0.0
    low, _, high = statistics.quantiles(repeats, n=4, method="inclusive")
    middle = statistics.median(repeats)
    if middle == 0:
        return 0.0 if high == low else math.inf
    return (high - low) / middle


def percent(share: float) -> str:
    """A share in percent: '48%', or '0.4%' below one percent."""
    return f"{share:.1%}" if 0 < abs(share) < 0.01 else f"{share:.0%}"


def plus_minus(spread: float) -> str:
    """A spread as '±6%'; above 100 % as '±>100%' (the probe's repeats disagree: it was disturbed)."""
    return "±>100%" if spread > 1 else f"±{percent(spread)}"


@dataclass(frozen=True)
class Line:
    """One choice of the reading: a number against a line, the label across it, and the probe behind it."""

    share: float  # a floor's share of the kernels' time, or the leading term over its rival
    threshold: float  # SHARE, or 1.0 for a lead
    spread: float  # the relative spread of the probe behind the share
    spread_words: str  # that spread, in words
    alternative: str  # the label on the other side of the line
    reading: str  # the numbers, as a clause: "the kernels read at 48% of the read bandwidth"
    within: str  # the same when borderline: "48% is within it of the 50% line"

    @property
    def margin(self) -> float:
        return self.share / self.threshold - 1

    @property
    def borderline(self) -> bool:
        return self.spread > 0 and abs(self.margin) <= self.spread


@dataclass(frozen=True)
class Regime:
    """A step's regime with its margin: the plain label, the number nearest to changing it, that number's
    line and relative margin, the probe spread it is read against, and the label across the line when
    the number lies within that spread (borderline)."""

    label: str  # one of LABELS, read from the lines alone (what StepCosts.regime returns)
    share: float  # the number nearest to changing the label: a floor's share, or the leading term's lead
    threshold: float  # its line: SHARE for a floor's share, 1.0 for a lead
    margin: float  # share / threshold - 1: how far past (+) or short of (-) the line, relative
    spread: float  # the relative spread of the probe behind the share (0.0: not measured)
    alternative: str = ""  # the label across the line when borderline, else ""
    reason: str = ""  # one sentence with the numbers that say why

    @property
    def borderline(self) -> bool:
        return bool(self.alternative)

    @property
    def name(self) -> str:
        """The label, or 'borderline memory-bound / kernel-bound' (both sides, in LABELS order)."""
        if not self.borderline:
            return self.label
        first, second = sorted({self.label, self.alternative}, key=LABELS.index)
        return f"borderline {first} / {second}"

    def describe(self) -> str:
        """'kernel-bound, margin -30%: the kernels read at 35% of the read bandwidth; the line is 50% (...)'."""
        return f"{self.name}, margin {self.margin:+.0%}: {self.reason}"


def floors_label(shares: Mapping[str, float]) -> str:
    """What the matmul kernels' floors name: memory-, compute- or kernel-bound. A share above NOT_A_FLOOR is
    no floor (the probe does not bound these kernels: see disturbed_probe_notes) and names nothing."""
    if SHARE <= shares["memory"] <= NOT_A_FLOOR:
        return "memory-bound"
    return "compute-bound" if SHARE <= shares["compute"] <= NOT_A_FLOOR else "kernel-bound"


def floor_lines(shares: Mapping[str, float], spreads: Mapping[str, float], dtype: str) -> list[Line]:
    """The floors' lines whose crossing would change the kernels' label."""
    label, lines = floors_label(shares), []
    for floor, verb, of in (
        ("memory", "read", "the read bandwidth"),
        ("compute", "compute", f"the {dtype} peak"),
    ):
        share = shares[floor]
        across = floors_label({**shares, floor: 0.0 if share >= SHARE else 1.0})
        if across != label:
            lines.append(
                Line(
                    share,
                    SHARE,
                    spreads.get(floor, 0.0),
                    SPREAD_WORDS[floor].format(dtype=dtype),
                    across,
                    f"the kernels {verb} at {percent(share)} of {of}; the line is {percent(SHARE)}",
                    f"{percent(share)} is within it of the {percent(SHARE)} line",
                )
            )
    return lines


def lead_line(
    terms: Mapping[str, float], spreads: Mapping[str, float], labels: Mapping[str, str], dtype: str
) -> Line:
    """The largest term against its rival: the largest of the terms that would name another regime."""
    first, *others = sorted(terms, key=terms.get, reverse=True)
    rival = next(term for term in others if labels[term] != labels[first])
    spread, term = max((spreads.get(first, 0.0), first), (spreads.get(rival, 0.0), rival))
    lead, rival_ms = terms[first] / max(terms[rival], 1e-12), terms[rival] * 1e3
    first_words = f"the {first} ({terms[first] * 1e3:.2f} ms)"
    return Line(
        lead,
        1.0,
        spread,
        SPREAD_WORDS[term].format(dtype=dtype),
        labels[rival],
        f"{first_words}: {lead:.2f}x the {rival} ({rival_ms:.2f} ms)",
        f"{first_words} and the {rival} ({rival_ms:.2f} ms) lie within it of each other",
    )


def regime_of(
    terms: Mapping[str, float],
    shares: Mapping[str, float],
    spreads: Mapping[str, float],
    dtype: str = "float32",
) -> Regime:
    """The regime of a step from its terms {term: seconds} (labkit.fast.cost.TERMS), its floors' shares of
    the kernels' time {"memory", "compute"}, and the relative spread behind each {term or floor: spread}
    (missing: 0, not measured). The margin is to the nearest line that would change the label; a line
    within its spread makes the reading borderline (the nearest such line is the one named).

        >>> terms = {"overhead": 0.010, "thread wake-ups": 0.005, "matmul kernels": 0.039, "KV cache": 0.0}
        >>> regime_of(terms, {"memory": 0.48, "compute": 0.07}, {"memory": 0.08}).name
        'borderline memory-bound / kernel-bound'
    """
    if not {"memory", "compute"} <= set(shares) or set(terms) != {*TERM_LABELS, "matmul kernels"}:
        raise ValueError(
            f"regime_of needs the four terms {[*TERM_LABELS, 'matmul kernels']} and the shares 'memory' and "
            f"'compute'; got terms {sorted(terms)} and shares {sorted(shares)}."
        )
    labels = {**TERM_LABELS, "matmul kernels": floors_label(shares)}
    largest = max(terms, key=terms.get)
    lines = [lead_line(terms, spreads, labels, dtype)]
    if largest == "matmul kernels":  # the kernels lead: their floors' lines count too
        lines += floor_lines(shares, spreads, dtype)
    label, near = labels[largest], [line for line in lines if line.borderline] or lines
    line = min(near, key=lambda line: abs(line.margin))
    if line.borderline:
        reason = f"{line.spread_words} is {plus_minus(line.spread)}, and {line.within}"
        return Regime(label, line.share, line.threshold, line.margin, line.spread, line.alternative, reason)
    measured = plus_minus(line.spread) if line.spread > 0 else "not measured"
    reason = f"{line.reading} ({line.spread_words}: {measured})"
    return Regime(label, line.share, line.threshold, line.margin, line.spread, "", reason)


def disturbed_probe_notes(shares: Mapping[str, float], dtype: str, short: bool = False) -> list[str]:
    """A note for each floor the step's kernels beat, which no kernel can: a share above 1 says the probe
    measured less than the machine can do (it was likely disturbed), or, for the memory floor, that the
    weights were read from a cache. [] when neither is above 1. short: one line each, without the share
    (a table prints it), so that the steps of one table share their notes.

        >>> disturbed_probe_notes({"memory": 0.45, "compute": 1.12}, "float32")[0][:70]
        'note: this step's kernels ran above the measured float32 peak (1.12x)'
    """
    notes = []
    if shares["compute"] > 1 and short:
        notes.append(
            f"note: kernels above the measured {dtype} peak (a peak share over 100%): a disturbed probe, or "
            "a faster path than the probe's (StepCosts.report explains)"
        )
    elif shares["compute"] > 1:
        notes.append(
            f"note: this step's kernels ran above the measured {dtype} peak ({shares['compute']:.2f}x): the "
            "peak probe was disturbed (another process on the cores: re-run measure_machine()), or these "
            f"kernels take a faster path than the probe's [1024, 1024] product (a {dtype} product on a CPU "
            "without instructions for it can be slow as a matrix product and fast as a vector one)"
        )
    if shares["memory"] > 1 and short:
        notes.append(
            "note: kernels above the measured read bandwidth (a bw share over 100%): a disturbed probe, or "
            "weights read from a cache (StepCosts.report explains)"
        )
    elif shares["memory"] > 1:
        notes.append(
            f"note: this step's kernels read their weights faster than the measured read bandwidth "
            f"({shares['memory']:.2f}x): the bandwidth probe was likely disturbed (another process on the "
            "cores), unless the weights fit in a cache; re-run measure_machine()"
        )
    return notes


def shared_notes(notes_by_step: Mapping[str, list[str]]) -> list[str]:
    """Each note once, after the steps that share it (their count, past two: the table shows which), in the
    order first met: a table of twelve steps whose kernels all beat one probe gets one line, not twelve.

        >>> shared_notes({"int8": ["note: a"], "int4": ["note: a"], "fp32": []})
        ['int8, int4: note: a']
    """
    steps_of: dict[str, list[str]] = {}
    for step, notes in notes_by_step.items():
        for note in notes:
            steps_of.setdefault(note, []).append(step)
    return [
        f"{', '.join(steps) if len(steps) <= 2 else f'{len(steps)} steps'}: {note}"
        for note, steps in steps_of.items()
    ]
