"""Notebook 10's pictures build from a real engine run on the tiny random model, and say what happened."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from labkit.serving.engine import Engine  # noqa: E402
from labkit.serving.workload import RunResult  # noqa: E402
from labkit.viz import serving  # noqa: E402

PROMPTS = ["Hi", "The sea is", "Once upon a time, in a land far away,", "A", "Dear friend,"]


@pytest.fixture(scope="module")
def trace(tiny, tokenizer):
    """5 requests, staggered, in a pool so small that the engine must preempt."""
    engine = Engine(tiny, tokenizer, max_num_seqs=4, n_blocks=8, block_size=4)
    requests = [(p, {"max_new_tokens": 14 - i}) for i, p in enumerate(PROMPTS)]
    return serving.run_traced(engine, requests, arrivals=[0, 0, 1, 3, 3])


def test_trace_records_every_step_joining_leaving_and_preemption(trace):
    kinds = [s.kind for s in trace.snapshots]
    assert kinds[0] == "prefill" and "decode" in kinds
    assert sorted(trace.arrivals) == [0, 1, 2, 3, 4] and trace.arrivals[3] == 3
    assert any(s.preempted for s in trace.snapshots)  # the small pool forced a preemption
    finished = [i for s in trace.snapshots for i in s.finished]
    assert sorted(finished) == [0, 1, 2, 3, 4]  # each left once, when done
    assert all(s.blocks_used <= trace.n_blocks for s in trace.snapshots)
    assert max(len(s.batch) for s in trace.snapshots) >= 2  # requests really shared steps
    assert trace.snapshots[-1].blocks_used == 0 and not trace.snapshots[-1].running


def test_timeline_states_match_the_trace(trace):
    states = serving.timeline_states(trace)
    for s in trace.snapshots:
        for request_id in s.batch:
            assert states[request_id][s.step] == s.kind
    preempted = next(i for s in trace.snapshots for i in s.preempted)
    assert "waiting" in states[preempted]


def test_figures_build(trace):
    ax = serving.draw_timeline(trace, upto=2)
    assert len(ax.patches) == sum(
        state is not None for row in serving.timeline_states(trace).values() for state in row
    )
    ax = serving.draw_engine_blocks(trace, 1)
    tables = trace.snapshots[1].block_tables
    # the blocks in use, not the pool
    assert len(ax.patches) == sum(map(len, tables.values())) < trace.n_blocks
    assert [label.get_text() for label in ax.get_yticklabels()] == [f"#{r}" for r in sorted(tables)]
    assert f"{trace.snapshots[1].blocks_used} of {trace.n_blocks} blocks of 4 tokens" in ax.get_title()
    ax = serving.draw_slot_grid([10, 4, 7])
    assert "21 useful token slots, 9 idle" in ax.get_title()


def test_format_trace_and_stepper(trace):
    text = serving.format_trace(trace)
    assert (
        len(text.splitlines()) == len(trace.snapshots) + 1 and "PREEMPTED" in text and "#4 finished" in text
    )
    stepper = serving.engine_stepper(trace, step=1)
    assert stepper.chart.value[:4] == b"\x89PNG" and "run the notebook" in repr(stepper)
    stepper.slider.value = 3
    assert stepper.text.value.startswith("<pre>   3")
    with pytest.raises(ValueError, match="arrival step"):
        serving.run_traced(None, [("Hi", {})], arrivals=[0, 1])


def test_comparison_plot():
    runs = [
        RunResult("one at a time", 2.0, 40, (0.1, 0.5), (0.05, 0.05), ((1,), (2,))),
        RunResult("continuous", 1.0, 40, (0.1, 0.2), (0.06, 0.07), ((1,), (2,))),
    ]
    axes = serving.plot_comparison({"together": runs, "staggered": runs})
    assert [round(p.get_height()) for p in axes[0].patches] == [20, 40, 20, 40]
