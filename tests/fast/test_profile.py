"""labkit.fast.profile and labkit.viz.fast: a decode step's time split by kind, and notebook 13's figures."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

import labkit  # noqa: E402
from labkit.benchmarks.fast import Row  # noqa: E402
from labkit.fast.profile import KINDS, kind_of, step_breakdown  # noqa: E402
from labkit.fast.static import StaticDecoder  # noqa: E402
from labkit.viz.fast import plot_breakdown, plot_staircase  # noqa: E402


def test_ops_are_sorted_into_matmuls_attention_and_the_rest():
    assert kind_of("aten::mm") == kind_of("aten::_weight_int4pack_mm_for_cpu") == "matmul kernels"
    assert kind_of("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert kind_of("aten::add") == kind_of("aten::index_copy_") == "everything else"


def test_breakdown_of_a_real_step_sums_to_one_and_sees_its_matmuls():
    torch.manual_seed(0)
    shares = step_breakdown(StaticDecoder(labkit.tiny_model(impl="labkit"), max_length=32), steps=4)
    assert tuple(shares) == KINDS
    assert sum(shares.values()) == pytest.approx(1.0)
    assert all(share > 0 for share in shares.values())  # a step runs matmuls, attention and small ops


def test_breakdown_says_when_the_decoder_is_too_short():
    with pytest.raises(ValueError, match="holds 8 tokens"):
        step_breakdown(StaticDecoder(labkit.tiny_model(impl="labkit"), max_length=8), steps=8)


def test_breakdown_names_a_bad_count():
    decoder = StaticDecoder(labkit.tiny_model(impl="labkit"), max_length=32)
    with pytest.raises(ValueError, match="steps must be a whole number of 1 or more, got 0"):
        step_breakdown(decoder, steps=0)
    with pytest.raises(ValueError, match="warmup must be a whole number of 0 or more, got 1.5"):
        step_breakdown(decoder, warmup=1.5)


def test_figures_draw_one_bar_per_path():
    rows = [Row("float32", 2, 13.0, 538e6), Row("int4", 2, 27.0, 95e6)]
    fig = plot_staircase(rows, bandwidth=20e9, llama_cpp=Row("llama.cpp", 2, 60.0, 98e6))
    speed, share = fig.axes
    assert [bar.get_width() for bar in speed.patches] == [60.0, 27.0, 13.0]  # top to bottom: steps in order
    assert share.patches[2].get_width() == pytest.approx(100 * 538e6 * 13 / 20e9)
    assert len(plot_staircase(rows, bandwidth=20e9).axes[0].patches) == 2  # no llama.cpp installed
    fig = plot_breakdown({"a": {"x": 0.7, "y": 0.3}, "b": {"x": 0.5, "y": 0.5}})
    assert len(fig.axes[0].patches) == 4
