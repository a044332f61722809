"""Pictures of one forward pass (notebook 02): where a position's attention goes, by layer and head.

>>> weights = all_attention_weights(trace_forward(model, input_ids))       # [L, H, T, T]
>>> plot_attention_heatmaps({"to 'The'": weights[:, :, -1, 0], "to ' France'": weights[:, :, -1, 3]})
>>> plot_head_attention(weights[23, 4, -1], tokens, title="layer 23, head 4")
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from labkit.core.doors import check_table, check_tensor
from labkit.viz.alt import with_alt_text
from labkit.viz.plots import CHOSEN_COLOR, OTHER_COLOR
from labkit.viz.tokens import drawable


@with_alt_text("Heatmaps of attention weights, layers across and heads down, on one scale from 0 to 1")
def plot_attention_heatmaps(
    panels: dict[str, torch.Tensor], figsize: tuple[float, float] = (10, 4.2)
) -> Figure:
    """One heatmap per entry of panels (title -> attention weights [n_layers, n_heads]), stacked,
    layers across and heads down, on one colour scale from 0 to 1."""
    check_table("panels", panels, "attention weights [n_layers, n_heads] (tensors)", of=torch.Tensor)
    fig, axes = plt.subplots(
        len(panels), 1, figsize=figsize, layout="constrained", sharex=True, squeeze=False
    )
    image = None
    for ax, (title, weights) in zip(axes[:, 0], panels.items()):
        weights = weights.detach().float().cpu()  # [L, H]
        image = ax.imshow(weights.T, vmin=0, vmax=1, cmap="viridis", aspect="auto", interpolation="nearest")
        n_layers, n_heads = weights.shape
        ax.set(title=drawable(title), ylabel="head", yticks=range(n_heads))
        ax.set_xticks(range(0, n_layers, 2 if n_layers > 16 else 1))
        ax.tick_params(labelsize=8)
    axes[-1, 0].set_xlabel("layer")
    fig.colorbar(image, ax=axes[:, 0].tolist(), label="attention weight", shrink=0.9)
    return fig


@with_alt_text("Bar chart of one attention head's weights over the tokens it can see")
def plot_head_attention(
    weights: torch.Tensor,
    tokens: Sequence[str],
    title: str = "",
    highlight: int | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Bars of one head's attention weights [T] over the tokens it can see; bar `highlight` in orange."""
    check_tensor("weights", weights, "[T] of one head's attention weights", dims=1)
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 2.8), layout="constrained")
    values = weights.detach().float().cpu().tolist()
    if len(values) != len(tokens):
        raise ValueError(f"{len(values)} weights for {len(tokens)} tokens: pass one weight per token.")
    colors = [CHOSEN_COLOR if i == highlight else OTHER_COLOR for i in range(len(values))]
    bars = ax.bar(range(len(values)), values, color=colors)
    ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=8)
    ax.set_xticks(range(len(tokens)), [drawable(repr(t)) for t in tokens], fontsize=9)
    ax.set(ylim=(0, 1.12), ylabel="attention weight", title=drawable(title))
    ax.spines[["top", "right"]].set_visible(False)
    return ax
