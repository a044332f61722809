"""Notebook 11's pictures draw what a load sweep measured: one point per concurrency, one bar per request."""

import math

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from labkit.loadtest.client import StreamTiming  # noqa: E402
from labkit.loadtest.load_result import LoadResult  # noqa: E402
from labkit.viz import http as http_plots  # noqa: E402


def level(concurrency: int, ttft: float) -> LoadResult:
    """A made-up level: `concurrency` requests of 8 tokens sent 0.1 s apart, each 1 s long."""
    requests = tuple(StreamTiming("x" * 8, 8, 0.1 * i, ttft / 2, ttft, 1.0) for i in range(concurrency))
    return LoadResult(concurrency, requests, wall_s=1.0 + 0.1 * concurrency)


def test_sweep_plot_has_a_point_per_level_and_the_seats_line():
    results = [level(c, 0.1 * c) for c in (1, 2, 4, 8)]
    left, middle, right = http_plots.plot_load_sweep(results, seats=4)
    measured = left.get_lines()[0]
    assert list(measured.get_xdata()) == [1, 2, 4, 8]
    assert list(measured.get_ydata()) == pytest.approx([r.tokens_per_s for r in results])
    p50 = middle.get_lines()[0]
    assert list(p50.get_ydata()) == pytest.approx([100, 200, 400, 800])
    assert any(list(line.get_xdata()) == [4, 4] for line in right.get_lines())  # the seats line
    assert [t.get_text() for t in middle.get_xticklabels()] == ["1", "2", "4", "8"]
    labels = [t.get_text() for t in left.get_yticklabels()]  # the log axis: plain numbers, at least two
    assert len(labels) >= 2 and all(label.replace(",", "").replace(".", "").isdigit() for label in labels)
    with pytest.raises(ValueError, match="at least one"):
        http_plots.plot_load_sweep([])


def test_timeline_has_a_waiting_and_a_decoding_bar_per_request():
    result = level(3, 0.4)
    ax = http_plots.plot_request_timeline(result)
    widths = [patch.get_width() for patch in ax.patches]
    assert widths == pytest.approx([0.4, 0.6] * 3)
    assert [patch.get_x() for patch in ax.patches][:2] == pytest.approx([0.0, 0.4])
    empty = LoadResult(1, (StreamTiming("", 0, 0.0, math.nan, math.nan, math.nan, 503, "busy"),), 1.0)
    with pytest.raises(ValueError, match="No request"):
        http_plots.plot_request_timeline(empty)
