"""A prediction locks: in every student copy, nothing a student can read between a prediction's box and its
reveal answers it, and the reading that follows the reveal opens only on request. Only the notebooks' sources
are read: nothing runs, no model loads."""

import json
import re
from pathlib import Path

import pytest

from labkit.course.locks import FOLD_OPEN, NEXT_QUESTION, is_folded, lock_predictions, prediction_spans
from labkit.course.student import student_copy

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
DIGIT = re.compile(r"\d")
# What a table or figure the copy has cleared is called in prose that points at it.
POINTS_AT_OUTPUT = re.compile(r"\b(?:table|figure|plot|chart|bars?|numbers?) (?:above|below)\b", re.I)


def source(cell: dict) -> str:
    return "".join(cell["source"])


def copy_cells(path: Path) -> list[dict]:
    return student_copy(json.loads(path.read_text(encoding="utf-8")))["cells"]


def student_visible(cell: dict) -> str:
    """What a student reads of a markdown cell without opening anything: a folded block's summary only."""
    return "" if is_folded(cell) else source(cell)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_nothing_between_a_box_and_its_reveal_answers_it(path):
    cells = copy_cells(path)
    spans = prediction_spans(cells)
    assert len(spans) >= 2, f"{path.name}: the copy lost its predictions"
    for name, asked, revealed in spans:
        assert cells[asked]["outputs"], f"{path.name}: {name} lost its question and box"
        for k in range(asked + 1, revealed + 1):
            cell = cells[k]
            if cell["cell_type"] == "code":
                assert not cell["outputs"], (
                    f"{path.name}: cell {k} keeps a saved output between {name}'s box and its reveal"
                )
            else:
                found = DIGIT.search(student_visible(cell)) or POINTS_AT_OUTPUT.search(student_visible(cell))
                assert not found, (
                    f"{path.name}: markdown cell {k}, between {name}'s box and its reveal, states "
                    f"{found.group(0)!r}: move what it says after the reveal, or the number before the box"
                )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_reading_that_states_a_number_waits_for_its_reveal(path):
    """After a reveal, up to the next slide, section or question, no saved output and no markdown a student
    sees unopened that states a number or points at a table the copy has cleared."""
    cells = copy_cells(path)
    for name, _asked, revealed in prediction_spans(cells):
        for k in range(revealed + 1, len(cells)):
            cell = cells[k]
            slide_type = cell.get("metadata", {}).get("slideshow", {}).get("slide_type")
            if cell["cell_type"] == "markdown" and (
                slide_type == "slide" or source(cell).lstrip().startswith(("#", NEXT_QUESTION))
            ):
                break
            if cell["cell_type"] == "code":
                assert not cell["outputs"], (
                    f"{path.name}: cell {k}, in {name}'s reading, keeps a saved output"
                )
                continue
            visible = student_visible(cell)
            found = DIGIT.search(visible) or POINTS_AT_OUTPUT.search(visible)
            assert not found, (
                f"{path.name}: markdown cell {k}, in {name}'s reading, shows {found.group(0)!r} "
                f"before the student has run the reveal: {visible[:120]!r}"
            )


def test_the_instructors_notebook_keeps_its_readings_open():
    """Locking is the student copy's: the notebooks in notebooks/ hold no fold (decks and GitHub show them)."""
    folded = [path.name for path in NOTEBOOKS if FOLD_OPEN in path.read_text(encoding="utf-8")]
    assert not folded, f"folded readings saved in the instructor's notebooks: {folded}"


def test_a_lock_clears_the_measurement_folds_the_reading_and_keeps_the_next_section():
    cells = [
        {"cell_type": "code", "source": "g = Prediction('How many ms?')\ng", "outputs": ["box"]},
        {"cell_type": "code", "source": "ms = measure()\nprint(ms)", "outputs": ["7.1"]},
        {"cell_type": "code", "source": "g.reveal(ms)", "outputs": ["measured 7.1"]},
        {"cell_type": "markdown", "source": "It took 7.1 ms, ", "metadata": {}},
        {"cell_type": "markdown", "source": "because of the table above.", "metadata": {}},
        {"cell_type": "code", "source": "plot(ms)", "outputs": ["a figure of 7.1 ms"]},
        {"cell_type": "markdown", "source": "The figure shows 7.1 ms.", "metadata": {}},
        {"cell_type": "markdown", "source": "## 2. Next", "metadata": {"slideshow": {"slide_type": "slide"}}},
        {"cell_type": "code", "source": "print(2)", "outputs": ["2"]},
    ]
    locked = lock_predictions(cells)
    assert [cell.get("outputs") for cell in locked[:3]] == [["box"], [], []]
    assert len(locked) == 8 and is_folded(locked[3]) and "7.1 ms" in source(locked[3])
    assert "the table above" in source(locked[3])
    assert locked[4]["outputs"] == [], "a figure of the saved run after the reveal answers it too"
    assert is_folded(locked[5]) and source(locked[6]) == "## 2. Next" and locked[7]["outputs"] == ["2"]
    assert cells[1]["outputs"] == ["7.1"], "the notebook given must be left as it was"
