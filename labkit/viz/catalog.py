"""The model zoo picture for notebook 12: when each open-weight model came out, and how big it is.

>>> from labkit.models import load_catalog
>>> fig = plot_model_zoo(load_catalog())
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from labkit.core.doors import check_items
from labkit.models.catalog import CatalogModel
from labkit.viz.alt import with_alt_text

SLIDE_FIGSIZE = (10, 5.6)  # inches: 16:9, the shape of a slide
MID_MONTH = 15  # catalog dates are months; a point sits in the middle of its month
DENSE_MARKER, MOE_MARKER = "o", "D"  # mixture-of-experts models are diamonds, at their total size


def release_day(model: CatalogModel) -> date:
    """The middle of the model's release month ("2024-09" -> 2024-09-15)."""
    year, month = (int(part) for part in model.release_date.split("-"))
    return date(year, month, MID_MONTH)


def short_name(model: CatalogModel) -> str:
    """The repo id without its organisation: 'meta-llama/Llama-3.1-8B-Instruct' -> 'Llama-3.1-8B-Instruct'."""
    return model.name.split("/")[-1]


def labelled(catalog: Sequence[CatalogModel]) -> list[CatalogModel]:
    """The models worth a label: the largest of each family (labels for all would be unreadable)."""
    largest: dict[str, CatalogModel] = {}
    for model in catalog:
        if model.family not in largest or model.params_b > largest[model.family].params_b:
            largest[model.family] = model
    return list(largest.values())


@with_alt_text(
    "Scatter plot of open models: release date against total parameters on a log scale, coloured by family"
)
def plot_model_zoo(catalog: Sequence[CatalogModel], ax: Axes | None = None) -> Figure:
    """Release date (x) against total parameters (y, log scale: 0.1B to 700B), one point per model,
    coloured by family; mixture-of-experts models are diamonds. Returns the Figure, sized for a slide.

        >>> fig = plot_model_zoo(load_catalog())
    """
    check_items(
        "catalog", catalog, "CatalogModel (labkit.models.load_catalog)", has=("family", "params_b", "is_moe")
    )
    if not catalog:
        raise ValueError("The catalog is empty: nothing to plot. Load one with labkit.models.load_catalog().")
    if ax is None:
        _, ax = plt.subplots(figsize=SLIDE_FIGSIZE, layout="constrained")
    families = list(dict.fromkeys(model.family for model in catalog))
    tab20 = plt.get_cmap("tab20").colors
    colors = tab20[0::2] + tab20[1::2]  # the 10 strong colours first, then their light partners
    for index, family in enumerate(families):
        members = [m for m in catalog if m.family == family]
        for moe, marker in [(False, DENSE_MARKER), (True, MOE_MARKER)]:
            group = [m for m in members if m.is_moe == moe]
            if group:
                ax.scatter(
                    [release_day(m) for m in group],
                    [m.params_b for m in group],
                    marker=marker,
                    s=48,
                    color=colors[index % len(colors)],
                    edgecolor="black",
                    linewidth=0.5,
                    label=family if not moe or len(group) == len(members) else None,
                    zorder=3,
                )
    for index, model in enumerate(sorted(labelled(catalog), key=lambda m: m.params_b)):
        # alternate: fewer overlaps
        ax.annotate(
            short_name(model),
            (release_day(model), model.params_b),
            fontsize=7,
            xytext=(5, 4 if index % 2 == 0 else -11),
            textcoords="offset points",
        )
    ax.set_yscale("log")
    ax.margins(x=0.08)  # room for the labels of the newest models
    ax.set(
        xlabel="release date",
        ylabel="parameters (billions, log scale)",
        title="Open-weight models: size over time (diamonds: mixture of experts, total size)",
    )
    ax.grid(True, which="major", axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8, title="family")
    return ax.figure
