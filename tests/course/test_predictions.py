"""Predict, then measure: every notebook asks the student for at least two predictions before the cells
that measure them, reveals each beside its measurement, and tells the instructor what a room usually
predicts. Only the notebooks' sources are read: nothing runs, no model loads."""

import json
from pathlib import Path

import pytest

from labkit.course.locks import predictions

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
NOTE_WORDS = ("predict", "guess")
NEAR = 2  # cells: how far from the prediction (before) or its reveal (after) the instructor's note may sit


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def is_instructor_note(cell: dict) -> bool:
    return (
        cell["cell_type"] == "markdown"
        and cell["metadata"].get("slideshow", {}).get("slide_type") == "notes"
        and any(word in source(cell).lower() for word in NOTE_WORDS)
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_two_predictions_each_revealed_after_it_is_asked(path):
    notebook_cells = cells(path)
    found = predictions(notebook_cells)
    assert len(found) >= 2, (
        f"{path.name} asks for {len(found)} prediction(s); every notebook asks for at least two"
    )
    for name, asked, revealed in found:
        assert revealed is not None, (
            f"{path.name}: {name} is asked in cell {asked} but never revealed after it"
        )
        tags = notebook_cells[asked]["metadata"].get("tags", [])
        assert "solution" not in tags, f"{path.name}: {name} is asked inside a worked solution"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_prediction_has_an_instructor_note(path):
    notebook_cells = cells(path)
    for name, asked, revealed in predictions(notebook_cells):
        if revealed is None:
            continue  # the test above says so
        near = list(range(max(0, asked - NEAR), asked)) + list(range(revealed + 1, revealed + 1 + NEAR))
        assert any(is_instructor_note(notebook_cells[k]) for k in near if k < len(notebook_cells)), (
            f"{path.name}: no instructor note (slide type 'notes', saying what a room usually predicts) within "
            f"{NEAR} cells before {name} is asked (cell {asked}) or after it is revealed (cell {revealed})"
        )
