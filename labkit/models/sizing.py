"""How much memory a model needs: its weights, plus the KV cache that grows with every token.

    weights  = parameters x bytes per parameter                    (7B in fp16: about 14 GB)
    KV cache = 2 x layers x KV heads x head dim x tokens x batch x bytes per element
               (keys and values)

Grouped-query attention shrinks the KV cache by n_heads / n_kv_heads: SmolLM2 keeps 3 KV heads for
9 query heads, so its cache is a third of what full multi-head attention would need. Sliding-window
layers (Gemma 3: 5 local layers to 1 global) keep only the last `sliding_window` tokens, so their
cache stops growing there; only the global layers grow with the whole context.

    >>> weight_bytes(7e9, "fp16") / 1e9
    14.0
    >>> PRESETS["llama-3.1-8b"].kv_cache_bytes(tokens=8192, batch=1, dtype="fp16") / 1e9
    1.073741824

Sizes are in bytes; `GB` is 10^9 bytes (as GPU and cloud vendors count), `GiB` 2^30. Which hardware
holds a model, after the OS and the runtime have taken their share, is in labkit.models.hardware.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace

import torch

from labkit.core.doors import check_number
from labkit.models.hardware import HARDWARE, RESERVES, Hardware, hardware_table, reserve_bytes

__all__ = ["DTYPE_BYTES", "GB", "GiB", "HARDWARE", "PRESETS", "Hardware", "ModelShape", "bytes_per_element",
           "format_bytes", "hardware_table", "kv_cache_bytes", "memory_table", "model_shape", "reserve_bytes",
           "shape_of", "weight_bytes"]

GB = 10**9
GiB = 2**30

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4, "float32": 4, "tf32": 4,
    "fp16": 2, "float16": 2, "half": 2, "bf16": 2, "bfloat16": 2,
    "fp8": 1, "int8": 1, "q8_0": 1.0625,  # GGUF Q8_0: 32 int8 + one fp16 scale per block
    "int4": 0.5, "nf4": 0.5, "q4_0": 0.5625,  # Q4_0: 32 4-bit values + one fp16 scale per block (4.5 bits)
    "q4_1": 0.625,  # Q4_1: 32 4-bit values + an fp16 scale and an fp16 minimum per block: 5 bits
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
        _positive("n_params", self.n_params, whole=False)
        for field in ("n_layers", "n_heads", "n_kv_heads", "head_dim", "context"):
            _positive(field, getattr(self, field))
        _positive("sliding_window", self.sliding_window, minimum=0)
        _positive("n_local_layers", self.n_local_layers, minimum=0)
        if (self.sliding_window == 0) != (self.n_local_layers == 0) or self.n_local_layers >= self.n_layers:
            raise ValueError(f"sliding_window ({self.sliding_window}) and n_local_layers ({self.n_local_layers}) "
                             f"must be both 0 (no local layers) or both >= 1, with at least one global layer "
                             f"(n_local_layers < n_layers = {self.n_layers}).")

    def weight_bytes(self, dtype: str | torch.dtype = "fp16") -> float:
        return weight_bytes(self.n_params, dtype)

    def kv_bytes_per_token(self, dtype: str | torch.dtype = "fp16") -> float:
        """KV bytes one more token of context costs, per sequence, while every layer still caches it
        (beyond a sliding window only the global layers grow)."""
        return kv_cache_bytes(self.n_layers, self.n_kv_heads, self.head_dim, 1, 1, dtype)

    def kv_cache_bytes(self, tokens: int, batch: int = 1, dtype: str | torch.dtype = "fp16") -> float:
        """Global layers cache all `tokens`; local layers at most `sliding_window` of them (the keys a step
        attends to: between steps transformers keeps window - 1, llama.cpp's cache a batch more)."""
        _check_tokens_and_batch(tokens, batch)
        n_global = self.n_layers - self.n_local_layers
        size = kv_cache_bytes(n_global, self.n_kv_heads, self.head_dim, tokens, batch, dtype)
        if self.n_local_layers:
            size += kv_cache_bytes(self.n_local_layers, self.n_kv_heads, self.head_dim,
                                   min(tokens, self.sliding_window), batch, dtype)
        return size

    def total_bytes(self, tokens: int, batch: int = 1, weights_dtype: str | torch.dtype = "fp16",
                    kv_dtype: str | torch.dtype | None = None) -> float:
        """Weights + KV cache (activations, a few % more, are left out)."""
        kv_dtype = weights_dtype if kv_dtype is None else kv_dtype
        return self.weight_bytes(weights_dtype) + self.kv_cache_bytes(tokens, batch, kv_dtype)

    def max_tokens(self, memory_bytes: float, batch: int = 1, weights_dtype: str | torch.dtype = "fp16",
                   kv_dtype: str | torch.dtype | None = None) -> int:
        """The longest context (per sequence, for `batch` sequences) that fits in `memory_bytes` after the
        weights; 0 if the weights alone do not fit. Not capped at the model's own context. Pass a machine's
        usable memory (Hardware.usable_bytes) to leave the OS and the runtime their share."""
        _positive("memory_bytes", memory_bytes, whole=False)
        kv_dtype = weights_dtype if kv_dtype is None else kv_dtype
        per_token = self.kv_cache_bytes(1, batch, kv_dtype)  # every layer; checks batch before any early return
        free = memory_bytes - self.weight_bytes(weights_dtype)
        if free <= 0:
            return 0
        if not self.n_local_layers or free < self.kv_cache_bytes(self.sliding_window, batch, kv_dtype):
            return int(free // per_token)
        global_per_token = kv_cache_bytes(self.n_layers - self.n_local_layers, self.n_kv_heads, self.head_dim, 1,
                                          batch, kv_dtype)
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
            raise TypeError(f"model_or_config: {type(config).__name__} has no {' or '.join(names)}; pass labkit's "
                            "Llama, a transformers model, or either's config.")
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
    return ModelShape(name or getattr(config, "name_or_path", None) or "model", float(n_params), n_layers,
                      n_heads, n_kv_heads, head_dim, get("max_position_embeddings"), window, n_local if window else 0)


# Published configurations (config.json of each model). n_params as reported by the model cards (Gemma 3 27B's
# includes its 0.4B vision encoder). Gemma 3: every 6th layer is global, the other 5 local (layer_types).
PRESETS: dict[str, ModelShape] = {s.name: s for s in [
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
]}


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
    check_number("n_bytes", n_bytes)
    for unit, size in [("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)]:
        if abs(n_bytes) >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{n_bytes:.0f} B"


# The columns of memory_table: which kinds of memory each one picks its smallest fitting hardware from.
COLUMNS = {"RAM / unified": ("RAM", "unified"), "GPU VRAM": ("VRAM",), "smallest that fits": ("budget",)}


def _hardware_list(hardware: dict[str, float] | dict[str, Hardware] | None) -> list[Hardware]:
    """HARDWARE by default; a dict of plain byte budgets ({"my GPU": 24e9}) becomes kind "budget" (no reserve)."""
    machines = []
    for name, size in (HARDWARE if hardware is None else hardware).items():
        if not isinstance(size, Hardware):
            _positive(f"hardware[{name!r}] (bytes)", size, whole=False)
            size = Hardware(name, float(size), "budget")
        machines.append(size)
    return sorted(machines, key=lambda h: h.usable_bytes)


def _smallest(shape: ModelShape, total: float, machines: list[Hardware]) -> str:
    """The first machine (smallest usable memory) that holds `total` bytes of `shape`, or 'none'."""
    return next((h.name for h in machines if total <= h.usable_bytes and h.splits(shape.n_heads, shape.n_kv_heads)),
                "none")


def _notes(shape: ModelShape, tokens: int) -> str:
    window = ""
    if shape.n_local_layers:
        window = f"window {shape.sliding_window:,} ({shape.n_local_layers}/{shape.n_layers})"
    return "; ".join(note for note in (shape.context_note(tokens), window) if note)


def _footnotes(shapes: list[ModelShape], tokens: int, machines: list[Hardware], chosen: set[str]) -> list[str]:
    """What the notes mean and which reserves the fits assume, only for those that appear (chosen: the
    names of the machines the table picked)."""
    kinds = {h.kind for h in machines} - {"budget"}
    reserves = [f"{kind} {rule}" for kind, (_, _, rule, _) in RESERVES.items() if kind in kinds]
    lines = [f"fits: total <= memory - reserve ({', '.join(reserves)}; see hardware_table)"] if reserves else []
    if any(h.devices > 1 and h.name in chosen for h in machines):
        lines.append("N x GPU: tensor parallel, each GPU holds 1/N of every layer (the heads must divide by N)")
    too_long = [s.name for s in shapes if s.context_note(tokens)]
    if too_long:
        lines.append(f"> trained N: {tokens:,} tokens exceed the N the model was trained for "
                     "(max_position_embeddings): answers may degrade")
    if any(s.n_local_layers for s in shapes):
        lines.append("window W (L/N): L of the N layers keep only the last W tokens: their cache stops growing at W")
    return lines


def memory_table(models: list[str | ModelShape] | None = None, tokens: int = 4096, batch: int = 1,
                 weights_dtype: str = "fp16", kv_dtype: str | None = None,
                 hardware: dict[str, float] | dict[str, Hardware] | None = None) -> str:
    """Weights, KV cache and total for each model, and the smallest hardware whose usable memory (after the
    OS and runtime reserve) holds it: CPU RAM or unified memory apart from GPU VRAM. A row whose `tokens`
    exceed the model's trained context is marked '> trained N', and a footnote says what that means.

    hardware: HARDWARE by default, or {name: Hardware}, or {name: bytes} (plain budgets, nothing reserved).

        >>> print(memory_table(["llama-2-7b"], tokens=8192).splitlines()[2])
        llama-2-7b    13.5 GB   524.3 KB     4.3 GB    17.8 GB  laptop 32 GB   RTX 4090 24 GB  > trained 4,096
    """
    _check_tokens_and_batch(tokens, batch)
    shapes = [model_shape(m) if isinstance(m, str) else m for m in (models or list(PRESETS))]
    for s in shapes:
        if not isinstance(s, ModelShape):
            raise TypeError(f"models must hold model names or ModelShapes, got a {type(s).__name__}.")
    machines = _hardware_list(hardware)
    columns = {title: [h for h in machines if h.kind in kinds] for title, kinds in COLUMNS.items()}
    columns = {title: group for title, group in columns.items() if group}
    kv_dtype = weights_dtype if kv_dtype is None else kv_dtype
    width = max(len("model"), *(len(s.name) for s in shapes))
    fits_width = {title: max(len(title), *(len(h.name) for h in group)) for title, group in columns.items()}
    lines = [f"weights {weights_dtype}, KV cache {kv_dtype}, {tokens:,} tokens x batch {batch}",
             f"{'model':<{width}}  {'weights':>9}  {'KV/token':>9}  {'KV cache':>9}  {'total':>9}  "
             + "  ".join(f"{title:<{fits_width[title]}}" for title in columns) + "  note"]
    chosen = set()
    for s in shapes:
        total = s.total_bytes(tokens, batch, weights_dtype, kv_dtype)
        picks = {title: _smallest(s, total, group) for title, group in columns.items()}
        chosen.update(picks.values())
        fits = "  ".join(f"{pick:<{fits_width[title]}}" for title, pick in picks.items())
        lines.append(f"{s.name:<{width}}  {format_bytes(s.weight_bytes(weights_dtype)):>9}  "
                     f"{format_bytes(s.kv_bytes_per_token(kv_dtype)):>9}  "
                     f"{format_bytes(s.kv_cache_bytes(tokens, batch, kv_dtype)):>9}  {format_bytes(total):>9}  "
                     f"{fits}  {_notes(s, tokens)}".rstrip())
    return "\n".join(lines + _footnotes(shapes, tokens, machines, chosen))
