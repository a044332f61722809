"""One decode step against the batch size (notebook 10, section 1): the step's time and throughput, and
which kind of weights is fastest at which batch, measured beside the cost model's prediction.

    >>> plot_batch_sweep([1, 2, 4], [0.055, 0.060, 0.070])
    >>> plot_weights_by_batch({"float32": {1: step_1, 32: step_32}}, machine)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from numbers import Integral, Real

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

from labkit.core.doors import check_items, check_table
from labkit.fast.cost import Machine, StepCosts
from labkit.viz.alt import with_alt_text
from labkit.viz.axes import plain_log_ticks


@with_alt_text("Two line charts: milliseconds per decode step, and tokens per second, against the batch size")
def plot_batch_sweep(batches: Sequence[int], step_s: Sequence[float], axes=None):
    """Left: ms per decode step by batch size; right: tokens/s (batch / step time) against perfect scaling.

    Returns the two matplotlib Axes.
    """
    check_items("batches", batches, "batch sizes (whole numbers)", of=Integral)
    check_items("step_s", step_s, "seconds per decode step (numbers)", of=Real)
    if len(batches) != len(step_s) or not batches:
        raise ValueError("Give one step time per batch size (and at least one).")
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 3.2), layout="constrained")
    left, right = axes
    left.plot(batches, [s * 1e3 for s in step_s], "o-", color="tab:green")
    left.set(
        xlabel="batch size (sequences)",
        ylabel="ms per decode step",
        xscale="log",
        ylim=(0, None),
        title="time of one decode step",
    )
    rates = [b / s for b, s in zip(batches, step_s)]
    right.plot(batches, rates, "o-", color="tab:green", label="measured")
    right.plot(
        batches,
        [rates[0] * b / batches[0] for b in batches],
        ":",
        color="gray",
        label="if the step cost stayed flat",
    )
    right.set(
        xlabel="batch size (sequences)",
        ylabel="tokens / s",
        xscale="log",
        yscale="log",
        title="decode throughput",
    )
    right.legend(frameon=False, fontsize=8)
    plain_log_ticks(right.yaxis)  # 20, 50, 100, 200 rather than a lone 10²
    for ax in axes:
        plain_log_ticks(ax.xaxis, batches)
        ax.spines[["top", "right"]].set_visible(False)
    return axes


@with_alt_text(
    "Line chart of milliseconds per decode step against the batch size, one line per kind of weights, "
    "measured and predicted"
)
def plot_weights_by_batch(costs: Mapping[str, Mapping[int, StepCosts]], machine: Machine, ax=None):
    """ms per decode step against the batch, one line per kind of weights: measured (solid, dots) and the
    cost model's prediction (dashed). costs: {weights: {batch: StepCosts}} (labkit.fast.cost.measure_step).
    Returns the Axes.

        >>> plot_weights_by_batch({"float32": {1: step_1, 32: step_32}}, measure_machine())
    """
    check_table("costs", costs, "{batch: StepCosts} dicts (labkit.fast.cost.measure_step)", of=Mapping)
    if not costs or not all(costs.values()):
        raise ValueError("Give at least one kind of weights, each with at least one batch size measured.")
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 3.4), layout="constrained")
    palette = plt.get_cmap("tab10")
    for index, (weights, by_batch) in enumerate(costs.items()):
        batches = sorted(by_batch)
        measured = [by_batch[b].measured_seconds * 1e3 for b in batches]
        ax.plot(batches, measured, "o-", color=palette(index))
        ax.plot(
            batches,
            [by_batch[b].predicted_seconds(machine) * 1e3 for b in batches],
            "--",
            color=palette(index),
            alpha=0.6,
        )
        ax.annotate(
            weights,
            (batches[-1], measured[-1]),
            xytext=(6, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
            color=palette(index),
        )
    every = sorted({b for by_batch in costs.values() for b in by_batch})
    ax.set(
        xscale="log",
        xlabel="batch size (sequences)",
        ylabel="ms per decode step",
        ylim=(0, None),
        title="which weights are fastest depends on the batch",
    )
    plain_log_ticks(ax.xaxis, every)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(
        handles=[
            Line2D([], [], color="black", marker="o", label="measured"),
            Line2D([], [], color="gray", ls="--", label="predicted (cost model)"),
        ],
        frameon=False,
        fontsize=8,
        loc="upper left",
    )
    return ax


__all__ = ["plot_batch_sweep", "plot_weights_by_batch"]
