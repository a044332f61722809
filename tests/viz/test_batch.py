"""Notebook 10's section-1 pictures: the batch sweep, and which weights win at which batch."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from labkit.fast.cost import Machine, StepCosts  # noqa: E402
from labkit.viz import batch  # noqa: E402


def test_batch_sweep_draws_throughput_as_batch_over_step_time():
    left, right = batch.plot_batch_sweep([1, 2, 4], [0.05, 0.055, 0.07])
    assert right.lines[0].get_ydata()[-1] == pytest.approx(4 / 0.07)
    assert [t.get_text() for t in right.get_xticklabels()] == ["1", "2", "4"]  # the measured batch sizes
    # plain, on the log axis
    assert [t.get_text() for t in right.get_yticklabels()] == ["20", "30", "40", "50", "70"]
    with pytest.raises(ValueError, match="one step time per batch size"):
        batch.plot_batch_sweep([1, 2], [0.05])


def test_weights_by_batch_draws_measured_and_predicted_lines_per_kind():
    machine = Machine(read_bandwidth=20e9, peaks={"float32": 100e9}, threads=2)

    def step(ms: float) -> StepCosts:
        return StepCosts(
            ops=1000,
            op_seconds=5e-6,
            matmul_seconds=ms / 1e3,
            weight_bytes=10**8,
            kv_bytes=0,
            flops=1e9,
            measured_seconds=ms / 1e3 + 0.006,
        )

    costs = {"float32": {1: step(30), 32: step(150)}, "int4": {1: step(20), 32: step(120)}}
    ax = batch.plot_weights_by_batch(costs, machine)
    assert len(ax.lines) == 4 and list(ax.lines[0].get_ydata()) == pytest.approx([36, 156])
    assert list(ax.lines[1].get_ydata()) == pytest.approx([35, 155])  # 5 ms overhead + the matmuls
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "32"]
    with pytest.raises(ValueError, match="at least one"):
        batch.plot_weights_by_batch({"float32": {}}, machine)
