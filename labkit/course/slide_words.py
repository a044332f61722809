"""How much prose a slide holds, so that a test can keep each slide to what an audience reads.

An audience reads about a sentence a second while it listens; a slide holds at most `WORD_LIMIT` words of
prose, and the rest of what the presenter says sits in the speaker notes: a markdown cell whose slide type
is `notes`, which every deck hides (reveal.js shows it in the speaker view) and the notebook still shows.
Prose is a shown markdown cell's words (labkit.course.slides groups the cells into slides as the decks
do), without its code blocks, display formulas, HTML tags and tables; code cells and outputs are not prose.

    >>> prose_words("## 2. Top-k\\n\\nKeep the $k$ most likely tokens:\\n```python\\nx = 1\\n```")
    8

    $ python -m labkit.course.slide_words notebooks/*.ipynb
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from labkit.core.arguments import check_int
from labkit.course.notebook_file import check_cells, read_notebook
from labkit.course.slides import describe, group
from labkit.course.solutions import text

__all__ = ["slide_words", "wordy_slides"]

WORD_LIMIT = 120  # words of prose on one slide
# Code blocks, display math, HTML tags and table rows: a table (a map of the course, a comparison) is read
# as a picture, row by row when the presenter points at it, not as running text.
NOT_PROSE = re.compile(r"```.*?```|\$\$.*?\$\$|<[^>]+>|^[ \t]*\|[^\n]*$", re.DOTALL | re.MULTILINE)
WORD = re.compile(r"[^\W_][\w'’.,-]*")


def prose_words(source: str) -> int:
    """The words of prose in a markdown cell's source."""
    return len(WORD.findall(NOT_PROSE.sub(" ", source)))


def slide_words(cells: list[dict]) -> list[tuple[int, int]]:
    """(index of the slide's first cell, words of prose on it) for every slide of a notebook's cells."""
    check_cells("cells", cells)
    return [
        (indices[0], sum(prose_words(text(cells[i])) for i in indices if cells[i]["cell_type"] == "markdown"))
        for indices in group(cells)
    ]


def wordy_slides(path: str | Path, limit: int = WORD_LIMIT) -> list[str]:
    """One line per slide of the notebook at `path` with more than `limit` words of prose, [] when none."""
    check_int("limit", limit, minimum=0, note="words of prose on a slide")
    cells, path = read_notebook(path)["cells"], Path(path)
    return [
        f"{path.name} {describe(cells[first], first)}: {words} words"
        for first, words in slide_words(cells)
        if words > limit
    ]


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print("\n".join(wordy_slides(name)) or f"{name}: every slide holds at most {WORD_LIMIT} words")
