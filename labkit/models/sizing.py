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

import math
import numbers
from dataclasses import dataclass, replace

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


def _positive(name: str, value: float, whole: bool = True, minimum: int = 1, allowed: str = "") -> None:
    """Raise unless value is an int >= minimum (whole) or a finite number > 0 (not whole): a TypeError for
    another type (bool included), else a ValueError. allowed: what the message says is allowed."""
    allowed = allowed or (f"a whole number >= {minimum}" if whole else "positive")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral if whole else numbers.Real):
        raise TypeError(f"{name} must be {allowed} ({'an int' if whole else 'a number'}), "
                        f"got {type(value).__name__} {value!r}.")
    if not (value >= minimum if whole else math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be {allowed}, got {value!r}.")


def _check_tokens_and_batch(tokens: int, batch: int) -> None:
    _positive("tokens", tokens, minimum=0)
    _positive("batch", batch, allowed="a whole number of sequences, at least 1 (batch=1 for a single request)")


def weight_bytes(n_params: float, dtype: str | torch.dtype = "fp16") -> float:
    """Bytes of `n_params` weights stored in `dtype` (7e9 in fp16 -> 1.4e10, about 14 GB)."""
    _positive("n_params", n_params, whole=False)
    return n_params * bytes_per_element(dtype)


def kv_cache_bytes(n_layers: int, n_kv_heads: int, head_dim: int, tokens: int, batch: int = 1,
                   dtype: str | torch.dtype = "fp16") -> float:
    """Bytes of a KV cache: 2 (keys and values) x layers x KV heads x head dim x tokens x batch x bytes."""
    for name, value in [("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim)]:
        _positive(name, value)
    _check_tokens_and_batch(tokens, batch)
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

    def __post_init__(self):
        _positive("n_params", self.n_params, whole=False)
        for field in ("n_layers", "n_heads", "n_kv_heads", "head_dim", "context"):
            _positive(field, getattr(self, field))

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
        _positive("memory_bytes", memory_bytes, whole=False)
        kv_dtype = weights_dtype if kv_dtype is None else kv_dtype
        per_token = self.kv_cache_bytes(1, batch, kv_dtype)  # checks batch before any early return
        free = memory_bytes - self.weight_bytes(weights_dtype)
        return int(free // per_token) if free > 0 else 0

    def without_gqa(self) -> ModelShape:
        """The same model as if every query head had its own key/value head (multi-head attention)."""
        return replace(self, name=f"{self.name} (no GQA)", n_kv_heads=self.n_heads)


def shape_of(model_or_config, name: str | None = None) -> ModelShape:
    """The ModelShape of labkit's Llama, a transformers model, or either's config."""
    config = getattr(model_or_config, "config", model_or_config)
    n_params = None
    if isinstance(model_or_config, torch.nn.Module):
        n_params = sum(p.numel() for p in {id(p): p for p in model_or_config.parameters()}.values())

    def get(*names):
        value = next((getattr(config, n) for n in names if getattr(config, n, None) is not None), None)
        if value is None:
            raise TypeError(f"model_or_config: {type(config).__name__} has no {' or '.join(names)}; pass labkit's "
                            "Llama, a transformers model, or either's config.")
        return value
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


def model_shape(name: str) -> ModelShape:
    """The shape of a well-known model by name (see PRESETS).

        >>> model_shape("llama-3.1-8b").n_layers
        32
    """
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
    _check_tokens_and_batch(tokens, batch)
    shapes = [model_shape(m) if isinstance(m, str) else m for m in (models or list(PRESETS))]
    for s in shapes:
        if not isinstance(s, ModelShape):
            raise TypeError(f"models must hold model names or ModelShapes, got a {type(s).__name__}.")
    hardware = HARDWARE if hardware is None else hardware
    for name, size in hardware.items():
        _positive(f"hardware[{name!r}] (bytes)", size, whole=False)
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
