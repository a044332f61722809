"""Predict, then measure: no guess is recorded in advance, a typed guess is compared with the measurement,
and a malformed prediction is refused when built."""

import ipywidgets as widgets
import pytest

from labkit.viz.predict import Prediction


def test_no_guess_is_recorded_until_the_student_makes_one():
    guess = Prediction("How many parameters, in millions?")
    assert guess.value is None and guess.widget.value == ""
    assert repr(guess.verdict(134.5)).startswith("no prediction recorded · measured 134.5")
    assert "you predicted" not in repr(guess.verdict(134.5)).lower()
    pick = Prediction("Fastest at batch 64?", choices=["float32", "bfloat16", "int4"])
    assert pick.value is None and pick.widget.index is None  # no button pressed
    assert "**bfloat16**" in pick.verdict("bfloat16")._repr_markdown_()
    assert "predicted" not in pick.verdict("bfloat16")._repr_markdown_()


def test_a_number_guess_is_compared_as_a_ratio():
    guess = Prediction("How many parameters, in millions?")
    guess.widget.value = "100"
    assert guess.value == 100 and isinstance(guess.value, int)
    assert (
        repr(guess.verdict(134.5))
        == "you predicted 100 · measured 134.5: the measurement is 1.34x your guess"
    )
    assert "right on" in repr(guess.verdict(100.2))


def test_a_typed_guess_that_is_not_a_number_counts_as_none():
    guess = Prediction("How many tokens?")
    guess.widget.value = "about ten"
    assert guess.value is None
    guess.widget.value = "1,200.5"
    assert guess.value == 1200.5


def test_a_choice_is_right_or_not():
    pick = Prediction("Fastest at batch 64?", choices=["float32", "bfloat16", "int4"])
    pick.widget.value = "int4"
    assert repr(pick.verdict("int4")).endswith(": right")
    assert repr(pick.verdict("bfloat16")).endswith(": not this time")


def test_the_verdict_follows_a_changed_guess():
    guess = Prediction("Milliseconds a step?", unit=" ms")
    guess.widget.value = "40"
    assert (
        repr(guess.verdict(20.0))
        == "you predicted 40 ms · measured 20 ms: the measurement is 0.50x your guess"
    )


def test_a_neutral_default_can_still_be_recorded():
    guess = Prediction("How many tokens?", default=12)
    assert isinstance(guess.widget, widgets.Text) and guess.value == 12
    assert repr(guess) == "How many tokens?\nrecorded prediction: 12 (change it in a live notebook)"


def test_the_saved_output_reads_as_text_without_a_kernel():
    assert repr(Prediction("How many tokens?")) == (
        "How many tokens?\nno prediction recorded (type or pick yours in a live notebook)"
    )


@pytest.mark.parametrize(
    "question, default, choices",
    [
        ("", None, None),
        ("Which?", "c", ["a", "b"]),
        ("Which?", None, ["a"]),
        ("How many?", "ten", None),
        ("How many?", True, None),
    ],
)
def test_a_malformed_prediction_is_refused(question, default, choices):
    with pytest.raises(ValueError, match="question|choices|default"):
        Prediction(question, default, choices=choices)


def test_a_guess_of_zero_is_compared_by_difference():
    guess = Prediction("For how many of the 4 questions?")
    guess.widget.value = "0"
    assert repr(guess.verdict(2)) == "you predicted 0 · measured 2: off by 2"
    assert repr(guess.verdict(0)).endswith(": exactly right")
