"""Figures of notebook 13: the decode staircase against llama.cpp, each step as the cost model predicts
it, and where one step's time goes.

    >>> plot_staircase(rows, bandwidth, llama_cpp=row_of_llama_cpp)
    >>> plot_cost_waterfall(fast.row_costs(hf_model, labels, context=48), measure_machine())
    >>> plot_breakdown({"float32": step_breakdown(fp32_decoder), "int4": step_breakdown(int4_decoder)})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from labkit.core.doors import check_items, check_table
from labkit.fast.roofline import bandwidth_utilisation
from labkit.viz.alt import with_alt_text
from labkit.viz.palette import BLUE, BLUISH_GREEN, ORANGE, REDDISH_PURPLE

STEP_COLOUR, PEER_COLOUR, BEST_COLOUR = "tab:blue", "tab:orange", "tab:green"
# Okabe-Ito (labkit.viz.palette): tab10's red and green, side by side in one bar, merge for red-green colour blindness.
TERM_COLOURS = {
    "overhead": REDDISH_PURPLE,
    "thread wake-ups": ORANGE,
    "matmul kernels": BLUE,
    "KV cache": BLUISH_GREEN,
}


@with_alt_text(
    "Two bar charts: tokens per second of each decoding path, and the share of memory bandwidth each one uses"
)
def plot_staircase(rows: Sequence, bandwidth: float, llama_cpp=None, labkit_best=None) -> Figure:
    """Left: tokens/s of each path (GPT-fast's staircase, top to bottom), llama.cpp as a line. Right:
    the share of measured memory bandwidth each path uses (bytes per token x tokens/s / bandwidth).

    rows: objects with `label`, `tokens_per_second`, `bytes_per_token` (labkit.benchmarks.fast.Row),
    in the order the steps were taken; llama_cpp: one more such row, or None when it is not installed;
    labkit_best: labkit's fastest path at its own best settings, in a process of its own (a row with `policy`
    and `threads`, labkit.benchmarks.fast_best.row_best), drawn below the steps in its own colour, or None.

        >>> plot_staircase(rows, machine.read_bandwidth, llama_cpp, labkit_best)
    """
    rows = check_items(
        "rows",
        rows,
        "Row (labkit.benchmarks.fast): label, tokens_per_second, bytes_per_token",
        has=("label", "tokens_per_second", "bytes_per_token"),
    )
    best = [labkit_best] if labkit_best is not None else []
    shown = list(rows) + best + ([llama_cpp] if llama_cpp is not None else [])
    labels = [row.label for row in rows] + [
        f"labkit's fastest at its best ({row.policy}, {row.threads} threads)" for row in best
    ]
    labels = (labels + [row.label for row in shown[len(labels) :]])[::-1]
    colours = (
        ([PEER_COLOUR] if llama_cpp is not None else [])
        + [BEST_COLOUR] * len(best)
        + [STEP_COLOUR] * len(rows)
    )
    fig, (speed, share) = plt.subplots(
        1, 2, figsize=(11, 0.4 * len(shown) + 1.6), sharey=True, gridspec_kw={"width_ratios": [3, 2]}
    )
    rates = [row.tokens_per_second for row in shown][::-1]
    speed.barh(labels, rates, color=colours)
    for y, rate in enumerate(rates):
        speed.text(rate, y, f" {rate:.1f}", va="center", fontsize=9)
    if llama_cpp is not None:
        speed.axvline(llama_cpp.tokens_per_second, color=PEER_COLOUR, linestyle="--", linewidth=1)
        speed.axvline(llama_cpp.tokens_per_second / 2, color=PEER_COLOUR, linestyle=":", linewidth=1)
    speed.set_xlim(0, max(rates) * 1.18)
    speed.set_xlabel("tokens/s, batch 1 (dashed: llama.cpp; dotted: half of it)")
    uses = [bandwidth_utilisation(row.bytes_per_token, row.tokens_per_second, bandwidth) for row in shown][
        ::-1
    ]
    share.barh(labels, [100 * use for use in uses], color=colours)
    for y, use in enumerate(uses):
        share.text(100 * use, y, f" {use:.0%}", va="center", fontsize=9)
    share.set_xlim(0, 100)
    share.set_xlabel(f"% of measured bandwidth ({bandwidth / 1e9:.1f} GB/s)")
    fig.suptitle("SmolLM2-135M, batch 1, greedy: each step of the fast path")
    fig.tight_layout()
    return fig


@with_alt_text("Stacked bar chart: the fractions of a decode step's CPU time by kind, one bar per path")
def plot_breakdown(breakdowns: Mapping[str, Mapping[str, float]]) -> Figure:
    """One stacked bar per path: the fractions of a decode step's CPU time by kind (labkit.fast.profile)."""
    check_table(
        "breakdowns", breakdowns, "{kind: fraction} dicts (labkit.fast.profile.step_breakdown)", of=Mapping
    )
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(breakdowns) + 1.4))
    names = list(breakdowns)[::-1]
    kinds = list(next(iter(breakdowns.values())))
    left = [0.0] * len(names)
    for kind in kinds:
        widths = [100 * breakdowns[name][kind] for name in names]
        bars = ax.barh(names, widths, left=left, label=kind)
        for bar, width in zip(bars, widths):
            if width > 6:
                ax.text(
                    bar.get_x() + width / 2,
                    bar.get_y() + bar.get_height() / 2,
                    f"{width:.0f} %",
                    ha="center",
                    va="center",
                    color="white",
                    fontsize=9,
                )
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of one decode step's profiled CPU time")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=len(kinds), frameon=False)
    fig.tight_layout()
    return fig


@with_alt_text(
    "Stacked bar chart: each step's predicted milliseconds split into overhead, thread wake-ups, matmul "
    "kernels and KV cache, with the measured time marked"
)
def plot_cost_waterfall(costs: Mapping[str, object], machine) -> Figure:
    """One bar per step, top to bottom: its predicted ms split into the cost model's terms (overhead,
    thread wake-ups, matmul kernels, KV cache), a black mark at the ms it measured, and its regime at
    the right.

    costs: {step name: labkit.fast.cost.StepCosts}; machine: the labkit.fast.cost.Machine they are read on.
    """
    check_table(
        "costs",
        costs,
        "StepCosts (labkit.fast.cost.measure_step)",
        has=("terms", "measured_seconds", "regime"),
    )
    names = list(costs)[::-1]
    terms = {name: costs[name].terms(machine) for name in names}
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(names) + 1.6))
    left = [0.0] * len(names)
    for term, colour in TERM_COLOURS.items():
        widths = [1e3 * terms[name][term] for name in names]
        ax.barh(names, widths, left=left, color=colour, alpha=0.8, label=f"{term} (predicted)")
        left = [a + b for a, b in zip(left, widths)]
    measured = [1e3 * costs[name].measured_seconds for name in names]
    ax.scatter(measured, names, marker="|", s=400, color="black", zorder=3, label="measured")
    right = max(left + measured) * 1.02
    for y, name in enumerate(names):
        ax.text(right, y, f" {costs[name].regime(machine)}", va="center", fontsize=9)
    ax.set_xlim(0, right * 1.25)
    ax.set_xlabel("ms per decode step")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=4, frameon=False)
    fig.suptitle("Each step as the cost model predicts it (bars) and as measured (black mark)")
    fig.tight_layout()
    return fig
