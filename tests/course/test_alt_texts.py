"""Alternative texts written by hand (data/course/alt_texts.json) stand in the saved notebooks: each names a
cell that still draws a figure, and that figure's saved alt is the written text, so a re-execution that
skipped `python -m labkit.course.alt_texts` (part of `make notebooks`) fails here. Only JSON is read."""

import json
import shutil

import pytest

from labkit.course.alt_texts import ALT_TEXTS_PATH, apply_alt_texts, figure_outputs, written_alt_texts

NOTEBOOKS = ALT_TEXTS_PATH.parents[2] / "notebooks"


@pytest.mark.parametrize("stem", sorted(written_alt_texts()))
def test_every_written_text_stands_in_its_figure(stem):
    cells = {cell.get("id"): cell for cell in json.loads((NOTEBOOKS / f"{stem}.ipynb").read_text())["cells"]}
    for cell_id, text in written_alt_texts()[stem].items():
        figures = figure_outputs(cells[cell_id])
        assert figures, f"{stem}: cell {cell_id} draws no figure"
        assert len(text.split()) >= 12, f"{stem} {cell_id}: a written text says what the figure shows"
        for output in figures:
            assert output["metadata"]["image/png"]["alt"] == text, f"{stem} {cell_id}: run the alt_texts step"


def test_applying_restores_a_generated_text_and_refuses_a_missing_figure(tmp_path):
    stem = "07_prefill_vs_decode_and_metrics"
    copy = tmp_path / f"{stem}.ipynb"
    shutil.copy(NOTEBOOKS / f"{stem}.ipynb", copy)
    notebook = json.loads(copy.read_text())
    cell_id, text = next(iter(written_alt_texts()[stem].items()))
    cell = next(cell for cell in notebook["cells"] if cell.get("id") == cell_id)
    figure_outputs(cell)[0]["metadata"]["image/png"]["alt"] = "Figure. x axis: tokens."  # as a run writes it
    copy.write_text(json.dumps(notebook))
    assert apply_alt_texts(copy) == 1 and apply_alt_texts(copy) == 0
    assert text in copy.read_text()
    with pytest.raises(ValueError, match="holds no figure"):
        apply_alt_texts(copy, {stem: {"no-such-cell": "A chart."}})
