"""A model's shape: the handful of numbers from its config.json that its memory depends on.

Grouped-query attention shrinks the KV cache by n_heads / n_kv_heads: SmolLM2 keeps 3 KV heads for
9 query heads, so its cache is a third of what full multi-head attention would need. Sliding-window
layers (Gemma 3: 5 local layers to 1 global) keep only the last `sliding_window` tokens, so their
cache stops growing there; only the global layers grow with the whole context.

    >>> PRESETS["llama-3.1-8b"].kv_cache_bytes(tokens=8192, batch=1, dtype="fp16") / 1e9
    1.073741824
    >>> shape_of(model).n_kv_heads  # labkit's Llama or a transformers model (SmolLM2-135M here)
    3

PRESETS holds well-known models' shapes; `shape_of` reads one off a model or its config. The formulas
themselves are in labkit.models.footprint.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from labkit.models.footprint import check_size, check_tokens_and_batch, kv_cache_bytes, weight_bytes


@dataclass(frozen=True)
class ModelShape:
    """What the memory of a decoder-only transformer depends on.

    >>> gemma = PRESETS["gemma-3-270m"]  # 15 of its 18 layers see only the last 512 tokens
    >>> gemma.kv_cache_bytes(8192) == 2 * 1 * 256 * 2 * (3 * 8192 + 15 * 512)
    True
    """

    name: str
    n_params: float  # parameters (all of them, embeddings included)
    n_layers: int
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads (= n_heads without grouped-query attention)
    head_dim: int
    context: int  # longest sequence it was trained for (max_position_embeddings)
    sliding_window: int = 0  # tokens a local (sliding-window) layer attends to and caches; 0: no local layers
    n_local_layers: int = 0  # how many of the n_layers are local; the others attend to the whole context

    def __post_init__(self):
        check_size("n_params", self.n_params, whole=False)
        for field in ("n_layers", "n_heads", "n_kv_heads", "head_dim", "context"):
            check_size(field, getattr(self, field))
        check_size("sliding_window", self.sliding_window, minimum=0)
        check_size("n_local_layers", self.n_local_layers, minimum=0)
        if (self.sliding_window == 0) != (self.n_local_layers == 0) or self.n_local_layers >= self.n_layers:
            raise ValueError(
                f"sliding_window ({self.sliding_window}) and n_local_layers ({self.n_local_layers}) "
                f"must be both 0 (no local layers) or both >= 1, with at least one global layer "
                f"(n_local_layers < n_layers = {self.n_layers})."
            )

    def weight_bytes(self, dtype: str | torch.dtype = "fp16") -> float:
        return weight_bytes(self.n_params, dtype)

    def kv_bytes_per_token(self, dtype: str | torch.dtype = "fp16") -> float:
        """KV bytes one more token of context costs, per sequence, while every layer still caches it
        (beyond a sliding window only the global layers grow)."""
        return kv_cache_bytes(self.n_layers, self.n_kv_heads, self.head_dim, 1, 1, dtype)

    def kv_cache_bytes(self, tokens: int, batch: int = 1, dtype: str | torch.dtype = "fp16") -> float:
        """Global layers cache all `tokens`; local layers at most `sliding_window` of them (the keys a step
        attends to: between steps transformers keeps window - 1, llama.cpp's cache a batch more)."""
        check_tokens_and_batch(tokens, batch)
        n_global = self.n_layers - self.n_local_layers
        size = kv_cache_bytes(n_global, self.n_kv_heads, self.head_dim, tokens, batch, dtype)
        if self.n_local_layers:
            size += kv_cache_bytes(
                self.n_local_layers,
                self.n_kv_heads,
                self.head_dim,
                min(tokens, self.sliding_window),
                batch,
                dtype,
            )
        return size

    def total_bytes(
        self,
        tokens: int,
        batch: int = 1,
        weights_dtype: str | torch.dtype = "fp16",
        kv_dtype: str | torch.dtype | None = None,
    ) -> float:
        """Weights + KV cache (activations, a few % more, are left out)."""
        kv_dtype = weights_dtype if kv_dtype is None else kv_dtype
        return self.weight_bytes(weights_dtype) + self.kv_cache_bytes(tokens, batch, kv_dtype)

    def max_tokens(
        self,
        memory_bytes: float,
        batch: int = 1,
        weights_dtype: str | torch.dtype = "fp16",
        kv_dtype: str | torch.dtype | None = None,
    ) -> int:
        """The longest context (per sequence, for `batch` sequences) that fits in `memory_bytes` after the
        weights; 0 if the weights alone do not fit. Not capped at the model's own context. Pass a machine's
        usable memory (Hardware.usable_bytes) to leave the OS and the runtime their share."""
        check_size("memory_bytes", memory_bytes, whole=False)
        kv_dtype = weights_dtype if kv_dtype is None else kv_dtype
        # every layer; checks batch before any early return
        per_token = self.kv_cache_bytes(1, batch, kv_dtype)
        free = memory_bytes - self.weight_bytes(weights_dtype)
        if free <= 0:
            return 0
        if not self.n_local_layers or free < self.kv_cache_bytes(self.sliding_window, batch, kv_dtype):
            return int(free // per_token)
        global_per_token = kv_cache_bytes(
            self.n_layers - self.n_local_layers, self.n_kv_heads, self.head_dim, 1, batch, kv_dtype
        )
        beyond = free - self.kv_cache_bytes(self.sliding_window, batch, kv_dtype)
        return self.sliding_window + int(beyond // global_per_token)

    def context_note(self, tokens: int) -> str:
        """'> trained 4,096' when `tokens` is longer than the model was trained for, else ''."""
        return f"> trained {self.context:,}" if tokens > self.context else ""

    def without_gqa(self) -> ModelShape:
        """The same model as if every query head had its own key/value head (multi-head attention)."""
        return replace(self, name=f"{self.name} (no GQA)", n_kv_heads=self.n_heads)

    def without_sliding_window(self) -> ModelShape:
        """The same model as if every layer attended to (and cached) the whole context."""
        return replace(self, name=f"{self.name} (all global)", sliding_window=0, n_local_layers=0)


def shape_of(model_or_config, name: str | None = None) -> ModelShape:
    """The ModelShape of labkit's Llama, a transformers model, or either's config."""
    config = getattr(model_or_config, "config", model_or_config)
    n_params = None
    if isinstance(model_or_config, torch.nn.Module):
        n_params = sum(p.numel() for p in {id(p): p for p in model_or_config.parameters()}.values())

    def get(*names):
        value = next((getattr(config, n) for n in names if getattr(config, n, None) is not None), None)
        if value is None:
            raise TypeError(
                f"model_or_config: {type(config).__name__} has no {' or '.join(names)}; pass labkit's "
                "Llama, a transformers model, or either's config."
            )
        return value

    n_layers, n_heads = get("n_layers", "num_hidden_layers"), get("n_heads", "num_attention_heads")
    n_kv_heads = get("n_kv_heads", "num_key_value_heads", "num_attention_heads")
    head_dim = getattr(config, "head_dim", None) or get("hidden_size") // n_heads
    n_local = sum(kind == "sliding_attention" for kind in getattr(config, "layer_types", None) or [])
    window = (getattr(config, "sliding_window", None) or 0) if n_local else 0
    if n_params is None:  # a config alone: count the parameters of a Llama of that shape
        hidden, inter, vocab = get("hidden_size"), get("intermediate_size"), get("vocab_size")
        attention = hidden * head_dim * (2 * n_heads + 2 * n_kv_heads)
        per_layer = attention + 3 * hidden * inter + 2 * hidden
        tied = getattr(config, "tie_word_embeddings", True)
        n_params = n_layers * per_layer + vocab * hidden * (1 if tied else 2) + hidden
    return ModelShape(
        name or getattr(config, "name_or_path", None) or "model",
        float(n_params),
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        get("max_position_embeddings"),
        window,
        n_local if window else 0,
    )


# Published configurations (config.json of each model). n_params as reported by the model cards (Gemma 3 27B's
# includes its 0.4B vision encoder). Gemma 3: every 6th layer is global, the other 5 local (layer_types).
PRESETS: dict[str, ModelShape] = {
    s.name: s
    for s in [
        ModelShape("smollm2-135m", 134_515_008, 30, 9, 3, 64, 8192),
        ModelShape("smollm2-1.7b", 1.71e9, 24, 32, 32, 64, 8192),
        ModelShape("gemma-3-270m", 268e6, 18, 4, 1, 256, 32768, sliding_window=512, n_local_layers=15),
        ModelShape("llama-3.2-1b", 1.24e9, 16, 32, 8, 64, 131072),
        ModelShape("llama-3.2-3b", 3.21e9, 28, 24, 8, 128, 131072),
        ModelShape("llama-2-7b", 6.74e9, 32, 32, 32, 128, 4096),
        ModelShape("qwen2.5-7b", 7.62e9, 28, 28, 4, 128, 131072),
        ModelShape("llama-3.1-8b", 8.03e9, 32, 32, 8, 128, 131072),
        ModelShape("llama-2-13b", 13.0e9, 40, 40, 40, 128, 4096),
        ModelShape("gemma-3-27b", 27.4e9, 62, 32, 16, 128, 131072, sliding_window=1024, n_local_layers=52),
        ModelShape("llama-3.1-70b", 70.6e9, 80, 64, 8, 128, 131072),
        ModelShape("llama-3.1-405b", 405e9, 126, 128, 8, 128, 131072),
    ]
}


def model_shape(name: str) -> ModelShape:
    """The shape of a well-known model by name (see PRESETS).

    >>> model_shape("llama-3.1-8b").n_layers
    32
    """
    if name not in PRESETS:
        raise ValueError(f"Unknown model {name!r}; presets: {', '.join(PRESETS)}. Or build a ModelShape.")
    return PRESETS[name]
