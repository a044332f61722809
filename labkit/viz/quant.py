"""Figures and a slider for the quantization lab (notebook 08).

Every plot function draws on `ax` (or a new figure) and returns the Axes; the slider has a static
fallback, `error_memory_table`, that prints the same numbers for a grid of settings.

    >>> schemes = round_trips(weight)                     # name -> restored weight
    >>> plot_error_histograms(weight, schemes)
    >>> quant_slider(weight)                              # bits and group size -> error and memory
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from numbers import Integral

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from labkit.core.doors import check_items, check_table, check_tensor
from labkit.quant.nf4 import NF4_CODEBOOK, nf4_dequantize, nf4_quantize
from labkit.quant.schemes import (
    absmax_dequantize,
    absmax_quantize,
    bits_per_weight,
    dequantize_groupwise,
    quantization_error,
    quantize_groupwise,
)
from labkit.table import Column, format_row
from labkit.viz.alt import with_alt_text
from labkit.viz.palette import series_colour


def _axes(ax: Axes | None, size: tuple[float, float]) -> Axes:
    return ax if ax is not None else plt.subplots(figsize=size, layout="constrained")[1]


def round_trips(weight: torch.Tensor, group_size: int = 64) -> dict[str, torch.Tensor]:
    """The weight after a quantize/dequantize round trip in each scheme of the lab, by name."""
    check_tensor("weight", weight, "[rows, cols] of one weight matrix", dims=2)
    return {
        "int8 per tensor": absmax_dequantize(*absmax_quantize(weight, 8, "tensor")),
        "int8 per channel": absmax_dequantize(*absmax_quantize(weight, 8, "channel")),
        "int4 per channel": absmax_dequantize(*absmax_quantize(weight, 4, "channel")),
        f"int4 g{group_size}": dequantize_groupwise(quantize_groupwise(weight, 4, group_size)),
        f"nf4 b{group_size}": nf4_dequantize(nf4_quantize(weight, group_size)),
    }


@with_alt_text("Histograms of the round-trip quantization error of each scheme, on a log count scale")
def plot_error_histograms(
    weight: torch.Tensor, restored: Mapping[str, torch.Tensor], ax: Axes | None = None, bins: int = 120
) -> Axes:
    """Histogram (log counts) of the round-trip error w~ - w of each scheme, on one shared axis."""
    check_tensor("weight", weight, "of one weight matrix's values")
    check_table("restored", restored, "round-trip weights (tensors, from round_trips)", of=torch.Tensor)
    ax = _axes(ax, (8, 3.6))
    largest = max(float((r - weight).abs().max()) for r in restored.values())
    edges = torch.linspace(-largest, largest, bins + 1)
    for index, (name, values) in enumerate(restored.items()):
        error = (values - weight).flatten()
        # Okabe-Ito: overlaid outlines told apart by colour alone
        ax.stairs(
            torch.histogram(error, edges).hist.numpy(),
            edges.numpy(),
            label=name,
            linewidth=1.4,
            color=series_colour(index),
        )
    ax.set(
        yscale="log",
        xlabel="round-trip error (restored - original)",
        ylabel="weights",
        title="quantization error on one weight matrix",
    )
    ax.legend(frameon=False, fontsize=8)
    return ax


@with_alt_text("Histogram of a weight matrix's values on a log count scale, with its outliers marked")
def plot_weight_distribution(
    weight: torch.Tensor, ax: Axes | None = None, bins: int = 200, outlier_sigmas: float = 6.0
) -> Axes:
    """Histogram (log counts) of a weight's values, with the outliers beyond `outlier_sigmas` std marked."""
    check_tensor("weight", weight, "of one weight matrix's values")
    ax = _axes(ax, (8, 3.2))
    values = weight.flatten().float()
    std = float(values.std())
    ax.hist(values.numpy(), bins=bins, color="tab:blue", log=True)
    outliers = values[values.abs() > outlier_sigmas * std]
    for sign in (-1, 1):
        ax.axvline(sign * outlier_sigmas * std, color="tab:red", linestyle="--", linewidth=1)
    ax.plot(
        outliers.numpy(),
        [1] * len(outliers),
        "v",
        color="tab:red",
        label=f"{len(outliers)} outliers beyond {outlier_sigmas:g} std",
    )
    ax.set(
        xlabel="weight value",
        ylabel="count",
        title=f"{values.numel():,} weights, std {std:.4f}, max |w| {float(values.abs().max()):.3f}",
    )
    ax.legend(frameon=False)
    return ax


@with_alt_text("NF4's 16 levels beside int4's, over a normal density")
def plot_levels(ax: Axes | None = None) -> Axes:
    """NF4's 16 levels against int4's (absmax, -7..7 scaled to [-1, 1]), over a normal density."""
    ax = _axes(ax, (8, 2.8))
    int4 = torch.arange(-7, 8) / 7
    grid = torch.linspace(-1.1, 1.1, 400)
    sigma = 1 / 2.0  # a block's absmax sits around 2 to 3 std for normal data: this is one choice
    density = torch.exp(-0.5 * (grid / sigma) ** 2)
    ax.fill_between(grid.numpy(), 0, (density * 0.9).numpy(), color="0.9", label="normal weights (scaled)")
    ax.vlines(int4.numpy(), 0.05, 0.45, color="tab:blue", label="int4 absmax: 15 even levels")
    ax.vlines(NF4_CODEBOOK.numpy(), 0.5, 0.9, color="tab:orange", label="NF4: 16 normal quantiles")
    ax.set(yticks=[], xlabel="value / absmax of the block", xlim=(-1.1, 1.1), ylim=(0, 1))
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return ax


def group_size_errors(
    weight: torch.Tensor, group_sizes: Sequence[int], bits: int = 4
) -> dict[str, list[float]]:
    """Relative RMS error of int4 symmetric, int4 asymmetric and NF4 for each group size."""
    check_tensor("weight", weight, "[rows, cols] of one weight matrix", dims=2)
    out: dict[str, list[float]] = {"int4 symmetric": [], "int4 asymmetric": [], "nf4": []}
    for g in group_sizes:
        for name, symmetric in (("int4 symmetric", True), ("int4 asymmetric", False)):
            restored = dequantize_groupwise(quantize_groupwise(weight, bits, g, symmetric=symmetric))
            out[name].append(quantization_error(weight, restored)["relative_rms"])
        out["nf4"].append(
            quantization_error(weight, nf4_dequantize(nf4_quantize(weight, g)))["relative_rms"]
            if g in (32, 64, 128, 256, 512, 1024)
            else float("nan")
        )
    return out


@with_alt_text("Line chart of quantization error against the group size, one line per scheme")
def plot_group_size_errors(
    group_sizes: Sequence[int], errors: Mapping[str, Sequence[float]], ax: Axes | None = None
) -> Axes:
    check_items("group_sizes", group_sizes, "group sizes (whole numbers)", of=Integral)
    check_table(
        "errors", errors, "errors by group size (lists of numbers, from group_size_errors)", of=Sequence
    )
    ax = _axes(ax, (7, 3.2))
    for name, values in errors.items():
        ax.plot(group_sizes, values, "o-", label=name)
    ax.set(
        xscale="log",
        xlabel="group size (weights sharing one scale)",
        ylabel="relative RMS error",
        title="smaller groups follow the weights more closely",
    )
    ax.set_xticks(list(group_sizes), [str(g) for g in group_sizes])
    ax.legend(frameon=False)
    return ax


def spread_labels(ys: Sequence[float], min_gap: float) -> list[float]:
    """Label heights near `ys` with at least `min_gap` between neighbours (order kept, as little moved
    as possible from the points' own heights).

        >>> spread_labels([1.0, 1.05, 5.0], min_gap=0.5)
        [0.775, 1.275, 5.0]
    """
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    placed = [ys[i] for i in order]
    for _ in range(len(placed)):  # push apart, then centre each crowded run on its points
        for k in range(1, len(placed)):
            placed[k] = max(placed[k], placed[k - 1] + min_gap)
        start = 0
        for k in range(1, len(placed) + 1):
            if k == len(placed) or placed[k] - placed[k - 1] > min_gap + 1e-12:
                shift = sum(ys[order[j]] - placed[j] for j in range(start, k)) / (k - start)
                placed[start:k] = [y + shift for y in placed[start:k]]
                start = k
    heights = [0.0] * len(ys)
    for k, i in enumerate(order):
        heights[i] = round(placed[k], 9)
    return heights


@with_alt_text("Scatter plot of model size in megabytes against perplexity, one labelled point per model")
def plot_size_vs_perplexity(results: Sequence, ax: Axes | None = None) -> Axes:
    """Model megabytes against perplexity, one labelled point per labkit.evaluation.Result.

    Variants with the same size and perplexity share one point and one label ("nf4 = bnb nf4"); labels
    are spread vertically so that none overlaps another.
    """
    check_items(
        "results",
        results,
        "Result (labkit.quant.evaluation.evaluate)",
        has=("name", "nbytes", "perplexity", "note"),
    )
    ax = _axes(ax, (9, 3.6))
    points: dict[tuple[float, float], list] = {}
    for r in results:
        if not r.note:
            points.setdefault((round(r.nbytes / 1e6, 1), round(r.perplexity, 3)), []).append(r)
    for (mb, ppl), same in points.items():
        colour = "tab:orange" if all(r.name.startswith("bnb") for r in same) else "tab:blue"
        ax.plot(mb, ppl, "o", color=colour)
    ppls = [ppl for _, ppl in points]
    gap = 0.09 * (max(ppls) - min(ppls) or 1.0)
    for ((mb, ppl), same), label_y in zip(points.items(), spread_labels(ppls, gap)):
        ax.annotate(
            " = ".join(r.name for r in same),
            (mb, ppl),
            xytext=(mb + 12, label_y),
            fontsize=9,
            va="center",
            arrowprops=dict(arrowstyle="-", color="0.6", lw=0.8),
        )
    ax.set_ylim(min(ppls) - gap, max(ppls) + gap)
    ax.set_xlim(right=max(mb for mb, _ in points) * 1.15)  # room for the rightmost label
    ax.set(
        xlabel="model size (MB)",
        ylabel="perplexity (lower is better)",
        title="size vs perplexity (blue: labkit, orange: bitsandbytes only)",
    )
    return ax


def error_memory(
    weight: torch.Tensor, bits: int, group_size: int, symmetric: bool = True, n_weights: int = 106_168_320
) -> dict[str, float]:
    """Round-trip error on `weight` and the size of `n_weights` weights (default: SmolLM2 without its
    embeddings) stored with `bits`-bit codes and one float16 scale per group."""
    restored = dequantize_groupwise(quantize_groupwise(weight, bits, group_size, symmetric=symmetric))
    per_weight = bits_per_weight(bits, group_size, symmetric)
    return {
        **quantization_error(weight, restored),
        "bits_per_weight": per_weight,
        "megabytes": n_weights * per_weight / 8 / 1e6,
    }


# error_memory_table's columns. The error's title has always stood one character right of its numbers (16
# wide over 15): notebook 08's saved output shows it so, and ERROR_TITLE keeps the title line as it was.
MEMORY_COLUMNS = [
    Column("bits", 4),
    Column("group", 7),
    Column("bits/weight", 13, ".2f"),
    Column("MB", 8, ".1f"),
    Column("rel. RMS error", 15, ".2%"),
]
ERROR_TITLE = Column("rel. RMS error", 16)


def error_memory_table(
    weight: torch.Tensor,
    bits: Sequence[int] = (8, 6, 4, 3, 2),
    group_sizes: Sequence[int] = (32, 64, 128),
    symmetric: bool = True,
) -> str:
    """The slider's numbers for a grid of settings, as text (the static fallback of quant_slider)."""
    check_tensor("weight", weight, "[rows, cols] of one weight matrix", dims=2)
    title_columns = [*MEMORY_COLUMNS[:-1], ERROR_TITLE]
    lines = [format_row(title_columns, [column.title for column in title_columns])]
    for b in bits:
        for g in group_sizes:
            s = error_memory(weight, b, g, symmetric)
            cells = [b, g, s["bits_per_weight"], s["megabytes"], s["relative_rms"]]
            lines.append(format_row(MEMORY_COLUMNS, cells))
    return "\n".join(lines)


class QuantSlider(widgets.VBox):
    """Sliders for bits and group size over one weight matrix: its error histogram, error and memory."""

    def __init__(self, weight: torch.Tensor, group_sizes: Sequence[int] | None = None):
        cols = weight.shape[1]
        if group_sizes is None:  # the usual sizes that divide the row, then the whole row (per channel)
            group_sizes = [g for g in (16, 32, 64, 128, 256, 512) if cols % g == 0 and g < cols] + [cols]
        sizes = [g for g in group_sizes if cols % g == 0]
        if not sizes:
            raise ValueError(
                f"None of the group sizes {list(group_sizes)} divides the {cols} columns of the weight."
            )
        self.weight = weight.detach().float()
        self.bits = widgets.IntSlider(value=4, min=2, max=8, description="bits")
        self.group_size = widgets.SelectionSlider(
            options=sizes, value=64 if 64 in sizes else sizes[0], description="group"
        )
        self.symmetric = widgets.Checkbox(value=True, description="symmetric")
        self.text = widgets.HTML()
        self.chart = widgets.Image(format="png")
        self._figure = Figure(figsize=(6, 2.6), layout="constrained")
        self._ax = self._figure.add_subplot()
        super().__init__([widgets.HBox([self.bits, self.group_size, self.symmetric]), self.text, self.chart])
        for control in (self.bits, self.group_size, self.symmetric):
            control.observe(lambda _: self.update(), names="value")
        self.update()

    def update(self) -> None:
        bits, g, symmetric = self.bits.value, self.group_size.value, self.symmetric.value
        stats = error_memory(self.weight, bits, g, symmetric)
        self.text.value = (
            f"<b>{stats['bits_per_weight']:.2f} bits per weight</b> &nbsp; SmolLM2's layers: "
            f"<b>{stats['megabytes']:.0f} MB</b> (float32: 425 MB) &nbsp; relative RMS error "
            f"<b>{stats['relative_rms']:.2%}</b>, max |error| {stats['max_abs']:.4f}"
        )
        restored = dequantize_groupwise(quantize_groupwise(self.weight, bits, g, symmetric=symmetric))
        self._ax.clear()
        self._ax.hist((restored - self.weight).flatten().numpy(), bins=100, log=True, color="tab:blue")
        self._ax.set(xlabel="round-trip error", ylabel="weights", title=f"int{bits}, groups of {g}")
        buffer = io.BytesIO()
        self._figure.savefig(buffer, format="png", dpi=80)
        self.chart.value = buffer.getvalue()

    def __repr__(self) -> str:
        return "QuantSlider(bits, group size; run the notebook to move the sliders)"


def quant_slider(weight: torch.Tensor, group_sizes: Sequence[int] | None = None) -> QuantSlider:
    """Bits (2-8) and group size sliders over `weight` [rows, cols]; static fallback: error_memory_table."""
    check_tensor("weight", weight, "[rows, cols] of one weight matrix", dims=2)
    return QuantSlider(weight, group_sizes)
