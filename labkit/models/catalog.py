"""The model catalog (notebook 12): open-weight models with their shapes and leaderboard scores, and
what each needs to run on a given machine.

Every row of data/models/catalog.csv becomes a `CatalogModel` (labkit.models.catalog_model). A catalog is
data typed by hand, so `load_catalog` reads it strictly: a number left as text, a missing field, a month
that is no month or a score without its source stops the load with the file, line, model and field.
`fits_here` predicts the memory one model needs and the fastest it can decode on a machine
(labkit.models.fit); `what_can_i_run` does it for the whole catalog. All of these are importable from here.

    >>> catalog = load_catalog()
    >>> smol = next(m for m in catalog if m.name == "HuggingFaceTB/SmolLM2-135M-Instruct")
    >>> fits_here(smol, memory_bytes=8e9, quant="q4", context_tokens=4096).fits
    True

Sizes are bytes (8e9 = 8 GB), as in labkit.models.footprint, which does the arithmetic.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import fields
from pathlib import Path

from labkit.models.catalog_model import (
    KINDS,
    OPTIONAL_FIELDS,
    SCORE_FIELDS,
    CatalogModel,
    check_catalog_model,
)
from labkit.models.fit import DEFAULT_CONTEXT, KV_DTYPE, QUANTS, Fit, fit_table, fits_here, what_can_i_run

__all__ = [
    "CATALOG_PATH",
    "DEFAULT_CONTEXT",
    "KINDS",
    "KV_DTYPE",
    "OPTIONAL_FIELDS",
    "QUANTS",
    "SCORE_FIELDS",
    "CatalogModel",
    "Fit",
    "check_catalog_model",
    "fit_table",
    "fits_here",
    "load_catalog",
    "what_can_i_run",
]

CATALOG_PATH = Path(__file__).resolve().parents[2] / "data" / "models" / "catalog.csv"

_INT_FIELDS = ("n_layers", "n_heads", "n_kv_heads", "head_dim", "context")
_FLOAT_FIELDS = ("params_b", "active_params_b", *SCORE_FIELDS)
_MONTH = re.compile(r"\d{4}-(0[1-9]|1[0-2])")
_DAY = re.compile(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])")


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
        raise _fail(
            path,
            line,
            name,
            "active_params_b",
            f"is {model.active_params_b} > params_b",
            "allowed: at most params_b (the total)",
        )
    for key, (where, when) in model.sources().items():
        if not where or not _DAY.fullmatch(when):
            raise _fail(
                path,
                line,
                name,
                key,
                "has no source or snapshot date",
                f"score_source needs '{key}=<where>' and score_date '{key}=YYYY-MM-DD'",
            )


def _parse_row(path: Path, line: int, row: dict[str, str | None]) -> CatalogModel:
    extra = row.get(None)  # csv.DictReader puts the cells beyond the header's under the key None
    if extra:
        raise ValueError(
            f"{path}, line {line}: model {_text(row, 'name') or '?'!r} has {len(extra)} more cell(s) "
            f"than the header ({extra[:3]}...); quote a cell that holds a comma."
        )
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
            raise ValueError(
                f"{path}: the header lacks column(s) {', '.join(missing)}; "
                f"a catalog needs: {', '.join(required)}."
            )
        models, lines = [], {}
        for row in reader:
            model = _parse_row(path, reader.line_num, row)
            if model.name in lines:
                raise ValueError(
                    f"{path}, line {reader.line_num}: model {model.name!r} is in the catalog twice "
                    f"(also line {lines[model.name]}); each model gets one row."
                )
            lines[model.name] = reader.line_num
            models.append(model)
    return models
