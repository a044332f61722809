"""Accuracy with a 95 % Wilson interval (notebook 14): the interval matches published values, stays inside
[0, 1] and is never empty, and bad counts are refused naming the argument."""

import pytest

from labkit.compute.accuracy import Accuracy, accuracy, wilson_interval


# Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3 (Wilson score)
@pytest.mark.parametrize(
    "successes, trials, low, high",
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)],
)
def test_wilson_interval_matches_newcombe(successes, trials, low, high):
    assert wilson_interval(successes, trials) == pytest.approx((low, high), abs=1e-4)


def test_interval_holds_the_rate_and_narrows_with_more_items():
    for correct, total in [(0, 5), (5, 5), (3, 10), (30, 100)]:
        low, high = Accuracy(correct, total).interval
        assert 0.0 <= low <= correct / total <= high <= 1.0 and high > low
    assert (
        Accuracy(30, 100).interval[1] - Accuracy(30, 100).interval[0]
        < Accuracy(3, 10).interval[1] - Accuracy(3, 10).interval[0]
    )


def test_accuracy_counts_flags_and_prints_rate_interval_and_counts():
    result = accuracy([True, False, False, True, False])
    assert result == Accuracy(2, 5) and result.rate == 0.4
    assert str(result) == "40 % [12-77 %] (2 of 5)"


def test_overlap_says_whether_two_runs_were_told_apart():
    assert Accuracy(9, 60).overlaps(Accuracy(12, 60)) and Accuracy(12, 60).overlaps(Accuracy(9, 60))
    assert not Accuracy(9, 60).overlaps(Accuracy(40, 60))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: wilson_interval(3, 0), "trials"),
        (lambda: wilson_interval(4, 3), "successes"),
        (lambda: wilson_interval(1, 3, z=0), "z"),
        (lambda: Accuracy(-1, 3), "correct"),
        (lambda: accuracy([]), "correct"),
        (lambda: accuracy([1, 0]), "True or False"),
    ],
)
def test_bad_counts_are_refused_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
