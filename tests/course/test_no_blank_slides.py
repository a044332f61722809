"""No slide of a live deck is blank: each shows some prose or some output.

The live deck (`make present`, Voila) hides every code cell's source and shows only markdown and outputs
(slides/README.md). So a slide whose shown cells are code that prints or draws nothing appears empty:
the room sees a white screen while the presenter pages past it. Such a cell belongs on the slide of the
prose or figure it prepares (the empty slide type), or needs a sentence of its own.

Voila runs the notebook before it shows the deck, so the instructor's saved outputs stand for what it
shows. A student copy clears some outputs (locked predictions, checker verdicts), but every deck that can
show a student copy (JupyterLab's deck mode, the static decks) shows the code, so no slide is blank there.
Slides group as in labkit.course.slides (`slide` and `subslide` start one; `notes`, `skip` and worked
solutions are not shown). Only the notebooks' JSON is read.
"""

import json
import re
from pathlib import Path

import pytest

from labkit.course.slides import group
from labkit.course.solutions import text

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def output_shows(output: dict) -> bool:
    """Whether a saved output puts anything on the slide: text that is not only white space, any rich
    data (a figure, a table, a widget), or an error."""
    if output.get("output_type") == "stream":
        return bool(text({"source": output.get("text", "")}).strip())
    if output.get("output_type") == "error":
        return True
    return any(
        text({"source": value}).strip() if isinstance(value, (str, list)) else value
        for value in output.get("data", {}).values()
    )


def cell_shows(cell: dict) -> bool:
    """Whether a cell shows anything in a live deck: markdown with text (HTML comments left out), or code
    with a visible output (its source is hidden). A code cell not run since it was written (no execution
    count, no output) is given the benefit of the doubt: the next `make notebooks` saves what it shows."""
    if cell["cell_type"] == "markdown":
        return bool(HTML_COMMENT.sub("", text(cell)).strip())
    if cell["cell_type"] == "code":
        outputs = cell.get("outputs", [])
        return any(map(output_shows, outputs)) or (not outputs and cell.get("execution_count") is None)
    return False  # a raw cell: nbconvert and Voila leave it out of an HTML deck


def blank_slides(cells: list[dict]) -> list[int]:
    """The index of the first cell of every slide that shows nothing in a live deck."""
    return [slide[0] for slide in group(cells) if not any(cell_shows(cells[i]) for i in slide)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_slide_of_a_live_deck_is_blank(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    blank = {cells[index].get("id", str(index)) for index in blank_slides(cells)}
    assert not blank, (
        f"{path.name}: slides that show nothing in a live deck (code hidden, no output), by first cell id: "
        f"{sorted(blank)}. Join the cell to the slide before or after it (slide type ''), mark a helper "
        "`skip`, or give the slide a sentence that belongs there"
    )


def cell(kind: str, source: str = "", slide_type: str = "", outputs: list | None = None) -> dict:
    made = {"cell_type": kind, "source": source, "metadata": {"slideshow": {"slide_type": slide_type}}}
    if kind == "code":
        made.update(outputs=outputs or [], execution_count=1)
    return made


def test_code_that_shows_nothing_makes_a_blank_slide_and_prose_or_output_does_not():
    printed = {"output_type": "stream", "name": "stdout", "text": "3 tokens\n"}
    figure = {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}}
    cells = [
        cell("markdown", "## 1. A section", "slide"),
        cell("code", "runs = measure()", "subslide"),  # 1: no output, source hidden live: blank
        cell("code", "plot(runs)", "subslide", [figure]),
        cell("markdown", "  \n<!-- to do -->\n", "subslide"),  # 3: nothing to read: blank
        cell("markdown", "The speaker's words.", "notes"),  # notes are not on the slide
        cell("code", "print(len(runs))", "subslide", [printed]),
        cell("code", "x = 1", "subslide", [{"output_type": "stream", "name": "stdout", "text": "\n"}]),  # 6
        cell("code", "y = 2", "skip", [printed]),  # skipped: not shown, and starts no slide
        cell("code", "ok = check(x)", "", [printed]),  # shown on slide 6: it is not blank
        cell("code", "z = 3", "subslide", [{"output_type": "stream", "name": "stdout", "text": "\n"}]),  # 9
    ]
    assert blank_slides(cells) == [1, 3, 9]


def test_a_slide_of_code_joined_to_its_prose_is_not_blank():
    cells = [
        cell("markdown", "## Total time", "slide"),
        cell("code", "fit = fit_curves(runs)", ""),  # prints nothing, but shares the heading's slide
        cell("code", "helpers()", "skip"),
    ]
    assert blank_slides(cells) == []


def test_a_cell_not_run_yet_is_not_judged_before_it_runs():
    written = dict(cell("code", "print(summary)", "subslide"), execution_count=None)
    ran_silently = cell("code", "runs = measure()", "subslide")
    assert blank_slides([cell("markdown", "## A", "slide"), written, ran_silently]) == [2]
