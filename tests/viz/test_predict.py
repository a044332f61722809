"""Predict, then measure: the guess is recorded, compared with the measurement, and checked when built."""

import pytest

from labkit.viz.predict import Prediction


def test_a_number_guess_is_compared_as_a_ratio():
    guess = Prediction("How many parameters, in millions?", default=100)
    assert guess.value == 100 and isinstance(guess.value, int)
    assert repr(guess.verdict(134.5)) == "you predicted 100 · measured 134.5: the measurement is 1.34x your guess"
    assert "right on" in repr(guess.verdict(100.2))


def test_a_choice_is_right_or_not():
    pick = Prediction("Fastest at batch 64?", default="int4", choices=["float32", "bfloat16", "int4"])
    assert repr(pick.verdict("int4")).endswith(": right")
    assert repr(pick.verdict("bfloat16")).endswith(": not this time")
    assert "**bfloat16**" in pick.verdict("bfloat16")._repr_markdown_()


def test_the_verdict_follows_a_changed_guess():
    guess = Prediction("Milliseconds a step?", default=10.0, unit=" ms")
    guess.widget.value = 40.0
    assert repr(guess.verdict(20.0)) == "you predicted 40 ms · measured 20 ms: the measurement is 0.50x your guess"


def test_the_saved_output_reads_as_text_without_a_kernel():
    guess = Prediction("How many tokens?", default=12)
    assert repr(guess) == "How many tokens?\nrecorded prediction: 12 (change it in a live notebook)"


@pytest.mark.parametrize("question, default, choices", [
    ("", 1, None), ("Which?", "c", ["a", "b"]), ("Which?", "a", ["a"]), ("How many?", None, None),
    ("How many?", True, None),
])
def test_a_malformed_prediction_is_refused(question, default, choices):
    with pytest.raises(ValueError, match="question|choices|default"):
        Prediction(question, default, choices=choices)


def test_a_guess_of_zero_is_compared_by_difference():
    guess = Prediction("For how many of the 4 questions?", default=0)
    assert repr(guess.verdict(2)) == "you predicted 0 · measured 2: off by 2"
    assert repr(guess.verdict(0)).endswith(": exactly right")
