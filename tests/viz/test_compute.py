"""Notebook 14's frontier: a line per method through its points, on a log token axis, with the 95 % Wilson
interval of each point as its error bar, in colour-blind-safe colours with a marker of its own."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from labkit.compute.accuracy import Accuracy  # noqa: E402
from labkit.compute.method_run import FrontierPoint  # noqa: E402
from labkit.viz.compute import OKABE_ITO, by_method, plot_frontier, point_label  # noqa: E402


def points():
    vote = [FrontierPoint("self-consistency", n, 3.0 * n, Accuracy(6 + n // 4, 60)) for n in (16, 1, 4, 8)]
    return vote + [
        FrontierPoint("calculator", 1, 34.0, Accuracy(60, 60)),
        FrontierPoint("thinking", 1, 40.0, Accuracy(1, 60), note="budget 16"),
    ]


def test_a_line_per_method_through_its_points_in_token_order():
    assert list(by_method(points())) == ["self-consistency", "calculator", "thinking"]
    assert [p.n for p in by_method(points())["self-consistency"]] == [1, 4, 8, 16]
    ax = plot_frontier(points(), title="sums")
    lines = [container.lines[0] for container in ax.containers]  # each errorbar's data line (not its caps)
    assert len(lines) == 3 and list(lines[0].get_xdata()) == [3, 12, 24, 48]
    assert list(lines[0].get_ydata()) == pytest.approx([100 * (6 + n // 4) / 60 for n in (1, 4, 8, 16)])
    assert ax.get_xscale() == "log" and ax.get_title() == "sums" and ax.get_ylim() == (0, 104)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "self-consistency",
        "calculator",
        "thinking",
    ]
    assert [line.get_color() for line in lines] == list(OKABE_ITO[:3])
    assert len({line.get_marker() for line in lines}) == 3
    assert [line.get_linestyle() for line in lines] == ["-", "-", "None"]  # budgets: markers alone
    texts = [text.get_text() for text in ax.texts]
    assert sorted(texts) == ["budget 16", "n=16", "n=4", "n=8"]  # each n once, along the top


def test_error_bars_are_the_wilson_intervals_and_points_are_labelled():
    ax = plot_frontier([FrontierPoint("calculator", 1, 34.0, Accuracy(60, 60))])
    low, high = Accuracy(60, 60).interval
    segments = ax.collections[0].get_segments()
    assert [tuple(y for _, y in seg) for seg in segments] == [pytest.approx((100 * low, 100 * high))]
    assert point_label(points()[0]) == "n=16" and point_label(points()[-1]) == "budget 16"
    assert point_label(points()[-2]) == ""
    with pytest.raises(ValueError, match="at least one"):
        plot_frontier([])
