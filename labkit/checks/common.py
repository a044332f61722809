"""What every checker says: a pass or a hint, and "not attempted yet" for an empty answer.

>>> verdict(True, "one step of beam search.")
✅ Correct: one step of beam search.
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence


def verdict(passed: bool, message: str) -> bool:
    """Print a pass or a hint, and return whether it passed."""
    print(("✅ Correct: " if passed else "❌ Not yet: ") + message)
    return passed


def not_attempted(what: str) -> bool:
    """Say the exercise still holds its placeholder; counts as not passed."""
    print(f"⏳ Not attempted yet: replace None with {what}.")
    return False


def run_student(function: Callable, *args, name_args: bool = False) -> tuple[object, str | None]:
    """(result, None) or (None, what went wrong): a student's function may fail in any way; report it, never raise.
    name_args: say which arguments it was called with (worth it when they are a few numbers, not tensors).

        >>> run_student(int, "x")
        (None, "calling it raised ValueError: invalid literal for int() with base 10: 'x'")
    """
    try:
        return function(*args), None
    except Exception as error:
        called = f"calling it with {args}" if name_args else "calling it"
        return None, f"{called} raised {type(error).__name__}: {error}"


def as_number(answer) -> float | None:
    """The answer as a float, None when it is not a number.

    >>> as_number("2.5"), as_number("twice")
    (2.5, None)
    """
    try:
        return float(answer)
    except (TypeError, ValueError):
        return None


def read_number(
    answer, example: str, number: str = "a number", others: Sequence = ()
) -> tuple[float | None, bool | None]:
    """Every numeric exercise's first step: (the answer as a float, None) to go on checking, or (None, the
    verdict to return at once): "not attempted" while the answer (or any of `others`, the exercise's other
    answers) is still None, `give {number}` when it is no number. `example` says what to put in place of None.

        >>> read_number("2.5", "a number of bits")
        (2.5, None)
        >>> read_number("many", "a number of bits", number="a number of bits")
        ❌ Not yet: give a number of bits, not str.
        (None, False)
    """
    if answer is None or any(other is None for other in others):
        return None, not_attempted(example)
    value = as_number(answer)
    if value is None:
        return None, verdict(False, f"give {number}, not {type(answer).__name__}.")
    return value, None


def matching_hint(value: float, hints: Sequence[tuple[float, str]], rel_tol: float) -> str | None:
    """The hint for the first plausible wrong answer (a number, its hint) that `value` equals within `rel_tol`,
    None when it matches none.

        >>> matching_hint(0.5, [(2.0, "not that"), (0.5, "upside down")], rel_tol=0.03)
        'upside down'
    """
    return next((hint for wrong, hint in hints if math.isclose(value, wrong, rel_tol=rel_tol)), None)


def check_ratio(
    answer,
    expected: float,
    example: str,
    on_pass: str,
    hints: Sequence[tuple[float, str]],
    on_miss: str,
    rel_tol: float = 0.03,
) -> bool:
    """The verdict on a ratio of two measurements: a pass within `rel_tol` of `expected` (saying `on_pass`),
    else the hint of the first plausible wrong answer the value matches, else "<value> is not it." and
    `on_miss`. `example` says what to put in place of None.

        >>> check_ratio(0.5, 2.0, "a ratio", "2x.", [(0.5, "upside down.")], "divide the two.")
        ❌ Not yet: upside down.
        False
    """
    value, refusal = read_number(answer, example)
    if refusal is not None:
        return refusal
    if math.isclose(value, expected, rel_tol=rel_tol):
        return verdict(True, on_pass)
    return verdict(False, matching_hint(value, hints, rel_tol) or f"{value:g} is not it. {on_miss}")
