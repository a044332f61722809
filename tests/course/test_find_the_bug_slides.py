"""A "find the bug" exercise shows the buggy code on the slide that asks for the bug, in every deck.

The live deck (Voila) hides the source of every code cell, so the code cell that defines the buggy
function and runs the checker on it shows only the checker's hint there. The slide that asks for the bug
therefore carries the buggy code as a markdown code block, and that block must be the code the checker
runs: each of its lines, in order, as a code cell of the notebook (or a labkit module) has them, so the two
cannot drift apart. Only the notebooks' JSON and labkit's sources are read.
"""

import json
import re
from pathlib import Path

import pytest

from labkit.course.slides import group
from labkit.course.solutions import text

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ASKS_FOR_THE_BUG = re.compile(r"^#+ .*\bfind the bug\b", re.IGNORECASE | re.MULTILINE)
CODE_BLOCK = re.compile(r"^```(?:python)?\n(.*?)\n```", re.DOTALL | re.MULTILINE)


def find_the_bug_slides(cells: list[dict]) -> list[list[int]]:
    """The slides (lists of cell indices) whose markdown asks the student to find a bug."""
    return [
        slide
        for slide in group(cells)
        if any(cells[i]["cell_type"] == "markdown" and ASKS_FOR_THE_BUG.search(text(cells[i])) for i in slide)
    ]


def shown_code(cells: list[dict], slide: list[int]) -> list[str]:
    """The code blocks in the slide's markdown: what a live deck shows of code."""
    return [
        block
        for i in slide
        if cells[i]["cell_type"] == "markdown"
        for block in CODE_BLOCK.findall(text(cells[i]))
    ]


def copied_from(block: str, sources: list[str]) -> bool:
    """Whether `block` is a run of whole lines of one of `sources`, exactly."""
    return any(f"\n{block}\n" in f"\n{source}\n" for source in sources)


def labkit_sources() -> list[str]:
    return [path.read_text(encoding="utf-8") for path in sorted((ROOT / "labkit").rglob("*.py"))]


def test_every_find_the_bug_slide_shows_the_code_the_checker_runs():
    asked, problems = 0, []
    labkit = labkit_sources()
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        code = [text(cell) for cell in cells if cell["cell_type"] == "code"]
        for slide in find_the_bug_slides(cells):
            asked += 1
            blocks = shown_code(cells, slide)
            where = f"{path.name} cell {slide[0]} ({cells[slide[0]].get('id')})"
            if not blocks:
                problems.append(f"{where}: no code block on the slide (a live deck hides code cells' source)")
            problems += [
                f"{where}: a code block that no code cell or labkit module holds line for line:\n{block}"
                for block in blocks
                if not copied_from(block, code + labkit)
            ]
    assert asked, "no slide asks to find a bug: has the heading changed? (ASKS_FOR_THE_BUG)"
    assert not problems, "\n".join(problems)


def markdown(source: str, slide_type: str = "") -> dict:
    return {"cell_type": "markdown", "source": source, "metadata": {"slideshow": {"slide_type": slide_type}}}


@pytest.mark.parametrize(
    ("block", "copied"),
    [
        ("def f(x):\n    return x + 1", True),
        ("    return x + 1", True),  # whole lines, indentation kept
        ("def f(x):\n    return x - 1", False),  # a line changed
        ("def f(x):\n    return x", False),  # part of a line
    ],
)
def test_a_block_counts_as_copied_only_line_for_line(block, copied):
    assert copied_from(block, ["import torch\n\ndef f(x):\n    return x + 1\n\nf(1)"]) is copied


def test_the_slide_that_asks_is_the_one_that_must_show_the_code():
    cells = [
        markdown("## Exercise 2: find the bug in a filter\n\nIt has one bug.", "slide"),
        markdown("```python\ndef f(x):\n    return x\n```"),
        markdown("## Exercise 3: something else", "slide"),
        markdown("```python\ndef g():\n    pass\n```", "subslide"),
    ]
    slides = find_the_bug_slides(cells)
    assert slides == [[0, 1]]
    assert shown_code(cells, slides[0]) == ["def f(x):\n    return x"]
