"""McNemar's paired test (notebook 14): its p-value equals a brute-force count over every way the
disagreements could have fallen, it is symmetric, it cannot tell apart methods that split evenly, and it
refuses flags that do not pair up."""

import itertools

import pytest

from labkit.compute.accuracy import Accuracy, accuracy
from labkit.compute.paired import PairedTest, mcnemar


def brute_force_p(only_first: int, only_second: int) -> float:
    """Two-sided: the share of the 2^n fair-coin outcomes of the n disagreements at least as uneven."""
    n = only_first + only_second
    observed = abs(only_first - only_second)
    outcomes = list(itertools.product([0, 1], repeat=n))
    return sum(abs(2 * sum(o) - n) >= observed for o in outcomes) / len(outcomes)


@pytest.mark.parametrize("only_first, only_second", [(7, 0), (1, 4), (3, 3), (0, 1), (2, 9), (5, 6)])
def test_the_p_value_counts_every_outcome_at_least_as_uneven(only_first, only_second):
    test = PairedTest(only_first, only_second, both=10, neither=10)
    assert test.p_value == pytest.approx(brute_force_p(only_first, only_second), abs=1e-12)
    assert test.p_value == PairedTest(only_second, only_first, 0, 0).p_value  # symmetric; ties do not count


def test_known_values_and_the_level():
    assert PairedTest(7, 0, 0, 0).p_value == 2 / 2**7 and PairedTest(7, 0, 0, 0).apart
    assert PairedTest(5, 0, 0, 0).p_value == 2 / 2**5 and not PairedTest(5, 0, 0, 0).apart  # 0.0625
    assert PairedTest(0, 0, 30, 30).p_value == 1.0  # no disagreement: nothing tells them apart


def test_the_flags_pair_up_item_by_item():
    first, second = [True, True, False, False, True], [False, True, True, False, False]
    assert mcnemar(first, second) == PairedTest(only_first=2, only_second=1, both=1, neither=1)
    assert accuracy(first).paired_with(accuracy(second)) == mcnemar(first, second)


@pytest.mark.parametrize(
    "first, second, match",
    [
        ([True, False], [True], "same items"),
        ([], [], "at least one"),
        ([1, 0], [True, False], "True or False"),
    ],
)
def test_flags_that_do_not_pair_up_are_refused(first, second, match):
    with pytest.raises(ValueError, match=match):
        mcnemar(first, second)


def test_an_accuracy_without_its_flags_cannot_be_paired():
    with pytest.raises(ValueError, match="each item's flag"):
        Accuracy(5, 60).paired_with(accuracy([True] * 60))
    with pytest.raises(ValueError, match="must be an Accuracy"):
        accuracy([True]).paired_with(0.5)
