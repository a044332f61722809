"""How much memory a model needs: its weights, plus the KV cache that grows with every token.

    weights  = parameters x bytes per parameter                    (7B in fp16: about 14 GB)
    KV cache = 2 x layers x KV heads x head dim x tokens x batch x bytes per element
               (keys and values)

Grouped-query attention shrinks the KV cache by n_heads / n_kv_heads: SmolLM2 keeps 3 KV heads for
9 query heads, so its cache is a third of what full multi-head attention would need.

    >>> weight_bytes(7e9, "fp16") / 1e9
    14.0
    >>> PRESETS["llama-3.1-8b"].kv_cache_bytes(tokens=8192, batch=1, dtype="fp16") / 1e9
    1.073741824

Sizes are in bytes; `GB` is 10^9 bytes (as GPU and cloud vendors count), `GiB` 2^30.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, replace
from functools import cache

import torch

GB = 10**9
GiB = 2**30

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4, "float32": 4, "tf32": 4,
    "fp16": 2, "float16": 2, "half": 2, "bf16": 2, "bfloat16": 2,
    "fp8": 1, "int8": 1, "q8_0": 1.0625,  # GGUF Q8_0: 32 int8 + one fp16 scale per block
    "int4": 0.5, "nf4": 0.5, "q4_0": 0.5625,  # Q4_0: 32 4-bit values + one fp16 scale per block
}


def bytes_per_element(dtype: str | torch.dtype) -> float:
    """Bytes of one number in `dtype`: a torch dtype or a name ("fp16", "bf16", "int8", "int4", ...)."""
    if isinstance(dtype, torch.dtype):
        return torch.empty((), dtype=dtype).element_size()
    key = str(dtype).lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ValueError(f"Unknown dtype {dtype!r}; use a torch dtype or one of: {', '.join(DTYPE_BYTES)}.")
    return DTYPE_BYTES[key]


def _positive(name: str, value: float, whole: bool = True) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and value != int(value)):
        raise ValueError(f"{name} must be a {'whole ' if whole else ''}number, got {value!r}.")
    if value < (1 if whole else 0) or (not whole and value == 0):
        raise ValueError(f"{name} must be at least 1, got {value!r}." if whole
                         else f"{name} must be positive, got {value!r}.")


def weight_bytes(n_params: float, dtype: str | torch.dtype = "fp16") -> float:
    """Bytes of `n_params` weights stored in `dtype` (7e9 in fp16 -> 1.4e10, about 14 GB)."""
    _positive("n_params", n_params, whole=False)
    return n_params * bytes_per_element(dtype)


def kv_cache_bytes(n_layers: int, n_kv_heads: int, head_dim: int, tokens: int, batch: int = 1,
                   dtype: str | torch.dtype = "fp16") -> float:
    """Bytes of a KV cache: 2 (keys and values) x layers x KV heads x head dim x tokens x batch x bytes."""
    for name, value in [("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim)]:
        _positive(name, value)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"tokens must be a whole number >= 0, got {tokens!r}.")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a whole number of sequences, at least 1, got {batch!r}. "
                         "Use batch=1 for a single request.")
    return 2 * n_layers * n_kv_heads * head_dim * tokens * batch * bytes_per_element(dtype)


@dataclass(frozen=True)
class ModelShape:
    """What the memory of a decoder-only transformer depends on."""

    name: str
    n_params: float  # parameters (all of them, embeddings included)
    n_layers: int
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads (= n_heads without grouped-query attention)
    head_dim: int
    context: int  # longest sequence it was trained for

    def weight_bytes(self, dtype: str | torch.dtype = "fp16") -> float:
        return weight_bytes(self.n_params, dtype)

    def kv_bytes_per_token(self, dtype: str | torch.dtype = "fp16") -> float:
        """KV bytes one more token of context costs, per sequence."""
        return kv_cache_bytes(self.n_layers, self.n_kv_heads, self.head_dim, 1, 1, dtype)

    def kv_cache_bytes(self, tokens: int, batch: int = 1, dtype: str | torch.dtype = "fp16") -> float:
        return kv_cache_bytes(self.n_layers, self.n_kv_heads, self.head_dim, tokens, batch, dtype)

    def total_bytes(self, tokens: int, batch: int = 1, weights_dtype: str | torch.dtype = "fp16",
                    kv_dtype: str | torch.dtype | None = None) -> float:
        """Weights + KV cache (activations, a few % more, are left out)."""
        kv_dtype = weights_dtype if kv_dtype is None else kv_dtype
        return self.weight_bytes(weights_dtype) + self.kv_cache_bytes(tokens, batch, kv_dtype)

    def max_tokens(self, memory_bytes: float, batch: int = 1, weights_dtype: str | torch.dtype = "fp16",
                   kv_dtype: str | torch.dtype | None = None) -> int:
        """The longest context (per sequence, for `batch` sequences) that fits in `memory_bytes` after the
        weights; 0 if the weights alone do not fit. Not capped at the model's own context."""
        kv_dtype = weights_dtype if kv_dtype is None else kv_dtype
        free = memory_bytes - self.weight_bytes(weights_dtype)
        if free <= 0:
            return 0
        return int(free // (self.kv_cache_bytes(1, batch, kv_dtype)))

    def without_gqa(self) -> ModelShape:
        """The same model as if every query head had its own key/value head (multi-head attention)."""
        return replace(self, name=f"{self.name} (no GQA)", n_kv_heads=self.n_heads)


def shape_of(model_or_config, name: str | None = None) -> ModelShape:
    """The ModelShape of labkit's Llama, a transformers model, or either's config."""
    config = getattr(model_or_config, "config", model_or_config)
    n_params = None
    if isinstance(model_or_config, torch.nn.Module):
        n_params = sum(p.numel() for p in {id(p): p for p in model_or_config.parameters()}.values())
    get = lambda *names: next(getattr(config, n) for n in names if getattr(config, n, None) is not None)  # noqa: E731
    n_layers, n_heads = get("n_layers", "num_hidden_layers"), get("n_heads", "num_attention_heads")
    n_kv_heads = get("n_kv_heads", "num_key_value_heads", "num_attention_heads")
    head_dim = getattr(config, "head_dim", None) or get("hidden_size") // n_heads
    if n_params is None:  # a config alone: count the parameters of a Llama of that shape
        hidden, inter, vocab = get("hidden_size"), get("intermediate_size"), get("vocab_size")
        attention = hidden * head_dim * (2 * n_heads + 2 * n_kv_heads)
        per_layer = attention + 3 * hidden * inter + 2 * hidden
        tied = getattr(config, "tie_word_embeddings", True)
        n_params = n_layers * per_layer + vocab * hidden * (1 if tied else 2) + hidden
    return ModelShape(name or getattr(config, "name_or_path", None) or "model", float(n_params), n_layers,
                      n_heads, n_kv_heads, head_dim, get("max_position_embeddings"))


# Published configurations (config.json of each model). n_params as reported by the model cards.
PRESETS: dict[str, ModelShape] = {s.name: s for s in [
    ModelShape("smollm2-135m", 134_515_008, 30, 9, 3, 64, 8192),
    ModelShape("smollm2-1.7b", 1.71e9, 24, 32, 32, 64, 8192),
    ModelShape("gemma-3-270m", 268e6, 18, 4, 1, 256, 32768),
    ModelShape("llama-3.2-1b", 1.24e9, 16, 32, 8, 64, 131072),
    ModelShape("llama-3.2-3b", 3.21e9, 28, 24, 8, 128, 131072),
    ModelShape("llama-2-7b", 6.74e9, 32, 32, 32, 128, 4096),
    ModelShape("qwen2.5-7b", 7.62e9, 28, 28, 4, 128, 131072),
    ModelShape("llama-3.1-8b", 8.03e9, 32, 32, 8, 128, 131072),
    ModelShape("llama-2-13b", 13.0e9, 40, 40, 40, 128, 4096),
    ModelShape("llama-3.1-70b", 70.6e9, 80, 64, 8, 128, 131072),
    ModelShape("llama-3.1-405b", 405e9, 126, 128, 8, 128, 131072),
]}

# Memory a model can use on common hardware (GB = 10^9 bytes; the OS and runtime need some of it).
HARDWARE: dict[str, float] = {
    "laptop, 8 GB RAM": 8 * GB,
    "laptop, 16 GB RAM": 16 * GB,
    "RTX 4090, 24 GB": 24 * GB,
    "Mac, 64 GB unified": 64 * GB,
    "A100 / H100, 80 GB": 80 * GB,
    "H200, 141 GB": 141 * GB,
    "8 x H100, 640 GB": 640 * GB,
}


def preset(name: str) -> ModelShape:
    if name not in PRESETS:
        raise ValueError(f"Unknown model {name!r}; presets: {', '.join(PRESETS)}. Or build a ModelShape.")
    return PRESETS[name]


def format_bytes(n_bytes: float) -> str:
    """Bytes as a short human number in decimal units: '14.0 GB', '432.0 MB', '48.0 KB'."""
    for unit, size in [("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)]:
        if abs(n_bytes) >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{n_bytes:.0f} B"


def memory_table(models: list[str | ModelShape] | None = None, tokens: int = 4096, batch: int = 1,
                 weights_dtype: str = "fp16", kv_dtype: str | None = None,
                 hardware: dict[str, float] | None = None) -> str:
    """Weights, KV cache and total for each model, and on which hardware it fits, as a text table."""
    shapes = [preset(m) if isinstance(m, str) else m for m in (models or list(PRESETS))]
    hardware = HARDWARE if hardware is None else hardware
    kv_dtype = weights_dtype if kv_dtype is None else kv_dtype
    width = max(len("model"), *(len(s.name) for s in shapes))
    lines = [f"weights {weights_dtype}, KV cache {kv_dtype}, {tokens:,} tokens x batch {batch}",
             f"{'model':<{width}}  {'weights':>9}  {'KV/token':>9}  {'KV cache':>9}  {'total':>9}  smallest that fits"]
    for s in shapes:
        total = s.total_bytes(tokens, batch, weights_dtype, kv_dtype)
        fits = next((name for name, size in sorted(hardware.items(), key=lambda h: h[1]) if total <= size), "none")
        lines.append(f"{s.name:<{width}}  {format_bytes(s.weight_bytes(weights_dtype)):>9}  "
                     f"{format_bytes(s.kv_bytes_per_token(kv_dtype)):>9}  "
                     f"{format_bytes(s.kv_cache_bytes(tokens, batch, kv_dtype)):>9}  {format_bytes(total):>9}  {fits}")
    return "\n".join(lines)


def plot_memory_by_context(model: str | ModelShape, memory_bytes: float, batch: int = 1,
                           weights_dtype: str = "fp16", kv_dtype: str | None = None,
                           context: int | None = None, max_tokens: int | None = None, ax=None):
    """Weights + KV cache as the context grows (log x axis), against the memory available.

    context: a context length to mark (a vertical line); max_tokens: the right end of the x axis
    (default: the model's own context). Returns the matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    shape = preset(model) if isinstance(model, str) else model
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


@cache
def _context_slider_class():
    """The widget class, made on first use so that `import labkit` does not pay for ipywidgets."""
    import ipywidgets as widgets

    class ContextSlider(widgets.VBox):
        """A slider over the context length (powers of two), with batch and memory boxes, that redraws
        `plot_memory_by_context` and says whether the model still fits.

        Attributes: `slider` (SelectionSlider), `batch`, `memory_gb` (number boxes), `text` (HTML),
        `chart` (Image, PNG).
        """

        def __init__(self, model: str | ModelShape = "llama-3.1-8b", memory_gb: float = 24, batch: int = 1,
                     weights_dtype: str = "fp16", kv_dtype: str | None = None):
            from matplotlib.figure import Figure

            self.shape = preset(model) if isinstance(model, str) else model
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

    return ContextSlider


def context_slider(model: str | ModelShape = "llama-3.1-8b", memory_gb: float = 24, batch: int = 1,
                   weights_dtype: str = "fp16", kv_dtype: str | None = None):
    """A context-length slider showing weights + KV cache against `memory_gb`, and where it runs out.

    Static fallback: `plot_memory_by_context` and `memory_table`.
    """
    return _context_slider_class()(model, memory_gb, batch, weights_dtype, kv_dtype)
