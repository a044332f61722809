"""Predict, then measure: the student commits a guess before a cell measures it, then sees both side by side.

A `Prediction` shows its question and an empty box (a number) or buttons with none pressed (a choice).
The course records no guess: a notebook run unattended (nbval, `make notebooks`, the static decks) says
"no prediction recorded" beside the measurement, so no saved run pretends to be a student's guess, right
or wrong. In a live notebook the student fills the box before running the measurement; `reveal` prints
the guess beside the measured value and, in a live kernel, redraws that line whenever the guess changes,
so a room's guesses can be tried one after another against the same measurement. A `default` may still
be given where a notebook wants a neutral starting value.

    >>> guess = Prediction("How many parameters does SmolLM2-135M have, in millions?")
    >>> guess                      # an empty number box; type your own guess before measuring
    >>> guess.reveal(134.5)        # "no prediction recorded · measured 134.5" until a guess is typed
    >>> guess.widget.value = "100"
    >>> guess.reveal(134.5)        # "you predicted 100 · measured 134.5: the measurement is 1.34x your guess"
    >>> pick = Prediction("Fastest at batch 64?", choices=["float32", "bfloat16", "int4"])
    >>> pick.reveal("bfloat16")    # "no prediction recorded · measured bfloat16" until a button is pressed
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import ipywidgets as widgets
from IPython.display import display

from labkit.core.doors import described

__all__ = ["Prediction"]


def _format(value: object, unit: str) -> str:
    """A value as the student would write it: whole numbers with thousands separators, others to 4 figures.

    >>> _format(134515008, ""), _format(0.0423, " s"), _format(1234.5, " ms"), _format("int4", "")
    ('134,515,008', '0.0423 s', '1,234 ms', 'int4')
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value}{unit}"
    if float(value).is_integer():
        return f"{int(value):,}{unit}"
    return f"{value:,.0f}{unit}" if abs(value) >= 1000 else f"{value:.4g}{unit}"


NO_GUESS = "no prediction recorded"
PLACEHOLDER = "your guess"


class Verdict:
    """One line comparing a guess with a measurement: text for a console, bold where Markdown renders.
    `guess` None means the student recorded none: the line then gives the measurement alone."""

    def __init__(self, guess: object, measured: object, unit: str = ""):
        self.guess, self.measured, self.unit = guess, measured, unit

    def comparison(self) -> str:
        """How far the guess was: a ratio for numbers, right or not for choices."""
        if isinstance(self.measured, (int, float)) and not isinstance(self.measured, bool):
            guess = float(self.guess)
            if guess == 0 or self.measured == 0:
                off = abs(self.measured - guess)
                return "exactly right" if off == 0 else f"off by {_format(off, self.unit)}"
            ratio = self.measured / guess
            if abs(ratio - 1) < 0.005:
                return "right on"
            return f"the measurement is {ratio:.2f}x your guess" if ratio > 0 else "the sign differs"
        return "right" if self.guess == self.measured else "not this time"

    def __repr__(self) -> str:
        if self.guess is None:
            return f"{NO_GUESS} · measured {_format(self.measured, self.unit)} (make a guess above, then run this again)"
        return (
            f"you predicted {_format(self.guess, self.unit)} · measured {_format(self.measured, self.unit)}:"
            f" {self.comparison()}"
        )

    def _repr_markdown_(self) -> str:
        if self.guess is None:
            return (
                f"{NO_GUESS.capitalize()} · measured **{_format(self.measured, self.unit)}** "
                f"(make a guess above, then run this again)"
            )
        return (
            f"You predicted **{_format(self.guess, self.unit)}** · measured "
            f"**{_format(self.measured, self.unit)}**: {self.comparison()}"
        )


def _guess_widget(default: float | int | str | None, choices: list[str] | None) -> widgets.Widget:
    """Buttons for a choice (none pressed without a default), else a text box for a number (empty without
    one: a number box cannot be empty, and an empty box is what says "no guess yet")."""
    if choices is not None:
        return widgets.ToggleButtons(options=choices, value=default)
    return widgets.Text(
        value="" if default is None else _format(default, "").replace(",", ""),
        placeholder=PLACEHOLDER,
        layout=widgets.Layout(width="12em"),
    )


def _is_finite_number(value: object) -> bool:
    """Whether value is an int or float (not a bool) that is neither NaN nor infinite: a guess a ratio can use."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_choices(choices: object, default: object) -> list[str]:
    """choices as a list, if it holds two or more distinct options (text) and default is None or one of them;
    else a ValueError naming the argument. A string is refused: its letters would become the buttons."""
    if isinstance(choices, str) or not isinstance(choices, Sequence):
        raise ValueError(
            f"choices must be a list of at least two options, e.g. ['float32', 'bfloat16'], got "
            f"{described(choices)} {choices!r}."
        )
    options = list(choices)
    wrong = next((option for option in options if not isinstance(option, str) or not option.strip()), None)
    if wrong is not None:
        raise ValueError(
            f"choices must be options written as text, e.g. 'int4'; got {wrong!r} in {options!r}."
        )
    if len(options) < 2 or len(set(options)) < len(options):
        raise ValueError(f"choices must hold at least two distinct options; got choices={options!r}.")
    if default is not None and default not in options:
        raise ValueError(f"default must be None or one of choices {options!r}; got default={default!r}.")
    return options


class Prediction:
    """A guess committed before a measurement: a question and a box (a number) or buttons (a choice).

    choices: the options to pick from; without them the guess is a number. default: a guess recorded in
    advance (one of `choices`, or a number); None, the course's choice, records none. unit: appended when
    printed, e.g. " ms" or " MB". Read the current guess with `.value` (None until the student gives one);
    `reveal(measured)` compares it.
    """

    def __init__(
        self,
        question: str,
        default: float | int | str | None = None,
        *,
        choices: Sequence[str] | None = None,
        unit: str = "",
    ):
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be the sentence the student answers, e.g. 'How many tokens?'.")
        if not isinstance(unit, str):
            raise TypeError(
                f"unit must be text printed after the numbers, e.g. ' ms' or ' MB', got {unit!r}."
            )
        choices = None if choices is None else _check_choices(choices, default)
        if choices is None and default is not None and not _is_finite_number(default):
            raise ValueError(f"default must be None, a finite number, or one of `choices`; got {default!r}.")
        self.question, self.default, self.unit = question, default, unit
        self.widget = _guess_widget(default, choices)

    @property
    def value(self) -> float | int | str | None:
        """The guess now: the box's number or the pressed button in a live notebook; None while there is none
        (or while the box holds something that is not a finite number)."""
        value = self.widget.value
        if not isinstance(self.widget, widgets.Text):
            return value
        try:
            number = float(value.replace(",", "").strip())
        except ValueError:
            return None
        if not math.isfinite(number):  # "nan" or "inf" typed in the box: no guess a ratio can use
            return None
        return int(number) if number.is_integer() and not isinstance(self.default, float) else number

    def __repr__(self) -> str:
        if self.value is None:
            return f"{self.question}\n{NO_GUESS} (type or pick yours in a live notebook)"
        return f"{self.question}\nrecorded prediction: {_format(self.value, self.unit)} (change it in a live notebook)"

    def _ipython_display_(self) -> None:
        """The question and its box in a live notebook; the question and recorded guess as text elsewhere."""
        box = widgets.VBox([widgets.HTML(f"<b>Predict:</b> {html.escape(self.question)}"), self.widget])
        display({**box._repr_mimebundle_(), "text/plain": repr(self)}, raw=True)

    def verdict(self, measured: object) -> Verdict:
        """The guess now beside `measured` (same unit)."""
        return Verdict(self.value, measured, self.unit)

    def reveal(self, measured: object) -> None:
        """Show the guess beside the measurement; in a live kernel the line follows later changes of the guess."""
        handle = display(self.verdict(measured), display_id=True)
        if handle is not None:
            self.widget.observe(lambda _change: handle.update(self.verdict(measured)), names="value")
