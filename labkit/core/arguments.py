"""Checks of a public function's arguments, made when it is called, before any model work or process
start. Each error names the argument, what it got and what is allowed.

The error is an `InvalidArgument`, a ValueError that also carries the argument's name and value as
attributes (vLLM's `VLLMValidationError(message, parameter=, value=)`), so a caller that renames
arguments, as the HTTP server names its clients' fields, maps them without reading the message.

    >>> check_int("port", 70000, minimum=0, maximum=65535)
    Traceback (most recent call last):
    InvalidArgument: port must be a whole number from 0 to 65535, got 70000.
    >>> caught.parameter, caught.value        # caught: the error, in `except InvalidArgument as caught`
    ('port', 70000)
"""

from __future__ import annotations

import math


class InvalidArgument(ValueError):
    """A refused argument: the message says what is allowed; `parameter` names the argument, `value` is what
    it got (both None when the fault lies in no one argument).

        >>> raise InvalidArgument("top_p must be in (0, 1], got 2.", parameter="top_p", value=2)
    """

    def __init__(self, message: str, parameter: str | None = None, value: object = None):
        super().__init__(message)
        self.parameter = parameter
        self.value = value

    def called(self, name: str) -> str:
        """The message with the argument called `name`, a caller's own name for it (a client's field): the
        message starts with `parameter`, which `name` replaces; any other message follows "name: ".

            >>> InvalidArgument("top_k must be an integer >= 0, got -1.", "top_k", -1).called("'options.top_k'")
            "'options.top_k' must be an integer >= 0, got -1."
        """
        message = str(self)
        if self.parameter and message.startswith(self.parameter + " "):
            return name + message[len(self.parameter) :]
        return f"{name}: {message}"

    def __reduce__(self):  # pickled whole (multiprocessing, a worker's error), attributes included
        return type(self), (str(self), self.parameter, self.value)


def allowed_range(minimum: int | None, maximum: int | None) -> str:
    """'a whole number from 0 to 65535', '... of 1 or more', or '... of at most 8'."""
    if minimum is not None and maximum is not None:
        return f"a whole number from {minimum} to {maximum}"
    if minimum is not None:
        return f"a whole number of {minimum} or more"
    return "a whole number" if maximum is None else f"a whole number of at most {maximum}"


def check_int(
    name: str, value: object, minimum: int | None = None, maximum: int | None = None, *, note: str = ""
) -> int:
    """value, if it is an int (not a bool) within [minimum, maximum]; else an InvalidArgument naming `name`.
    note, if given, follows the range in brackets: what a bound is, or what else is allowed.

        >>> check_int("n_threads", 2, minimum=1)
        2
        >>> check_int("n_layers", 0, minimum=1, maximum=30, note="the model's layers")
        Traceback (most recent call last):
        InvalidArgument: n_layers must be a whole number from 1 to 30 (the model's layers), got 0.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        bracket = f" ({note})" if note else ""
        raise InvalidArgument(
            f"{name} must be {allowed_range(minimum, maximum)}{bracket}, got {value!r}.", name, value
        )
    return value


def check_seconds(name: str, value: object) -> float:
    """value as a float, if it is a finite number of seconds above 0; else an InvalidArgument naming `name`.

    >>> check_seconds("timeout", 30)
    30.0
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidArgument(f"{name} must be a number of seconds above 0, got {value!r}.", name, value)
    return float(value)


def check_text(name: str, value: object, example: str) -> str:
    """value, if it is a non-empty string; else an InvalidArgument naming `name`, with an example of one.

    >>> check_text("host", "127.0.0.1", example="'127.0.0.1'")
    '127.0.0.1'
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(
            f"{name} must be a non-empty string such as {example}, got {value!r}.", name, value
        )
    return value


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    """value, if it is one of `allowed`; else an InvalidArgument naming `name` and listing them.

    >>> check_choice("dtype", "float32", ("float32", "bfloat16"))
    'float32'
    """
    if not isinstance(value, str) or value not in allowed:
        raise InvalidArgument(
            f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}.", name, value
        )
    return value
