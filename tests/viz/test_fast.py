"""Notebook 13's cost waterfall draws each step's predicted terms and its measured time."""

import pytest

from labkit.fast.cost import Machine, StepCosts
from labkit.viz.fast import TERM_COLOURS, plot_cost_waterfall

MACHINE = Machine(read_bandwidth=20e9, peaks={"float32": 100e9}, threads=2)
COSTS = {
    "float32": StepCosts(
        ops=2488,
        op_seconds=4e-6,
        matmul_seconds=0.046,
        weight_bytes=538_000_000,
        kv_bytes=2_000_000,
        flops=2.7e8,
        measured_seconds=0.057,
    ),
    "int4, compiled": StepCosts(
        ops=273,
        op_seconds=11e-6,
        matmul_seconds=0.004,
        weight_bytes=95_000_000,
        kv_bytes=2_000_000,
        flops=2.7e8,
        measured_seconds=0.0075,
    ),
}


def test_each_step_is_a_bar_of_its_terms_with_its_measured_time_and_regime():
    fig = plot_cost_waterfall(COSTS, MACHINE)
    ax = fig.axes[0]
    bars = ax.patches  # one bar per step and term, term by term, the last step (top) first within a term
    assert len(bars) == len(TERM_COLOURS) * len(COSTS)
    overhead_int4, overhead_fp32 = bars[0], bars[1]  # the figure lists steps top to bottom
    assert overhead_fp32.get_width() == pytest.approx(
        2488 * 4e-3
    ) and overhead_int4.get_width() == pytest.approx(3.003)
    kv_fp32 = bars[7]  # the fourth term, KV cache, after overhead, wake-ups and matmuls
    assert kv_fp32.get_x() + kv_fp32.get_width() == pytest.approx(
        1e3 * COSTS["float32"].predicted_seconds(MACHINE)
    )
    [marks] = ax.collections
    assert sorted(x for x, _ in marks.get_offsets()) == pytest.approx([7.5, 57.0])  # the measured ms
    texts = [t.get_text().strip() for t in ax.texts]
    assert texts == [COSTS["int4, compiled"].regime(MACHINE), COSTS["float32"].regime(MACHINE)]
