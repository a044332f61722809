"""Diagrams drawn with matplotlib: the inference loop of notebook 00.

>>> plot_inference_loop()
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import FancyBboxPatch

from labkit.viz.alt import with_alt_text

LOOP_STAGES = [  # (left edge, label, colour)
    (0.1, 'tokens so far\n"The capital of\nFrance is"', "#dbe9f6"),
    (2.6, "model\n(one forward pass)", "#fde2c8"),
    (5.1, "scores for every\npossible\nnext token", "#e2f0d9"),
    (7.6, 'decoding rule\npicks one token:\n" Paris"', "#f3dcef"),
]


@with_alt_text(
    "Diagram of the generation loop: tokens go into the model, its scores into a decoding rule, and the "
    "chosen token back into the input"
)
def plot_inference_loop(ax: Axes | None = None) -> Axes:
    """Tokens -> model -> scores -> decoding rule, and the arrow back that makes it generation."""
    if ax is None:
        ax = plt.subplots(figsize=(10, 3.4))[1]
    ax.set(xlim=(0, 10), ylim=(0, 3.4))
    ax.axis("off")
    width, height, y = 2.2, 1.4, 1.2
    for x, label, colour in LOOP_STAGES:
        ax.add_patch(FancyBboxPatch((x, y), width, height, boxstyle="round,pad=0.05", fc=colour, ec="0.3"))
        ax.text(x + width / 2, y + height / 2, label, ha="center", va="center", fontsize=10)
    for (x, *_), (next_x, *_) in zip(LOOP_STAGES, LOOP_STAGES[1:]):
        ax.annotate(
            "",
            xy=(next_x - 0.05, y + height / 2),
            xytext=(x + width + 0.05, y + height / 2),
            arrowprops=dict(arrowstyle="-|>", lw=1.5),
        )
    ax.annotate(
        "",
        xy=(1.2, y - 0.05),
        xytext=(8.7, y - 0.05),
        arrowprops=dict(arrowstyle="-|>", lw=1.5, connectionstyle="bar,fraction=-0.08"),
    )
    ax.text(4.95, 3.0, "INFERENCE", ha="center", fontsize=11, fontweight="bold")
    ax.text(8.7, 3.0, "DECODING", ha="center", fontsize=11, fontweight="bold")
    ax.text(
        5, 0.15, "append the new token and repeat: GENERATION", ha="center", fontsize=11, fontweight="bold"
    )
    return ax
