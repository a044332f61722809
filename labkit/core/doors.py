"""Checks of the shape of what a public function is given: a tensor of so many dimensions, a model, a list or
dict of records, a number, a callable. Each is one line at the top of the function, before any work, and
raises a TypeError or an InvalidArgument that names the argument, says what is allowed and what it got, so a
student's slip (a list where a tensor goes, a dict where a list goes) stops at the door instead of deep
inside matplotlib or torch.

Records are checked by the attributes the function reads (`has=`), not by their class, so any object that
carries them (a labkit dataclass, a student's own) still passes: the door refuses only what would crash.

    >>> check_tensor("weight", [[1.0, 2.0]], "[out, in]", dims=2)
    Traceback (most recent call last):
    TypeError: weight must be a tensor [out, in], got list.
    >>> check_items("rows", [row_a, row_b], "Row (labkit.benchmarks.fast)", has=("label",))
    [row_a, row_b]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields
from numbers import Integral, Real

import torch

from labkit.core.arguments import InvalidArgument


def described(value: object) -> str:
    """What value is, for an error message: a tensor's dtype and shape, else its type's name."""
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def check_tensor(
    name: str, value: object, shape: str, dims: int | tuple[int, ...] | None = None
) -> torch.Tensor:
    """value, if it is a torch tensor with `dims` dimensions (one count or several allowed); else a
    TypeError (not a tensor) or an InvalidArgument (wrong dimensions) naming `name` and `shape`.

        >>> check_tensor("logits", torch.zeros(2, 5), "[B, V]", dims=2).shape
        torch.Size([2, 5])
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a tensor {shape}, got {described(value)}.")
    allowed = (dims,) if isinstance(dims, int) else dims
    if allowed is not None and value.dim() not in allowed:
        raise InvalidArgument(f"{name} must be a tensor {shape}, got {described(value)}.", name, value)
    return value


def check_model(name: str, value: object, what: str = "a causal LM (labkit's Llama or a transformers model)"):
    """value, if it is a torch module; else a TypeError naming `name`.

    >>> check_model("model", labkit.load_model("smollm2-135m"))
    """
    if not isinstance(value, torch.nn.Module):
        raise TypeError(f"{name} must be {what}, got {described(value)}.")
    return value


def check_callable(name: str, value: object, what: str) -> Callable:
    """value, if it can be called; else a TypeError naming `name` and what a call should do.

    >>> check_callable("run", lambda: model(ids), "a function of no arguments that runs the work once")
    """
    if not callable(value):
        raise TypeError(f"{name} must be {what}, got {described(value)}.")
    return value


def check_number(
    name: str,
    value: object,
    minimum: float | None = None,
    *,
    above: float | None = None,
    maximum: float | None = None,
) -> float:
    """value, if it is a finite int or float (not a bool) >= minimum, > above and <= maximum; else an
    InvalidArgument naming `name` and the range.

        >>> check_number("alpha", 0.8, minimum=0, maximum=1)
        0.8
    """
    bounds = [
        f">= {minimum}" if minimum is not None else "",
        f"> {above}" if above is not None else "",
        f"<= {maximum}" if maximum is not None else "",
    ]
    if (
        isinstance(value, bool)
        or not isinstance(value, Real)
        or not math.isfinite(value)
        or (minimum is not None and value < minimum)
        or (above is not None and value <= above)
        or (maximum is not None and value > maximum)
    ):
        allowed = " and ".join(bound for bound in bounds if bound)
        raise InvalidArgument(
            f"{name} must be a number{' ' + allowed if allowed else ''}, got {value!r}.", name, value
        )
    return value


def is_record(item: object, of: type | tuple[type, ...] | None, has: tuple[str, ...]) -> bool:
    """Whether item is an instance of `of` (when given) and carries every attribute in `has`."""
    return (of is None or isinstance(item, of)) and all(hasattr(item, attribute) for attribute in has)


def check_items(
    name: str, value: object, what: str, of: type | tuple[type, ...] | None = None, has: tuple[str, ...] = ()
) -> Sequence:
    """value, if it is a list (or tuple, or any iterable but text and dicts) of `what`: each item an
    instance of `of` and carrying the attributes `has`; else a TypeError naming `name`. An iterable
    that is not a sequence (a generator) comes back as a list. An empty one passes: the function says
    what an empty one means.

        >>> check_items("batches", [1, 8, 32], "batch sizes (int)", of=int)
        [1, 8, 32]
    """
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of {what}, got {described(value)}.")
    items = value if isinstance(value, Sequence) else list(value)
    for index, item in enumerate(items):
        if not is_record(item, of, has):
            raise TypeError(f"{name} must be a list of {what}, but {name}[{index}] is {described(item)}.")
    return items


def check_table(
    name: str, value: object, what: str, of: type | tuple[type, ...] | None = None, has: tuple[str, ...] = ()
) -> Mapping:
    """value, if it is a dict whose values are `what` (instances of `of`, carrying the attributes `has`);
    else a TypeError naming `name` and the first key whose value is wrong.

        >>> check_table("panels", {"layer 3": weights}, "attention weights [n_layers, n_heads]", of=torch.Tensor)
    """
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict of {what}, got {described(value)}.")
    for key, item in value.items():
        if not is_record(item, of, has):
            raise TypeError(f"{name} must be a dict of {what}, but {name}[{key!r}] is {described(item)}.")
    return value


def check_record(
    name: str, value: object, what: str, of: type | tuple[type, ...] | None = None, has: tuple[str, ...] = ()
) -> object:
    """value, if it is `what`: an instance of `of` carrying the attributes `has`; else a TypeError naming `name`.

    >>> check_record("trace", trace, "a Trace (labkit.viz.serving.run_traced)", has=("snapshots",))
    """
    if not is_record(value, of, has):
        raise TypeError(f"{name} must be {what}, got {described(value)}.")
    return value


FIELD_TYPES = {"str": (str,), "int": (Integral,), "float": (Real,), "None": (type(None),)}


def check_fields(record: object) -> None:
    """Every field of a dataclass `record` of the type its annotation names, where that is str, int, float
    or a union of them with None (an int passes for a float; other annotations are not checked); else a
    TypeError naming the class, the field and what it got. Called from a record's __post_init__.

        >>> CatalogModel(name=7, ...)
        TypeError: CatalogModel's name must be str, got int.
    """
    for field in fields(record):
        names = [part.strip() for part in str(field.type).split("|")]
        if not all(name in FIELD_TYPES for name in names):
            continue
        value = getattr(record, field.name)
        allowed = tuple(kind for name in names for kind in FIELD_TYPES[name])
        if isinstance(value, bool) or not isinstance(value, allowed):
            raise TypeError(
                f"{type(record).__name__}'s {field.name} must be {' or '.join(names)}, "
                f"got {described(value)}."
            )


def check_tokenizer(name: str, value: object) -> object:
    """value, if it is a tokenizer (callable on text, with a decode method, like transformers'); else a
    TypeError naming `name`.

        >>> check_tokenizer("tokenizer", labkit.load_tokenizer("smollm2-135m"))
    """
    if not callable(value) or not hasattr(value, "decode"):
        raise TypeError(
            f"{name} must be the model's tokenizer (as load_model returns it), got {described(value)}."
        )
    return value
