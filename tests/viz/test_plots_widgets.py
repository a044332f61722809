"""Fast tests of labkit.plots and labkit.widgets on the tiny random model (no real weights needed)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import labkit  # noqa: E402
from labkit.decoding.request import Step  # noqa: E402
from labkit.viz import (
    plots,
    widgets,  # noqa: E402
)

PNG_MAGIC = b"\x89PNG"


@pytest.fixture(scope="module")
def steps(tokenizer):
    """A finished greedy generation of 6 tokens from the tiny model."""
    model = labkit.tiny_model()
    return list(labkit.generate(model, tokenizer, "Once upon a time", max_new_tokens=6, return_logits=True))


def peaked_logits(vocab_size: int, favourites: dict[int, float]) -> torch.Tensor:
    """[V] logits that are 0 everywhere except the given token ids."""
    logits = torch.zeros(vocab_size)
    for token_id, value in favourites.items():
        logits[token_id] = value
    return logits


def bar_colors(ax) -> list[tuple]:
    return [tuple(bar.get_facecolor()) for bar in ax.patches]


def test_as_probs_accepts_probabilities_logits_and_a_batch_of_one():
    logits = torch.tensor([2.0, 1.0, 0.0])
    expected = torch.softmax(logits, dim=-1)
    assert torch.allclose(plots.as_probs(logits), expected)
    assert torch.allclose(plots.as_probs(expected), expected)  # already probabilities: unchanged
    assert torch.allclose(plots.as_probs(logits[None]), expected)
    with pytest.raises(ValueError, match=r"logits\[0, -1\]"):
        plots.as_probs(torch.zeros(1, 4, 3))


def test_top_candidates_are_sorted_and_labelled(tokenizer):
    paris = tokenizer(" Paris", add_special_tokens=False)["input_ids"][0]
    logits = peaked_logits(len(tokenizer), {paris: 12.0, 30: 11.0})
    top = plots.top_candidates(logits, tokenizer, top_k=3)
    assert [c.token_id for c in top[:2]] == [paris, 30]
    assert top[0].label == "' Paris'"
    assert top[0].prob > top[1].prob > top[2].prob
    for top_k in (0, 2.0, True):
        with pytest.raises(ValueError, match="top_k must be a whole number of 1 or more, got "):
            plots.top_candidates(logits, tokenizer, top_k=top_k)


def test_byte_pieces_and_unprintable_characters_get_readable_labels(tokenizer):
    pieces = tokenizer("🍵", add_special_tokens=False)["input_ids"]
    assert len(pieces) > 1
    assert plots.token_label(tokenizer, pieces[0]) == f"#{pieces[0]} (byte piece)"
    assert "\\U0001f375" in plots.drawable("'🍵'")  # the plot font has no emoji: escaped, no warning
    assert plots.drawable("' $'") == "' \\$'"  # no accidental math mode


def test_distribution_plot_highlights_the_chosen_token(tokenizer):
    logits = peaked_logits(len(tokenizer), {100: 9.0, 200: 8.0, 300: 7.0})
    ax = plots.plot_next_token_distribution(logits, tokenizer, top_k=3, chosen=200)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    colors = bar_colors(ax)
    highlighted = [
        label
        for label, color in zip(labels, colors)
        if color == matplotlib.colors.to_rgba(plots.CHOSEN_COLOR)
    ]
    assert highlighted == [plots.token_label(tokenizer, 200)]
    # The most likely token is drawn at the top (highest y).
    top_bar = max(ax.patches, key=lambda bar: bar.get_y())
    assert top_bar.get_width() == pytest.approx(float(torch.softmax(logits, -1)[100]))


def test_a_chosen_long_shot_gets_its_own_bar(tokenizer):
    logits = peaked_logits(len(tokenizer), {100: 9.0, 200: 8.0})
    ax = plots.plot_next_token_distribution(logits, tokenizer, top_k=2, chosen=4321)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(ax.patches) == 3
    assert labels[-1] == plots.token_label(tokenizer, 4321)
    assert bar_colors(ax)[-1] == matplotlib.colors.to_rgba(plots.CHOSEN_COLOR)


def test_two_distributions_drawn_on_the_same_tokens_compare_bar_by_bar(tokenizer):
    model_probs = torch.softmax(peaked_logits(len(tokenizer), {100: 9.0, 200: 8.0, 300: 7.0}), -1)
    frequencies = torch.zeros(len(tokenizer))
    frequencies[[200, 300, 4321]] = torch.tensor([0.5, 0.3, 0.2])  # 100 never drawn, 4321 only here
    tokens = model_probs.topk(3).indices.tolist()
    axes = [
        plots.plot_next_token_distribution(p, tokenizer, tokens=tokens, ax=plt.subplots()[1])
        for p in (model_probs, frequencies)
    ]
    for ax, probs in zip(axes, (model_probs, frequencies)):
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels == [plots.token_label(tokenizer, t) for t in tokens] + ["every other token"]
        widths = [bar.get_width() for bar in sorted(ax.patches, key=lambda bar: -bar.get_y())]
        assert widths[:3] == pytest.approx([float(probs[t]) for t in tokens])
        assert sum(widths) == pytest.approx(1.0)  # the last bar holds the rest of the mass
        assert bar_colors(ax)[-1] == matplotlib.colors.to_rgba(plots.REST_COLOR)
    with pytest.raises(ValueError, match="distinct token ids"):
        plots.plot_next_token_distribution(model_probs, tokenizer, tokens=[100, 100])


def test_a_chosen_id_outside_the_vocabulary_is_refused(tokenizer):
    with pytest.raises(ValueError, match="token id"):
        plots.plot_next_token_distribution(torch.randn(len(tokenizer)), tokenizer, chosen=len(tokenizer))


def test_distribution_plot_draws_into_a_given_axes(tokenizer):
    fig, ax = plt.subplots()
    returned = plots.plot_next_token_distribution(torch.randn(len(tokenizer)), tokenizer, top_k=4, ax=ax)
    assert returned is ax and len(ax.patches) == 4


def test_kept_vs_cut_in_columns_on_a_log_axis_shows_a_cut_head_token(tokenizer):
    """Typical sampling may cut the most likely token: in columns, most likely first, it is the first bar, grey."""
    logits = peaked_logits(len(tokenizer), {5: 3.0, 7: 2.9, 9: 2.0, 11: 1.0})
    transformed = logits.clone()
    transformed[5] = float("-inf")  # the most likely token, cut
    ax = plots.plot_kept_vs_cut(logits, transformed, tokenizer, top_k=40, log=True, columns=True)
    before = ax.patches[:40]  # then the renormalised survivors
    assert ax.get_yscale() == "log" and len(ax.get_xticklabels()) == 40
    assert [bar.get_x() + bar.get_width() / 2 for bar in before] == list(range(40))  # most likely on the left
    assert before[0].get_facecolor() == matplotlib.colors.to_rgba(plots.CUT_COLOR)
    assert before[1].get_facecolor() == matplotlib.colors.to_rgba(plots.KEPT_COLOR)
    assert len(ax.patches) == 40 + 39  # no renormalised bar for the cut token
    assert ax.get_ylim()[0] < min(bar.get_height() for bar in before)  # the smallest bar is still drawn
    plt.close(ax.figure)


def test_generation_steps_grid_has_one_panel_per_step(tokenizer, steps):
    fig = plots.plot_generation_steps(steps, tokenizer, top_k=3, max_steps=4, n_cols=3)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 4
    for ax, step in zip(visible, steps):
        assert plots.token_label(tokenizer, step.token_id) in ax.get_title()
    with pytest.raises(ValueError, match="No steps"):
        plots.plot_generation_steps([], tokenizer)


def test_step_confidence_bars_are_the_chosen_probabilities(tokenizer, steps):
    ax = plots.plot_step_confidence(steps, tokenizer)
    chosen_bars = ax.patches[: len(steps)]
    for bar, step in zip(chosen_bars, steps):
        assert bar.get_height() == pytest.approx(float(torch.softmax(step.logits, -1)[step.token_id]))
    assert len(ax.get_xticklabels()) == len(steps)


def test_stepper_slider_covers_every_step(tokenizer, steps):
    stepper = widgets.generation_stepper(steps, tokenizer, top_k=5)
    assert stepper.slider.max - stepper.slider.min + 1 == len(steps)
    assert bytes(stepper.chart.value).startswith(PNG_MAGIC)
    assert repr(stepper) == f"GenerationStepper({len(steps)} steps; run the notebook to move the slider)"


def test_moving_the_slider_changes_the_text_and_the_chart(tokenizer, steps):
    stepper = widgets.generation_stepper(steps, tokenizer, top_k=5, prompt="Once upon a time")
    first_text, first_chart = stepper.text.value, bytes(stepper.chart.value)
    stepper.slider.value = stepper.slider.max
    assert stepper.text.value != first_text
    assert bytes(stepper.chart.value) != first_chart
    last = steps[-1]
    assert f"step {len(steps)} of {len(steps)}" in stepper.text.value
    assert f"(id {last.token_id})" in stepper.text.value
    assert f"finish_reason = <b>{last.finish_reason}</b>" in stepper.text.value
    assert "Once upon a time" in stepper.text.value


def test_stepper_highlights_the_current_token(tokenizer):
    ids = tokenizer(" Paris is nice", add_special_tokens=False)["input_ids"]
    fake = [Step(i, tokenizer.decode(i), 0.0, logits=torch.zeros(len(tokenizer))) for i in ids]
    stepper = widgets.generation_stepper(fake, tokenizer, top_k=2)
    stepper.slider.value = 2
    highlighted = stepper.text.value.split(widgets.HIGHLIGHT_STYLE + "'>")[1].split("</span>")[0]
    assert highlighted == tokenizer.decode(ids[1])
    assert tokenizer.decode(ids[0]) in stepper.text.value.split(widgets.HIGHLIGHT_STYLE)[0]


def test_stepper_highlights_a_whole_emoji_when_its_last_byte_arrives(tokenizer):
    ids = tokenizer(" a 🍵", add_special_tokens=False)["input_ids"]
    fake = [Step(i, "", 0.0, logits=torch.zeros(len(tokenizer))) for i in ids]
    stepper = widgets.generation_stepper(fake, tokenizer, top_k=2)
    stepper.slider.value = len(ids)
    highlighted = stepper.text.value.split(widgets.HIGHLIGHT_STYLE + "'>")[1].split("</span>")[0]
    assert highlighted.endswith("🍵") and "\ufffd" not in stepper.text.value


def test_stepper_rejects_an_empty_generation(tokenizer):
    with pytest.raises(ValueError, match="No steps"):
        widgets.generation_stepper([], tokenizer)


def test_table_has_a_row_per_step_and_marks_the_finish(tokenizer, steps):
    table = widgets.top_candidates_table(steps, tokenizer, top_k=2)
    lines = table.splitlines()
    assert len(lines) == len(steps) + 1
    assert lines[0].split() == ["step", "chosen", "candidates"]
    for line, step in zip(lines[1:], steps):
        assert plots.token_label(tokenizer, step.token_id) in line
    assert lines[-1].endswith(f"finish_reason={steps[-1].finish_reason!r}")
    assert "finish_reason" not in "\n".join(lines[1:-1])
