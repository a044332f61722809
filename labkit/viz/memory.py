"""Memory pictures for notebook 07: weights + KV cache against the memory available, and a slider.

    >>> plot_memory_by_context("llama-3.1-8b", memory_bytes=24e9)
    >>> context_slider("llama-3.1-8b", memory_gb=24)
"""

from __future__ import annotations

import io
import math

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from labkit.models.sizing import GB, ModelShape, format_bytes, model_shape


def plot_memory_by_context(model: str | ModelShape, memory_bytes: float, batch: int = 1,
                           weights_dtype: str = "fp16", kv_dtype: str | None = None,
                           context: int | None = None, max_tokens: int | None = None, ax=None):
    """Weights + KV cache as the context grows (log x axis), against the memory available.

    context: a context length to mark (a vertical line); max_tokens: the right end of the x axis
    (default: the model's own context). Returns the matplotlib Axes.
    """
    shape = model_shape(model) if isinstance(model, str) else model
    kv_dtype = weights_dtype if kv_dtype is None else kv_dtype
    right = max_tokens or shape.context
    tokens = sorted({int(t) for t in torch.logspace(math.log10(64), math.log10(right), 60).tolist()})
    weights = shape.weight_bytes(weights_dtype) / GB
    kv = [shape.kv_cache_bytes(t, batch, kv_dtype) / GB for t in tokens]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.4), layout="constrained")
    ax.stackplot(tokens, [weights] * len(tokens), kv, labels=[f"weights ({weights_dtype})",
                                                                f"KV cache ({kv_dtype}, batch {batch})"],
                 colors=["#9ec5fe", "#ffb36b"], alpha=0.9)
    ax.axhline(memory_bytes / GB, color="crimson", lw=1.5, label=f"memory: {memory_bytes / GB:.0f} GB")
    limit = shape.max_tokens(memory_bytes, batch, weights_dtype, kv_dtype)
    if 0 < limit < right:
        ax.axvline(limit, color="crimson", ls=":", lw=1)
        ax.text(limit, memory_bytes / GB, f" runs out at {limit:,} tokens", color="crimson", va="bottom", fontsize=8)
    if context is not None:
        ax.axvline(context, color="black", lw=1)
        total = shape.total_bytes(context, batch, weights_dtype, kv_dtype) / GB
        ax.text(context, ax.get_ylim()[1] * 0.5, f" {context:,} tok: {total:.1f} GB", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="context length (tokens per sequence)", ylabel="GB", title=f"{shape.name}: weights + KV cache")
    ax.legend(loc="upper left", frameon=False, fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    return ax


class ContextSlider(widgets.VBox):
    """A slider over the context length (powers of two), with batch and memory boxes, that redraws
    `plot_memory_by_context` and says whether the model still fits.

    Attributes: `slider` (SelectionSlider), `batch`, `memory_gb` (number boxes), `text` (HTML),
    `chart` (Image, PNG).
    """

    def __init__(self, model: str | ModelShape = "llama-3.1-8b", memory_gb: float = 24, batch: int = 1,
                 weights_dtype: str = "fp16", kv_dtype: str | None = None):
        self.shape = model_shape(model) if isinstance(model, str) else model
        self.weights_dtype, self.kv_dtype = weights_dtype, weights_dtype if kv_dtype is None else kv_dtype
        options = [2**k for k in range(8, int(math.log2(self.shape.context)) + 1)]
        self.slider = widgets.SelectionSlider(options=[(f"{t:,}", t) for t in options],
                                              value=options[len(options) // 2], description="context",
                                              continuous_update=False)
        self.batch = widgets.BoundedIntText(value=batch, min=1, max=1024, description="batch")
        self.memory_gb = widgets.BoundedFloatText(value=memory_gb, min=1, max=100_000, description="memory GB")
        self.text, self.chart = widgets.HTML(), widgets.Image(format="png")
        self._figure = Figure(figsize=(7, 3.4), layout="constrained")
        self._ax = self._figure.add_subplot()
        super().__init__([widgets.HBox([self.slider, self.batch, self.memory_gb]), self.text, self.chart])
        for control in (self.slider, self.batch, self.memory_gb):
            control.observe(self.redraw, names="value")
        self.redraw()

    def fits(self) -> bool:
        """Whether weights + KV cache fit in the memory, at the slider's context and the batch."""
        return self.total_bytes() <= self.memory_gb.value * GB

    def total_bytes(self) -> float:
        return self.shape.total_bytes(self.slider.value, self.batch.value, self.weights_dtype, self.kv_dtype)

    def redraw(self, _change=None) -> None:
        tokens, batch, memory = self.slider.value, self.batch.value, self.memory_gb.value * GB
        kv = self.shape.kv_cache_bytes(tokens, batch, self.kv_dtype)
        verdict = "fits" if self.fits() else "does <b>not</b> fit"
        self.text.value = (f"<b>{self.shape.name}</b>, {tokens:,} tokens x batch {batch}: weights "
                           f"{format_bytes(self.shape.weight_bytes(self.weights_dtype))} + KV cache "
                           f"{format_bytes(kv)} = <b>{format_bytes(self.total_bytes())}</b>: {verdict} in "
                           f"{memory / GB:,.0f} GB")
        self._ax.clear()
        plot_memory_by_context(self.shape, memory, batch, self.weights_dtype, self.kv_dtype, context=tokens,
                               ax=self._ax)
        buffer = io.BytesIO()
        self._figure.savefig(buffer, format="png", dpi=80)
        self.chart.value = buffer.getvalue()

    def __repr__(self) -> str:
        # Short and deterministic: this is what GitHub and nbval see in place of the live widget.
        return f"ContextSlider({self.shape.name}; run the notebook to move the slider)"


def context_slider(model: str | ModelShape = "llama-3.1-8b", memory_gb: float = 24, batch: int = 1,
                   weights_dtype: str = "fp16", kv_dtype: str | None = None):
    """A context-length slider showing weights + KV cache against `memory_gb`, and where it runs out.

    Static fallback: `plot_memory_by_context` and `memory_table`.
    """
    return ContextSlider(model, memory_gb, batch, weights_dtype, kv_dtype)
