"""Every figure says what it shows: each plotting function in labkit.viz sets an alternative text read from
what it drew, a displayed figure carries it in its output's metadata, and nbconvert writes it as <img alt>."""

import importlib
import inspect
import pkgutil

import matplotlib.pyplot as plt
import nbformat
import pytest
import torch
from IPython.core.formatters import DisplayFormatter
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from nbconvert import HTMLExporter

import labkit.viz
from labkit.viz import search, speculative
from labkit.viz.alt import alt_text, png_with_alt, set_alt_text
from labkit.viz.fast import TERM_COLOURS
from labkit.viz.palette import OKABE_ITO, ON_WHITE
from labkit.viz.plots import plot_surprise
from labkit.viz.quant import plot_error_histograms, plot_levels, round_trips
from labkit.viz.speculative import plot_acceptance_rule


def plotting_functions():
    """Every public `plot_...` / `draw_...` function defined in a labkit.viz module."""
    for info in pkgutil.iter_modules(labkit.viz.__path__):
        module = importlib.import_module(f"labkit.viz.{info.name}")
        for name, function in inspect.getmembers(module, inspect.isfunction):
            if name.startswith(("plot_", "draw_")) and function.__module__ == module.__name__:
                yield f"{info.name}.{name}", function


def test_every_plotting_function_sets_an_alternative_text():
    functions = dict(plotting_functions())
    assert len(functions) >= 30  # the course's figures, notebooks 00 to 14
    missing = [name for name, function in functions.items() if not getattr(function, "alt_text_lead", "")]
    assert missing == []


def test_the_text_names_the_series_and_their_numbers():
    ax = plot_surprise({"mirostat": [1.0, 2.5, 4.0], "top-p": [0.5, 0.25, 3.0]}, tau=3.0)
    text = alt_text(ax.figure)
    assert text.startswith("Line chart of the surprise in bits")
    assert "mirostat: 3 points" in text and "y 1 to 4" in text and "top-p: 3 points" in text


def test_bars_are_named_by_their_tick_labels_with_their_lengths():
    p, q = torch.tensor([0.6, 0.3, 0.1]), torch.tensor([0.2, 0.5, 0.3])
    text = alt_text(plot_acceptance_rule(p, q, ["Paris", "Lyon", "Nice"]).figure)
    assert "p: target: 3 bars: Paris 0.6, Lyon 0.3, Nice 0.1" in text
    assert "q: draft: 3 bars: Paris 0.2, Lyon 0.5, Nice 0.3" in text


def test_a_figure_without_named_series_still_says_what_it_is():
    text = alt_text(plot_levels().figure)
    assert text.startswith("NF4's 16 levels beside int4's")


def test_bad_input_is_refused_with_the_argument_named():
    with pytest.raises(ValueError, match="lead must be a non-empty sentence"):
        set_alt_text(plt.subplots()[0], " ")
    with pytest.raises(TypeError, match="drawn must be a matplotlib Figure or Axes, got str"):
        set_alt_text("figure", "A chart")


def test_the_displayed_png_carries_the_text_as_metadata_and_nbconvert_writes_it_as_img_alt():
    formatter = DisplayFormatter()
    formatter.formatters["image/png"].for_type(Figure, png_with_alt(lambda fig: "iVBORw0KGgo="))
    fig = set_alt_text(plot_levels(), "NF4 against int4")
    data, metadata = formatter.format(fig, include={"image/png", "text/plain"})
    assert metadata["image/png"] == {"alt": alt_text(fig)}
    output = nbformat.v4.new_output("display_data", data={"image/png": data["image/png"]}, metadata=metadata)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("plot_levels()", outputs=[output])])
    html, _ = HTMLExporter(template_name="classic").from_notebook_node(notebook)
    assert 'alt="NF4 against int4.' in html


def test_a_figure_drawn_outside_labkit_viz_is_described_from_what_it_draws():
    fig, ax = plt.subplots()
    ax.bar(["a", "b"], [0.7, 0.3])
    ax.set_title("Next token")
    data, metadata = png_with_alt(lambda fig: "iVBORw0KGgo=")(fig)
    assert metadata == {"alt": "Figure. Next token: 2 bars: a 0.7, b 0.3."}
    # nothing drawn, nothing said
    assert png_with_alt(lambda fig: "iVBORw0KGgo=")(plt.figure()) == "iVBORw0KGgo="
    plt.close("all")


def test_a_retina_png_keeps_its_size_beside_the_text():
    render = png_with_alt(lambda fig: ("iVBORw0KGgo=", {"width": 320, "height": 240}))
    data, metadata = render(set_alt_text(plot_levels(), "NF4 against int4"))
    assert (
        data == "iVBORw0KGgo="
        and metadata["width"] == 320
        and metadata["alt"].startswith("NF4 against int4.")
    )


def test_colours_told_apart_only_by_red_and_green_are_gone():
    weight = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    ax = plot_error_histograms(weight, round_trips(weight))
    assert [to_hex(patch.get_edgecolor()) for patch in ax.patches] == [c.lower() for c in ON_WHITE[:5]]
    assert set(TERM_COLOURS.values()) <= set(OKABE_ITO)
    assert {search.GREEDY_COLOR, speculative.ACCEPTED, speculative.RESAMPLED} <= set(OKABE_ITO)
