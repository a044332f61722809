"""Will a model run here, and how fast at most? Memory and the decode speed limit of one catalog model.

Memory is the weights at a quantization plus the KV cache at a context length (plus what the OS and the
engine keep). Decoding one token at batch 1 reads every active weight and the whole KV cache once, so a
machine whose memory streams `bandwidth` bytes per second decodes at most

    tokens/s <= bandwidth / (active weights + KV cache)

SmolLM2-135M in fp16 with 2,048 tokens cached reads 317 MB a token: 25 GB/s allows at most 78.8 tokens/s.
An upper bound: a real engine also spends time on per-op overhead and compute (notebooks 07 and 13).

    >>> smol = next(m for m in load_catalog() if m.name == "HuggingFaceTB/SmolLM2-135M-Instruct")
    >>> fits_here(smol, memory_bytes=8e9, quant="q4", context_tokens=4096).fits
    True

Sizes are bytes (8e9 = 8 GB), as in labkit.models.footprint, which does the arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from labkit.core.arguments import check_int
from labkit.core.doors import check_fields, check_items
from labkit.models.catalog_model import CatalogModel, check_catalog_model
from labkit.models.footprint import kv_cache_bytes, weight_bytes
from labkit.table import Column, format_table

# Bytes per weight of each quantization, as a dtype name of labkit.models.footprint.DTYPE_BYTES:
# q4 is GGUF Q4_0, 4.5 bits per weight (32 4-bit weights share one fp16 scale: 18 bytes per 32 weights);
# llama.cpp's K-quants such as Q4_K_M average a little more. q4_1 is GGUF Q4_1, 5 bits per weight (32 4-bit
# weights share an fp16 scale and an fp16 minimum: 20 bytes per 32 weights), SmolLM2's file but its embedding.
# int8 counts 1 byte and leaves its scales out.
QUANTS: dict[str, str] = {"fp32": "fp32", "fp16": "fp16", "int8": "int8", "q4": "q4_0", "q4_1": "q4_1"}
KV_DTYPE = "fp16"  # llama.cpp, vLLM and transformers keep the KV cache in 16-bit floats by default
DEFAULT_CONTEXT = 4096  # tokens: a long chat; every model in the catalog was trained for at least this


@dataclass(frozen=True)
class Fit:
    """What running one model at one quantization and context would take, and whether it fits."""

    model: str
    quant: str
    context_tokens: int  # the context asked for, capped at the model's own
    weight_bytes: float  # all parameters at the quantization
    kv_cache_bytes: float  # fp16 keys and values for context_tokens (sliding windows ignored: an upper bound)
    runtime_overhead_bytes: float
    os_reserve_bytes: float
    total_bytes: float  # weights + KV cache + runtime overhead
    memory_bytes: float
    fits: bool  # total + OS reserve <= memory
    bytes_per_token: float  # read per decoded token: active weights + the whole KV cache
    max_tokens_per_s: float | None  # bandwidth / bytes_per_token: an upper bound; None without a bandwidth

    def __post_init__(self):
        check_fields(self)

    def as_dict(self) -> dict:
        return asdict(self)


def _quant_dtype(quant: str) -> str:
    if quant not in QUANTS:
        raise ValueError(
            f"quant must be one of {', '.join(QUANTS)} (q4 = GGUF Q4_0, 4.5 bits per weight; "
            f"q4_1 = GGUF Q4_1, 5 bits per weight), got {quant!r}."
        )
    return QUANTS[quant]


def _check_bytes(name: str, value: float, positive: bool = False) -> None:
    """A ValueError naming `name` unless value is a finite number of bytes >= 0 (> 0 when `positive`)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (value >= 0 and math.isfinite(value))
        or (positive and value == 0)
    ):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a number of bytes {bound} (8e9 = 8 GB), got {value!r}.")


def check_budget(memory_bytes: float, os_reserve_bytes: float, runtime_overhead_bytes: float) -> None:
    """A ValueError unless memory_bytes > 0 (a machine with no memory runs nothing) and the reserves >= 0."""
    _check_bytes("memory_bytes", memory_bytes, positive=True)
    _check_bytes("os_reserve_bytes", os_reserve_bytes)
    _check_bytes("runtime_overhead_bytes", runtime_overhead_bytes)


def fits_here(
    model: CatalogModel,
    memory_bytes: float,
    quant: str = "q4",
    context_tokens: int = DEFAULT_CONTEXT,
    os_reserve_bytes: float = 0.0,
    runtime_overhead_bytes: float = 0.0,
    bandwidth_bytes_per_s: float | None = None,
) -> Fit:
    """Memory one model needs here, whether it fits, and its decode speed limit (batch 1).

    Weights: all parameters x bytes per weight of `quant` ("fp32", "fp16", "int8", "q4": 4.5 bits per
    weight, the GGUF Q4_0 average including its fp16 scales, or "q4_1": 5 bits per weight, GGUF Q4_1 with
    its fp16 scales and minimums). KV cache: fp16, for `context_tokens` (capped
    at the model's context). Each decoded token reads the active weights (a mixture-of-experts reads only
    its active parameters) and the whole KV cache, so tokens/s <= bandwidth / those bytes.
    os_reserve_bytes and runtime_overhead_bytes: what the OS and the engine keep (measure yours; 0 by default).

        >>> round(fits_here(smol, 8e9, "fp16", 2048, bandwidth_bytes_per_s=25e9).max_tokens_per_s, 1)
        78.8
    """
    check_catalog_model(model)
    dtype = _quant_dtype(quant)
    check_budget(memory_bytes, os_reserve_bytes, runtime_overhead_bytes)
    check_int("context_tokens", context_tokens, minimum=1)
    if bandwidth_bytes_per_s is not None and (
        isinstance(bandwidth_bytes_per_s, bool)
        or not isinstance(bandwidth_bytes_per_s, (int, float))
        or not bandwidth_bytes_per_s > 0
    ):
        raise ValueError(
            f"bandwidth_bytes_per_s must be > 0 bytes/s (or None), got {bandwidth_bytes_per_s!r}."
        )
    tokens = min(context_tokens, model.context)
    weights = weight_bytes(model.params_b * 1e9, dtype)
    kv = float(kv_cache_bytes(model.n_layers, model.n_kv_heads, model.head_dim, tokens, 1, KV_DTYPE))
    total = weights + kv + runtime_overhead_bytes
    per_token = weight_bytes(model.active_params_b * 1e9, dtype) + kv
    speed = None if bandwidth_bytes_per_s is None else bandwidth_bytes_per_s / per_token
    return Fit(
        model.name,
        quant,
        tokens,
        weights,
        kv,
        runtime_overhead_bytes,
        os_reserve_bytes,
        total,
        memory_bytes,
        total + os_reserve_bytes <= memory_bytes,
        per_token,
        speed,
    )


def what_can_i_run(
    catalog: list[CatalogModel],
    memory_bytes: float,
    bandwidth_bytes_per_s: float | None = None,
    quants: tuple[str, ...] = ("fp16", "int8", "q4"),
    context_tokens: int = DEFAULT_CONTEXT,
    os_reserve_bytes: float = 0.0,
    runtime_overhead_bytes: float = 0.0,
) -> list[dict]:
    """One row (a dict of `Fit`'s fields) per model x quantization, in catalog order.

    pandas is not a labkit dependency: `pandas.DataFrame(rows)` makes a table of it where pandas is installed.

        >>> rows = what_can_i_run(load_catalog(), memory_bytes=16e9, bandwidth_bytes_per_s=50e9)
        >>> [r["model"] for r in rows if r["fits"] and r["quant"] == "q4"][:2]
        ['HuggingFaceTB/SmolLM2-135M-Instruct', 'HuggingFaceTB/SmolLM2-360M-Instruct']
    """
    if isinstance(catalog, (str, CatalogModel)) or not isinstance(catalog, (list, tuple)):
        raise ValueError(
            f"catalog must be a list of CatalogModel (load_catalog() returns one), got "
            f"{type(catalog).__name__}; for one model, pass [model]."
        )
    for index, model in enumerate(catalog):
        check_catalog_model(model, f"catalog[{index}]")
    check_budget(memory_bytes, os_reserve_bytes, runtime_overhead_bytes)
    if isinstance(quants, str) or not isinstance(quants, (list, tuple)):
        raise ValueError(f"quants must be a tuple of quantizations such as ('fp16', 'q4'), got {quants!r}.")
    for quant in quants:
        _quant_dtype(quant)
    return [
        fits_here(
            model,
            memory_bytes,
            quant,
            context_tokens,
            os_reserve_bytes,
            runtime_overhead_bytes,
            bandwidth_bytes_per_s,
        ).as_dict()
        for model in catalog
        for quant in quants
    ]


def fit_table(rows: list[dict], only_fitting: bool = False) -> str:
    """what_can_i_run's rows as aligned text: model, quantization, GB needed, fits, decode bound in tokens/s."""
    check_items("rows", rows, "rows of what_can_i_run (dicts)", of=dict)
    columns = [
        Column("model", 44, align="<"),
        Column("quant", 6),
        Column("GB", 8, ".2f"),
        Column("fits", 6),
        Column("tok/s bound", 13, ".1f"),
    ]
    return format_table(
        columns,
        [
            [
                row["model"],
                row["quant"],
                row["total_bytes"] / 1e9,
                "yes" if row["fits"] else "no",
                "-" if row["max_tokens_per_s"] is None else row["max_tokens_per_s"],
            ]
            for row in rows
            if row["fits"] or not only_fitting
        ],
    )
