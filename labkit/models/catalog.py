"""The model catalog (notebook 12): open-weight models with their shapes and leaderboard scores, and
what each needs to run on a given machine.

Every row of data/models/catalog.csv becomes a `CatalogModel`. `fits_here` predicts the memory one model
needs (weights at a quantization + the KV cache at a context length) and the fastest it can decode on a
machine whose memory streams `bandwidth` bytes per second; `what_can_i_run` does it for the whole catalog.

    >>> catalog = load_catalog()
    >>> smol = next(m for m in catalog if m.name == "HuggingFaceTB/SmolLM2-135M-Instruct")
    >>> fits_here(smol, memory_bytes=8e9, quant="q4", context_tokens=4096).fits
    True

Sizes are bytes (8e9 = 8 GB), as in labkit.models.sizing, which does the arithmetic.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from labkit.core.arguments import check_int
from labkit.core.doors import check_fields, check_items
from labkit.models.sizing import ModelShape, kv_cache_bytes, weight_bytes
from labkit.table import Column, format_table

CATALOG_PATH = Path(__file__).resolve().parents[2] / "data" / "models" / "catalog.csv"

# Bytes per weight of each quantization, as a labkit.models.sizing dtype name:
# q4 is GGUF Q4_0, 4.5 bits per weight (32 4-bit weights share one fp16 scale: 18 bytes per 32 weights);
# llama.cpp's K-quants such as Q4_K_M average a little more. q4_1 is GGUF Q4_1, 5 bits per weight (32 4-bit
# weights share an fp16 scale and an fp16 minimum: 20 bytes per 32 weights), SmolLM2's file but its embedding.
# int8 counts 1 byte and leaves its scales out.
QUANTS: dict[str, str] = {"fp32": "fp32", "fp16": "fp16", "int8": "int8", "q4": "q4_0", "q4_1": "q4_1"}
KV_DTYPE = "fp16"  # llama.cpp, vLLM and transformers keep the KV cache in 16-bit floats by default
DEFAULT_CONTEXT = 4096  # tokens: a long chat; every model in the catalog was trained for at least this
SCORE_FIELDS = ("lmarena_elo", "open_llm_leaderboard_avg")
OPTIONAL_FIELDS = (*SCORE_FIELDS, "score_source", "score_date", "notes")
KINDS = ("base", "instruct")
_INT_FIELDS = ("n_layers", "n_heads", "n_kv_heads", "head_dim", "context")
_FLOAT_FIELDS = ("params_b", "active_params_b", *SCORE_FIELDS)
_MONTH = re.compile(r"\d{4}-(0[1-9]|1[0-2])")
_DAY = re.compile(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])")


@dataclass(frozen=True)
class CatalogModel:
    """One open-weight model: what its config.json says, and what leaderboards said of it (a snapshot)."""

    name: str  # Hugging Face repo id, e.g. "meta-llama/Llama-3.1-8B-Instruct"
    family: str  # e.g. "Llama 3"
    params_b: float  # all parameters, billions (what must sit in memory)
    active_params_b: float  # parameters used per token, billions (= params_b unless mixture-of-experts)
    n_layers: int
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads (2 x n_kv_heads x head_dim numbers are cached per token and layer)
    head_dim: int
    context: int  # max_position_embeddings from config.json, tokens
    license: str  # the license id on the model's Hugging Face page
    release_date: str  # YYYY-MM, first public release
    kind: str  # "base" or "instruct"
    lmarena_elo: float | None = None  # LMArena text Elo (Bradley-Terry fit of human votes); None = not known
    open_llm_leaderboard_avg: float | None = None  # Open LLM Leaderboard v2 average of 6 benchmarks, 0-100
    score_source: str = ""  # "field=where; field=where" for each score given
    score_date: str = ""  # "field=YYYY-MM-DD; ..." the leaderboard snapshot of each score
    notes: str = ""

    def __post_init__(self):
        check_fields(self)  # a number read as text, or a name where a row goes, stops here

    @property
    def is_moe(self) -> bool:
        """Mixture-of-experts: only some of the weights are read for each token."""
        return self.active_params_b < self.params_b

    def shape(self) -> ModelShape:
        """The model as a labkit.models.sizing.ModelShape, for the memory calculator.

            >>> smol.shape().kv_bytes_per_token("fp16")  # SmolLM2-135M: 2 x 30 layers x 3 x 64 x 2 bytes
            23040.0
        """
        return ModelShape(self.name, self.params_b * 1e9, self.n_layers, self.n_heads, self.n_kv_heads,
                          self.head_dim, self.context)

    def sources(self) -> dict[str, tuple[str, str]]:
        """Where and when each given score was read: {"lmarena_elo": (source, "YYYY-MM-DD"), ...}."""
        where, when = _pairs(self.score_source), _pairs(self.score_date)
        return {key: (where.get(key, ""), when.get(key, "")) for key in SCORE_FIELDS
                if getattr(self, key) is not None}


def _pairs(text: str) -> dict[str, str]:
    """'a=x; b=y' -> {'a': 'x', 'b': 'y'}."""
    items = (part.split("=", 1) for part in text.split(";") if "=" in part)
    return {key.strip(): value.strip() for key, value in items}


def _fail(path: Path, line: int, name: str, field: str, problem: str, allowed: str) -> ValueError:
    return ValueError(f"{path}, line {line}: model {name or '?'!r}: field {field!r} {problem}; {allowed}.")


def _text(row: dict[str, str | None], field: str) -> str:
    """A cell, stripped; '' for a cell missing from a short row."""
    return (row.get(field) or "").strip()


def _number(path: Path, line: int, row: dict[str, str | None], field: str) -> float | int | None:
    """The field as an int or float (None when an optional field is empty); a ValueError otherwise."""
    text, name = _text(row, field), _text(row, "name")
    whole = field in _INT_FIELDS
    allowed = "allowed: a whole number >= 1" if whole else "allowed: a positive number"
    if not text:
        if field in OPTIONAL_FIELDS:
            return None
        raise _fail(path, line, name, field, "is empty", "it is required, " + allowed)
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        raise _fail(path, line, name, field, f"is {text!r}, not a number", allowed) from None
    if not (math.isfinite(value) and value > 0):
        raise _fail(path, line, name, field, f"is {text!r}", allowed)
    return value


def _check_row(path: Path, line: int, model: CatalogModel) -> None:
    """Raise a ValueError for a value of the right type that is still not allowed."""
    name = model.name
    if model.kind not in KINDS:
        raise _fail(path, line, name, "kind", f"is {model.kind!r}", f"allowed: {' or '.join(KINDS)}")
    if not _MONTH.fullmatch(model.release_date):
        raise _fail(path, line, name, "release_date", f"is {model.release_date!r}", "allowed: YYYY-MM")
    if model.active_params_b > model.params_b:
        raise _fail(path, line, name, "active_params_b", f"is {model.active_params_b} > params_b",
                    "allowed: at most params_b (the total)")
    for key, (where, when) in model.sources().items():
        if not where or not _DAY.fullmatch(when):
            raise _fail(path, line, name, key, "has no source or snapshot date",
                        f"score_source needs '{key}=<where>' and score_date '{key}=YYYY-MM-DD'")


def _parse_row(path: Path, line: int, row: dict[str, str | None]) -> CatalogModel:
    extra = row.get(None)  # csv.DictReader puts the cells beyond the header's under the key None
    if extra:
        raise ValueError(f"{path}, line {line}: model {_text(row, 'name') or '?'!r} has {len(extra)} more cell(s) "
                         f"than the header ({extra[:3]}...); quote a cell that holds a comma.")
    values: dict[str, object] = {}
    for field in fields(CatalogModel):
        if field.name in _INT_FIELDS or field.name in _FLOAT_FIELDS:
            values[field.name] = _number(path, line, row, field.name)
            continue
        text = _text(row, field.name)
        if not text and field.name not in OPTIONAL_FIELDS:
            raise _fail(path, line, _text(row, "name"), field.name, "is empty", "it is required (text)")
        values[field.name] = text
    model = CatalogModel(**values)
    _check_row(path, line, model)
    return model


def load_catalog(path: str | Path | None = None) -> list[CatalogModel]:
    """The models of a catalog CSV (default: the repository's data/models/catalog.csv), in file order.

    A missing required column, an empty required field or a value that is not allowed raises a ValueError
    naming the file, line, model and field. Empty scores mean "not known".

        >>> len(load_catalog()) > 20
        True
    """
    path = Path(CATALOG_PATH if path is None else path)
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        required = [f.name for f in fields(CatalogModel) if f.name not in OPTIONAL_FIELDS]
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:  # optional columns (scores, sources, notes) may be left out altogether
            raise ValueError(f"{path}: the header lacks column(s) {', '.join(missing)}; "
                             f"a catalog needs: {', '.join(required)}.")
        models, lines = [], {}
        for row in reader:
            model = _parse_row(path, reader.line_num, row)
            if model.name in lines:
                raise ValueError(f"{path}, line {reader.line_num}: model {model.name!r} is in the catalog twice "
                                 f"(also line {lines[model.name]}); each model gets one row.")
            lines[model.name] = reader.line_num
            models.append(model)
    return models


def check_catalog_model(model: object, what: str = "model") -> None:
    """A ValueError unless `model` is a CatalogModel (a row of load_catalog()), e.g. not a model's name."""
    if not isinstance(model, CatalogModel):
        raise ValueError(f"{what} must be a CatalogModel, a row of load_catalog(), got {type(model).__name__} "
                         f"{model!r:.60}; to find one by name: next(m for m in load_catalog() if m.name == name).")


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
        raise ValueError(f"quant must be one of {', '.join(QUANTS)} (q4 = GGUF Q4_0, 4.5 bits per weight; "
                         f"q4_1 = GGUF Q4_1, 5 bits per weight), got {quant!r}.")
    return QUANTS[quant]


def _non_negative(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a number of bytes >= 0, got {value!r}.")


def fits_here(model: CatalogModel, memory_bytes: float, quant: str = "q4", context_tokens: int = DEFAULT_CONTEXT,
              os_reserve_bytes: float = 0.0, runtime_overhead_bytes: float = 0.0,
              bandwidth_bytes_per_s: float | None = None) -> Fit:
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
    for name, value in [("memory_bytes", memory_bytes), ("os_reserve_bytes", os_reserve_bytes),
                        ("runtime_overhead_bytes", runtime_overhead_bytes)]:
        _non_negative(name, value)
    check_int("context_tokens", context_tokens, minimum=1)
    if bandwidth_bytes_per_s is not None and (isinstance(bandwidth_bytes_per_s, bool) or not isinstance(
            bandwidth_bytes_per_s, (int, float)) or not bandwidth_bytes_per_s > 0):
        raise ValueError(f"bandwidth_bytes_per_s must be > 0 bytes/s (or None), got {bandwidth_bytes_per_s!r}.")
    tokens = min(context_tokens, model.context)
    weights = weight_bytes(model.params_b * 1e9, dtype)
    kv = float(kv_cache_bytes(model.n_layers, model.n_kv_heads, model.head_dim, tokens, 1, KV_DTYPE))
    total = weights + kv + runtime_overhead_bytes
    per_token = weight_bytes(model.active_params_b * 1e9, dtype) + kv
    speed = None if bandwidth_bytes_per_s is None else bandwidth_bytes_per_s / per_token
    return Fit(model.name, quant, tokens, weights, kv, runtime_overhead_bytes, os_reserve_bytes, total,
               memory_bytes, total + os_reserve_bytes <= memory_bytes, per_token, speed)


def what_can_i_run(catalog: list[CatalogModel], memory_bytes: float, bandwidth_bytes_per_s: float | None = None,
                   quants: tuple[str, ...] = ("fp16", "int8", "q4"), context_tokens: int = DEFAULT_CONTEXT,
                   os_reserve_bytes: float = 0.0, runtime_overhead_bytes: float = 0.0) -> list[dict]:
    """One row (a dict of `Fit`'s fields) per model x quantization, in catalog order.

    pandas is not a labkit dependency: `pandas.DataFrame(rows)` makes a table of it where pandas is installed.

        >>> rows = what_can_i_run(load_catalog(), memory_bytes=16e9, bandwidth_bytes_per_s=50e9)
        >>> [r["model"] for r in rows if r["fits"] and r["quant"] == "q4"][:2]
        ['HuggingFaceTB/SmolLM2-135M-Instruct', 'HuggingFaceTB/SmolLM2-360M-Instruct']
    """
    if isinstance(catalog, (str, CatalogModel)) or not isinstance(catalog, (list, tuple)):
        raise ValueError(f"catalog must be a list of CatalogModel (load_catalog() returns one), got "
                         f"{type(catalog).__name__}; for one model, pass [model].")
    for index, model in enumerate(catalog):
        check_catalog_model(model, f"catalog[{index}]")
    if isinstance(quants, str) or not isinstance(quants, (list, tuple)):
        raise ValueError(f"quants must be a tuple of quantizations such as ('fp16', 'q4'), got {quants!r}.")
    for quant in quants:
        _quant_dtype(quant)
    return [fits_here(model, memory_bytes, quant, context_tokens, os_reserve_bytes, runtime_overhead_bytes,
                      bandwidth_bytes_per_s).as_dict()
            for model in catalog for quant in quants]


def fit_table(rows: list[dict], only_fitting: bool = False) -> str:
    """what_can_i_run's rows as aligned text: model, quantization, GB needed, fits, decode bound in tokens/s."""
    check_items("rows", rows, "rows of what_can_i_run (dicts)", of=dict)
    columns = [Column("model", 44, align="<"), Column("quant", 6), Column("GB", 8, ".2f"), Column("fits", 6),
               Column("tok/s bound", 13, ".1f")]
    return format_table(columns, [[row["model"], row["quant"], row["total_bytes"] / 1e9, "yes" if row["fits"] else "no",
                                   "-" if row["max_tokens_per_s"] is None else row["max_tokens_per_s"]]
                                  for row in rows if row["fits"] or not only_fitting])
