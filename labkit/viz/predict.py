"""Predict, then measure: the student commits a guess before a cell measures it, then sees both side by side.

A `Prediction` shows its question and a box (a number) or buttons (a choice) holding a recorded default,
so a notebook run unattended (nbval, `make present`, the static decks) still reads well. In a live
notebook the student changes the box before running the measurement; `reveal` prints the guess beside
the measured value and, in a live kernel, redraws that line whenever the guess changes, so a room's
guesses can be tried one after another against the same measurement.

    >>> guess = Prediction("How many parameters does SmolLM2-135M have, in millions?", default=100.0)
    >>> guess                      # a number box holding 100.0; type your own guess before measuring
    >>> guess.reveal(134.5)        # "you predicted 100 · measured 134.5: the measurement is 1.34x your guess"
    >>> pick = Prediction("Fastest at batch 64?", default="int4", choices=["float32", "bfloat16", "int4"])
    >>> pick.reveal("bfloat16")    # "you predicted int4 · measured bfloat16: not this time"
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import ipywidgets as widgets
from IPython.display import display


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


class Verdict:
    """One line comparing a guess with a measurement: text for a console, bold where Markdown renders."""

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
        return (f"you predicted {_format(self.guess, self.unit)} · measured {_format(self.measured, self.unit)}:"
                f" {self.comparison()}")

    def _repr_markdown_(self) -> str:
        return (f"You predicted **{_format(self.guess, self.unit)}** · measured "
                f"**{_format(self.measured, self.unit)}**: {self.comparison()}")


class Prediction:
    """A guess committed before a measurement: a question, a recorded default, and a box or buttons.

    default: a number (a box to type into) or one of `choices` (buttons). unit: appended when printed,
    e.g. " ms" or " MB". Read the current guess with `.value`; `reveal(measured)` compares it.
    """

    def __init__(self, question: str, default: float | int | str, *, choices: Sequence[str] | None = None,
                 unit: str = ""):
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be the sentence the student answers, e.g. 'How many tokens?'.")
        if choices is not None:
            choices = list(choices)
            if len(choices) < 2 or default not in choices:
                raise ValueError(f"choices must hold at least two options and the default; got choices={choices!r},"
                                 f" default={default!r}.")
            self.widget = widgets.ToggleButtons(options=choices, value=default)
        elif isinstance(default, (int, float)) and not isinstance(default, bool):
            self.widget = widgets.FloatText(value=float(default), layout=widgets.Layout(width="12em"))
        else:
            raise ValueError(f"default must be a number, or one of `choices`; got {default!r}.")
        self.question, self.default, self.unit = question, default, unit

    @property
    def value(self) -> float | int | str:
        """The guess now: the box's value in a live notebook, the recorded default elsewhere."""
        value = self.widget.value
        if isinstance(self.default, int) and not isinstance(self.default, bool) and float(value).is_integer():
            return int(value)
        return value

    def __repr__(self) -> str:
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
