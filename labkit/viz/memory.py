"""Memory pictures for notebook 07: weights + KV cache against the memory available, and a slider.

>>> plot_memory_by_context("llama-3.1-8b", memory_bytes=24e9, reserve_bytes=3.4e9)
>>> context_slider("llama-3.1-8b", memory_gb=24, reserve_gb=3.4)
"""

from __future__ import annotations

import io

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from labkit.core.doors import check_record
from labkit.models.sizing import GB, ModelShape, format_bytes, model_shape
from labkit.viz.alt import with_alt_text


def mark_memory(ax, memory_bytes: float, reserve_bytes: float, limit: int | None) -> None:
    """The memory as a red line, what the reserve leaves of it as a dashed one (when there is a reserve),
    and, when the context runs out inside the axes, a dotted line at that many tokens (`limit`).

        >>> mark_memory(ax, 24e9, 3.4e9, limit=90_000)
    """
    usable = memory_bytes - reserve_bytes
    ax.axhline(memory_bytes / GB, color="crimson", lw=1.5, label=f"memory: {memory_bytes / GB:.0f} GB")
    if reserve_bytes > 0:
        ax.axhline(
            usable / GB,
            color="crimson",
            ls="--",
            lw=1,
            label=f"usable: {usable / GB:.1f} GB (reserve {reserve_bytes / GB:.1f} GB)",
        )
    if limit is not None:
        ax.axvline(limit, color="crimson", ls=":", lw=1)
        ax.text(
            limit,
            memory_bytes / GB,
            f" runs out at {limit:,} tokens",
            color="crimson",
            va="bottom",
            fontsize=8,
        )


def label_memory_axes(ax, name: str, right: int, top_gb: float) -> None:
    """Tokens from 0 to `right` (in thousands) across, GB up from 0 with headroom above `top_gb` (the highest
    thing drawn) for the legend, which sits above the data; the axis labels and the title.

        >>> label_memory_axes(ax, "llama-3.1-8b", right=131072, top_gb=24.0)
    """
    ax.set_xlim(0, right)
    ax.set_ylim(0, 1.6 * top_gb)  # headroom: the legend sits above the data
    ax.xaxis.set_major_formatter(lambda x, _: f"{x / 1000:,.0f}k" if x else "0")
    ax.set(xlabel="context length (tokens per sequence)", ylabel="GB", title=f"{name}: weights + KV cache")
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9, edgecolor="none")  # hides the lines behind it
    ax.spines[["top", "right"]].set_visible(False)


@with_alt_text(
    "Line chart of memory for weights plus KV cache as the context grows, against the memory available"
)
def plot_memory_by_context(
    model: str | ModelShape,
    memory_bytes: float,
    batch: int = 1,
    weights_dtype: str = "fp16",
    kv_dtype: str | None = None,
    context: int | None = None,
    max_tokens: int | None = None,
    ax=None,
    reserve_bytes: float = 0.0,
):
    """Weights + KV cache as the context grows (a linear x axis: the cache grows linearly with tokens, and
    flattens in sliding-window layers past their window), against the memory and what the OS and runtime
    leave of it (memory - reserve_bytes).

    context: a context length to mark (a vertical line); max_tokens: the right end of the x axis (default:
    the model's own context; past it, a grey band marks tokens the model was not trained for).
    Returns the matplotlib Axes.
    """
    check_record(
        "model",
        model,
        "a model name such as 'smollm2-135m' or a ModelShape (labkit.models.model_shape)",
        of=(str, ModelShape),
    )
    shape = model_shape(model) if isinstance(model, str) else model
    kv_dtype = weights_dtype if kv_dtype is None else kv_dtype
    right = max_tokens or shape.context
    tokens = sorted(
        {int(t) for t in torch.linspace(0, right, 200).tolist()} | {min(shape.sliding_window, right)}
    )
    weights = shape.weight_bytes(weights_dtype) / GB
    kv = [shape.kv_cache_bytes(t, batch, kv_dtype) / GB for t in tokens]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.4), layout="constrained")
    ax.stackplot(
        tokens,
        [weights] * len(tokens),
        kv,
        labels=[f"weights ({weights_dtype})", f"KV cache ({kv_dtype}, batch {batch})"],
        colors=["#9ec5fe", "#ffb36b"],
        alpha=0.9,
    )
    usable = memory_bytes - reserve_bytes
    limit = shape.max_tokens(usable, batch, weights_dtype, kv_dtype) if usable > 0 else 0
    mark_memory(ax, memory_bytes, reserve_bytes, limit if 0 < limit < right else None)
    if right > shape.context:
        ax.axvspan(shape.context, right, color="0.85", zorder=0, label=f"beyond trained {shape.context:,}")
    if context is not None:
        ax.axvline(context, color="black", lw=1)
        total = shape.total_bytes(context, batch, weights_dtype, kv_dtype) / GB
        ax.text(context, weights / 2, f" {context:,} tok: {total:.1f} GB", fontsize=8)  # inside the weights
    label_memory_axes(ax, shape.name, right, max(weights + kv[-1], memory_bytes / GB))
    return ax


class ContextSlider(widgets.VBox):
    """A linear slider over the context length (in steps of 1/128 of the model's context), with batch,
    memory and reserve boxes, that redraws `plot_memory_by_context` and says whether the model still fits
    in what the reserve leaves.

    Attributes: `slider` (IntSlider), `batch`, `memory_gb`, `reserve_gb` (number boxes), `text` (HTML),
    `chart` (Image, PNG).
    """

    def __init__(
        self,
        model: str | ModelShape = "llama-3.1-8b",
        memory_gb: float = 24,
        batch: int = 1,
        weights_dtype: str = "fp16",
        kv_dtype: str | None = None,
        reserve_gb: float = 0.0,
    ):
        self.shape = model_shape(model) if isinstance(model, str) else model
        self.weights_dtype, self.kv_dtype = weights_dtype, weights_dtype if kv_dtype is None else kv_dtype
        step = max(self.shape.context // 128, 1)
        self.slider = widgets.IntSlider(
            value=self.shape.context // 4 // step * step or step,
            min=step,
            max=self.shape.context,
            step=step,
            description="context",
            continuous_update=False,
        )
        self.batch = widgets.BoundedIntText(value=batch, min=1, max=1024, description="batch")
        self.memory_gb = widgets.BoundedFloatText(
            value=memory_gb, min=1, max=100_000, description="memory GB"
        )
        self.reserve_gb = widgets.BoundedFloatText(
            value=reserve_gb, min=0, max=100_000, description="reserve GB"
        )
        self.text, self.chart = widgets.HTML(), widgets.Image(format="png")
        self._figure = Figure(figsize=(7, 3.4), layout="constrained")
        self._ax = self._figure.add_subplot()
        controls = [self.slider, self.batch, self.memory_gb, self.reserve_gb]
        super().__init__([widgets.HBox(controls[:2]), widgets.HBox(controls[2:]), self.text, self.chart])
        for control in controls:
            control.observe(self.redraw, names="value")
        self.redraw()

    def usable_bytes(self) -> float:
        """Memory minus the reserve the OS and the runtime keep."""
        return (self.memory_gb.value - self.reserve_gb.value) * GB

    def fits(self) -> bool:
        """Whether weights + KV cache fit in the usable memory, at the slider's context and the batch."""
        return self.total_bytes() <= self.usable_bytes()

    def total_bytes(self) -> float:
        return self.shape.total_bytes(self.slider.value, self.batch.value, self.weights_dtype, self.kv_dtype)

    def redraw(self, _change=None) -> None:
        tokens, batch, memory = self.slider.value, self.batch.value, self.memory_gb.value * GB
        kv = self.shape.kv_cache_bytes(tokens, batch, self.kv_dtype)
        verdict = "fits" if self.fits() else "does <b>not</b> fit"
        self.text.value = (
            f"<b>{self.shape.name}</b>, {tokens:,} tokens x batch {batch}: weights "
            f"{format_bytes(self.shape.weight_bytes(self.weights_dtype))} + KV cache "
            f"{format_bytes(kv)} = <b>{format_bytes(self.total_bytes())}</b>: {verdict} in the "
            f"{format_bytes(self.usable_bytes())} left of {memory / GB:,.0f} GB"
        )
        self._ax.clear()
        plot_memory_by_context(
            self.shape,
            memory,
            batch,
            self.weights_dtype,
            self.kv_dtype,
            context=tokens,
            ax=self._ax,
            reserve_bytes=min(self.reserve_gb.value * GB, memory),
        )
        buffer = io.BytesIO()
        self._figure.savefig(buffer, format="png", dpi=80)
        self.chart.value = buffer.getvalue()

    def __repr__(self) -> str:
        # Short and deterministic: this is what GitHub and nbval see in place of the live widget.
        return f"ContextSlider({self.shape.name}; run the notebook to move the slider)"


def context_slider(
    model: str | ModelShape = "llama-3.1-8b",
    memory_gb: float = 24,
    batch: int = 1,
    weights_dtype: str = "fp16",
    kv_dtype: str | None = None,
    reserve_gb: float = 0.0,
):
    """A context-length slider showing weights + KV cache against `memory_gb` minus `reserve_gb` (what the
    OS and runtime keep: see labkit.models.hardware), and where it runs out.

    Static fallback: `plot_memory_by_context` and `memory_table`.
    """
    return ContextSlider(model, memory_gb, batch, weights_dtype, kv_dtype, reserve_gb)
