"""Readable log axes: round numbers at the ticks, written plainly (20, 100, 1,500), never as powers of ten."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from labkit.viz.axes import plain_log_ticks, plain_number, round_log_ticks  # noqa: E402

DRAWS_OWN_FIGURES = True  # the tests draw bare axes to label them (tests/viz/conftest.py)


def test_round_log_ticks_take_1_2_5_per_decade_and_more_where_the_range_is_narrow():
    assert round_log_ticks(12, 260) == [20, 50, 100, 200]
    assert round_log_ticks(0.02, 0.9) == [0.02, 0.05, 0.1, 0.2, 0.5]
    assert round_log_ticks(12, 30) == [15, 20, 30]  # 1-2-5 would leave only 20
    assert len(round_log_ticks(31, 39)) >= 2 and all(31 <= t <= 39 for t in round_log_ticks(31, 39))
    with pytest.raises(ValueError, match="0 < low <= high"):
        round_log_ticks(0, 10)


def test_plain_numbers_have_no_powers_of_ten():
    assert [plain_number(v) for v in (20.0, 1500.0, 0.5, 1.5)] == ["20", "1,500", "0.5", "1.5"]


def test_a_log_axis_gets_plain_labels_and_no_minor_ticks():
    _, ax = plt.subplots()
    ax.plot([1, 2, 4, 8, 16, 32], [25, 26, 50, 100, 180, 260])
    ax.set(xscale="log", yscale="log")
    plain_log_ticks(ax.yaxis)
    plain_log_ticks(ax.xaxis, [1, 2, 4, 8, 16, 32])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["50", "100", "200"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8", "16", "32"]
    assert len(ax.yaxis.get_minorticklocs()) == 0 and len(ax.xaxis.get_minorticklocs()) == 0
