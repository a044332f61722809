"""Figures of sampling (notebooks 04 and 05): which tokens a sampling rule keeps and which it cuts, the
diversity-vs-quality trade-off of decoding settings, and Mirostat's surprise per generated token.

A truncation rule (top-k, top-p, min-p, ...) masks tokens to -inf and sampling renormalises the rest:
`plot_kept_vs_cut` draws both halves of that, the original probabilities (kept or cut) and what each kept
token gets after the cut.

    >>> after = labkit.sampling.top_p_filter(logits[None], 0.9)[0]
    >>> plot_kept_vs_cut(logits, after, tokenizer)
    >>> results = labkit.decoding.judge.measure_settings(model, tokenizer, prompt, settings, judge, judge_tokenizer)
    >>> plot_diversity_quality(results)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from transformers import PreTrainedTokenizerBase

from labkit.core.doors import check_items, check_table, check_tensor
from labkit.decoding.judge import SettingResult
from labkit.viz.alt import with_alt_text
from labkit.viz.palette import series_colour
from labkit.viz.tokens import as_probs, drawable, token_label

MARKERS = "osD^vP*X"  # one marker per setting, so the legend tells them apart without colour too
NUDGE = 0.02  # distinct-2 units: points closer than this along x are drawn this far apart
KEPT_COLOR = "tab:blue"  # a token a truncation keeps
CUT_COLOR = "lightgray"  # a token it masks
RENORMALIZED_COLOR = "tab:orange"  # the kept tokens' probability after renormalising


def label_token_axis(
    ax: Axes, places: list[int], labels: list[str], limits: tuple[float, float], *, columns: bool, log: bool
) -> None:
    """The token names along the category axis (x for columns, y for rows) and the probability scale,
    linear or logarithmic, within `limits` along the other.

        >>> label_token_axis(ax, [1, 0], ["' a'", "' b'"], (0, 1), columns=False, log=False)
    """
    if columns:
        ax.set_xticks(places, labels, rotation=90, fontsize=7)
        ax.set_xlim(-0.6, len(places) - 0.4)
        ax.set(yscale="log" if log else "linear", ylim=limits, ylabel="probability")
    else:
        ax.set_yticks(places, labels, fontsize=8)
        ax.set(xscale="log" if log else "linear", xlim=limits, xlabel="probability")


@with_alt_text(
    "Bar chart of the top tokens: which a sampling rule keeps and which it cuts, and the kept ones' "
    "probabilities after renormalising"
)
def plot_kept_vs_cut(
    logits: torch.Tensor,
    transformed: torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    top_k: int = 15,
    ax: Axes | None = None,
    title: str | None = None,
    *,
    log: bool = False,
    columns: bool = False,
) -> Axes:
    """The top_k tokens of the original distribution [V]: kept ones in blue, cut ones in grey, and
    (in orange) the probability each kept token has after the cut, renormalised.

    log: a logarithmic probability axis, so the tail's bars stay visible beside the head's.
    columns: one column per token, the most likely on the left (room for 40 tokens), instead of rows.

        >>> after = labkit.sampling.top_p_filter(logits[None], 0.9)[0]
        >>> plot_kept_vs_cut(logits, after, tokenizer)
        >>> plot_kept_vs_cut(logits, after, tokenizer, top_k=40, log=True, columns=True)
    """
    check_tensor("logits", logits, "[V] (or [1, V]) of one position's scores", dims=(1, 2))
    check_tensor(
        "transformed", transformed, "[V] (or [1, V]) of the scores after a sampling rule", dims=(1, 2)
    )
    before, after = as_probs(logits), torch.softmax(transformed.detach().float().cpu().reshape(-1), dim=-1)
    kept = torch.isfinite(transformed.detach().reshape(-1).cpu())
    values, ids = before.topk(min(top_k, before.shape[0]))
    if ax is None:
        size = (max(6.0, 0.2 * len(ids) + 1.5), 3.4) if columns else (7, 0.28 * len(ids) + 1.2)
        _, ax = plt.subplots(figsize=size, layout="constrained")
    places = list(range(len(ids))) if columns else list(range(len(ids)))[::-1]
    colors = [KEPT_COLOR if kept[i] else CUT_COLOR for i in ids]
    survivors = [(place, float(after[i])) for place, i in zip(places, ids) if kept[i]]
    bars = ax.bar if columns else ax.barh
    bars(places, values.tolist(), 0.8, color=colors, label="before (blue: kept, grey: cut)")
    bars(
        [place for place, _ in survivors],
        [p for _, p in survivors],
        0.3,
        color=RENORMALIZED_COLOR,
        label="after, renormalised",
    )
    top = max(float(values.max()), float(after[kept].max()))
    limits = (float(values.min()) / 2, min(1.0, top * 2)) if log else (0, min(1.0, top * 1.15 + 0.02))
    labels = [drawable(token_label(tokenizer, int(i))) for i in ids]
    label_token_axis(ax, places, labels, limits, columns=columns, log=log)
    n_kept = int(kept.sum())
    ax.set_title(
        drawable(title or "") + f"{' · ' if title else ''}{n_kept:,} of {kept.numel():,} tokens kept",
        fontsize=10,
    )
    ax.legend(loc="upper right" if columns else "lower right", fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return ax


@with_alt_text("Line chart of the surprise in bits of each generated token, one line per run")
def plot_surprise(runs: dict, tau: float | None = None, ax: Axes | None = None) -> Axes:
    """Surprise (-log2 p, bits) of each generated token, one line per run, e.g. {"mirostat": [..]}.

    tau: draw the target surprise as a dashed line.

        >>> plot_surprise({"mirostat v2": run.surprises, "top-k 40": other}, tau=3.0)
    """
    check_table("runs", runs, "surprises in bits per token (lists of numbers)", of=Iterable)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.2), layout="constrained")
    for name, values in runs.items():
        values = list(values)
        ax.plot(range(1, len(values) + 1), values, marker=".", lw=1, label=drawable(str(name)))
    if tau is not None:
        ax.axhline(tau, color="black", ls="--", lw=1, label=f"target tau = {tau:g}")
    ax.set_xlabel("generated token")
    ax.set_ylabel("surprise (bits)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return ax


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


@with_alt_text(
    "Scatter plot of sampling settings: diversity (distinct-2) against the judge's bits per byte, with "
    "intervals"
)
def plot_diversity_quality(
    results: Sequence[SettingResult],
    ax: Axes | None = None,
    xlabel: str = "diversity (distinct-2 over all samples)",
    ylabel: str = "judge's bits per byte (lower: more likely)",
) -> Axes:
    """One point per setting: x its distinct-2, y the judge's mean bits per byte with its 95% interval
    (thick bar) and interquartile range (thin bar). Settings are named in a legend beside the axes,
    so no label can cover a point or another label; points with almost the same distinct-2 are nudged
    apart sideways (`nudged`). The y axis is inverted: up is more likely text.

        >>> plot_diversity_quality(measure_settings(model, tokenizer, prompt, settings, judge, judge_tokenizer))
    """
    check_items(
        "results",
        results,
        "SettingResult (labkit.decoding.diversity.measure_settings)",
        has=("distinct_2", "q1", "q3"),
    )
    if not results:
        raise ValueError("No settings to plot: pass the list that measure_settings returned.")
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4), layout="constrained")
    for index, (r, x) in enumerate(zip(results, nudged([r.distinct_2 for r in results]))):
        color = series_colour(index)  # Okabe-Ito: the settings differ by colour alone
        ax.vlines(x, r.q1, r.q3, color=color, lw=1, alpha=0.6)
        ax.vlines(x, r.low, r.high, color=color, lw=4, alpha=0.9)
        ax.scatter(
            [x],
            [r.mean],
            color=color,
            marker=MARKERS[index % len(MARKERS)],
            s=60,
            zorder=3,
            edgecolor="black",
            linewidth=0.5,
            label=drawable(f"{r.name}: {r.mean:.2f} bits/byte"),
        )
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(
        "point: mean over the samples; thick bar: its 95% interval; thin bar: interquartile range\n"
        f"(points less than {NUDGE} apart in distinct-2 are spread sideways)",
        fontsize=9,
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return ax
