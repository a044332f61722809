"""The quant lab's figures draw what they say, and the slider and its static fallback agree."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from labkit.quant.evaluation import Result  # noqa: E402
from labkit.viz import quant as quant_plots  # noqa: E402


@pytest.fixture
def weight():
    torch.manual_seed(0)
    w = torch.randn(64, 256) * 0.05
    w[1, 2] = 1.0
    return w


def test_round_trips_cover_every_scheme_and_keep_the_shape(weight):
    restored = quant_plots.round_trips(weight, group_size=64)
    assert list(restored) == [
        "int8 per tensor",
        "int8 per channel",
        "int4 per channel",
        "int4 g64",
        "nf4 b64",
    ]
    assert all(r.shape == weight.shape for r in restored.values())


def test_histograms_and_levels_draw(weight):
    ax = quant_plots.plot_error_histograms(weight, quant_plots.round_trips(weight))
    assert len(ax.patches) == 5 and ax.get_yscale() == "log"
    ax = quant_plots.plot_weight_distribution(weight, outlier_sigmas=6)
    assert "1 outliers" in ax.get_legend().get_texts()[0].get_text()
    ax = quant_plots.plot_levels()
    assert len(ax.collections) == 3  # the density, the int4 levels, the NF4 levels
    plt.close("all")


def test_group_size_errors_shrink_with_the_group(weight):
    errors = quant_plots.group_size_errors(weight, [32, 128, 256])
    assert errors["int4 symmetric"][0] < errors["int4 symmetric"][-1]
    assert len(errors["nf4"]) == 3
    quant_plots.plot_group_size_errors([32, 128, 256], errors)
    quant_plots.plot_size_vs_perplexity(
        [Result("fp32", "", 5e8, 30.0, 1.0, 20.0), Result("bnb nf4", "", 1.7e8, 38.0, 0.5, 5.0)]
    )
    plt.close("all")


def test_size_vs_perplexity_merges_identical_points_and_keeps_labels_apart():
    results = [
        Result("fp32", "", 5.38e8, 30.06, 1.0, 11.0),
        Result("int8", "", 2.2e8, 30.02, 0.8, 18.0),
        Result("int4a g32", "", 1.8e8, 30.07, 0.8, 19.0),
        Result("nf4", "", 1.731e8, 37.93, 0.5, 3.0),
        Result("bnb nf4", "", 1.731e8, 37.93, 0.5, 6.0),
    ]
    ax = quant_plots.plot_size_vs_perplexity(results)
    labels = {text.get_text(): text.get_position()[1] for text in ax.texts}
    assert set(labels) == {"fp32", "int8", "int4a g32", "nf4 = bnb nf4"}
    heights = sorted(labels.values())
    gap = 0.09 * (37.93 - 30.02)
    assert all(b - a >= gap - 1e-6 for a, b in zip(heights, heights[1:]))
    plt.close("all")


def test_spread_labels_moves_only_crowded_labels():
    assert quant_plots.spread_labels([1.0, 1.05, 5.0], min_gap=0.5) == [0.775, 1.275, 5.0]
    assert quant_plots.spread_labels([3.0, 1.0], min_gap=0.5) == [3.0, 1.0]


def test_slider_and_its_static_fallback_show_the_same_numbers(weight):
    slider = quant_plots.quant_slider(weight)
    assert list(slider.group_size.options) == [16, 32, 64, 128, 256] and slider.group_size.value == 64
    slider.bits.value, slider.group_size.value = 4, 32
    stats = quant_plots.error_memory(weight, 4, 32)
    assert f"{stats['relative_rms']:.2%}" in slider.text.value and "4.50 bits per weight" in slider.text.value
    assert bytes(slider.chart.value).startswith(b"\x89PNG")
    table = quant_plots.error_memory_table(weight, bits=(4,), group_sizes=(32,))
    assert f"{stats['relative_rms']:.2%}" in table
    assert repr(slider).startswith("QuantSlider(")
    with pytest.raises(ValueError, match="None of the group sizes"):
        quant_plots.quant_slider(weight, group_sizes=(48,))
