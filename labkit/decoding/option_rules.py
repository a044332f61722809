"""The rule of each number option of DecodingConfig, checkable on its own: its type and its range.

DecodingConfig checks every option by these rules, then how the options combine (`config`). A caller that
ignores an option still checks its value here: labkit's server decodes greedily when asked for
temperature 0 and drops the sampling options, as Ollama and vLLM do, but refuses a top_p of 5 all the same.
Every refusal is an `InvalidArgument` (labkit.core.arguments) whose `parameter` and `value` are the option's
name and value, so whoever calls the option by another name (a client's field) renames it without reading
the message.

    >>> check_option("top_k", 40)
    40
    >>> check_option("top_k", -1)
    InvalidArgument: top_k must be an integer >= 0 (0 turns it off), got -1.
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral, Real

from labkit.core.arguments import InvalidArgument


def is_number(value: object) -> bool:
    """A real number, not a bool (True is 1 to Python, not to a config)."""
    return isinstance(value, Real) and not isinstance(value, bool)


def is_int(value: object) -> bool:
    """A whole number, not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


INF = float("inf")
# Each number option's rule: (whole number?, the test of a value, the values allowed as a message says them).
RULES: dict[str, tuple[bool, Callable[[float], bool], str]] = {
    "max_new_tokens": (True, lambda v: v >= 0, ">= 0"),
    "temperature": (False, lambda v: 0 <= v < INF, ">= 0 (0 means greedy)"),
    "top_k": (True, lambda v: v >= 0, ">= 0 (0 turns it off)"),
    "top_p": (False, lambda v: 0 < v <= 1, "in (0, 1] (1 turns it off)"),
    "min_p": (False, lambda v: 0 <= v <= 1, "in [0, 1] (0 turns it off)"),
    "typical_p": (False, lambda v: 0 < v <= 1, "in (0, 1] (1 turns it off)"),
    "epsilon_cutoff": (False, lambda v: 0 <= v < 1, "in [0, 1) (0 turns it off)"),
    "eta_cutoff": (False, lambda v: 0 <= v < 1, "in [0, 1) (0 turns it off)"),
    "repetition_penalty": (False, lambda v: 0 < v < INF,
                           "> 0 (1 is off, > 1 discourages repeats, < 1 encourages them)"),
    "presence_penalty": (False, lambda v: -2 <= v <= 2, "in [-2, 2] (0 is off, > 0 discourages repeats)"),
    "frequency_penalty": (False, lambda v: -2 <= v <= 2, "in [-2, 2] (0 is off, > 0 discourages repeats)"),
    "no_repeat_ngram_size": (True, lambda v: v >= 0, ">= 0 (0 turns it off)"),
    "min_new_tokens": (True, lambda v: v >= 0, ">= 0"),
    "num_beams": (True, lambda v: v >= 1, ">= 1 (1 means no beam search)"),
    "length_penalty": (False, lambda v: abs(v) < INF, "(finite; > 0 favours longer beams, < 0 shorter ones)"),
}


def check_option(name: str, value: object) -> object:
    """`value` if it is allowed for the number option `name` on its own (RULES: its type and range; how options
    combine is DecodingConfig's check); else an InvalidArgument naming it. A server that ignores an option
    (sampling options when decoding greedily) still checks its value so.

        >>> check_option("top_p", 1.5)
        InvalidArgument: top_p must be in (0, 1] (1 turns it off), got 1.5.
    """
    whole, allowed, says = RULES[name]
    if whole and (not is_int(value) or not allowed(value)):
        raise InvalidArgument(f"{name} must be an integer {says}, got {value!r}.", name, value)
    if not whole and (not is_number(value) or value != value):
        raise InvalidArgument(f"{name} must be a number {says}, got {value!r} ({type(value).__name__}).", name, value)
    if not whole and not allowed(value):
        raise InvalidArgument(f"{name} must be {says}, got {value!r}.", name, value)
    return value


def blamed(parameter: str, value: object, check: Callable, *args) -> object:
    """check(*args), its ValueError raised as an InvalidArgument naming `parameter` unless it names one."""
    try:
        return check(*args)
    except InvalidArgument:
        raise
    except ValueError as error:
        raise InvalidArgument(str(error), parameter, value) from None
