"""The accuracy-vs-compute frontier of notebook 14: accuracy against the tokens generated per item, one
line per method, a point per n (or per budget), 95 % intervals as error bars.

Colours are Okabe and Ito's palette (2008), which stays distinct under the common colour-vision
deficiencies, and every method also has its own marker, so the figure reads in grey too.

    >>> points = frontier(sampled_run) + frontier(greedy_run) + frontier(calculator_run)
    >>> plot_frontier(points, title="sums, SmolLM2-135M")
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt

from labkit.compute.method_run import FrontierPoint
from labkit.core.doors import check_items
from labkit.viz.alt import with_alt_text
from labkit.viz.axes import plain_log_ticks

OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000", "#F0E442")
MARKERS = ("o", "s", "^", "D", "v", "*", "X", "P")


def by_method(points: Sequence[FrontierPoint]) -> dict[str, list[FrontierPoint]]:
    """The points grouped by method, in the order the methods first appear, each group by tokens."""
    groups: dict[str, list[FrontierPoint]] = {}
    for point in points:
        groups.setdefault(point.method, []).append(point)
    return {method: sorted(group, key=lambda p: p.tokens_per_item) for method, group in groups.items()}


def point_label(point: FrontierPoint) -> str:
    """What a point is annotated with: its note if it has one, else its n when above 1 ('' for n = 1)."""
    return point.note or (f"n={point.n}" if point.n > 1 else "")


def annotate_points(
    ax,
    group: Sequence[FrontierPoint],
    accuracies: Sequence[float],
    color: str,
    written: set[tuple[float, str]],
) -> None:
    """Label one method's points: a note beside its point (at its accuracy, in %), in the method's colour;
    an n along the top of the axes, once per position: `written` holds the (tokens, label) pairs already
    there, shared by every method, so methods at the same n and tokens do not write it twice.

        >>> annotate_points(ax, by_method(points)["self-consistency"], [10.0, 12.0], "#0072B2", set())
    """
    for point, accuracy in zip(group, accuracies):
        px = point.tokens_per_item
        if point.note:
            ax.annotate(
                point.note,
                (px, accuracy),
                xytext=(5, -3),
                textcoords="offset points",
                fontsize=7,
                color=color,
            )
        elif point_label(point) and (round(px, 3), point_label(point)) not in written:
            written.add((round(px, 3), point_label(point)))
            ax.annotate(
                point_label(point),
                (px, 1),
                xycoords=("data", "axes fraction"),
                xytext=(0, -10),
                textcoords="offset points",
                fontsize=7,
                color="dimgray",
                ha="center",
            )


@with_alt_text(
    "Line chart of accuracy in percent against generated tokens per item, one line per method, with 95 % "
    "intervals"
)
def plot_frontier(points: Sequence[FrontierPoint], title: str = "", ax=None):
    """Accuracy (%) against generated tokens per item (log axis): a line per method through its points (markers
    alone for a method whose points carry notes, such as thinking budgets), each with its 95 % Wilson interval
    as an error bar. A point's n is written once per position along the top, a note beside its point.
    Returns the Axes."""
    check_items(
        "points",
        points,
        "FrontierPoint (labkit.compute.method_run.frontier)",
        has=("method", "tokens_per_item", "accuracy"),
    )
    if not points:
        raise ValueError("Give at least one FrontierPoint (labkit.compute.method_run.frontier).")
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4.2), layout="constrained")
    written: set[tuple[float, str]] = set()
    for index, (method, group) in enumerate(by_method(points).items()):
        x = [p.tokens_per_item for p in group]
        y = [100 * p.accuracy.rate for p in group]
        below = [100 * (p.accuracy.rate - p.accuracy.interval[0]) for p in group]
        above = [100 * (p.accuracy.interval[1] - p.accuracy.rate) for p in group]
        color, marker = OKABE_ITO[index % len(OKABE_ITO)], MARKERS[index % len(MARKERS)]
        style = "none" if any(p.note for p in group) else "-"
        ax.errorbar(
            x,
            y,
            yerr=[below, above],
            color=color,
            marker=marker,
            ls=style,
            capsize=3,
            lw=1.5,
            ms=7,
            label=method,
        )
        annotate_points(ax, group, y, color, written)
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    ax.set(
        xlabel="generated tokens per item (log scale)",
        ylabel="accuracy (%)",
        ylim=(0, 104),
        title=title,
        yticks=range(0, 101, 20),
    )
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.spines[["top", "right"]].set_visible(False)
    return ax
