"""labkit.viz.progress: a saved tqdm bar's text fallback becomes its final state."""

import json

from labkit.viz.progress import WIDGET_STATE, WIDGET_VIEW, final_bar_text, finish_progress_fallbacks


def widget_state(value: float, total: float) -> dict:
    models = {
        "box": ("HBoxModel", {"children": ["IPY_MODEL_label", "IPY_MODEL_bar", "IPY_MODEL_counts"]}),
        "label": ("HTMLModel", {"value": "variants:\u2007100%"}),
        "bar": ("FloatProgressModel", {"value": value, "max": total}),
        "counts": ("HTMLModel", {"value": "\u20077/7\u2007[01:03&lt;00:00,\u200711.30s/it]"}),
        "slider": ("IntSliderModel", {"value": 3}),
    }
    return {key: {"model_name": name, "state": state} for key, (name, state) in models.items()}


def test_final_bar_text_reads_a_finished_bar_and_ignores_other_widgets():
    state = widget_state(7, 7)
    assert final_bar_text(state, "box") == "variants: 100%|██████████| 7/7 [01:03<00:00, 11.30s/it]"
    assert final_bar_text(widget_state(3.5, 7), "box").split("|")[1] == "█████     "
    assert final_bar_text(state, "slider") is None and final_bar_text(state, "missing") is None


def test_finish_progress_fallbacks_rewrites_only_progress_bars(tmp_path):
    stale = {
        "output_type": "display_data",
        "metadata": {},
        "data": {WIDGET_VIEW: {"model_id": "box"}, "text/plain": "variants:   0%|          | 0/7"},
    }
    slider = {
        "output_type": "display_data",
        "metadata": {},
        "data": {WIDGET_VIEW: {"model_id": "slider"}, "text/plain": "IntSlider(value=3)"},
    }
    notebook = {
        "cells": [{"cell_type": "code", "outputs": [stale, slider]}],
        "metadata": {"widgets": {WIDGET_STATE: {"state": widget_state(7, 7)}}},
    }
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(notebook))
    assert finish_progress_fallbacks(path) == 1
    outputs = json.loads(path.read_text())["cells"][0]["outputs"]
    assert outputs[0]["data"]["text/plain"].startswith("variants: 100%|██████████| 7/7")
    assert outputs[1]["data"]["text/plain"] == "IntSlider(value=3)"
    assert finish_progress_fallbacks(path) == 0  # already finished: nothing to do
