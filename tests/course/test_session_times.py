"""The instructor's path: each notebook's stated session time follows one rule, and its opening
instructor note says how the set-up runs in JupyterLab's deck mode.

The rule (also in slides/README.md and the README): presenting a notebook takes
    1 minute per slide or sub-slide + 5 minutes per exercise + 2 minutes per prediction,
counting the cells of slide type `slide` or `subslide` outside worked solutions, the "Exercise N"
headings and the `Prediction(...)` boxes. The time a notebook states near its top ("⏱️ About **60
minutes**", "**Time:** about 60 minutes") must lie within 25 % of that, so a notebook that grows by a
quarter must restate its time. Only the notebooks' sources are read: nothing runs, no model loads.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MINUTES_PER_SLIDE, MINUTES_PER_EXERCISE, MINUTES_PER_PREDICTION = 1, 5, 2
TOLERANCE = 0.25
STATED = re.compile(r"(?:⏱️|\*\*Time:?\*\*:?)\s*about\s*\**(\d+)\s*minutes", re.IGNORECASE)
EXERCISE = re.compile(r"^#{2,4} Exercise \d+\b", re.MULTILINE)
PREDICTION = re.compile(r"^\w+ = Prediction\(", re.MULTILINE)
OPENING = 6  # the time and the first instructor note sit within the first cells


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def slide_type(cell: dict) -> str:
    return cell["metadata"].get("slideshow", {}).get("slide_type", "")


def counts(notebook_cells: list[dict]) -> tuple[int, int, int]:
    """(slides and sub-slides, exercises, predictions) of a notebook, worked solutions left out."""
    shown = [cell for cell in notebook_cells if "solution" not in cell["metadata"].get("tags", [])]
    slides = sum(slide_type(cell) in ("slide", "subslide") for cell in shown)
    exercises = sum(len(EXERCISE.findall(source(cell))) for cell in shown if cell["cell_type"] == "markdown")
    predictions = sum(len(PREDICTION.findall(source(cell))) for cell in shown if cell["cell_type"] == "code")
    return slides, exercises, predictions


def rule_minutes(slides: int, exercises: int, predictions: int) -> int:
    return (
        MINUTES_PER_SLIDE * slides + MINUTES_PER_EXERCISE * exercises + MINUTES_PER_PREDICTION * predictions
    )


def stated_minutes(notebook_cells: list[dict]) -> int:
    found = [
        int(m[1])
        for cell in notebook_cells[:OPENING]
        if cell["cell_type"] == "markdown"
        for m in STATED.finditer(source(cell))
    ]
    assert len(found) == 1, f"expected one stated time ('⏱️ About **N minutes**') in the first {OPENING} cells"
    return found[0]


def test_the_rule_counts_a_small_notebook():
    notebook = [
        {
            "cell_type": "markdown",
            "metadata": {"slideshow": {"slide_type": "slide"}},
            "source": "# 99 · A title\n\n⏱️ About **15 minutes**.",
        },
        {
            "cell_type": "code",
            "metadata": {"slideshow": {"slide_type": "subslide"}},
            "source": 'guess = Prediction("How many?")\nguess',
        },
        {
            "cell_type": "markdown",
            "metadata": {"slideshow": {"slide_type": "slide"}},
            "source": "## Exercise 1: count them",
        },
        {
            "cell_type": "markdown",
            "metadata": {"slideshow": {"slide_type": "subslide"}, "tags": ["solution"]},
            "source": "### Exercise 1: worked solution",
        },
    ]
    assert counts(notebook) == (3, 1, 1)
    assert rule_minutes(*counts(notebook)) == 10
    assert stated_minutes(notebook) == 15


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stated_time_follows_the_rule(path):
    notebook_cells = cells(path)
    slides, exercises, predictions = counts(notebook_cells)
    rule = rule_minutes(slides, exercises, predictions)
    stated = stated_minutes(notebook_cells)
    assert abs(stated - rule) <= TOLERANCE * rule, (
        f"{path.name} states {stated} minutes; {slides} slides, {exercises} exercises and {predictions} predictions "
        f"take {rule} by the rule (1 a slide, 5 an exercise, 2 a prediction): state about {5 * round(rule / 5)}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_opening_note_says_how_deck_mode_runs_the_set_up(path):
    """Deck mode (jupyterlab-slideshow) runs no cell by itself and never shows `skip` cells, where every
    notebook's set-up sits: the first instructor note must send the presenter through Run All Cells."""
    notes = [
        source(cell)
        for cell in cells(path)[:OPENING]
        if slide_type(cell) == "notes" and source(cell).startswith("Instructor:")
    ]
    assert notes, f"{path.name} has no opening instructor note"
    note = notes[0]
    assert "Run All Cells" in note and "Start Deck" in note, (
        f"{path.name}: the opening note does not say to run all cells before Start Deck"
    )
    assert "when you reach it" not in note, f"{path.name}: deck mode does not run a cell when you reach it"
    assert "recorded predictions" not in note, f"{path.name}: the saved reveals record no prediction"
