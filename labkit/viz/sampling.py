"""Figures of notebook 04 (sampling): the diversity-vs-quality trade-off of decoding settings.

    >>> results = labkit.decoding.judge.measure_settings(model, tokenizer, prompt, settings, judge, judge_tokenizer)
    >>> plot_diversity_quality(results)
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from labkit.core.doors import check_items
from labkit.decoding.judge import SettingResult
from labkit.viz.plots import drawable
from labkit.viz.alt import with_alt_text
from labkit.viz.palette import series_colour

MARKERS = "osD^vP*X"  # one marker per setting, so the legend tells them apart without colour too
NUDGE = 0.02  # distinct-2 units: points closer than this along x are drawn this far apart


def nudged(xs: Sequence[float], step: float = NUDGE) -> list[float]:
    """x positions where runs of values closer than `step` are spread `step` apart, centred on their mean.

        >>> nudged([0.5, 0.88, 0.885])
        [0.5, 0.8725, 0.8925]
    """
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out, group = list(xs), []
    for i in order + [None]:
        if i is not None and (not group or xs[i] - xs[group[-1]] < step):
            group.append(i)
            continue
        centre = sum(xs[g] for g in group) / len(group)
        for rank, g in enumerate(group):
            out[g] = round(centre + (rank - (len(group) - 1) / 2) * step, 6)
        group = [i] if i is not None else []
    return out


@with_alt_text("Scatter plot of sampling settings: diversity (distinct-2) against the judge's bits per byte, with "
               "intervals")
def plot_diversity_quality(results: Sequence[SettingResult], ax: Axes | None = None,
                           xlabel: str = "diversity (distinct-2 over all samples)",
                           ylabel: str = "judge's bits per byte (lower: more likely)") -> Axes:
    """One point per setting: x its distinct-2, y the judge's mean bits per byte with its 95% interval
    (thick bar) and interquartile range (thin bar). Settings are named in a legend beside the axes,
    so no label can cover a point or another label; points with almost the same distinct-2 are nudged
    apart sideways (`nudged`). The y axis is inverted: up is more likely text.

        >>> plot_diversity_quality(measure_settings(model, tokenizer, prompt, settings, judge, judge_tokenizer))
    """
    check_items("results", results, "SettingResult (labkit.decoding.diversity.measure_settings)",
                has=("distinct_2", "q1", "q3"))
    if not results:
        raise ValueError("No settings to plot: pass the list that measure_settings returned.")
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4), layout="constrained")
    for index, (r, x) in enumerate(zip(results, nudged([r.distinct_2 for r in results]))):
        color = series_colour(index)  # Okabe-Ito: the settings differ by colour alone
        ax.vlines(x, r.q1, r.q3, color=color, lw=1, alpha=0.6)
        ax.vlines(x, r.low, r.high, color=color, lw=4, alpha=0.9)
        ax.scatter([x], [r.mean], color=color, marker=MARKERS[index % len(MARKERS)], s=60, zorder=3,
                   edgecolor="black", linewidth=0.5, label=drawable(f"{r.name}: {r.mean:.2f} bits/byte"))
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title("point: mean over the samples; thick bar: its 95% interval; thin bar: interquartile range\n"
                 f"(points less than {NUDGE} apart in distinct-2 are spread sideways)", fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return ax
