"""A long prompt arriving while short answers decode, with and without chunked prefill (tiny model): the
runs record every step, chunking mixes decodes with prompt chunks within its budget, and the table and
figure build from them."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from labkit.serving.interference import interference_run, interference_table  # noqa: E402
from labkit.viz.serving import plot_step_times  # noqa: E402

SHORTS = ["Hi", "The sea is", "Dear friend,"]
LONG = "word " * 120  # 120+ tokens: several chunks of 32


def test_chunks_keep_decoding_while_the_long_prompt_is_fed(tiny, tokenizer, one_thread):
    first = interference_run(tiny, tokenizer, SHORTS, LONG, chunked=False, arrival_step=3, max_new_tokens=12)
    chunked = interference_run(
        tiny, tokenizer, SHORTS, LONG, chunked=True, budget=32, arrival_step=3, max_new_tokens=12
    )
    # shorts, then the long one
    assert first.step_kinds.count("prefill") == 2 and "mixed" not in first.step_kinds
    assert max(first.step_tokens) > 120  # the whole long prompt in one step
    assert chunked.step_kinds.count("mixed") >= 4 and max(chunked.step_tokens) <= 32
    assert len(first.gaps_ms) == len(chunked.gaps_ms) == 3 * 11  # 12 tokens each: 11 gaps
    table = interference_table([first, chunked])
    assert "prefill first" in table and "chunked prefill, 32 tokens a step" in table
    assert len(plot_step_times([first, chunked])) == 2


def test_an_arrival_after_everything_finished_is_refused_clearly(tiny, tokenizer):
    with pytest.raises(ValueError, match="before step 50"):
        interference_run(tiny, tokenizer, SHORTS, LONG, chunked=False, arrival_step=50, max_new_tokens=2)
