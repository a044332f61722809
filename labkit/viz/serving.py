"""Batching pictures for notebook 10: static batching's wasted slots, the strategies compared, and the
time of each engine step while a long prompt arrives. The continuous-batching engine step by step (a
traced run, its timeline, block tables and a step slider) is labkit.viz.engine_trace, whose names are
importable from here too.

    >>> draw_slot_grid([10, 4, 7])                    # static batching: the short requests' idle slots
    >>> plot_comparison({"together": [one_at_a_time, continuous]})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from numbers import Integral

import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from labkit.core.doors import check_items, check_table
from labkit.viz.alt import with_alt_text
from labkit.viz.engine_trace import (
    STATE_COLORS,
    EngineStepper,
    Snapshot,
    Trace,
    draw_engine_blocks,
    draw_timeline,
    engine_stepper,
    format_trace,
    run_traced,
    timeline_states,
)

STEP_COLORS = {"prefill": STATE_COLORS["prefill"], "decode": STATE_COLORS["decode"], "mixed": "#f0a030"}

__all__ = [  # this module's figures, and the engine trace's names that notebook 10 reaches through it
    "EngineStepper",
    "STATE_COLORS",
    "STEP_COLORS",
    "Snapshot",
    "Trace",
    "draw_engine_blocks",
    "draw_slot_grid",
    "draw_timeline",
    "engine_stepper",
    "format_trace",
    "plot_comparison",
    "plot_step_times",
    "run_traced",
    "timeline_states",
]


@with_alt_text("Grid of static batching's decode steps: requests by steps, useful tokens against idle slots")
def draw_slot_grid(output_lengths: Sequence[int], labels: Sequence[str] | None = None, ax=None):
    """Static batching's decode steps: rows = requests, columns = steps; green = a useful token, grey = an idle
    slot (the request has finished but its row still runs until the longest one ends). Returns the Axes."""
    check_items("output_lengths", output_lengths, "output token counts (whole numbers)", of=Integral)
    if not output_lengths or min(output_lengths) < 1:
        raise ValueError("Give each request's number of output tokens (at least 1 each).")
    steps, rows = max(output_lengths), len(output_lengths)
    grid = [[1 if step < n else 0 for step in range(steps)] for n in output_lengths]
    if ax is None:
        _, ax = plt.subplots(figsize=(min(12, 2 + 0.18 * steps), 0.45 * rows + 1.2), layout="constrained")
    ax.imshow(grid, cmap=ListedColormap(["#d9d9d9", "#4caf50"]), vmin=0, vmax=1, aspect="auto")
    ax.set_yticks(range(rows), labels or [f"request {i}" for i in range(rows)])
    ax.set_xticks([x - 0.5 for x in range(0, steps + 1, 5)], [str(x) for x in range(0, steps + 1, 5)])
    ax.set_xticks([x - 0.5 for x in range(steps + 1)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(rows + 1)], minor=True)
    ax.grid(which="minor", color="white", lw=0.8)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel("decode step")
    useful = sum(output_lengths)
    ax.set_title(
        f"{useful} useful token slots, {rows * steps - useful} idle ({1 - useful / (rows * steps):.0%} of "
        f"the batch's work wasted)",
        fontsize=9,
    )
    ax.legend(
        handles=[Patch(color="#4caf50", label="useful"), Patch(color="#d9d9d9", label="idle (wasted)")],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        frameon=False,
        fontsize=8,
    )
    return ax


@with_alt_text(
    "Three bar charts comparing scenarios: throughput, time to first token and time per output token "
    "(p50, whiskers to p95)"
)
def plot_comparison(results: Mapping[str, Sequence], axes=None):
    """results: scenario name -> RunResults (name, tokens_per_s, ttft_p50/p95, tpot_p50/p95). Three panels:
    throughput, TTFT and TPOT (bars p50, whiskers up to p95), one group per scenario. Returns the Axes."""
    check_table("results", results, "lists of RunResult (labkit.serving.benchmark)", of=Sequence)
    if not results:
        raise ValueError("Give at least one scenario, e.g. {'together': [result, ...]}.")
    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(12, 3.3), layout="constrained")
    names = list(dict.fromkeys(r.name for runs in results.values() for r in runs))
    width = 0.8 / len(names)
    palette = plt.get_cmap("tab10")
    panels = [
        ("tokens / s (all requests)", "tokens_per_s", None, 1),
        ("TTFT, s (p50, whisker p95)", "ttft_p50", "ttft_p95", 1),
        ("TPOT, ms (p50, whisker p95)", "tpot_p50", "tpot_p95", 1e3),
    ]
    for ax, (title, p50, p95, scale) in zip(axes, panels):
        for group, runs in enumerate(results.values()):
            for r in runs:
                x = group + (names.index(r.name) - (len(names) - 1) / 2) * width
                low = getattr(r, p50) * scale
                ax.bar(
                    x,
                    low,
                    width * 0.9,
                    color=palette(names.index(r.name)),
                    label=r.name if group == 0 else None,
                )
                if p95 is not None:
                    ax.plot([x, x], [low, getattr(r, p95) * scale], color="black", lw=1)
        ax.set_xticks(range(len(results)), list(results))
        ax.set_title(title, fontsize=10)
        ax.spines[["top", "right"]].set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    axes[0].figure.legend(
        handles, labels, loc="outside lower center", ncols=min(len(names), 3), frameon=False, fontsize=8
    )
    return axes


@with_alt_text(
    "Bar charts of each engine step's time, coloured by its kind, with the long prompt's arrival marked"
)
def plot_step_times(runs: Sequence, axes=None):
    """One panel per `InterferenceRun` (labkit.serving.interference): a bar per engine step, its height the
    step's time, its colour its kind; a line where the long prompt arrived. Returns the Axes."""
    check_items("runs", runs, "InterferenceRun (labkit.serving.interference)", has=("step_kinds", "step_ms"))
    if axes is None:
        _, axes = plt.subplots(
            1, len(runs), figsize=(5.5 * len(runs), 3.2), sharey=True, layout="constrained"
        )
    axes = list(axes) if len(runs) > 1 else [axes]
    for ax, run in zip(axes, runs):
        colors = [STEP_COLORS[kind] for kind in run.step_kinds]
        ax.bar(range(len(run.step_ms)), run.step_ms, width=0.9, color=colors)
        ax.axvline(run.arrival_step - 0.5, color="black", lw=1, ls="--")
        ax.annotate(
            "long prompt arrives",
            (run.arrival_step - 0.5, 1),
            xycoords=("data", "axes fraction"),
            xytext=(4, -2),
            textcoords="offset points",
            fontsize=8,
            va="top",
        )
        ax.set(title=run.name, xlabel="engine step")
        ax.spines[["top", "right"]].set_visible(False)
    axes[0].set_ylabel("ms per step")
    handles = [Patch(color=color, label=kind) for kind, color in STEP_COLORS.items()]
    axes[-1].legend(handles=handles, frameon=False, fontsize=8, loc="upper right")
    return axes
