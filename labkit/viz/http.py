"""Serving-over-HTTP pictures for notebook 11: a load sweep (throughput and latency against concurrency)
and one load level's requests on a timeline (waiting for the first token, then decoding).

    >>> results = await sweep(server.url, "smollm2-135m", [1, 2, 4, 8, 16, 32])
    >>> plot_load_sweep(results, seats=16)
    >>> plot_request_timeline(results[-1])
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from labkit.core.doors import check_items, check_record
from labkit.loadtest.load_result import LoadResult
from labkit.viz.alt import with_alt_text
from labkit.viz.axes import plain_log_ticks

FIRST_TOKEN, DECODING = "#d9a441", "#4caf50"


@with_alt_text(
    "Three line charts against concurrency: output tokens per second, time to first token and time per "
    "output token (p50 and p95)"
)
def plot_load_sweep(results: Sequence[LoadResult], seats: int | None = None, axes=None):
    """Left: output tokens/s by concurrency (and perfect scaling from the first level); middle: TTFT p50 and
    p95; right: TPOT p50 and p95. `seats`: the server's max_num_seqs, drawn as a dashed line. Returns the Axes."""
    check_items(
        "results",
        results,
        "LoadResult (labkit.loadtest.load.sweep)",
        has=("concurrency", "tokens_per_s", "quantile"),
    )
    if not results:
        raise ValueError("Give at least one LoadResult (from labkit.loadtest.load.sweep).")
    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(12, 3.3), layout="constrained")
    levels = [r.concurrency for r in results]
    left, middle, right = axes
    rates = [r.tokens_per_s for r in results]
    left.plot(levels, rates, "o-", color="tab:green", label="measured")
    left.plot(
        levels, [rates[0] * c / levels[0] for c in levels], ":", color="gray", label="if it scaled perfectly"
    )
    left.set(ylabel="output tokens / s", title="throughput", yscale="log")
    plain_log_ticks(left.yaxis)  # 20, 50, 100, 200 rather than a lone 10²
    left.legend(frameon=False, fontsize=8)
    for ax, metric, title in (
        (middle, "ttft_s", "time to first token"),
        (right, "tpot_s", "time per output token"),
    ):
        for q, style in ((50, "o-"), (95, "s--")):
            ax.plot(
                levels,
                [r.quantile(metric, q) * 1e3 for r in results],
                style,
                color="tab:purple",
                label=f"p{q}",
            )
        ax.set(ylabel="ms", title=title, ylim=(0, None))
        ax.legend(frameon=False, fontsize=8)
    for ax in axes:
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis, levels)
        ax.set_xlabel("concurrent clients")
        if seats is not None:
            ax.axvline(seats, color="gray", ls="--", lw=1)
        ax.spines[["top", "right"]].set_visible(False)
    if seats is not None:
        left.text(seats, left.get_ylim()[0], f" {seats} seats", color="gray", fontsize=8, va="bottom")
    return axes


@with_alt_text(
    "Timeline of requests: each one's wait for its first token, then its decoding, as horizontal bars"
)
def plot_request_timeline(result: LoadResult, ax=None):
    """Each request of one level as a bar from when it was sent: waiting for its first token (queue +
    prefill), then decoding until its last token. Returns the Axes."""
    check_record(
        "result", result, "a LoadResult (labkit.loadtest.load.sweep)", has=("requests", "concurrency")
    )
    timed = sorted((r for r in result.requests if not math.isnan(r.e2e_s)), key=lambda r: r.sent_s)
    if not timed:
        raise ValueError("No request of this level received any text.")
    start = min(r.sent_s for r in timed)
    if ax is None:
        _, ax = plt.subplots(figsize=(10, min(4.5, 1.2 + 0.08 * len(timed))), layout="constrained")
    for row, r in enumerate(timed):
        sent = r.sent_s - start
        ax.barh(row, r.ttft_s, left=sent, color=FIRST_TOKEN, height=0.8)
        ax.barh(row, r.e2e_s - r.ttft_s, left=sent + r.ttft_s, color=DECODING, height=0.8)
    ax.set(
        xlabel="seconds since the first request was sent",
        ylabel="request (in the order sent)",
        title=f"{result.concurrency} concurrent clients, {len(timed)} requests",
    )
    ax.invert_yaxis()
    ax.set_yticks([])
    ax.legend(
        handles=[
            Patch(color=FIRST_TOKEN, label="waiting for the first token (queue + prefill)"),
            Patch(color=DECODING, label="decoding"),
        ],
        frameon=False,
        fontsize=8,
        loc="lower right",
    )
    ax.spines[["top", "right"]].set_visible(False)
    return ax
