"""Student copies of the notebooks: the worked solutions removed, and no answer left in a saved output.

`make student` writes them to student/ (not committed, one copy per notebook, same names). A copy keeps
every saved output that teaches (tables, plots, widgets' fallbacks) and drops what gives an answer away:
- every cell tagged `solution` (labkit.course.solutions marks the worked solutions);
- the instructor's speaker notes (a notes cell that starts "Instructor:"), which name the numbers the
  room is asked to predict, an exercise's answer among them;
- the saved verdict of each checker cell (one that calls a `check_...` function): the student runs it.

Why a small script and not a grader's tool: the markers are nbgrader's and otter-grader's, but neither
tool fits the course's exercises, and both are heavy. nbgrader (`nbgrader generate_assignment`) keeps
a solution cell and swaps its code for a `raise NotImplementedError()` stub, while here the student's
cell is a separate cell with its checker already; it also brings a course database (SQLAlchemy,
alembic) and the classic Notebook server. otter-grader (`otter assign`) wants each question declared in
raw cells with its own tests, and brings pandas, jupytext and a Docker client. Both install from PyPI;
this needs only the notebook's JSON.

    >>> write_student_copies(["notebooks/00_setup_and_tour.ipynb"], "student")
    [PosixPath('student/00_setup_and_tour.ipynb')]
    $ python -m labkit.course.student --out student notebooks/*.ipynb
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterable
from pathlib import Path

from labkit.course.solutions import SOLUTION_TAG, tags, text

INSTRUCTOR_NOTE = "Instructor:"
CHECKER_CALL = re.compile(r"\bcheck_\w+\(")


def is_instructor_note(cell: dict) -> bool:
    """Whether the cell is a speaker note addressed to the instructor."""
    slide_type = cell.get("metadata", {}).get("slideshow", {}).get("slide_type")
    return slide_type == "notes" and text(cell).lstrip().startswith(INSTRUCTOR_NOTE)


def is_checker_cell(cell: dict) -> bool:
    """Whether the cell is code that calls an exercise checker (`checks.check_top_k_filter(top_k)`)."""
    return cell["cell_type"] == "code" and bool(CHECKER_CALL.search(text(cell)))


def student_copy(notebook: dict) -> dict:
    """The notebook (as loaded from JSON) without its solutions, instructor notes and checker verdicts;
    `notebook` itself is left as it was.

        >>> len(student_copy({"cells": [{"cell_type": "code", "source": "x = 1", "outputs": [],
        ...                              "metadata": {"tags": ["solution"]}}]})["cells"])
        0
    """
    copy = json.loads(json.dumps(notebook))
    copy["cells"] = [cell for cell in copy["cells"]
                     if SOLUTION_TAG not in tags(cell) and not is_instructor_note(cell)]
    for cell in filter(is_checker_cell, copy["cells"]):
        cell["outputs"] = []
        cell["execution_count"] = None
    return copy


def write_student_copies(paths: Iterable[str | Path], out_dir: str | Path) -> list[Path]:
    """Write the student copy of each notebook in `paths` to `out_dir` (created if needed), under its
    own name; returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in map(Path, paths):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        target = out_dir / path.name
        target.write_text(json.dumps(student_copy(notebook), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(target)
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Write student copies of the notebooks (no solutions).")
    parser.add_argument("notebooks", nargs="+", help="the course's notebooks, e.g. notebooks/*.ipynb")
    parser.add_argument("--out", default="student", help="the folder to write them to (default: student)")
    arguments = parser.parse_args()
    for written in write_student_copies(arguments.notebooks, arguments.out):
        print(f"wrote {written}")
