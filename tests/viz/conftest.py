"""Fixtures of the figure and widget tests: matplotlib draws off screen, and every test's figures are
closed after it. Every figure a test leaves drawn must carry an alternative text (labkit.viz.alt): each
plotting function sets one, so a new function without `with_alt_text` fails the test that draws it. A test
module that draws figures of its own (not with a labkit function) says so: DRAWS_OWN_FIGURES = True."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from labkit.viz.alt import alt_text  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures(request):
    yield
    figures = [plt.figure(number) for number in plt.get_fignums()]
    plt.close("all")
    if getattr(request.module, "DRAWS_OWN_FIGURES", False):
        return
    drawn = [fig for fig in figures if any(ax.has_data() for ax in fig.get_axes())]
    assert all(alt_text(fig) for fig in drawn), (
        "a figure was drawn without an alternative text (labkit.viz.alt)"
    )
