"""Worked solutions, marked as nbgrader and otter-grader mark them, with no answer saved under them.

Each exercise ends with a "Worked solution" heading and the code cell(s) under it. All of them carry
the cell tag `solution`: nbconvert's TagRemovePreprocessor drops them from the static and Voila decks
and labkit.course.student from the student copies. Their slide type is `skip`, so JupyterLab's deck
mode (jupyterlab-slideshow, which hides cells by slide type and never by tag) leaves them out too.
The code sits between `# BEGIN SOLUTION` and `# END SOLUTION`, the markers both graders look for. A
solution still runs under nbval, so a wrong one fails `make test`, but it is tagged
`nbval-ignore-output` and saved without outputs: a saved output would print the answer under the
collapsed code (`make notebooks` saves them, then runs this).

    >>> hide_solutions("notebooks/06_kv_cache.ipynb")  # cells changed; 0 when already hidden
    0
    $ python -m labkit.course.solutions notebooks/*.ipynb
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from labkit.course.notebook_file import check_cells, read_notebook

__all__ = ["hide_solutions", "solution_cells"]

SOLUTION_TAG = "solution"
IGNORE_OUTPUT_TAG = "nbval-ignore-output"  # nbval runs the cell but compares no output
SKIP = "skip"  # the slide type that every deck leaves out, deck mode included
BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
HEADING = "worked solution"


def text(cell: dict) -> str:
    """A cell's source as one string (notebooks store it as a list of lines)."""
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def tags(cell: dict) -> list[str]:
    """The cell's tags, [] when it has none."""
    return cell.get("metadata", {}).get("tags", [])


def solution_cells(cells: list[dict]) -> list[int]:
    """Indices of the worked solutions: each "Worked solution" heading, the code cells right under it,
    and any other cell already tagged `solution`.

        >>> solution_cells([{"cell_type": "markdown", "source": "### Worked solution"},
        ...                 {"cell_type": "code", "source": "x = 1"}, {"cell_type": "markdown", "source": "Next"}])
        [0, 1]
    """
    check_cells("cells", cells)
    found = {i for i, cell in enumerate(cells) if SOLUTION_TAG in tags(cell)}
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and text(cell).lstrip("# ").lower().startswith(HEADING):
            found.add(i)
            following = i + 1
            while following < len(cells) and cells[following]["cell_type"] == "code":
                found.add(following)
                following += 1
    return sorted(found)


def add_tags(cell: dict, *names: str) -> None:
    """Append each of `names` to the cell's tags unless it is there already."""
    cell_tags = cell["metadata"].setdefault("tags", [])
    cell_tags.extend(name for name in names if name not in cell_tags)


def wrap_in_markers(source: str) -> list[str]:
    """The source between the solution markers, as a notebook's list of lines; unchanged if already marked.

    >>> wrap_in_markers("x = 1")
    ['# BEGIN SOLUTION\\n', 'x = 1\\n', '# END SOLUTION']
    """
    if source.lstrip().startswith(BEGIN):
        return source.splitlines(keepends=True)
    return f"{BEGIN}\n{source.rstrip()}\n{END}".splitlines(keepends=True)


def mark_solution(cell: dict) -> None:
    """Tag a worked-solution cell and skip it in decks; a code cell also gets the markers and loses its
    outputs."""
    add_tags(cell, SOLUTION_TAG)
    cell["metadata"].setdefault("slideshow", {})["slide_type"] = SKIP
    if cell["cell_type"] == "code":
        add_tags(cell, IGNORE_OUTPUT_TAG)
        cell["source"] = wrap_in_markers(text(cell))
        cell["outputs"] = []
        cell["execution_count"] = None


def hide_solutions(path: str | Path) -> int:
    """Mark every worked solution of the notebook at `path` (see the module docstring); returns how many
    cells changed. The file is rewritten, in the layout nbformat writes, only if one did."""
    notebook, path = read_notebook(path), Path(path)
    changed = 0
    for index in solution_cells(notebook["cells"]):
        cell = notebook["cells"][index]
        before = json.dumps(cell)
        mark_solution(cell)
        changed += json.dumps(cell) != before
    if changed:
        path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return changed


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(f"{name}: {hide_solutions(name)} solution cell(s) marked")
