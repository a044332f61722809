"""Prediction locks: in a student copy, nothing between a prediction's box and its reveal answers it.

A prediction is a code cell `guess_x = Prediction(...)` (its box) and the first later code cell that calls
`guess_x.reveal(...)`. The instructor's notebook keeps every saved output and reading, so that it reads
well on GitHub and in a deck; the student's copy (labkit.course.student) locks each prediction:
- every code cell from the box to the reveal loses its saved output: the measuring cells, whose table or
  figure would answer the question, and the reveal itself;
- so does every code cell of the reading after the reveal (up to the next new slide, section or
  prediction): a figure or table of the saved run would answer it just as well;
- the reading's markdown is folded, run by run, into `<details>` blocks that open only on request, in
  JupyterLab and on the site, under a summary that asks the student to run the reveal first and says
  whose run it describes.

Markdown between a box and its reveal is left as it is: it says what the next cell measures, and the
course keeps any number out of it (tests/course/test_prediction_locks.py reads every copy).

    >>> cells = lock_predictions(notebook["cells"])  # a new list; the cells given are left as they were
"""

from __future__ import annotations

import copy
import re

from labkit.course.notebook_file import check_cells
from labkit.course.solutions import text

__all__ = ["lock_predictions"]

PREDICTION = re.compile(r"^(\w+) = Prediction\(", re.MULTILINE)  # guess_params = Prediction("How ...
NEXT_QUESTION = "**Predict"  # the markdown that asks the next prediction ends a reading
FOLD_SUMMARY = (
    "<b>Run the reveal above first</b>, then open this: how the course's saved run read it (its numbers "
    "are that machine's; yours are the ones printed above)"
)
FOLD_OPEN, FOLD_CLOSE = f"<details>\n<summary>{FOLD_SUMMARY}</summary>\n\n", "\n\n</details>"


def predictions(cells: list[dict]) -> list[tuple[str, int, int | None]]:
    """(name, index of the box's cell, index of the first later code cell that reveals it, or None) for each
    prediction of a notebook's cells.

    >>> predictions([{"cell_type": "code", "source": "g = Prediction('?')"},
    ...              {"cell_type": "code", "source": "g.reveal(3)"}])
    [('g', 0, 1)]
    """
    found = []
    for asked, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        for name in PREDICTION.findall(text(cell)):
            revealed = next(
                (
                    k
                    for k in range(asked + 1, len(cells))
                    if cells[k]["cell_type"] == "code" and f"{name}.reveal(" in text(cells[k])
                ),
                None,
            )
            found.append((name, asked, revealed))
    return found


def prediction_spans(cells: list[dict]) -> list[tuple[str, int, int]]:
    """(name, box, reveal) for each prediction that is revealed (tests/course/test_predictions.py finds any
    that is not)."""
    return [(name, asked, revealed) for name, asked, revealed in predictions(cells) if revealed is not None]


def starts_something_new(cell: dict) -> bool:
    """Whether a markdown cell opens a new slide or section, or asks the next prediction: a reading ends there."""
    source = text(cell).lstrip()
    slide_type = cell.get("metadata", {}).get("slideshow", {}).get("slide_type")
    return slide_type == "slide" or source.startswith("#") or source.startswith(NEXT_QUESTION)


def reading_after(cells: list[dict], revealed: int) -> list[int]:
    """The indices of the cells that read a reveal's result: those after it up to the first cell that starts
    something new (a figure of the measurement and the prose about it, say)."""
    reading = []
    for k in range(revealed + 1, len(cells)):
        if cells[k]["cell_type"] == "markdown" and starts_something_new(cells[k]):
            break
        reading.append(k)
    return reading


def markdown_runs(cells: list[dict], indices: list[int]) -> list[list[int]]:
    """The consecutive markdown cells among `indices`, run by run (a code cell ends a run)."""
    runs: list[list[int]] = []
    for k in indices:
        if cells[k]["cell_type"] != "markdown":
            runs.append([])
        elif runs and runs[-1] and runs[-1][-1] == k - 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    return [run for run in runs if run]


def folded(cells: list[dict]) -> dict:
    """One markdown cell holding the given cells' text in a block that opens on request (the first
    cell's id and metadata kept)."""
    fold = copy.deepcopy(cells[0])
    fold["source"] = FOLD_OPEN + "\n\n".join(text(cell).strip() for cell in cells) + FOLD_CLOSE
    return fold


def is_folded(cell: dict) -> bool:
    """Whether a markdown cell is a reading folded by `lock_predictions`."""
    return cell["cell_type"] == "markdown" and text(cell).startswith(FOLD_OPEN)


def lock_predictions(cells: list[dict]) -> list[dict]:
    """The cells with every prediction locked: no saved output from a box to the end of its reading (the
    box's own output, its question and box, is kept), and the reading's markdown folded.

        >>> locked = lock_predictions([
        ...     {"cell_type": "code", "source": "g = Prediction('?')\\ng", "outputs": ["box"]},
        ...     {"cell_type": "code", "source": "x = measure()", "outputs": ["7 ms"]},
        ...     {"cell_type": "code", "source": "g.reveal(x)", "outputs": ["measured 7 ms"]},
        ...     {"cell_type": "markdown", "source": "7 ms, because ..."}])
        >>> [cell.get("outputs") for cell in locked[:3]], is_folded(locked[3])
        ([['box'], [], []], True)
    """
    cells = copy.deepcopy(check_cells("cells", cells))
    readings = {}
    for _name, asked, revealed in prediction_spans(cells):
        reading = reading_after(cells, revealed)
        for cell in (cells[k] for k in [*range(asked + 1, revealed + 1), *reading]):
            if cell["cell_type"] == "code":
                cell["outputs"], cell["execution_count"] = [], None
        readings.update({run[0]: run for run in markdown_runs(cells, reading)})
    locked, skip = [], set()
    for index, cell in enumerate(cells):
        if index in skip:
            continue
        if index in readings:
            locked.append(folded([cells[k] for k in readings[index]]))
            skip.update(readings[index])
        else:
            locked.append(cell)
    return locked
