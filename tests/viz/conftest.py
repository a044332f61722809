"""Fixtures of the figure and widget tests: matplotlib draws off screen, and every test's figures are
closed after it."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")
