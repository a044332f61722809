"""How much memory a model needs, and the smallest machine that holds it: the memory calculator.

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

This module is the one to import (notebooks 06, 07 and 12 do): `memory_table` lives here, and every name of
the pieces is importable from here too. The formulas are in labkit.models.footprint, a model's shape
(ModelShape, PRESETS, shape_of) in labkit.models.shapes, and which hardware holds a model, after the OS and
the runtime have taken their share, in labkit.models.hardware.

Sizes are in bytes; `GB` is 10^9 bytes (as GPU and cloud vendors count), `GiB` 2^30.
"""

from __future__ import annotations

from labkit.models.footprint import (
    DTYPE_BYTES,
    GB,
    GiB,
    bytes_per_element,
    check_size,
    check_tokens_and_batch,
    format_bytes,
    kv_cache_bytes,
    weight_bytes,
)
from labkit.models.hardware import HARDWARE, RESERVES, Hardware, hardware_table, reserve_bytes
from labkit.models.shapes import PRESETS, ModelShape, model_shape, shape_of
from labkit.table import Column, format_table

__all__ = [
    "DTYPE_BYTES",
    "GB",
    "GiB",
    "HARDWARE",
    "PRESETS",
    "Hardware",
    "ModelShape",
    "bytes_per_element",
    "format_bytes",
    "hardware_table",
    "kv_cache_bytes",
    "memory_table",
    "model_shape",
    "reserve_bytes",
    "shape_of",
    "weight_bytes",
]


# The columns of memory_table: which kinds of memory each one picks its smallest fitting hardware from.
COLUMNS = {"RAM / unified": ("RAM", "unified"), "GPU VRAM": ("VRAM",), "smallest that fits": ("budget",)}


def _hardware_list(hardware: dict[str, float] | dict[str, Hardware] | None) -> list[Hardware]:
    """HARDWARE by default; a dict of plain byte budgets ({"my GPU": 24e9}) becomes kind "budget" (no reserve)."""
    machines = []
    for name, size in (HARDWARE if hardware is None else hardware).items():
        if not isinstance(size, Hardware):
            check_size(f"hardware[{name!r}] (bytes)", size, whole=False)
            size = Hardware(name, float(size), "budget")
        machines.append(size)
    return sorted(machines, key=lambda h: h.usable_bytes)


def _shapes(models: list[str | ModelShape] | None) -> list[ModelShape]:
    """Each model as a ModelShape (a name is looked up in PRESETS); every preset when models is None or empty."""
    shapes = [model_shape(m) if isinstance(m, str) else m for m in (models or list(PRESETS))]
    for s in shapes:
        if not isinstance(s, ModelShape):
            raise TypeError(f"models must hold model names or ModelShapes, got a {type(s).__name__}.")
    return shapes


def _columns(shapes: list[ModelShape], groups: dict[str, list[Hardware]]) -> list[Column]:
    """memory_table's columns: the model, four sizes, one pick per group of hardware, and the note (last, so
    it takes the width it needs)."""
    sizes = [Column(title, 9) for title in ("weights", "KV/token", "KV cache", "total")]
    picks = [
        Column(title, max(len(title), *(len(h.name) for h in group)), align="<")
        for title, group in groups.items()
    ]
    return [
        Column("model", max(len("model"), *(len(s.name) for s in shapes)), align="<"),
        *sizes,
        *(picks or [Column("", 0)]),  # no hardware at all: an empty column keeps the layout
        Column("note", 0, align="<"),
    ]


def _smallest(shape: ModelShape, total: float, machines: list[Hardware]) -> str:
    """The first machine (smallest usable memory) that holds `total` bytes of `shape`, or 'none'."""
    return next(
        (h.name for h in machines if total <= h.usable_bytes and h.splits(shape.n_heads, shape.n_kv_heads)),
        "none",
    )


def _notes(shape: ModelShape, tokens: int) -> str:
    window = ""
    if shape.n_local_layers:
        window = f"window {shape.sliding_window:,} ({shape.n_local_layers}/{shape.n_layers})"
    return "; ".join(note for note in (shape.context_note(tokens), window) if note)


def _footnotes(
    shapes: list[ModelShape], tokens: int, machines: list[Hardware], chosen: set[str]
) -> list[str]:
    """What the notes mean and which reserves the fits assume, only for those that appear (chosen: the
    names of the machines the table picked)."""
    kinds = {h.kind for h in machines} - {"budget"}
    reserves = [f"{kind} {rule}" for kind, (_, _, rule, _) in RESERVES.items() if kind in kinds]
    lines = (
        [f"fits: total <= memory - reserve ({', '.join(reserves)}; see hardware_table)"] if reserves else []
    )
    if any(h.devices > 1 and h.name in chosen for h in machines):
        lines.append(
            "N x GPU: tensor parallel, each GPU holds 1/N of every layer (the heads must divide by N)"
        )
    too_long = [s.name for s in shapes if s.context_note(tokens)]
    if too_long:
        lines.append(
            f"> trained N: {tokens:,} tokens exceed the N the model was trained for "
            "(max_position_embeddings): answers may degrade"
        )
    if any(s.n_local_layers for s in shapes):
        lines.append(
            "window W (L/N): L of the N layers keep only the last W tokens: their cache stops growing at W"
        )
    return lines


def memory_table(
    models: list[str | ModelShape] | None = None,
    tokens: int = 4096,
    batch: int = 1,
    weights_dtype: str = "fp16",
    kv_dtype: str | None = None,
    hardware: dict[str, float] | dict[str, Hardware] | None = None,
) -> str:
    """Weights, KV cache and total for each model, and the smallest hardware whose usable memory (after the
    OS and runtime reserve) holds it: CPU RAM or unified memory apart from GPU VRAM. A row whose `tokens`
    exceed the model's trained context is marked '> trained N', and a footnote says what that means.

    hardware: HARDWARE by default, or {name: Hardware}, or {name: bytes} (plain budgets, nothing reserved).

        >>> print(memory_table(["llama-2-7b"], tokens=8192).splitlines()[2])
        llama-2-7b    13.5 GB   524.3 KB     4.3 GB    17.8 GB  laptop 32 GB   RTX 4090 24 GB  > trained 4,096
    """
    check_tokens_and_batch(tokens, batch)
    shapes = _shapes(models)
    machines = _hardware_list(hardware)
    groups = {title: [h for h in machines if h.kind in kinds] for title, kinds in COLUMNS.items()}
    groups = {title: group for title, group in groups.items() if group}
    kv_dtype = weights_dtype if kv_dtype is None else kv_dtype
    rows, chosen = [], set()
    for s in shapes:
        total = s.total_bytes(tokens, batch, weights_dtype, kv_dtype)
        picks = [_smallest(s, total, group) for group in groups.values()]
        chosen.update(picks)
        sizes = [
            s.weight_bytes(weights_dtype),
            s.kv_bytes_per_token(kv_dtype),
            s.kv_cache_bytes(tokens, batch, kv_dtype),
            total,
        ]
        rows.append([s.name, *map(format_bytes, sizes), *(picks or [""]), _notes(s, tokens)])
    table = format_table(_columns(shapes, groups), rows, gap="  ")
    lines = [f"weights {weights_dtype}, KV cache {kv_dtype}, {tokens:,} tokens x batch {batch}"]
    lines += [line.rstrip() for line in table.splitlines()]  # a row without a note ends at its last pick
    return "\n".join(lines + _footnotes(shapes, tokens, machines, chosen))
