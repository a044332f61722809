"""The rule of each number option of DecodingConfig, checkable on its own: its type and its range.

DecodingConfig checks every option by these rules, then how the options combine (`config`). A caller that
ignores an option still checks its value here: labkit's server decodes greedily when asked for
temperature 0 and drops the sampling options, as Ollama and vLLM do, but refuses a top_p of 5 all the same.
Every refusal is an `InvalidArgument` (labkit.core.arguments) whose `parameter` and `value` are the option's
name and value, so whoever calls the option by another name (a client's field) renames it without reading
the message. Each range is data (a `Rule`), so labkit's server states the same ranges in its published
OpenAPI schema without a second copy of the numbers.

    >>> check_option("top_k", 40)
    40
    >>> check_option("top_k", -1)
    InvalidArgument: top_k must be an integer >= 0 (0 turns it off), got -1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral, Real

from labkit.core.arguments import InvalidArgument


def is_number(value: object) -> bool:
    """A real number, not a bool (True is 1 to Python, not to a config)."""
    return isinstance(value, Real) and not isinstance(value, bool)


def is_int(value: object) -> bool:
    """A whole number, not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


INF = float("inf")


@dataclass(frozen=True)
class Rule:
    """A number option's rule: whole numbers or any, the range allowed, and the range as a message says it.
    An infinite end is never allowed itself (JSON has no infinity); `low_open` / `high_open` refuse a finite
    end too. A server states the same range in its published schema (labkit.serving.http.json_schema).

        >>> Rule(False, 0, 1, "in (0, 1]", low_open=True).allows(1.0)
        True
    """

    whole: bool  # an integer option
    low: float  # the least value (-INF: none)
    high: float  # the greatest value (INF: none)
    says: str  # the values allowed, as a refusal says them
    low_open: bool = False  # low itself is refused: top_p > 0
    high_open: bool = False  # high itself is refused: epsilon_cutoff < 1

    def allows(self, value: float) -> bool:
        """Whether `value` lies in the range (NaN never does)."""
        above = value > self.low if self.low_open or self.low == -INF else value >= self.low
        below = value < self.high if self.high_open or self.high == INF else value <= self.high
        return above and below


# Each number option's rule (whole number?, least, greatest, the values allowed as a message says them).
RULES: dict[str, Rule] = {
    "max_new_tokens": Rule(True, 0, INF, ">= 0"),
    "temperature": Rule(False, 0, INF, ">= 0 (0 means greedy)"),
    "top_k": Rule(True, 0, INF, ">= 0 (0 turns it off)"),
    "top_p": Rule(False, 0, 1, "in (0, 1] (1 turns it off)", low_open=True),
    "min_p": Rule(False, 0, 1, "in [0, 1] (0 turns it off)"),
    "typical_p": Rule(False, 0, 1, "in (0, 1] (1 turns it off)", low_open=True),
    "epsilon_cutoff": Rule(False, 0, 1, "in [0, 1) (0 turns it off)", high_open=True),
    "eta_cutoff": Rule(False, 0, 1, "in [0, 1) (0 turns it off)", high_open=True),
    "repetition_penalty": Rule(
        False, 0, INF, "> 0 (1 is off, > 1 discourages repeats, < 1 encourages them)", low_open=True
    ),
    "presence_penalty": Rule(False, -2, 2, "in [-2, 2] (0 is off, > 0 discourages repeats)"),
    "frequency_penalty": Rule(False, -2, 2, "in [-2, 2] (0 is off, > 0 discourages repeats)"),
    "no_repeat_ngram_size": Rule(True, 0, INF, ">= 0 (0 turns it off)"),
    "min_new_tokens": Rule(True, 0, INF, ">= 0"),
    "num_beams": Rule(True, 1, INF, ">= 1 (1 means no beam search)"),
    # A finished beam scores log p / L ** length_penalty: beyond +-10 that power overflows a float for long
    # beams, and every beam would score 0 or -inf.
    "length_penalty": Rule(False, -10, 10, "in [-10, 10] (> 0 favours longer beams, < 0 shorter ones)"),
}


def check_option(name: str, value: object) -> object:
    """`value` if it is allowed for the number option `name` on its own (RULES: its type and range; how options
    combine is DecodingConfig's check); else an InvalidArgument naming it. A server that ignores an option
    (sampling options when decoding greedily) still checks its value so.

        >>> check_option("top_p", 1.5)
        InvalidArgument: top_p must be in (0, 1] (1 turns it off), got 1.5.
    """
    rule = RULES[name]
    if rule.whole and (not is_int(value) or not rule.allows(value)):
        raise InvalidArgument(f"{name} must be an integer {rule.says}, got {value!r}.", name, value)
    if not rule.whole and (not is_number(value) or value != value):
        raise InvalidArgument(
            f"{name} must be a number {rule.says}, got {value!r} ({type(value).__name__}).", name, value
        )
    if not rule.whole and not rule.allows(value):
        raise InvalidArgument(f"{name} must be {rule.says}, got {value!r}.", name, value)
    return value


def blamed(parameter: str, value: object, check: Callable, *args) -> object:
    """check(*args), its ValueError raised as an InvalidArgument naming `parameter` unless it names one."""
    try:
        return check(*args)
    except InvalidArgument:
        raise
    except ValueError as error:
        raise InvalidArgument(str(error), parameter, value) from None
