"""Student copies of the notebooks: the worked solutions removed, and no answer left in a saved output.

`make lab` (and `make student`) write them to student/ (not committed, one copy per notebook, same names)
and open the first; `make teach` opens the instructor's copies in notebooks/. A copy keeps every saved
output that teaches (tables, plots, widgets' fallbacks) and drops what gives an answer away:
- every cell tagged `solution` (labkit.course.solutions marks the worked solutions);
- the instructor's speaker notes (a notes cell that starts "Instructor:"), which name the numbers the
  room is asked to predict, an exercise's answer among them;
- the saved verdict of each checker cell (one that calls a `check_...` function): the student runs it;
- each prediction's answer (labkit.course.locks): the saved outputs from its box to its reveal (the
  measuring cells and the reveal) go, and the reading after the reveal is folded into a block that opens
  on request; the question and its box stay, and the student sees the measurement by running the cells.

A copy is rewritten when its notebook changes, unless the student has worked in it: a copy that differs
from the one last written (student/.written.json keeps a fingerprint of each) is kept as it is, and the
tool says how to get the new one.

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
import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

from labkit.course.locks import lock_predictions
from labkit.course.notebook_file import check_notebook, check_path, check_paths, read_notebook
from labkit.course.solutions import SOLUTION_TAG, tags, text

__all__ = ["student_copy", "write_student_copies"]

INSTRUCTOR_NOTE = "Instructor:"
CHECKER_CALL = re.compile(r"\bcheck_\w+\(")
REVEAL_CALL = re.compile(r"\b\w+\.reveal\(")
WRITTEN = ".written.json"  # in the copies' folder: {file name: sha256 of the copy as last written}


def is_instructor_note(cell: dict) -> bool:
    """Whether the cell is a speaker note addressed to the instructor."""
    slide_type = cell.get("metadata", {}).get("slideshow", {}).get("slide_type")
    return slide_type == "notes" and text(cell).lstrip().startswith(INSTRUCTOR_NOTE)


def is_checker_cell(cell: dict) -> bool:
    """Whether the cell is code that calls an exercise checker (`checks.check_top_k_filter(top_k)`)."""
    return cell["cell_type"] == "code" and bool(CHECKER_CALL.search(text(cell)))


def is_reveal_cell(cell: dict) -> bool:
    """Whether the cell shows a prediction's measurement (`guess_batch.reveal(measured)`)."""
    return cell["cell_type"] == "code" and bool(REVEAL_CALL.search(text(cell)))


def student_copy(notebook: dict) -> dict:
    """The notebook (as loaded from JSON) without its solutions, instructor notes and checker verdicts, its
    predictions locked; `notebook` itself is left as it was.

        >>> len(student_copy({"cells": [{"cell_type": "code", "source": "x = 1", "outputs": [],
        ...                              "metadata": {"tags": ["solution"]}}]})["cells"])
        0
    """
    copy = json.loads(json.dumps(check_notebook("notebook", notebook)))
    copy["cells"] = [
        cell for cell in copy["cells"] if SOLUTION_TAG not in tags(cell) and not is_instructor_note(cell)
    ]
    for cell in copy["cells"]:
        if is_checker_cell(cell) or is_reveal_cell(cell):
            cell["outputs"] = []
            cell["execution_count"] = None
    copy["cells"] = lock_predictions(copy["cells"])
    return copy


def fingerprint(content: str) -> str:
    """The sha256 of a copy's text, to tell later whether the student has changed it."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def check_out_dir(paths: list[Path], out_dir: Path) -> None:
    """Refuse to write copies over their own sources (`--out notebooks` would erase the solutions)."""
    sources = {path.resolve().parent for path in paths}
    if out_dir.resolve() in sources:
        raise ValueError(
            f"out_dir {str(out_dir)!r} holds the notebooks the copies are made from; give another "
            f"folder, e.g. 'student'."
        )


def write_student_copies(paths: Iterable[str | Path], out_dir: str | Path) -> list[Path]:
    """Write the student copy of each notebook in `paths` to `out_dir` (created if needed), under its
    own name, keeping any copy the student has changed since it was written; returns the paths written.
    Every notebook is read (and checked) before any copy is written."""
    paths, out_dir = check_paths("paths", paths), check_path("out_dir", out_dir)
    check_out_dir(paths, out_dir)
    notebooks = [read_notebook(path, f"paths[{index}]") for index, path in enumerate(paths)]
    out_dir.mkdir(parents=True, exist_ok=True)
    record_path = out_dir / WRITTEN
    record = json.loads(record_path.read_text(encoding="utf-8")) if record_path.exists() else {}
    written = []
    for path, notebook in zip(paths, notebooks):
        target = out_dir / path.name
        if target.exists() and fingerprint(target.read_text(encoding="utf-8")) != record.get(path.name):
            print(
                f"kept {target}: it has your work in it (to get the new copy, move it aside and run "
                f"`make student` again)"
            )
            continue
        content = json.dumps(student_copy(notebook), indent=1, ensure_ascii=False) + "\n"
        target.write_text(content, encoding="utf-8")
        record[path.name] = fingerprint(content)
        written.append(target)
    record_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Write student copies of the notebooks (no solutions).")
    parser.add_argument("notebooks", nargs="+", help="the course's notebooks, e.g. notebooks/*.ipynb")
    parser.add_argument("--out", default="student", help="the folder to write them to (default: student)")
    arguments = parser.parse_args()
    for written in write_student_copies(arguments.notebooks, arguments.out):
        print(f"wrote {written}")
