"""Checks of a public function's arguments, made when it is called, before any model work or process
start. Each error names the argument, what it got and what is allowed.

    >>> check_int("port", 70000, minimum=0, maximum=65535)
    Traceback (most recent call last):
    ValueError: port must be a whole number from 0 to 65535, got 70000.
"""

from __future__ import annotations

import math

def allowed_range(minimum: int | None, maximum: int | None) -> str:
    """'a whole number from 0 to 65535', '... of 1 or more', or '... of at most 8'."""
    if minimum is not None and maximum is not None:
        return f"a whole number from {minimum} to {maximum}"
    if minimum is not None:
        return f"a whole number of {minimum} or more"
    return "a whole number" if maximum is None else f"a whole number of at most {maximum}"


def check_int(name: str, value: object, minimum: int | None = None, maximum: int | None = None, *,
              note: str = "") -> int:
    """value, if it is an int (not a bool) within [minimum, maximum]; else a ValueError naming `name`.
    note, if given, follows the range in brackets: what a bound is, or what else is allowed.

        >>> check_int("n_threads", 2, minimum=1)
        2
        >>> check_int("n_layers", 0, minimum=1, maximum=30, note="the model's layers")
        Traceback (most recent call last):
        ValueError: n_layers must be a whole number from 1 to 30 (the model's layers), got 0.
    """
    if (isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum)
            or (maximum is not None and value > maximum)):
        bracket = f" ({note})" if note else ""
        raise ValueError(f"{name} must be {allowed_range(minimum, maximum)}{bracket}, got {value!r}.")
    return value


def check_seconds(name: str, value: object) -> float:
    """value as a float, if it is a finite number of seconds above 0; else a ValueError naming `name`.

        >>> check_seconds("timeout", 30)
        30.0
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a number of seconds above 0, got {value!r}.")
    return float(value)


def check_text(name: str, value: object, example: str) -> str:
    """value, if it is a non-empty string; else a ValueError naming `name`, with an example of one.

        >>> check_text("host", "127.0.0.1", example="'127.0.0.1'")
        '127.0.0.1'
    """
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string such as {example}, got {value!r}.")
    return value


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    """value, if it is one of `allowed`; else a ValueError naming `name` and listing them.

        >>> check_choice("dtype", "float32", ("float32", "bfloat16"))
        'float32'
    """
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}.")
    return value
